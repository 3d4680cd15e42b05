"""Helpers of the tasks tests: tiny corpora written from data.synthetic, and run.py run as a user would (a real
subprocess from the repo root)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from hogwild.data.synthetic import synthetic_parallel, synthetic_tagged

REPO = pathlib.Path(__file__).resolve().parents[2]


def write_tagged(path: pathlib.Path, count: int, seed: int) -> pathlib.Path:
    """A slash-tagged corpus (one sentence per line, word/TAG tokens, like the Brown corpus)."""
    lines = [" ".join(f"{w}/{t}" for w, t in sentence) for sentence in synthetic_tagged(count, seed=seed)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_parallel(prefix: pathlib.Path, count: int, seed: int) -> pathlib.Path:
    """prefix.fr / prefix.en line-aligned text from the synthetic translation task."""
    pairs = synthetic_parallel(count, seed=seed)
    prefix.with_name(prefix.name + ".fr").write_text("".join(" ".join(s) + "\n" for s, _ in pairs), encoding="utf-8")
    prefix.with_name(prefix.name + ".en").write_text("".join(" ".join(t) + "\n" for _, t in pairs), encoding="utf-8")
    return prefix


def run_py(*args: str, timeout: float = 240, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`python run.py ARGS` from the repo root; stdout and stderr captured separately."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                   "HOGWILD_CACHE": os.environ.get("HOGWILD_TEST_CACHE", "/tmp/hogwild-test-cache"), **(env or {})}
    return subprocess.run([sys.executable, str(REPO / "run.py"), *args], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=timeout, **kwargs)
