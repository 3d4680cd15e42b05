"""The README's quick start, as written: its first command (set up a venv, install, run the default job) in a fresh
copy of the tracked files, and `.ci/run` running exactly the README's test command."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def _readme_command(which: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / ".ci" / "readme_commands.py"), which], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


def _fresh_copy(destination: pathlib.Path) -> pathlib.Path:
    """The tracked files (as in the working tree) copied to `destination`: what a fresh clone holds."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_readme_main_command_runs_from_a_fresh_copy_and_learns(tmp_path):
    command = _readme_command("main")
    assert command.endswith("run.py")  # the main job: run.py with no arguments
    clone = _fresh_copy(tmp_path / "clone")
    done = subprocess.run(["bash", "-c", command], cwd=clone, env=_clean_env(), capture_output=True, text=True,
                          timeout=1100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    accuracies = [float(x) for x in re.findall(r"^\[eval\].*held-out accuracy (\d\.\d+)", done.stdout, re.M)]
    assert len(accuracies) >= 3, done.stdout
    assert accuracies[0] < 0.5 and max(accuracies) > accuracies[0] + 0.3, accuracies  # visibly learning
    assert "best held-out accuracy" in done.stdout
    assert len(list((clone / "runs").glob("pos-*/summary.json"))) == 1


def test_ci_runs_exactly_the_readme_test_command(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
    assert _readme_command("main") == lines[0] and _readme_command("test") == lines[1]
    # .ci/run executes whatever the README's second line says: swap it for a harmless marker in a copy.
    clone = _fresh_copy(tmp_path / "clone")
    marker = "echo README-TEST-COMMAND-RAN"
    (clone / "README.md").write_text(readme.replace(lines[1], marker, 1), encoding="utf-8")
    done = subprocess.run(["bash", str(clone / ".ci" / "run")], cwd=tmp_path, env=_clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"+ {marker}", "README-TEST-COMMAND-RAN"]
