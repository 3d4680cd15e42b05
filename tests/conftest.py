"""Shared test fixtures: the location of the real corpora, and deterministic single-threaded torch."""
import pathlib

import pytest
import torch

from hogwild.data.corpora import corpora_dir

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def corpus():
    """`corpus("brown")` -> path of that corpus folder, or skip the test saying which folder is missing."""

    def find(name: str) -> pathlib.Path:
        path = corpora_dir() / name
        if not path.exists():
            pytest.skip(f"corpus {name!r} not found at {path} (set HOGWILD_CORPORA to its parent folder)")
        return path

    return find


@pytest.fixture(autouse=True)
def _single_thread_torch():
    """Tests share two cores with worker subprocesses: keep the test process itself on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
