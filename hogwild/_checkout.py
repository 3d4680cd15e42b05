"""Makes `hogwild.models`, `hogwild.data` and `hogwild.tasks` importable from a source checkout.

In the repository those packages are the top-level folders models/, data/ and tasks/ (beside hogwild/); an install
(`pip install .`, see pyproject.toml's package-dir) puts them inside the hogwild package, so no generic top-level name
is claimed in site-packages. In a checkout run without an install (`python run.py`, a copy on a GPU machine) this
finder maps the three names to those folders. It is installed only when the folders are beside the package, and first
on sys.meta_path so that a second checkout (a git worktree) never resolves to another checkout's editable install.

Serves no step of `hogwild.train`: it only makes the sibling packages importable.

Usage: nothing to call: `import hogwild` installs it when needed.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

SUBPACKAGES = ("models", "data", "tasks")


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds hogwild.<name> in the checkout's top-level folder <name>/ (the submodules then follow its __path__)."""

    def __init__(self, root: Path) -> None:
        self.folders = {f"hogwild.{name}": root / name for name in SUBPACKAGES}

    def find_spec(self, fullname, path=None, target=None):
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(fullname, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])


def install_if_checkout(package_dir: Path) -> None:
    """Put a CheckoutFinder first on sys.meta_path when `package_dir` is hogwild/ inside a source checkout."""
    root = package_dir.parent
    inside = all((package_dir / name).is_dir() for name in SUBPACKAGES)
    beside = all((root / name / "__init__.py").is_file() for name in SUBPACKAGES)
    if beside and not inside and not any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, CheckoutFinder(root))
