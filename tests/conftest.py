"""Shared test fixtures: the location of the real corpora, and deterministic single-threaded torch.

Tests that need a GPU skip with a reason naming CUDA; that reason also marks them `cuda`, so that a GPU machine runs
exactly those (`pytest -m cuda`, bench/gpu_check.sh).

The real corpora (../shared/corpora, or $HOGWILD_CORPORA) are for tests marked `corpora` (or using the `corpus`
fixture, which marks them): those skip, saying why, when the corpora are absent. Every other test runs with the
corpora hidden ($HOGWILD_CORPORA pointing at a folder that does not exist, inherited by its subprocesses), so a test
that reads them without the mark fails here, not only on a machine without them.
"""
import compileall
import pathlib
import signal
import subprocess

import pytest
import torch

from hogwild.data.corpora import corpora_dir

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


COMPILED = ("hogwild", "models", "data", "tasks", "bench", "scripts", "tests")


def pytest_configure(config):
    """Signals as a terminal's foreground command has them: the tests send Ctrl-C and hang-ups to the processes they
    start, which inherit this one's ignored signals and rightly keep them ignored (run.py under nohup). A suite started
    in the background of a script (SIGINT ignored) or under nohup (SIGHUP) had those tests fail.

    Then compile the checkout's modules once, before any test starts a process. The suite starts hundreds of Python
    processes (run.py, its workers, MPI ranks, bench scripts), and each imports the project: with no .pyc beside the
    sources (a fresh clone, or PYTHONDONTWRITEBYTECODE=1 as on our machines, which stops each process writing what it
    compiled) every one of them compiled those modules again, about 0.4 s of CPU each. Written once, by the controller
    (xdist's workers find them made), into the __pycache__ folders git ignores; an unchanged file is not rewritten."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if hasattr(config, "workerinput"):
        return
    for folder in COMPILED:
        compileall.compile_dir(REPO_ROOT / folder, quiet=1)


def pytest_collection_modifyitems(items):
    for item in items:
        if "corpus" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.corpora)
        if any("CUDA" in mark.kwargs.get("reason", "") for mark in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.cuda)  # bench/gpu_check.sh runs these: `pytest -m cuda`
    # Files holding a slow (end-to-end) test first, each kept whole: under the README's `pytest -n 2` they start early
    # and the short files fill in at the end, so that both workers finish together. First of all the files with a
    # test marked `slow(first=True)`, a job of minutes (the README's quick start, gpu_check.sh's CPU mode): the two
    # workers take one each at once, where landing together on one worker, or last, they would end the suite alone.
    slow = [item.get_closest_marker("slow") for item in items]
    first_files = {item.path for item, mark in zip(items, slow) if mark is not None and mark.kwargs.get("first")}
    slow_files = {item.path for item, mark in zip(items, slow) if mark is not None}
    items.sort(key=lambda item: (item.path not in first_files, item.path not in slow_files))  # stable: files whole


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist (`-n 2`, the README's test command) hands out whole files, in the order above: a module's shared
    fixtures (a trained run, a tokenised cache) are built once, by one worker. An explicit --dist is kept."""
    if config.getvalue("dist") != "load":  # "load" is what -n alone implies
        return None
    from xdist.scheduler import LoadFileScheduling
    config.option.loadscopereorder = False  # xdist would put the files with the most tests first
    return LoadFileScheduling(config, log)


@pytest.fixture(autouse=True)
def _corpora_only_where_marked(request, monkeypatch, tmp_path_factory):
    if request.node.get_closest_marker("corpora") is None:
        monkeypatch.setenv("HOGWILD_CORPORA", str(tmp_path_factory.getbasetemp() / "corpora-hidden"))
    elif not corpora_dir().is_dir():
        pytest.skip(f"needs the real corpora: {corpora_dir()} not found (set HOGWILD_CORPORA to the folder holding "
                    f"brown/, europarl-fr-en/ ...)")


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


@pytest.fixture
def tmpfs(tmp_path):
    """`tmpfs("64k")` -> a folder on a tmpfs of that size (a disk that really fills up: writes past it fail with
    ENOSPC), unmounted after the test; skips saying why where it cannot be mounted (it needs root)."""
    mounted = []

    def mount(size: str) -> pathlib.Path:
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=True)
