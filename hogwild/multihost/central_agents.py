"""The training hosts' agents of the algorithms with a central model on parameter servers: EASGD/EAMSGD (elastic
exchanges) and DOWNPOUR (push the accumulated update, fetch the central model). The servers' side: .server.

Usage: built by .agents.make_agent for dist.algorithm 'easgd', 'eamsgd' or 'downpour'.

With a 16-bit wire format (DistConfig.wire) a host and a server send each other differences from the center the host
last received (a Reference both hold); a DOWNPOUR push is a difference already, and what its rounding lost is kept
for the next push.
"""
from __future__ import annotations

import numpy as np

from .agents import HostAgent, _Exchange
from .math import DownpourTracker, elastic_difference, partition_bounds
from .protocol import BYE, ELASTIC, FETCH, PUSH, TAG_PAYLOAD, TAG_REPLY, TAG_SERVER, message
from .wire import Reference, decode, empty, encode


class ServerClientAgent(HostAgent):
    """Shared part of the algorithms with a central model partitioned over parameter servers."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.bounds = partition_bounds(self.flat.numel, len(self.servers))
        self.center = Reference(self.initial, self.dist.wire)  # the center as this host last received it
        self._closed = False

    def _to_servers(self, kind: float, values: np.ndarray | None, reply: bool) -> tuple[list, np.ndarray]:
        """Send the header [kind] and values[part] (wire format) to every server; with reply=True also receive
        every server's partition (wire format)."""
        received = empty(self.flat.numel, self.dist.wire)
        requests = []
        for server, (lo, hi) in zip(self.servers, self.bounds):
            requests.append(self.t.isend(message(kind), server, TAG_SERVER))
            if values is not None:
                requests.append(self.t.isend(values[lo:hi], server, TAG_PAYLOAD))
            if reply:
                requests.append(self.t.irecv(received[lo:hi], server, TAG_REPLY))
        return requests, received

    def _close(self) -> bool:
        if not self._closed:
            self._closed = True
            self._pending = _Exchange("goodbye to the servers", self._to_servers(BYE, None, reply=False)[0],
                                      counted=False)
            return False
        return True


class ElasticAgent(ServerClientAgent):
    """EASGD / EAMSGD (asynchronous, Zhang et al. 2015): every tau local updates, x -= alpha (x - center) on the host
    and center += alpha (x - center) on the servers (EAMSGD: the same exchange; the local optimizer uses momentum)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last_exchange_done = False

    def tick(self, local_done: bool) -> bool:
        if local_done and self._last_exchange_done:
            return self._close()
        if local_done or self.due():  # one last exchange when training ends: the center sees the final steps
            self._last_exchange_done = local_done
            snap = self.flat.snapshot()
            requests, received = self._to_servers(ELASTIC, self.center.encode(snap), reply=True)

            def complete() -> None:
                center = self.center.decode(received)
                self.flat.add_(-elastic_difference(snap, center, self.dist.alpha))
                self.center.move_to(center)

            self._pending = _Exchange("elastic exchange with the servers", requests, complete)
        return False


class DownpourAgent(ServerClientAgent):
    """DOWNPOUR: push the accumulated local update every n_push local updates, fetch the central model every n_fetch."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tracker = DownpourTracker(self.flat.snapshot())
        self.next_push, self.next_fetch = self.dist.n_push, self.dist.n_fetch
        self._pushed_final = False
        self._fetch_waited = False  # a due fetch waited for a push: it goes next

    def tick(self, local_done: bool) -> bool:
        step = self.steps()
        if local_done and not self._pushed_final:
            self._pushed_final = True
            self._push()
            return False
        if local_done:
            return self._close()
        push, fetch = step >= self.next_push, step >= self.next_fetch
        # a due fetch waits for the push of the same step to be on its way (same-pair order is kept), but never for
        # a second push: when the local steps outpace the exchanges both are due at every tick, and a push first
        # each time would leave the host training alone, the servers summing every host's whole local run
        if push and not self._fetch_waited:
            self.next_push = (step // self.dist.n_push + 1) * self.dist.n_push
            self._fetch_waited = fetch
            self._push()
        elif fetch:
            self.next_fetch = (step // self.dist.n_fetch + 1) * self.dist.n_fetch
            self._fetch_waited = False
            requests, received = self._to_servers(FETCH, None, reply=True)

            def complete() -> None:
                central = self.center.decode(received)
                self.center.move_to(central)
                self.flat.add_(self.tracker.fetch(central, self.flat.snapshot()))

            self._pending = _Exchange("DOWNPOUR fetch from the servers", requests, complete)
        return False

    def _push(self) -> None:
        wire = self.dist.wire
        update = self.tracker.push(self.flat.snapshot(), lambda delta: decode(encode(delta, wire), wire))
        requests, _ = self._to_servers(PUSH, encode(update, wire), reply=False)
        self._pending = _Exchange("DOWNPOUR push to the servers", requests)
