"""The package as a user installs it: `pip install <checkout>` (not editable) into a fresh virtualenv outside the
checkout, then, from a folder outside it, import hogwild, hogwild.models/data/tasks/multihost and train the POS
tagger for a few updates with two workers; and the installed `hogwild` command (run.py's command line): its --help,
a short run of the built-in synthetic job that writes its run directory there, and `hogwild tag` on that run.

The dependencies (torch, numpy, ...) are not downloaded again: a .pth file in the new venv adds the running
interpreter's site-packages to sys.path. Python does not process the .pth files of a folder added that way, so an
editable install of the checkout there (`pip install -e .` in the README's quick start) cannot leak into the venv;
the test checks both that mechanism (a probe .pth) and where every hogwild module comes from.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("hogwild", "hogwild/feed", "hogwild/share", "hogwild/worker", "hogwild/parent", "hogwild/multihost",
            "hogwild/models", "hogwild/data", "hogwild/tasks")

INSIDE_THE_VENV = textwrap.dedent("""
    import builtins, importlib, importlib.util, math, os, sys
    from pathlib import Path

    site = Path(sys.argv[1]).resolve()
    assert not hasattr(builtins, "HOGWILD_PROBE"), "a .pth of the shared site-packages was processed"
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


def _copy_tracked_files(destination: Path) -> Path:
    """What a clone holds (the working tree's version of every tracked file): never build inside the checkout."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (REPO / name).is_file() and not name.startswith(("tests/", "docs/")):
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination


def _run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_a_non_editable_install_imports_and_trains_outside_the_checkout(tmp_path):
    source = _copy_tracked_files(tmp_path / "source")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    probe = tmp_path / "probe"  # stands for an editable install's .pth in the shared site-packages
    probe.mkdir()
    (probe / "probe.pth").write_text("import builtins; builtins.HOGWILD_PROBE = True\n")
    shared = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], str(probe)])
    (site / "shared_dependencies.pth").write_text("".join(f"{path}\n" for path in shared))

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "HOGWILD_CORPORA")}
    env.update(OMP_NUM_THREADS="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    # setuptools and wheel come through the .pth when the running interpreter has them (no network needed);
    # otherwise pip's build isolation fetches them.
    offline = all(importlib.util.find_spec(name) for name in ("setuptools", "wheel"))
    flags = ["--no-build-isolation", "--no-index"] if offline else []
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", *flags, str(source)], env=env, cwd=tmp_path)

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
    done = _run([str(python), "use_hogwild.py", str(site)], env=env, cwd=elsewhere)
    assert "updates on 2 workers, loss" in done.stdout
    _check_the_command(venv / "bin" / "hogwild", {**env, "HOGWILD_CACHE": str(tmp_path / "cache")}, elsewhere)


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
