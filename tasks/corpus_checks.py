"""The checks of run.py's corpus paths before anything is loaded: --train, --dev and --test exist and are files or
folders (NMT: prefixes of existing language files), and --dev is not a --train corpus. Each returns the reason a
path is refused, or None; `RunOptions` raises it naming the flag.

Usage: `message = corpus_refusal("pos", "corpora/brown", ("fr", "en"))  # -> None`
"""
from __future__ import annotations

import os
import stat

from hogwild.data.compressed import COMPRESSED_SUFFIXES


def same_corpus_refusal(dev: str, train: list[str], task: str, languages: tuple[str, str]) -> str | None:
    """--dev must not be (the same file as) a --train corpus: a held-out score on training data measures nothing.
    NMT corpora are prefixes: their source-language files are compared."""
    def files(path: str) -> str:
        if task == "pos":
            return path
        from hogwild.data.parallel import parallel_files
        return str(parallel_files(path, *languages)[0])
    for path in train:
        try:
            same = os.path.samefile(files(dev), files(path))
        except (OSError, ValueError):  # a file missing on one side: the reader names it
            continue
        if same:
            return (f"{dev} is the same corpus as --train {path}: a held-out set must not be trained on; give another "
                    f"--dev, or none for a seeded split of --train")
    return None


def _special_file(path: str) -> str | None:
    """What a path that is neither a regular file nor a folder is (a FIFO, a device...), else None."""
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((kind for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
                 if test(mode)), "not a regular file")


def corpus_refusal(task: str, path: str, languages: tuple[str, str]) -> str | None:
    """POS corpora are files or folders; NMT corpora are prefixes (PREFIX.fr / PREFIX.fr.xz exist, and a language's
    files are not all FIFOs or devices, which its reader would call missing)."""
    if task == "pos" or os.path.exists(path):
        if not os.path.exists(path):
            return f"{path} does not exist"
        kind = _special_file(path)
        return f"{path} is {kind}, not a corpus file or folder" if kind else None
    folder = os.path.dirname(path) or "."
    base = os.path.basename(path)
    if not os.path.isdir(folder) or not any(entry.startswith(base + ".") for entry in os.listdir(folder)):
        return (f"no file {path}.<lang>[.xz|.gz|.bz2] found (NMT corpora are given as prefixes, e.g. "
                f"europarl-fr-en/train for train.fr + train.en)")
    for language in languages:
        named = (f"{path}.{language}{suffix}" for suffix in ("", *COMPRESSED_SUFFIXES))
        there = [file for file in named if os.path.exists(file)]
        special = [(file, kind) for file in there if (kind := _special_file(file))]
        if special and len(special) == len(there):
            return f"{special[0][0]} is {special[0][1]}, not a corpus file"
    return None
