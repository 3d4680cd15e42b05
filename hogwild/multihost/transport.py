"""The MPI transport of multi-host training: the only module that imports mpi4py, lazily, inside functions, so that
single-host use never needs MPI. Non-blocking point-to-point and collectives, heartbeats that name a dead or hung
rank, and the job-wide abort.

Usage: `t = MPITransport(import_mpi().COMM_WORLD, roles, dist); t.wait([t.isend(buf, dest, tag)], "what")`.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any, Callable, NoReturn, Sequence

import numpy as np

from .dist_config import DistConfig

MPI_HINT = "multi-host training needs mpi4py and an MPI library: run  pip install '.[mpi]'  (mpi4py + MPICH wheels)"
_ALIVE, _GONE = 1, 0


def import_mpi():
    """mpi4py's MPI module (initialises MPI on first use), or a RuntimeError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise RuntimeError(f"{MPI_HINT} (import failed: {error})") from None
    return MPI


def say(line: str, stream=None) -> None:
    """Write one whole line at once (ranks share the launcher's stdout; print() may split text and newline)."""
    stream = stream or sys.stdout
    stream.write(line + "\n")
    stream.flush()


class TransportFailure(RuntimeError):
    """A failure met on a thread whose aborts are deferred (MPITransport.defer_aborts_in); the message names it."""


class _Request:
    """A non-blocking MPI request with the status it completed with (mpi4py forgets it after Test)."""

    def __init__(self, MPI, request, buffer: Any = None, peer: int | None = None) -> None:
        self.request, self.status, self.buffer, self.done = request, MPI.Status(), buffer, False
        self.peer = peer  # the other rank, for error messages (None: any rank, or a collective)


class MPITransport:
    """Non-blocking messaging between ranks, plus heartbeats: any wait that outlives `timeout_seconds`, or a peer
    silent that long, aborts the whole job (MPI Abort) with a message naming the rank, its role, pid and host."""

    def __init__(self, world, roles: list[str], dist: DistConfig) -> None:
        self.MPI = import_mpi()
        self.world, self.roles, self.dist = world, roles, dist
        # a broken connection (a peer died) must reach our abort() naming the peer, not end this rank silently
        world.Set_errhandler(self.MPI.ERRORS_RETURN)
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.hosts_comm = world.Split(0 if roles[self.rank] == "worker" else 1, self.rank)  # training hosts only
        self.heart = world.Dup()  # heartbeats never mix with data messages
        for comm in (self.hosts_comm, self.heart):
            comm.Set_errhandler(self.MPI.ERRORS_RETURN)
        self.where = world.allgather((os.getpid(), socket.gethostname()))
        self.peers = [q for q in range(self.size) if q != self.rank]
        self._sends: list[_Request] = []
        self._beat_out = np.array([_ALIVE], dtype=np.int64)
        self._beat_in = {q: np.zeros(1, dtype=np.int64) for q in self.peers}
        self._beat_recv = {q: self._post_beat(q) for q in self.peers}
        self._beat_send: dict[int, Any] = {}
        self._last_seen = {q: time.monotonic() for q in self.peers}
        self._last_beat = 0.0
        self._gone: set[int] = set()
        self._deferred: threading.Thread | None = None  # defer_aborts_in

    # ---- naming and aborting ---------------------------------------------------------------------------------------
    def describe(self, rank: int) -> str:
        pid, host = self.where[rank]
        return f"rank {rank} ({self.roles[rank]}, pid {pid} on {host})"

    def defer_aborts_in(self, thread: threading.Thread) -> None:
        """A training host's agent thread: a failure it meets (a dead or silent peer, a failed exchange) raises
        TransportFailure there instead of aborting at once, so that the host's engine stops its workers and writes
        last.pt first (HostCommunication.failure); the engine's error then aborts the job, naming the same cause."""
        self._deferred = thread

    def abort(self, reason: str) -> NoReturn:
        if threading.current_thread() is self._deferred:
            raise TransportFailure(reason)
        say(f"hogwild.distributed: {self.describe(self.rank)} aborts the job: {reason}", sys.stderr)
        # MPICH's launcher tears the job down at once on Abort and can drop the line above before forwarding it
        # (seen in about 1 of 8 test runs); a short pause lets it reach the user's terminal first.
        time.sleep(0.5)
        self.world.Abort(1)
        os._exit(1)  # not reached: Abort ends the process

    # ---- point-to-point and collectives -----------------------------------------------------------------------------
    def _call(self, peer: int | None, what: str, operation: Callable[[], Any]) -> Any:
        """Run one MPI call; an MPI error (e.g. the peer's process is gone) aborts the job naming the peer."""
        try:
            return operation()
        except self.MPI.Exception as error:
            other = self.describe(peer) if peer is not None else "another rank"
            self.abort(f"{what} with {other} failed ({error.Get_error_string().strip()}): {other} died or is "
                       f"unreachable")

    def isend(self, buffer: np.ndarray, dest: int, tag: int) -> _Request:
        request = _Request(self.MPI, self._call(dest, "sending", lambda: self.world.Isend(buffer, dest=dest, tag=tag)),
                           buffer, dest)  # the buffer is kept alive until the send completes
        self._sends.append(request)
        return request

    def irecv(self, buffer: np.ndarray, source: int | None, tag: int) -> _Request:
        any_source = self.MPI.ANY_SOURCE if source is None else source
        request = self._call(source, "receiving", lambda: self.world.Irecv(buffer, source=any_source, tag=tag))
        return _Request(self.MPI, request, buffer, source)

    def iallreduce(self, send: np.ndarray, total: np.ndarray) -> _Request:
        """Sum over the training hosts.  # (N,) -> (N,)"""
        request = self._call(None, "allreduce", lambda: self.hosts_comm.Iallreduce(send, total, op=self.MPI.SUM))
        return _Request(self.MPI, request, (send, total))

    def ibcast(self, buffer: np.ndarray, root: int) -> _Request:
        return _Request(self.MPI, self._call(root, "broadcast", lambda: self.world.Ibcast(buffer, root=root)), buffer,
                        root)

    def test(self, request: _Request) -> bool:
        if not request.done:
            request.done = bool(self._call(request.peer, "communication",
                                           lambda: request.request.Test(request.status)))
        return request.done

    def source(self, request: _Request) -> int:
        return request.status.Get_source()

    def wait(self, requests: Sequence[_Request], what: str, deadline: bool = True) -> None:
        """Wait for all `requests` while servicing heartbeats; with `deadline`, abort after timeout_seconds (without:
        for waits on other ranks' training progress, bounded only by their heartbeats)."""
        start = time.monotonic()
        while not all(self.test(r) for r in requests):
            self.service()
            if deadline and time.monotonic() - start > self.dist.timeout_seconds:
                self.abort(f"{what} did not finish within {self.dist.timeout_seconds} s")
            time.sleep(0.001)

    # ---- heartbeats ----------------------------------------------------------------------------------------------
    def _post_beat(self, peer: int):
        return self._call(peer, "heartbeat", lambda: self.heart.Irecv(self._beat_in[peer], source=peer, tag=0))

    def service(self) -> None:
        """Send due heartbeats, take in the peers' ones, and abort when a peer has been silent too long."""
        now = time.monotonic()
        if now - self._last_beat >= self.dist.heartbeat_seconds:
            self._last_beat = now
            for q in self.peers:
                previous = self._beat_send.get(q)
                if q in self._gone:
                    continue
                if previous is None or self._call(q, "heartbeat", previous.Test):  # no pile-up for a silent peer
                    self._beat_send[q] = self._call(q, "heartbeat",
                                                    lambda: self.heart.Isend(self._beat_out, dest=q, tag=0))
        for q in self.peers:
            while q not in self._gone and self._call(q, "heartbeat", self._beat_recv[q].Test):
                self._last_seen[q] = now
                if self._beat_in[q][0] == _GONE:
                    self._gone.add(q)
                else:
                    self._beat_recv[q] = self._post_beat(q)
        silent = [q for q in self.peers if q not in self._gone and now - self._last_seen[q] > self.dist.timeout_seconds]
        if silent:
            names = ", ".join(self.describe(q) for q in silent)
            self.abort(f"no heartbeat from {names} for more than {self.dist.timeout_seconds} s: dead or hung")
        self._sends = [r for r in self._sends if not self.test(r)]

    def close(self) -> None:
        """Say goodbye on the heartbeat channel (peers stop watching us) and release pending requests."""
        self.wait(self._sends, "delivery of the last messages")
        gone = np.array([_GONE], dtype=np.int64)
        for q in self.peers:
            previous = self._beat_send.get(q)
            if previous is not None:
                previous.Wait()
            self.heart.Isend(gone, dest=q, tag=0).Wait()
        for q in self.peers:
            if q not in self._gone:
                self._beat_recv[q].Cancel()
                self._beat_recv[q].Wait()
