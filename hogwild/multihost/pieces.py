"""Big transfers in pieces: a message, broadcast or allreduce larger than PIECE_BYTES travels as MPI requests over
slices of at most PIECE_BYTES, at most IN_FLIGHT of them posted at a time, in order.

Why: MPI keeps the order of the messages between two ranks, and over TCP a message posted behind a 40 MB transfer
waits for all of it (20 Mbit/s: 16 s). A heartbeat posted while a rank sends the model then arrives that late, and the
peer declares the rank dead. In pieces, it waits behind fewer bytes in MPI (IN_FLIGHT pieces; the kernel's socket
buffer and TCP's recovery from the shaped link's drops still add seconds on a slow link), and each piece received
counts as a sign of life of its sender (MPITransport.test), so a transfer that moves is never taken for a dead peer.

Usage (the transport builds these; `starts` post one MPI request each):
    transfer = Pieces([lambda lo=lo, hi=hi: comm.Isend(buf[lo:hi], dest, tag) for lo, hi in piece_bounds(buf)])
    while not transfer.test(): ...
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Sequence

import numpy as np

PIECE_BYTES = 1 << 19
IN_FLIGHT = 2


def stalled(requests: Sequence["Pieces"]) -> float:
    """Seconds since the last progress of any of `requests` (a slow link makes progress; a lost answer does not)."""
    return time.monotonic() - max(request.progressed for request in requests)


def piece_bounds(buffer: np.ndarray, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
    """[lo, hi) of a 1-d buffer cut into slices of at most PIECE_BYTES (one slice, maybe empty, when it is small)."""
    hi = buffer.size if hi is None else hi
    step = max(1, PIECE_BYTES // buffer.itemsize)
    return [(start, min(start + step, hi)) for start in range(lo, hi, step)] or [(lo, hi)]


class Pieces:
    """One logical transfer made of MPI requests posted in order, at most `in_flight` outstanding.

    buffer: kept alive until the transfer completes; peer: the other rank (None: a collective), for error messages;
    finish(): run once when every piece has completed (e.g. decoding a received wire format); sent, received: the
    payload bytes it carries out of and into this rank; senders: the ranks a completed piece proves alive (what it
    received came from them)."""

    def __init__(self, starts: Sequence[Callable[[], Any]], in_flight: int = IN_FLIGHT, buffer: Any = None,
                 peer: int | None = None, finish: Callable[[], None] | None = None, sent: int = 0,
                 received: int = 0, senders: Sequence[int] = ()) -> None:
        self.starts, self.in_flight, self.buffer, self.peer, self.finish = list(starts), in_flight, buffer, peer, finish
        self.sent, self.received, self.senders = sent, received, tuple(senders)
        self.posted: deque = deque()
        self.next = 0
        self.done = False
        self.progressed = time.monotonic()  # when it was posted or a piece last completed
        self._post()

    def _post(self) -> None:
        while len(self.posted) < self.in_flight and self.next < len(self.starts):
            self.posted.append(self.starts[self.next]())
            self.next += 1

    def test(self) -> bool:
        """Advance: retire the completed pieces at the head, post the next ones; True once all have completed."""
        if self.done:
            return True
        while self.posted and self.posted[0].Test():
            self.posted.popleft()
            self.progressed = time.monotonic()
            self._post()
        if not self.posted and self.next == len(self.starts):
            self.done = True
            if self.finish is not None:
                self.finish()
        return self.done

    def cancel(self) -> None:
        """Cancel the pieces posted and not completed (receives that will never be matched), and post no more."""
        self.next = len(self.starts)
        for request in self.posted:
            request.Cancel()
            request.Wait()
        self.posted.clear()
        self.done = True
