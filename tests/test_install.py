"""The package as a user installs it, in one fresh virtualenv: the README's first quick-start command as written (make
the venv, install torch and the checkout, run the default job) in a fresh copy of the tracked files; then, in that same
venv, `pip install <checkout>` (not editable, replacing the quick start's editable install) and, from a folder outside
any checkout, import hogwild, hogwild.models/data/tasks/multihost and train the POS tagger for a few updates with two
workers; and the installed `hogwild` command (run.py's command line): its --help, a short run of the built-in
synthetic job that writes its run directory there, and `hogwild tag` on that run. Also: `.ci/run` runs exactly the
README's test command.

One venv for both installs: making a venv and installing torch into it is most of the quick start's time, and the
non-editable install needs nothing more than that venv holds.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("hogwild", "hogwild/feed", "hogwild/share", "hogwild/worker", "hogwild/parent", "hogwild/multihost",
            "hogwild/models", "hogwild/data", "hogwild/tasks")

INSIDE_THE_VENV = textwrap.dedent("""
    import importlib, importlib.util, math, os, sys
    from pathlib import Path

    site = Path(sys.argv[1]).resolve()
    import hogwild
    import hogwild.data, hogwild.models, hogwild.multihost, hogwild.tasks
    from hogwild.tasks.job_builders import build_job  # the tasks package imports cleanly when installed
    for module in (hogwild, hogwild.models, hogwild.data, hogwild.tasks, hogwild.multihost):
        assert Path(module.__file__).resolve().is_relative_to(site), (module.__name__, module.__file__)
    for name in ("models", "data", "tasks", "scripts", "bench"):  # no generic top-level names
        assert importlib.util.find_spec(name) is None, (name, importlib.util.find_spec(name))
        try:
            importlib.import_module(name)
        except ImportError:
            pass
        else:
            raise AssertionError(f"import {name} worked")

    from hogwild.data.corpora import checkout_root, corpora_dir
    assert checkout_root() is None and corpora_dir() == Path.cwd().parent / "shared" / "corpora"

    import torch
    from hogwild.data.pos_dataset import synthetic_pos_dataset
    from hogwild.models import POSTagger, pos_loss, pos_preset

    if __name__ == "__main__":
        dataset = synthetic_pos_dataset(num_train=60, num_dev=10, seed=0)
        config = pos_preset("small", n_words=len(dataset.words), n_chars=len(dataset.chars),
                            n_tags=len(dataset.tags))
        torch.manual_seed(0)
        model = POSTagger(config)
        result = hogwild.train(model, pos_loss, dataset.train.batches(),
                               hogwild.Config(workers=2, lr=0.03, max_steps=5, progress=False, tensorboard=False))
        # max_steps stops the workers; one already inside its step may finish it (lock-free: at most workers - 1 more)
        assert 5 <= result.updates <= 6 and sum(result.worker_updates) == result.updates, (
            result.updates, result.worker_updates)
        assert math.isfinite(result.final_loss) and result.final_loss > 0, result.final_loss
        print("trained", result.updates, "updates on", len(result.worker_updates), "workers, loss",
              round(result.final_loss, 4))
""")


def _readme_command(which: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / ".ci" / "readme_commands.py"), which], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


def _copy_tracked_files(destination: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """The tracked files (as in the working tree) copied to `destination`, less the folders `leave_out` names: what a
    clone holds. Never build inside the checkout."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (REPO / name).is_file() and not name.startswith(leave_out):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination


def _clean_env() -> dict[str, str]:
    """This process's environment less its venv: what a user's shell holds."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """The README's main command run as written in a fresh copy -> (the copy, the finished command). The copy's
    .venv is the fresh venv both installs use."""
    command = _readme_command("main")
    assert command.endswith("run.py")  # the main job: run.py with no arguments
    clone = _copy_tracked_files(tmp_path_factory.mktemp("quick-start") / "clone")
    hidden = str(tmp_path_factory.getbasetemp() / "corpora-hidden")  # as the autouse fixture hides them, later
    done = subprocess.run(["bash", "-c", command], cwd=clone, env={**_clean_env(), "HOGWILD_CORPORA": hidden},
                          capture_output=True, text=True, timeout=1100)
    return clone, done


@pytest.mark.slow(first=True)
@pytest.mark.timeout(1200)
def test_readme_main_command_runs_from_a_fresh_copy_and_learns(quick_start):
    clone, done = quick_start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    accuracies = [float(x) for x in re.findall(r"^\[eval\].*held-out accuracy (\d\.\d+)", done.stdout, re.M)]
    assert len(accuracies) >= 3, done.stdout
    assert accuracies[0] < 0.5 and max(accuracies) > accuracies[0] + 0.3, accuracies  # visibly learning
    assert "best held-out accuracy" in done.stdout
    assert len(list((clone / "runs").glob("pos-*/summary.json"))) == 1


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_non_editable_install_imports_and_trains_outside_the_checkout(quick_start, tmp_path):
    clone, done = quick_start
    python = clone / ".venv" / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    assert any(site.glob("__editable__*hogwild*")), "the quick start installed nothing:\n" + done.stderr[-3000:]
    source = _copy_tracked_files(tmp_path / "source", leave_out=("tests/", "docs/"))
    env = {k: v for k, v in _clean_env().items() if k != "HOGWILD_CORPORA"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # The venv's setuptools (torch needs one) builds the wheel itself (70.1+), so no build environment is fetched; an
    # older one lets pip's build isolation fetch what pyproject.toml asks for.
    builds = subprocess.run([str(python), "-c", "import setuptools.command.bdist_wheel"], capture_output=True)
    flags = ["--no-build-isolation", "--no-index"] if builds.returncode == 0 else []
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", *flags, str(source)], env=env, cwd=tmp_path)

    assert not any(site.glob("__editable__*hogwild*"))  # replaced: nothing maps the names to the copy any more
    record = next(site.glob("hogwild-*.dist-info")) / "RECORD"
    installed = {line.split(",")[0] for line in record.read_text().splitlines()}
    for package in PACKAGES:
        assert f"{package}/__init__.py" in installed, package
    assert {"hogwild/data/corpora.py", "hogwild/tasks/defaults.py", "hogwild/tasks/job_builders.py",
            "hogwild/models/pos_tagger.py", "hogwild/multihost/transport.py"} <= installed
    assert not [name for name in installed if name.split("/")[0] in ("models", "data", "tasks", "scripts", "bench",
                                                                     "tests")]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "use_hogwild.py").write_text(INSIDE_THE_VENV)
    trained = _run([str(python), "use_hogwild.py", str(site)], env=env, cwd=elsewhere)
    assert "updates on 2 workers, loss" in trained.stdout
    _check_the_command(clone / ".venv" / "bin" / "hogwild", {**env, "HOGWILD_CACHE": str(tmp_path / "cache")},
                       elsewhere)


def _check_the_command(hogwild: Path, env: dict, cwd: Path) -> None:
    """`hogwild` is run.py's command line: the same flags and subcommands, named hogwild; a 12-update run of the
    built-in synthetic job (1 worker: exactly 12) writes its run directory under the working folder."""
    text = _run([str(hogwild), "--help"], env=env, cwd=cwd).stdout
    assert text.startswith("usage: hogwild [-h] [--config FILE] [--task {pos,nmt}]"), text[:300]
    assert "hogwild tag --checkpoint RUN_DIR" in text and "mpiexec -n 2 hogwild --task pos" in text
    assert "usage: hogwild translate [-h] --checkpoint RUN_DIR" in _run([str(hogwild), "translate", "--help"],
                                                                         env=env, cwd=cwd).stdout
    done = _run([str(hogwild), "--workers", "1", "--steps", "12", "--synthetic-size", "200", "--out", "runs/check",
                 "--no-progress"], env=env, cwd=cwd)
    run_dir = cwd / "runs" / "check"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["updates"], summary["workers"], summary["stop_reason"]) == (12, 1, "max_steps"), done.stdout
    recorded = json.loads((run_dir / "config.json").read_text())["run"]
    assert (recorded["task"], recorded["steps"], recorded["synthetic_size"]) == ("pos", 12, 200)
    assert (run_dir / "command.txt").read_text() == ("hogwild --workers 1 --steps 12 --synthetic-size 200 --out "
                                                     "runs/check --no-progress\n")
    assert (run_dir / "last.pt").is_file() and (run_dir / "metrics.jsonl").stat().st_size > 0
    tagged = subprocess.run([str(hogwild), "tag", "--checkpoint", "runs/check"], input="the cat sat\n", env=env,
                            cwd=cwd, capture_output=True, text=True, timeout=120)
    assert tagged.returncode == 0, tagged.stderr[-2000:]
    assert [word.rsplit("/", 1)[0] for word in tagged.stdout.split()] == ["the", "cat", "sat"], tagged.stdout
    assert tagged.stderr.startswith("hogwild tag: "), tagged.stderr  # the checkpoint used, named by the command


def test_ci_runs_exactly_the_readme_test_command(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
    assert _readme_command("main") == lines[0] and _readme_command("test") == lines[1]
    # .ci/run executes whatever the README's second line says: swap it for a harmless marker in a copy.
    clone = _copy_tracked_files(tmp_path / "clone")
    marker = "echo README-TEST-COMMAND-RAN"
    (clone / "README.md").write_text(readme.replace(lines[1], marker, 1), encoding="utf-8")
    done = subprocess.run(["bash", str(clone / ".ci" / "run")], cwd=tmp_path, env=_clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"+ {marker}", "README-TEST-COMMAND-RAN"]
