"""The suite needs nothing beside the checkout: only tests marked `corpora` see ../shared/corpora (tests/conftest.py),
and without the corpora they skip, saying why."""
import os
import subprocess
import sys

import pytest

from hogwild.data.corpora import corpora_dir
from tests.conftest import REPO_ROOT


def test_an_unmarked_test_runs_with_the_corpora_hidden():
    assert os.environ["HOGWILD_CORPORA"].endswith("corpora-hidden") and not corpora_dir().exists()


@pytest.mark.corpora
def test_a_marked_test_sees_them():
    assert corpora_dir().is_dir()


def test_without_the_corpora_marked_tests_skip_saying_why(tmp_path):
    env = {**os.environ, "HOGWILD_CORPORA": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "corpora", "-rs",
                           "tests/data/test_readers.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" not in done.stdout and " skipped" in done.stdout
    assert f"needs the real corpora: {tmp_path / 'none'} not found" in done.stdout
