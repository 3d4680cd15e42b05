"""What every spawned worker process receives (`WorkerSpec`) and runs around its training: the prelude (ignore the
parent's signals, die with the parent, thread count, device binding, the stop check) and the ending (a failure's
traceback to the parent, then exit without interpreter teardown). Shared by the Hogwild worker and the sync worker.

Serves step 3 of `hogwild.train` (spawn): `WorkerSpec`s are built by the engine and pickled once at spawn.

Usage (worker.py, sync.py): `def worker_main(spec): run_worker_process(spec, lambda stopped: train(spec, stopped))`
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch import nn
from tqdm.std import TqdmDefaultWriteLock

from ..config import Config
from .._lifeline import die_with_parent
from ..process_signals import PARENT_SIGNALS, outlive_closed_output
from ..feed.batch_store import BatchStore
from ..share.run_state import RunControl, SharedCounters, StepBudget
from .gradients import use_tf32
from .replica import torch_device


@dataclass
class WorkerSpec:
    """Everything one worker needs (shared tensors travel as shared-memory handles)."""

    worker: int
    device: str
    config: Config  # the run's settings (workers, seed, stop conditions, clipping, threads...)
    model: nn.Module  # parameters and buffers in shared memory
    loss_fn: Callable
    optimizer: Any  # hogwild.shared_optim.SharedOptimizer
    store: BatchStore
    counters: SharedCounters
    control: RunControl  # the run's stop and start flags
    tickets: Any  # feed.tickets.Mailbox: this worker's queue of tickets; None in partition and sync modes
    error_file: str  # where a failure's traceback goes (a file: a queue's lock could be held by a killed worker)
    parent_pid: int  # the process this one is a child of and dies with: the engine's, or its fork server
    budget: StepBudget | None = None  # partition mode with max_steps: the shared count of claimed update slots
    partition_start: tuple[int, int] = (0, 0)  # partition mode: (epoch, position) to resume at
    start_seq: int = 0  # sync mode: the first ticket to train (resume)
    inherited: Any = None  # forked from the fork server: the parent's environment and streams (start_method.py)


_bound = threading.local()  # the device bind_device gave each thread


def bind_device(device: torch.device) -> None:
    """Make a worker's device the current one in the calling thread (the current CUDA device is per thread): its
    main thread at start, its update thread (updates.py) too. torch.cuda.manual_seed (seed_batch), CUDA events and
    any allocation without an explicit device go to the current device, which is otherwise cuda:0 in every thread."""
    if device.type == "cuda":
        torch.cuda.set_device(0 if device.index is None else device.index)  # 'cuda' is cuda:0 in a fresh process
    _bound.device = device


def bound_device() -> torch.device | None:
    """The device bind_device bound in the calling thread (None: none was bound here)."""
    return getattr(_bound, "device", None)


def exit_now(code: int) -> NoReturn:
    """Leave without interpreter teardown: everything a worker produces is already in shared memory or sent,
    and tearing down torch took seconds per worker on a busy machine (which the parent would wait for)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_worker_process(spec: WorkerSpec, train: Callable[[Callable[[], bool]], None]) -> NoReturn:
    """The body of a worker process: the prelude, then `train(stopped)`; any exception, even SystemExit, is sent to
    the parent with its traceback and the process exits 1 (0 once train returns). `stopped()` is true once the
    parent requests a stop or has died."""
    try:
        for name in PARENT_SIGNALS:  # Ctrl-C, `timeout`, batch schedulers and a closed terminal signal the whole
            signal.signal(name, signal.SIG_IGN)  # process group: the parent decides (it stops them, then checkpoints)
        die_with_parent(spec.parent_pid)
        if spec.inherited is not None:
            spec.inherited.attach()
        outlive_closed_output()  # a warning to a pipe whose reader has gone must not end the worker
        # tqdm bars made inside torch (torch.fx while compiling) take a multiprocessing lock, a semaphore that the
        # exit without teardown (exit_now) would leave to the resource tracker ("leaked semaphore objects"); a
        # worker shows no bar, so tqdm's lock stays a thread lock
        TqdmDefaultWriteLock.mp_lock = None
        torch.set_num_threads(spec.config.threads_per_worker)
        bind_device(torch_device(spec.device))
        use_tf32(spec.config.tf32)
        control, parent = spec.control, spec.parent_pid

        def stopped() -> bool:
            return control.stopping or os.getppid() != parent

        train(stopped)
    except BaseException:  # noqa: BLE001 - anything, even SystemExit, is reported to the parent
        try:
            with open(spec.error_file + ".tmp", "w", encoding="utf-8") as file:
                file.write(traceback.format_exc())
            os.replace(spec.error_file + ".tmp", spec.error_file)  # whole before the exit status tells the parent
        except OSError:
            traceback.print_exc()  # no room to write it: the parent names the exit status and points at stderr
        exit_now(1)
    exit_now(0)
