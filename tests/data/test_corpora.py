"""data.corpora: $HOGWILD_CORPORA wins; else shared/corpora beside the checkout; without a checkout (an installed
package, tests/test_install.py) ../shared/corpora from the working directory."""
from pathlib import Path

from hogwild.data import corpora
from hogwild.data.corpora import checkout_root, corpora_dir

REPO = Path(__file__).resolve().parent.parent.parent


def test_environment_variable_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("HOGWILD_CORPORA", str(tmp_path / "elsewhere"))
    assert corpora_dir() == tmp_path / "elsewhere"


def test_beside_the_checkout_whatever_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("HOGWILD_CORPORA", raising=False)
    monkeypatch.chdir(tmp_path)
    assert checkout_root() == REPO
    assert corpora_dir() == REPO.parent / "shared" / "corpora"


def test_an_installed_package_looks_beside_the_working_directory(monkeypatch, tmp_path):
    installed = tmp_path / "site-packages" / "hogwild" / "data" / "corpora.py"  # no hogwild/ beside data/'s parent
    monkeypatch.setattr(corpora, "__file__", str(installed))
    monkeypatch.setenv("HOGWILD_CORPORA", "")  # set but empty: ignored
    monkeypatch.chdir(tmp_path)
    assert checkout_root() is None
    assert corpora_dir() == tmp_path.parent / "shared" / "corpora"
