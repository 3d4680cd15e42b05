"""The ranks that do not train: DOWNPOUR/EASGD parameter servers (each holds one partition of the central model) and
the optional tester (periodically evaluates the latest central or averaged model).

Usage: `ParameterServer(transport, dist, roles, center_part, save).run()`; `Tester(transport, dist, roles, flat,
evaluate).run()` -> history (hogwild.multihost.train_distributed picks the role from the rank).

Like the agents, both are non-blocking event loops over `transport` that keep servicing heartbeats; no mpi4py here.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np

from .dist_config import DistConfig, ranks_with
from .math import FlatParams, elastic_difference, partition_bounds
from .protocol import BYE, ELASTIC, FETCH, POLL_SECONDS, PUSH, TAG_PAYLOAD, TAG_REPLY, TAG_SERVER, TAG_STOP, \
    TAG_TESTER, TAG_TESTER_REPLY, message
from .transport import say
from .wire import Reference, decode, empty


class ParameterServer:
    """Holds `center` (this server's partition of the central model) and applies what the hosts send.

    PUSH [delta] -> center += delta (DOWNPOUR); FETCH -> reply center; ELASTIC [x] -> reply the old center at once
    (both transfers then share the link's two directions), and when x has arrived center += alpha (x - old center)
    (EASGD/EAMSGD); BYE -> that rank is finished. Values travel in DistConfig.wire's format (.wire), the tester's
    fetches as fp32. Each client (training host, tester) has its own receive: one rank's
    requests are taken in order, a slow one never holds up the others. The loop ends when every client said goodbye.
    """

    def __init__(self, transport, dist: DistConfig, roles: list[str], center: np.ndarray,
                 save: Callable[[np.ndarray, int], None] | None = None, start: np.ndarray | None = None) -> None:
        """start: this partition of the model every rank held after the initial synchronisation (the first
        reference of a 16-bit wire format; default: `center`)."""
        self.t, self.dist, self.center, self.save = transport, dist, center, save
        self.hosts = ranks_with(roles, "worker")
        # per host, the center as it last received it (16-bit wire formats send differences from it)
        self.sent = {q: Reference(center if start is None else start, dist.wire) for q in self.hosts}
        self.tester = (ranks_with(roles, "tester") or [None])[0]
        self.first_server = ranks_with(roles, "server")[0] == transport.rank
        self.updates = 0  # PUSH and ELASTIC messages applied

    def run(self) -> int:
        clients = self.hosts + ([self.tester] if self.tester is not None else [])
        headers = {q: np.zeros(1, dtype=np.float32) for q in clients}
        payloads = {q: empty(self.center.size, self.dist.wire) for q in self.hosts}
        asked = {q: self.t.irecv(headers[q], q, TAG_SERVER) for q in clients}
        receiving: dict[int, tuple] = {}  # client -> (payload request, reply request, kind, old center, start time)
        open_hosts = set(self.hosts)
        while asked or receiving:
            self.t.service()
            busy = False
            for q, (request, reply, kind, old, started) in list(receiving.items()):
                if self.t.test(request):
                    busy = True
                    del receiving[q]
                    if kind == PUSH:  # an update: a difference already
                        self.center += decode(payloads[q], self.dist.wire)
                    else:
                        self.center += elastic_difference(self.sent[q].decode(payloads[q]), old, self.dist.alpha)
                        self.sent[q].move_to(old)
                    self.t.stats.exchanged(time.monotonic() - started, [request] + ([reply] if reply else []))
                    self._updated()
                    asked[q] = self.t.irecv(headers[q], q, TAG_SERVER)
            for q, request in list(asked.items()):
                if not self.t.test(request):
                    continue
                busy = True
                del asked[q]
                kind = float(headers[q][0])
                if kind in (PUSH, ELASTIC) and q in payloads:
                    old = reply = None
                    if kind == ELASTIC:  # the center as the host will decode it, answered at once
                        reply = self.t.isend(self.sent[q].encode(self.center), q, TAG_REPLY)
                        old = self.sent[q].decode(reply.buffer)
                    receiving[q] = (self.t.irecv(payloads[q], q, TAG_PAYLOAD), reply, kind, old, time.monotonic())
                elif kind == FETCH:
                    if q in self.sent:  # a host: in the wire format
                        reply = self.t.isend(self.sent[q].encode(self.center), q, TAG_REPLY)
                        self.sent[q].move_to(self.sent[q].decode(reply.buffer))
                    else:  # the tester: the center itself, fp32
                        self.t.isend(self.center.copy(), q, TAG_REPLY)
                    self.t.stats.exchanged(0.0)  # answered at once: the reply's time is the host's
                    asked[q] = self.t.irecv(headers[q], q, TAG_SERVER)
                elif kind == BYE:
                    open_hosts.discard(q)
                    if not open_hosts and self.tester in asked and self.first_server:
                        self.t.isend(message(BYE), self.tester, TAG_STOP)
                else:
                    self.t.abort(f"parameter server got an unknown message kind {kind} from rank {q}")
            if not busy:
                time.sleep(POLL_SECONDS)
        if self.save is not None:
            self.save(self.center, self.updates)
        return self.updates

    def _updated(self) -> None:
        self.updates += 1
        every = self.dist.checkpoint_every
        if self.save is not None and every and self.updates % every == 0:
            self.save(self.center, self.updates)


class Tester:
    """Every tester_every_seconds: fetch the latest central model (from the servers) or averaged model (from the first
    training host), evaluate it in a helper thread while heartbeats keep flowing, and record the metrics."""

    def __init__(self, transport, dist: DistConfig, roles: list[str], flat: FlatParams,
                 evaluate: Callable[[], dict]) -> None:
        self.t, self.dist, self.flat, self.evaluate = transport, dist, flat, evaluate
        self.servers = ranks_with(roles, "server")
        self.first_host = ranks_with(roles, "worker")[0]
        self.sources = self.servers or [self.first_host]
        self.history: list[dict] = []
        self._start = time.monotonic()

    def run(self) -> list[dict]:
        stop = self.t.irecv(np.zeros(1, dtype=np.float32), self.sources[0], TAG_STOP)
        next_test = time.monotonic() + self.dist.tester_every_seconds
        while not self.t.test(stop):
            self.t.service()
            if time.monotonic() >= next_test:
                self.flat.assign_(self.fetch())
                self.record(self.run_evaluation())
                next_test = time.monotonic() + self.dist.tester_every_seconds
            time.sleep(POLL_SECONDS * 5)
        for rank in self.sources:
            tag = TAG_SERVER if self.servers else TAG_TESTER
            self.t.wait([self.t.isend(message(BYE), rank, tag)], f"goodbye from the tester to rank {rank}")
        return self.history

    def fetch(self) -> np.ndarray:
        """The latest model, assembled from every server's partition or taken from the first host.  # (N,)"""
        model = np.empty(self.flat.numel, dtype=np.float32)
        requests = []
        if self.servers:
            for server, (lo, hi) in zip(self.servers, partition_bounds(self.flat.numel, len(self.servers))):
                requests += [self.t.isend(message(FETCH), server, TAG_SERVER),
                             self.t.irecv(model[lo:hi], server, TAG_REPLY)]
        else:
            requests += [self.t.isend(message(FETCH), self.first_host, TAG_TESTER),
                         self.t.irecv(model, self.first_host, TAG_TESTER_REPLY)]
        self.t.wait(requests, f"tester fetch from rank(s) {self.sources}")
        return model

    def run_evaluation(self) -> dict:
        """evaluate() in a helper thread so that this rank keeps answering heartbeats during a long evaluation."""
        box: dict = {}
        thread = threading.Thread(target=lambda: box.update(metrics=self.evaluate()), daemon=True)
        thread.start()
        while thread.is_alive():
            self.t.service()
            thread.join(0.05)
        if "metrics" not in box:
            self.t.abort("the tester's evaluate() raised (its traceback is printed above)")
        return box["metrics"]

    def record(self, metrics: dict) -> None:
        entry = {"seconds": round(time.monotonic() - self._start, 3), **{k: float(v) for k, v in metrics.items()}}
        self.history.append(entry)
        say(f"hogwild.distributed tester: {entry}")
