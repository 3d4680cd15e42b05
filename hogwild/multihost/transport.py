"""The MPI transport of multi-host training: the only module that imports mpi4py, lazily, inside functions, so that
single-host use never needs MPI. Non-blocking point-to-point and collectives (big ones in pieces, .pieces), heartbeats
that name a dead or hung rank, the job-wide abort, and a goodbye that leaves no message unmatched at MPI_Finalize.

Every receive names its source: MPICH 5.0's ch4:ucx over TCP can leave a big message from one rank unmatched by an
MPI_ANY_SOURCE receive posted for it (MPI_Iprobe sees it, the receive never completes), which hung the parameter
servers at the end of a run on simulated hosts.

Usage: `t = MPITransport(import_mpi().COMM_WORLD, roles, dist); t.wait([t.isend(buf, dest, tag)], "what"); t.close()`.
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
from .exchange_stats import ExchangeStats
from .pieces import Pieces, piece_bounds, stalled
from .wire import add_into

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
        self.host_ranks = [q for q, role in enumerate(roles) if role == "worker"]
        self.heart = world.Dup()  # heartbeats never mix with data messages
        for comm in (self.hosts_comm, self.heart):
            comm.Set_errhandler(self.MPI.ERRORS_RETURN)
        self.where = world.allgather((os.getpid(), socket.gethostname()))
        self.peers = [q for q in range(self.size) if q != self.rank]
        self._sends: list[Pieces] = []
        self.stats = ExchangeStats()  # the bytes; the exchanges are counted by the agents and servers
        self._op16 = None  # _sum16
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

    def isend(self, buffer: np.ndarray, dest: int, tag: int) -> Pieces:
        """Send a 1-d buffer (kept alive until it is delivered; in pieces when big)."""
        self.stats.sent(buffer.nbytes)
        starts = [lambda lo=lo, hi=hi: self.world.Isend(buffer[lo:hi], dest=dest, tag=tag)
                  for lo, hi in piece_bounds(buffer)]
        request = self._call(dest, "sending", lambda: Pieces(starts, buffer=buffer, peer=dest, sent=buffer.nbytes))
        self._sends.append(request)
        return request

    def irecv(self, buffer: np.ndarray, source: int, tag: int) -> Pieces:
        """Receive exactly buffer.size elements from `source` (sent by isend, cut into the same pieces)."""
        starts = [lambda lo=lo, hi=hi: self.world.Irecv(buffer[lo:hi], source=source, tag=tag)
                  for lo, hi in piece_bounds(buffer)]
        return self._call(source, "receiving", lambda: Pieces(starts, len(starts), buffer, source,
                                                              lambda: self.stats.received(buffer.nbytes),
                                                              received=buffer.nbytes, senders=[source]))

    def iallreduce(self, send: np.ndarray, total: np.ndarray) -> Pieces:
        """Sum over the training hosts, slice by slice; float32, or 16-bit wire data (.wire) summed in fp32 at every
        step of the reduction.  # (N,) -> (N,)"""
        self.stats.sent(send.nbytes)
        op = self.MPI.SUM if send.dtype == np.float32 else self._sum16()
        starts = [lambda lo=lo, hi=hi: self.hosts_comm.Iallreduce(send[lo:hi], total[lo:hi], op=op)
                  for lo, hi in piece_bounds(send)]
        others = [q for q in self.host_ranks if q != self.rank]  # a piece's sum needed every host's part
        return self._call(None, "allreduce", lambda: Pieces(starts, buffer=(send, total),
                                                            finish=lambda: self.stats.received(total.nbytes),
                                                            sent=send.nbytes, received=total.nbytes, senders=others))

    def _sum16(self):
        """The MPI reduction of DistConfig.wire's 16-bit data (MPI has no bf16 sum): a user-defined operation."""
        if self._op16 is None:
            wire = self.dist.wire

            def add(incoming, inout, datatype) -> None:
                add_into(np.frombuffer(incoming, dtype=np.uint16), np.frombuffer(inout, dtype=np.uint16), wire)

            self._op16 = self.MPI.Op.Create(add, commute=True)
        return self._op16

    def ibcast(self, buffer: np.ndarray, parts: Sequence[tuple[int, int, int]]) -> Pieces:
        """buffer[lo:hi] from rank `root` to every rank, for each (root, lo, hi) of `parts`, as one ordered sequence
        of broadcasts (every rank posts them in the same order, as MPI requires of collectives)."""
        starts, mine, theirs = [], 0, 0
        for root, lo, hi in parts:
            starts += [lambda a=a, b=b, root=root: self.world.Ibcast(buffer[a:b], root=root)
                       for a, b in piece_bounds(buffer, lo, hi)]
            nbytes = (hi - lo) * buffer.itemsize
            mine, theirs = (mine + nbytes, theirs) if root == self.rank else (mine, theirs + nbytes)
        self.stats.sent(mine)
        roots = {root for root, _, _ in parts} - {self.rank}
        return self._call(None, "broadcast", lambda: Pieces(starts, buffer=buffer, senders=roots,
                                                            finish=lambda: self.stats.received(theirs)))

    def test(self, request: Pieces) -> bool:
        """Advance `request`; a piece received is a sign of life of its senders, as a heartbeat is (over a slow link
        a heartbeat can wait seconds behind the transfer's bytes in TCP)."""
        if not request.done:
            before = request.progressed
            self._call(request.peer, "communication", request.test)
            if request.progressed != before:
                for q in request.senders:
                    self._last_seen[q] = max(self._last_seen[q], request.progressed)
        return request.done

    def wait(self, requests: Sequence[Pieces], what: str, deadline: bool = True) -> None:
        """Wait for all `requests` while servicing heartbeats; with `deadline`, abort when they made no progress for
        timeout_seconds (without: for waits on other ranks' training progress, bounded only by their heartbeats)."""
        while not all([self.test(r) for r in requests]):  # each advanced (and heard), not only the first
            self.service()
            if deadline and stalled(requests) > self.dist.timeout_seconds:
                self.abort(f"{what} made no progress for {self.dist.timeout_seconds} s")
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
        self._take_beats(now)
        silent = self._silent(now)
        if silent:
            names = ", ".join(self.describe(q) for q in silent)
            self.abort(f"no heartbeat from {names} for more than {self.dist.timeout_seconds} s: dead or hung")
        self._sends = [r for r in self._sends if not self.test(r)]

    def _silent(self, now: float) -> list[int]:
        """The peers neither heard (a heartbeat, a piece received) nor gone for more than timeout_seconds."""
        return [q for q in self.peers if q not in self._gone and now - self._last_seen[q] > self.dist.timeout_seconds]

    def _take_beats(self, now: float) -> None:
        """Take in the peers' heartbeats (a goodbye: that peer sends none after it)."""
        for q in self.peers:
            while q not in self._gone and self._call(q, "heartbeat", self._beat_recv[q].Test):
                self._last_seen[q] = now
                if self._beat_in[q][0] == _GONE:
                    self._gone.add(q)
                else:
                    self._beat_recv[q] = self._post_beat(q)

    def close(self) -> None:
        """Deliver what is still on its way, say goodbye on the heartbeat channel and take in every peer's heartbeats
        up to its goodbye: no message is left unmatched at MPI_Finalize (UCX warns of each one). Every rank closes
        after the final model's broadcast; a peer still receiving its tail (the root's part ends once the sockets
        hold it) says goodbye later, and is waited for as long as its heartbeats come."""
        self.wait(self._sends, "delivery of the last messages")
        for q in self.peers:
            previous = self._beat_send.get(q)
            if previous is not None:
                self._call(q, "heartbeat", previous.Wait)
        gone = np.array([_GONE], dtype=np.int64)
        goodbyes = [self._call(q, "goodbye", lambda q=q: self.heart.Isend(gone, dest=q, tag=0)) for q in self.peers]
        while len(self._gone) < len(self.peers):  # a peer still receiving the final model says goodbye later
            now = time.monotonic()
            self._take_beats(now)
            silent = self._silent(now)
            if silent:
                names = ", ".join(self.describe(q) for q in silent)
                self.abort(f"no heartbeat or goodbye from {names} for more than {self.dist.timeout_seconds} s at the "
                           f"end: dead or hung")
            time.sleep(0.001)
        for request in goodbyes:
            self._call(None, "goodbye", request.Wait)
        if self._op16 is not None:
            self._op16.Free()
