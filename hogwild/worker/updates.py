"""Applying a worker's updates to the shared parameters: at once, or one step behind in a background thread.

Serial (every 'cpu' worker; device workers with Config.overlap_update off): the update is applied the moment it is
submitted, before the next step's pull. Overlapped (the default on GPUs): update k is held until step k+1 starts, then
applied on the CPU by a background thread while step k+1 computes and the pull of step k+2 reads the shared
parameters; the worker waits for it before submitting update k+1. Neither the update nor that pull waits for the
other: on a GPU the copy to the device and the CPU update run at once, so a cycle costs the longer of them, not
their sum. The pull may read part of the update (a torn read, as between Hogwild workers); the version a step
reports is the global update count when its pull was issued, so an update that had not landed then counts as not
read. With one worker each step then lacks the update held back and maybe the one landing (staleness 1 or 2).

The background thread is bound to the worker's device (`process_prelude.bind_device`: without it the thread's
current CUDA device is cuda:0, where any CUDA call would open a context in every worker) and runs the CPU optimizer
step with `threads` torch threads of its own (`update_threads`: by default a GPU worker's share of the machine's
cores, since its main thread mostly waits for the GPU). The step's arithmetic is elementwise, so the result is
bit-identical whatever the thread count (tests/hogwild/worker/test_update_threads.py).

Serves step 3 of `hogwild.train` (spawn): it runs inside the worker processes.

A worker's step (step_graph.py on a device, in_place.py for 'cpu') submits its update before the device has
finished it: the Update carries the step's `result`, and whoever applies it (the background thread, or the worker
itself when serial) first waits for the step's copy to the host, then reads its finiteness and loss there - the skip
of a non-finite step is decided then, by the SkipRule, and the worker's main thread never waits for the device.

Usage (worker.py): `updater.release()` as a step starts; `updater.wait()` then `updater.submit(Update(...))` once it
is queued and the next pull issued; `updater.finish()` at the end.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..config import Config
from ..share.run_state import StepBudget, WorkerView
from ..share.resources import usable_cores
from .gradients import NonFiniteStreak, scale_gradients
from .process_prelude import bind_device


def update_threads(config: Config, device: str, cores: int | None = None) -> int:
    """Torch threads of a worker's background update thread: Config.update_threads, or automatically, for a GPU
    worker, its share of the cores left after the parent's one, less one for its own main thread (at least 1);
    for other workers threads_per_worker (their main thread computes on the CPU too). `cores`: this machine's."""
    if config.update_threads is not None:
        return config.update_threads
    if not device.startswith("cuda"):
        return config.threads_per_worker
    cores = usable_cores() if cores is None else cores
    return max(1, (cores - 1) // config.workers - 1)


def start_update_thread(device: torch.device, threads: int) -> None:
    """The background update thread's first act: bind the worker's device, set its own torch thread count."""
    bind_device(device)
    torch.set_num_threads(threads)  # this thread's OpenMP team; the worker's main thread keeps its own count


@dataclass
class Update:
    """One gradient, on the host, ready to apply."""

    grads: list[Tensor | None] | None  # one per shared parameter (None: no gradient this step); None: already
    #                                     on the shared parameters' .grad ('cpu' workers)
    read_version: int  # global update count when its parameters were pulled
    epoch: int
    examples: int
    loss: float
    phases: list[float]  # seconds of pull, compute, push
    clip_scale: float | None = None  # multiply the gradients by this first (clip_norm)
    result: Any = None  # the step's result, maybe still on the device (step_graph.StepResult, graphed or eager; or
    #                     in_place.py's): grads, loss, phases and the skip come from it once it has finished


@dataclass
class SkipRule:
    """What a step with a non-finite gradient does instead of its update: counted as skipped, its max_steps slot given
    back (skipped updates do not count), and a streak of them past its limit fails the worker."""

    view: WorkerView
    budget: StepBudget | None
    streak: NonFiniteStreak

    def applied(self) -> None:
        self.streak.applied()

    def skipped(self) -> None:
        self.view.skipped()  # never write a non-finite gradient into the shared parameters
        if self.budget is not None:
            self.budget.release()
        self.streak.skipped()


class Updater:
    """Applies Updates with the shared optimizer and records them in the worker's counters."""

    def __init__(self, optimizer: Any, shared: list[Tensor], schedule: Callable[[int, int], float],
                 view: WorkerView, background: bool, device: torch.device = torch.device("cpu"), threads: int = 1,
                 skip: SkipRule | None = None):
        self.optimizer, self.shared, self.schedule, self.view = optimizer, shared, schedule, view
        self.skip = skip  # decides the late skips of the steps' results (Update.result)
        self.executor = None
        if background:
            # The main thread fixes its own thread count now: a thread's count is set lazily from the last
            # torch.set_num_threads of any thread, which will be the update thread's.
            torch.get_num_threads()
            self.executor = ThreadPoolExecutor(1, thread_name_prefix="hogwild-update", initializer=start_update_thread,
                                               initargs=(device, threads))
        self.waiting: Update | None = None  # submitted; held until the next pull has read the parameters
        self.running: Future | None = None

    def submit(self, update: Update) -> None:
        if self.executor is None:
            self._apply(update)
        else:
            self.waiting = update

    def release(self) -> None:
        """The next step has started: the held update may now write the shared parameters, beside that step's
        compute and the prefetch after it, which may read part of it (a torn read, as between Hogwild workers)."""
        if self.waiting is not None:
            self.running = self.executor.submit(self._apply, self.waiting)
            self.waiting = None

    def wait(self) -> None:
        """Block until the update in the background has landed; re-raise its error."""
        if self.running is not None:
            running, self.running = self.running, None
            running.result()

    def in_flight(self) -> int:
        """Updates submitted but not yet landed (0 or 1)."""
        return int(self.waiting is not None or self.running is not None)

    def finish(self) -> None:
        """Land what is left (the last step's update)."""
        self.wait()
        if self.waiting is not None:
            update, self.waiting = self.waiting, None
            self._apply(update)

    def shutdown(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)

    def _apply(self, update: Update) -> None:
        if update.result is not None:  # a step's result: wait for its copy to the host (a device's), then read it
            finite, loss, grads, phases = update.result.resolve()
            if not finite:
                self.skip.skipped()
                return
            self.skip.applied()
            update.grads, update.loss, update.phases = grads, loss, phases
        start = time.perf_counter()
        if update.grads is not None:  # setting .grad checks shape, dtype and device: skipped when already there
            for param, grad in zip(self.shared, update.grads):
                param.grad = grad
        if update.clip_scale is not None:
            scale_gradients([param.grad for param in self.shared], update.clip_scale)
        lr = self.schedule(update.read_version, update.epoch)
        staleness = self.view.global_updates() - update.read_version  # updates that landed since the pull
        self.optimizer.step(lr)  # lock-free, in place on the shared parameters and state
        phases = (*update.phases, time.perf_counter() - start)
        self.view.applied(staleness, update.examples, update.loss, lr, phases)
