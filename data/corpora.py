"""Where the real corpora live: the one answer the tests, the scripts and the benchmarks share.

`$HOGWILD_CORPORA` when set; else `shared/corpora` beside the source checkout this package was imported from (a
checkout at ROOT reads ROOT/../shared/corpora); else, for an installed package with no checkout, `../shared/corpora`
from the working directory (the checkout root, when following the README).

Usage: `brown = corpora_dir() / "brown"`
"""
from __future__ import annotations

import os
from pathlib import Path

CORPORA_ENV = "HOGWILD_CORPORA"


def checkout_root() -> Path | None:
    """The source checkout holding this file (data/ beside hogwild/), or None inside an installed package."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "hogwild" / "__init__.py").is_file() and (root / "data" / "corpora.py").is_file() else None


def corpora_dir() -> Path:
    """The folder holding brown/, europarl-fr-en/, ... (it may not exist: callers skip or fail naming it)."""
    if os.environ.get(CORPORA_ENV):
        return Path(os.environ[CORPORA_ENV])
    return (checkout_root() or Path.cwd()).parent / "shared" / "corpora"
