"""How the engine starts its workers (hogwild/worker/start_method.py): CPU workers forked from one fork server per
process, which a later run reuses, each taking the parent's environment and standard streams as they are when it
starts; spawn when asked, and for workers whose shared tensors need too many file descriptors."""
from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import re
import signal
import sys
import threading
import time

import pytest
import torch
from torch import nn

import hogwild
from hogwild.worker import fork_server
from hogwild.worker.start_method import MAX_DESCRIPTORS, passed_descriptors
from tests.hogwild import engine_helpers as H


def reporting_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """mse_loss that appends "pid parent-pid mark" to $START_METHOD_LOG at each step (and says so on stderr in the
    run marked "second")."""
    with open(os.environ["START_METHOD_LOG"], "a") as log:
        log.write(f"{os.getpid()} {os.getppid()} {os.environ['START_METHOD_MARK']}\n")
    if os.environ["START_METHOD_MARK"] == "second":
        print(f"step in {os.getpid()}", file=sys.stderr, flush=True)
    return H.mse_loss(model, batch)


def forking_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    """reporting_loss in a worker that forks a process (which exits 0 at once) at each step: the exit status is the
    mark."""
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.environ["START_METHOD_MARK"] = str(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
    return reporting_loss(model, batch)


def _train(tmp_path, name: str, model: nn.Module | None = None, optimizer: str = "sgd",
           loss_fn=reporting_loss) -> list[tuple[int, int, str]]:
    log = tmp_path / f"{name}.log"
    os.environ["START_METHOD_LOG"], os.environ["START_METHOD_MARK"] = str(log), name
    result = hogwild.train(model or H.regression_model(), loss_fn, H.regression_batches(n=6),
                           hogwild.Config(workers=2, lr=0.01, optimizer=optimizer, progress=False, tensorboard=False,
                                          checkpoint_dir=str(tmp_path / name)))
    assert result.updates == 6
    return [(int(pid), int(parent), mark) for pid, parent, mark in (line.split() for line in log.read_text().split(
        "\n") if line)]


@pytest.fixture
def environment(monkeypatch):
    monkeypatch.delenv("HOGWILD_START_METHOD", raising=False)
    monkeypatch.setenv("START_METHOD_LOG", "")
    monkeypatch.setenv("START_METHOD_MARK", "")
    return monkeypatch


def test_cpu_workers_fork_from_one_server_and_take_the_environment_and_streams_at_their_start(environment, capfd,
                                                                                              tmp_path):
    with capfd.disabled():  # the server may start here, its standard streams pytest's own
        first = _train(tmp_path, "first")
    second = _train(tmp_path, "second")  # the environment and streams changed since the server started
    server = fork_server.pid()
    assert server is not None and server != os.getpid()
    for steps in (first, second):
        assert len(steps) == 6 and {parent for _, parent, _ in steps} == {server}
        assert len({pid for pid, _, _ in steps}) <= 2
    assert {mark for _, _, mark in first} == {"first"} and {mark for _, _, mark in second} == {"second"}
    assert not {pid for pid, _, _ in first} & {pid for pid, _, _ in second}  # new workers, the same server
    said = {int(pid) for pid in re.findall(r"^step in (\d+)$", capfd.readouterr().err, re.M)}
    assert said == {pid for pid, _, _ in second}


def test_a_process_a_forked_worker_forks_lives_on(environment, tmp_path):
    """The server's lifeline for the processes it forks (forkserver_preload.py) is inherited by the workers' own
    forks, which must not take it for theirs."""
    steps = _train(tmp_path, "forks", loss_fn=forking_loss)
    assert len(steps) == 6 and {mark for _, _, mark in steps} == {"0"}
    assert {parent for _, parent, _ in steps} == {fork_server.pid()}


def test_the_engines_server_is_its_own_and_a_users_fork_server_processes_keep_their_signals(environment, tmp_path):
    """multiprocessing's shared fork server stays the user's: its processes can still be terminated (SIGTERM), which
    the engine's server, ignoring the process group's signals, would have passed on to them."""
    steps = _train(tmp_path, "engine")
    assert {parent for _, parent, _ in steps} == {fork_server.pid()}
    user = multiprocessing.get_context("forkserver").Process(target=time.sleep, args=(60,))
    user.start()
    user.terminate()
    user.join(20)
    assert user.exitcode == -signal.SIGTERM
    assert multiprocessing.forkserver._forkserver._forkserver_pid not in (None, fork_server.pid())


def test_a_run_started_from_another_thread_spawns(environment, tmp_path):
    """The server starts from the main thread only (it blocks the parent's signals while it starts, which only the
    main thread can do, and it dies with the thread that started it)."""
    found = []
    thread = threading.Thread(target=lambda: found.extend(_train(tmp_path, "threaded")))
    thread.start()
    thread.join(120)
    assert len(found) == 6 and {parent for _, parent, _ in found} == {os.getpid()}


def test_descriptors_are_counted_only_when_tensors_travel_as_descriptors():
    model = H.regression_model()
    assert passed_descriptors(model) == 4  # two weights, two biases
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        assert passed_descriptors(model) == 0
    finally:
        torch.multiprocessing.set_sharing_strategy("file_descriptor")


def test_hogwild_start_method_spawn_spawns(environment, tmp_path):
    environment.setenv("HOGWILD_START_METHOD", "spawn")
    steps = _train(tmp_path, "spawned")
    assert len(steps) == 6 and {parent for _, parent, _ in steps} == {os.getpid()}


def test_workers_whose_tensors_need_too_many_descriptors_are_spawned(environment, tmp_path):
    model = H.many_tensors_model(layers=40)  # 82 tensors; with Adam's two moments and step each: 328
    assert passed_descriptors(model) == 82 < MAX_DESCRIPTORS
    steps = _train(tmp_path, "many", model=model, optimizer="adam")
    assert len(steps) == 6 and {parent for _, parent, _ in steps} == {os.getpid()}


def test_an_unknown_start_method_is_refused_naming_the_variable(environment, tmp_path):
    environment.setenv("HOGWILD_START_METHOD", "fork")
    with pytest.raises(ValueError, match=r"^HOGWILD_START_METHOD='fork': expected spawn or forkserver"):
        _train(tmp_path, "refused")
    assert not (tmp_path / "refused").exists()
