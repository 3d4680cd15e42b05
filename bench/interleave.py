"""Interleaved races: several training runs share the machine in turns, so that its drift hits them all alike.

A race that trains one variant after another compares runs minutes apart; on a shared VM the same job's updates/s
drift by 10-15% between such runs (1.74-1.93x for 2 workers against 1 on Brown, 2026-11-25), more than the effects
being measured. Here each run is a child process in its own process group, set up and then held until its turn; the
controller runs them in slices of `slice_seconds`, in turn, stopping the others' whole groups (the child, its engine
workers, its feeder) with SIGSTOP and resuming with SIGCONT. A run's time is its active time: the sum of its slices,
up to the moment in question. When a run has had its `minutes`, the controller asks it to stop (SIGTERM: the engine's
graceful stop) and waits until it has stopped, in a last turn of its own; the runs then finish (score their
snapshots) one at a time, after all training is over. When a run fails, the race ends, but not the other runs'
work: each is asked to stop as at the end of its minutes and finishes, and RunFailed carries what they returned.

Usage (bench_convergence --interleave 30):
    results = race({"single": 13.0, "hogwild2": 8.0}, 30.0, child_main, (train, finish, args))
where child_main(conn, variant, train, finish, args) is `child` below. `results[variant]` is what `finish` returned
and `slices[variant]` the run's (begin, end) turns, in time.perf_counter() seconds (CLOCK_MONOTONIC: one clock for
every process on the machine).
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection

import torch.multiprocessing as mp
from hogwild.supervisor import die_with_parent

STOP_SIGNAL = signal.SIGTERM  # the engine's graceful stop (hogwild.supervisor.PARENT_SIGNALS)


def active_seconds(slices: list[tuple[float, float]], begin: float, end: float) -> float:
    """Seconds of [begin, end] that fall inside the run's turns `slices` ((begin, end) pairs, in order)."""
    return sum(max(0.0, min(stop, end) - max(start, begin)) for start, stop in slices)


stop_requested = False  # set in a child by STOP_SIGNAL outside the engine's own handler (the torch2 pattern's loop)


def _request_stop(number, frame) -> None:
    global stop_requested
    stop_requested = True


def _signal_group(pid: int, number: int) -> None:
    """Send `number` to the process group led by `pid`; a group that has already gone (the run died) is let be."""
    try:
        os.killpg(pid, number)
    except ProcessLookupError:
        pass


_PIPE_GONE = (EOFError, BrokenPipeError, ConnectionResetError)  # the other end of a race's pipe has closed


class RunFailed(RuntimeError):
    """A run of the race failed (its message names it). `results` and `slices` are race()'s, for the other runs that
    could be stopped and finished after it (their training cut short)."""

    def __init__(self, variant: str, message: str):
        super().__init__(f"{variant}: {message}")
        self.variant = variant
        self.results: dict = {}
        self.slices: dict[str, list[tuple[float, float]]] = {}


def child(conn: Connection, variant: str, train: Callable, finish: Callable, args) -> None:
    """One run, in its own process group: set up (train's first yield), wait for 'go', train until stopped, report
    'trained', wait for 'finish', then send finish's result. Any failure is sent back with its traceback."""
    die_with_parent(os.getppid())  # a controller killed outright takes its runs along, stopped or not
    os.setpgid(0, 0)  # the controller pauses this group: this process and every worker it spawns
    signal.signal(STOP_SIGNAL, _request_stop)
    try:
        steps = train(args, variant)  # a generator: set up, yield; train, yield the trained run
        next(steps)
        conn.send(("ready", None))
        if conn.recv() != "go":
            return
        trained = next(steps)
        conn.send(("trained", None))
        if conn.recv() != "finish":
            return
        conn.send(("result", finish(args, variant, trained)))
    except _PIPE_GONE:
        return  # the controller has gone or abandoned the race: nobody to report to
    except BaseException as error:  # noqa: BLE001 -- the controller reports it and stops the race
        if not isinstance(error, (ValueError, SystemExit)):  # a bad option's message says it all; a bug needs more
            traceback.print_exc()
        with contextlib.suppress(*_PIPE_GONE):
            conn.send(("error", "".join(traceback.format_exception_only(error)).strip()))


class Racer:
    """The controller's handle on one child: its process, its pipe, its turns and its active time."""

    def __init__(self, variant: str, minutes: float, target: Callable, target_args: tuple):
        self.variant, self.budget = variant, minutes * 60
        context = mp.get_context("spawn")
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=target, args=(child_conn, variant, *target_args), name=f"race-{variant}")
        self.slices: list[tuple[float, float]] = []
        self.started = self.trained = self.finished = False
        self.result = None

    @property
    def active(self) -> float:
        return sum(end - begin for begin, end in self.slices)

    def exited(self, when: str) -> RunFailed:
        self.process.join(timeout=5)
        return RunFailed(self.variant, f"the run exited (code {self.process.exitcode}) {when}")

    def send(self, message: str) -> None:
        try:
            self.conn.send(message)
        except _PIPE_GONE:
            raise self.exited(f"before {message!r}") from None

    def expect(self, kind: str | None, timeout: float | None = None):
        """The child's next message, which must be `kind` (None: none was due, as during a turn); a failure, an exit
        or another message stops the race."""
        when = f"before {kind!r}" if kind else "during its turn"
        if not self.conn.poll(timeout):
            raise RunFailed(self.variant, f"no {kind!r} from the run within {timeout} s")
        try:
            got, value = self.conn.recv()
        except EOFError:
            raise self.exited(when) from None
        if got == "error":
            raise RunFailed(self.variant, f"the run failed: {value}")
        if got != kind:
            raise RunFailed(self.variant, f"the run sent {got!r} {when}")
        return value

    def turn(self, seconds: float) -> None:
        """Let the run train for `seconds` (its first turn starts it), then stop its whole group."""
        begin = time.perf_counter()
        if self.started:
            _signal_group(self.process.pid, signal.SIGCONT)  # a group that died while stopped: expect() says so
        else:
            self.send("go")
            self.started = True
        try:
            if self.conn.poll(seconds):  # only a failure speaks during a turn
                self.expect(None)
        finally:
            _signal_group(self.process.pid, signal.SIGSTOP)
            self.slices.append((begin, time.perf_counter()))

    def ask_to_stop(self) -> None:
        """The engine's graceful stop for the run (delivered when its stopped group resumes, which this does too); a
        run that died while stopped is let be: expect() or join() tells."""
        try:
            os.kill(self.process.pid, STOP_SIGNAL)
        except ProcessLookupError:
            pass
        _signal_group(self.process.pid, signal.SIGCONT)

    def stop_training(self, timeout: float = 120.0) -> None:
        """Ask the run to stop (graceful), let it, and wait until it has: a last turn, so that the updates and the
        final snapshot of its stopping count in its time, and no other run's turn overlaps it."""
        begin = time.perf_counter()
        self.ask_to_stop()
        try:
            self.expect("trained", timeout)
        finally:
            self.slices.append((begin, time.perf_counter()))
        self.trained = True

    def finish(self) -> None:
        """Let a trained run finish (score its snapshots) and keep what it returns."""
        self.send("finish")
        self.result = self.expect("result")
        self.finished = True
        self.process.join()

    def salvage(self) -> bool:
        """After another run's failure: stop this run's training if it has started (the graceful stop of its
        minutes' end) and let it finish. False where it never started or fails too."""
        if not self.started:
            return False
        try:
            if not self.trained:
                self.stop_training()
            if not self.finished:
                self.finish()
        except RunFailed:
            return False
        return True

    def kill(self, grace: float = 10.0) -> None:
        """Stop a run that the race abandons: first gracefully (the engine removes its batch files and stops its
        workers), after `grace` seconds with SIGKILL to the whole group, where a dead run's workers may be left."""
        if self.process.pid is None:  # never started (an earlier run's start failed)
            return
        self.conn.close()  # a run that waits for the controller's word ends instead
        if self.process.is_alive():
            self.ask_to_stop()
            self.process.join(timeout=grace)
        _signal_group(self.process.pid, signal.SIGKILL)
        if self.process.is_alive():  # it failed before it led a group of its own
            self.process.kill()
        self.process.join(timeout=10)


def race(minutes: dict[str, float], slice_seconds: float, target: Callable, target_args: tuple,
         setup_timeout: float = 600.0) -> tuple[dict, dict[str, list[tuple[float, float]]]]:
    """Run one child per variant (`target(conn, variant, *target_args)`, e.g. `child`), in turns of `slice_seconds`
    until each has had its `minutes`; then let each finish, one at a time. Returns ({variant: finish's result},
    {variant: its turns}). A child's failure raises RunFailed naming the run, with the results of the others that
    could be stopped and finished; every child's group is gone when race() returns or raises."""
    racers = [Racer(variant, budget, target, target_args) for variant, budget in minutes.items()]
    try:
        for racer in racers:
            racer.process.start()
        for racer in racers:  # set up one by one is not needed: a child waits for 'go' once it is ready
            racer.expect("ready", setup_timeout)
        while any(not r.trained for r in racers):
            for racer in (r for r in racers if not r.trained):
                racer.turn(min(slice_seconds, racer.budget - racer.active))
                if racer.active >= racer.budget - 1e-3:
                    racer.stop_training()
        for racer in racers:
            racer.finish()
        return {r.variant: r.result for r in racers}, {r.variant: r.slices for r in racers}
    except RunFailed as failure:  # the failed run goes first; the others keep what they have trained
        next(racer for racer in racers if racer.variant == failure.variant).kill()
        kept = [racer for racer in racers if racer.variant != failure.variant and racer.salvage()]
        failure.results = {racer.variant: racer.result for racer in kept}
        failure.slices = {racer.variant: racer.slices for racer in racers}
        raise
    finally:  # a failure or Ctrl-C: no run outlives the race (finished runs' groups are not signalled)
        for racer in racers:
            if not racer.finished:
                racer.kill()
