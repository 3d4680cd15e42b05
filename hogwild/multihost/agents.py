"""The per-host communication agent: a thread beside the local Hogwild workers that exchanges parameters with other
hosts (allreduce, AD-PSGD ring here; EASGD/EAMSGD elastic averaging and DOWNPOUR push/fetch in .central_agents)
while the workers keep training.

Usage: `agent = make_agent(transport, FlatParams(params), dist, roles, steps=lambda: counter); agent.start(); ...;
agent.finish()` (hogwild.multihost.train_distributed does this around the local engine).

The agent never blocks: every exchange is a set of non-blocking requests polled in one event loop that also services
heartbeats (`transport.service()`), so a dead or hung peer is noticed while waiting. All MPI goes through `transport`
(.transport.MPITransport); this module never imports mpi4py.
"""
from __future__ import annotations

import threading
import time
import traceback
from typing import Callable

import numpy as np

from .dist_config import DistConfig, ranks_with
from .math import FlatParams, pair_average_delta, ring_pairing
from .pieces import stalled
from .protocol import BYE, MIX, POLL_SECONDS, TAG_MIX, TAG_MIX_REPLY, TAG_PAYLOAD, TAG_STOP, TAG_TESTER, \
    TAG_TESTER_REPLY, message
from .transport import TransportFailure
from .wire import Reference, decode, empty, encode


class _Exchange:
    """One exchange in flight: its requests, what to do when they complete, and a name for error messages.

    deadline=True: the peers answer from their agent loops, so the exchange must make progress (a piece of it
    completing) at least every timeout_seconds; however slow the link, a transfer that moves is not a failure;
    False (allreduce rounds, the final average): it waits for the other hosts' training progress, which may
    legitimately take long; a dead or hung peer is then caught by the heartbeats.
    counted: an exchange of parameters (counted and timed in the rank's ExchangeStats); False for goodbyes.
    """

    def __init__(self, what: str, requests: list, complete: Callable[[], None] | None = None,
                 deadline: bool = True, counted: bool = True) -> None:
        self.what, self.requests, self.complete, self.started = what, requests, complete, time.monotonic()
        self.deadline, self.counted = deadline, counted


class HostAgent:
    """Base agent: the event loop, tester service and bookkeeping shared by all algorithms."""

    def __init__(self, transport, flat: FlatParams, dist: DistConfig, roles: list[str], steps: Callable[[], int],
                 start: np.ndarray) -> None:
        self.t, self.flat, self.dist, self.roles, self.steps = transport, flat, dist, roles, steps
        self.initial = start  # the model after the initial synchronisation, the same on every rank  # (N,)
        self.hosts = ranks_with(roles, "worker")
        self.servers = ranks_with(roles, "server")
        self.tester = (ranks_with(roles, "tester") or [None])[0]
        self.index = self.hosts.index(transport.rank)
        self.local_done = threading.Event()  # set by the caller when the local engine has returned
        self.timeout = dist.timeout_seconds
        self.next_step = dist.period
        self._pending: _Exchange | None = None
        self.failed: str | None = None  # a deferred transport failure (a dead or silent peer): the engine stops
        self._thread = threading.Thread(target=self._main, name=f"hogwild-agent-{transport.rank}", daemon=True)
        # the first host answers the tester's requests for the latest averaged model (no servers to ask)
        self._serve_tester = self.tester is not None and not self.servers and self.index == 0
        self._tester_buf = np.zeros(1, dtype=np.float32)
        self._tester_req = None
        self._tester_gone = self.tester is None or bool(self.servers) or self.index != 0

    @property
    def exchanges(self) -> int:
        return self.t.stats.exchanges

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        """Mark local training done and wait for the agent's closing protocol (bounded by the transport timeout)."""
        self.local_done.set()
        while self._thread.is_alive():
            self._thread.join(0.1)

    def _main(self) -> None:
        try:
            if self._serve_tester:
                self._tester_req = self.t.irecv(self._tester_buf, self.tester, TAG_TESTER)
            while True:
                self.t.service()
                self._service_tester()
                if self._pending is not None:
                    if all([self.t.test(r) for r in self._pending.requests]):  # each advanced, not only the first
                        pending, self._pending = self._pending, None
                        if pending.complete is not None:
                            pending.complete()
                        if pending.counted:
                            self.t.stats.exchanged(time.monotonic() - pending.started, pending.requests)
                    elif self._pending.deadline and stalled(self._pending.requests) > self.timeout:
                        self.t.abort(f"{self._pending.what} made no progress for {self.timeout} s")
                elif self.tick(self.local_done.is_set()) and self._tester_gone:
                    return
                time.sleep(POLL_SECONDS)
        except TransportFailure as failure:  # deferred (a training host): the engine checkpoints, then aborts
            self.failed = str(failure)
        except BaseException:  # noqa: BLE001 - any failure in the agent must end the whole job, not hang it
            self.t.abort(f"communication agent failed:\n{traceback.format_exc()}")

    def _service_tester(self) -> None:
        if self._tester_req is None or not self.t.test(self._tester_req):
            return
        if self._tester_buf[0] == BYE:
            self._tester_req, self._tester_gone = None, True
            return
        self.t.isend(self.flat.snapshot(), self.tester, TAG_TESTER_REPLY)
        self._tester_req = self.t.irecv(self._tester_buf, self.tester, TAG_TESTER)

    def stop_tester(self) -> None:
        """Tell the tester that training is over (sent once, by the rank that serves it or by the first server)."""
        if self.tester is not None and self.index == 0 and not self.servers:
            self.t.isend(message(BYE), self.tester, TAG_STOP)

    def tick(self, local_done: bool) -> bool:
        """Start the next exchange when due (set self._pending); return True once the closing protocol is over."""
        raise NotImplementedError

    def due(self) -> bool:
        if self.steps() < self.next_step:
            return False
        self.next_step = (self.steps() // self.dist.period + 1) * self.dist.period
        return True


class AllreduceAgent(HostAgent):
    """Synchronous averaging of all hosts every `period` local updates (hierarchical: Hogwild inside each host).

    Each round carries a "finished" flag; a host whose engine has returned joins every round at once, and the round in
    which every host is finished is the last one: its average, taken over frozen parameters, is the final model.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._over = False
        self.average = Reference(self.initial, self.dist.wire)  # the last average, on every host

    def tick(self, local_done: bool) -> bool:
        if self._over:
            return True
        if not (local_done or self.due()):
            return False

        def complete(mean: np.ndarray, finished: int) -> None:
            if finished == len(self.hosts):
                self._over = True
                self.stop_tester()

        self._pending = average_hosts(self.t, self.flat, self.average, f"allreduce round {self.exchanges + 1}",
                                      complete, 1.0 if local_done else 0.0)
        return False


def average_hosts(t, flat: FlatParams, reference: Reference, what: str, then: Callable[[np.ndarray, int], None],
                  flag: float = 0.0, counted: bool = True) -> _Exchange:
    """One allreduce over the training hosts that moves every host to their average (as a delta: local training
    goes on meanwhile), then calls then(average, sum of the hosts' flags). 16-bit wire formats sum the differences
    from `reference` (the last average) and move it to the new average."""
    snap = flat.snapshot()
    send = np.concatenate([reference.encode(snap), encode(np.array([flag], dtype=np.float32), reference.wire)])
    total = np.empty_like(send)
    hosts = t.hosts_comm.Get_size()

    def complete() -> None:
        mean = reference.decode_mean(total[:-1], hosts)
        flat.add_(mean - snap)
        reference.move_to(mean)
        then(mean, int(round(float(decode(total[-1:], reference.wire)[0]))))

    return _Exchange(what, [t.iallreduce(send, total)], complete, deadline=False, counted=counted)


class RingAgent(HostAgent):
    """AD-PSGD: active hosts average (0.5/0.5) with one passive ring neighbour at a time, alternating neighbours.

    A passive host answers a MIX header at once with its own parameters (both transfers then share the link's two
    directions) and averages when the neighbour's parameters have arrived. With a 16-bit wire format each pair
    sends differences from the average it last agreed on."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.active, self.neighbours = ring_pairing(self.index, len(self.hosts))
        self.neighbours = [self.hosts[i] for i in self.neighbours]
        self._turn = 0
        self._headers = {q: np.zeros(1, dtype=np.float32) for q in self.neighbours}
        self._pairs = {q: Reference(self.initial, self.dist.wire) for q in self.neighbours}
        self._group = Reference(self.initial, self.dist.wire)  # for the final average of all hosts
        self._inbox = empty(self.flat.numel, self.dist.wire)
        self._asked = {} if self.active else {q: self.t.irecv(self._headers[q], q, TAG_MIX) for q in self.neighbours}
        self._answering: tuple | None = None  # (neighbour, payload request, reply request, own snapshot, start time)
        self._byes: set[int] = set()
        self._phase = "train"  # train -> average (final allreduce over hosts) -> over

    def tick(self, local_done: bool) -> bool:
        if self._phase == "over":
            return True
        self._answer()
        if self._phase == "train":
            if not local_done:
                if self.active and self.neighbours and self.due():
                    self._mix(self.neighbours[self._turn % len(self.neighbours)])
                return False
            if self.active:
                for q in self.neighbours:
                    self.t.isend(message(BYE), q, TAG_MIX)
            elif len(self._byes) < len(self.neighbours) or self._answering is not None:
                return False  # keep answering until every active neighbour has finished
            self._phase = "average"
            self._pending = average_hosts(self.t, self.flat, self._group, "final AD-PSGD averaging", self._over,
                                          counted=False)
        return False

    def _over(self, mean: np.ndarray, finished: int) -> None:
        self._phase = "over"
        self.stop_tester()

    def _mix(self, peer: int) -> None:
        snap, pair = self.flat.snapshot(), self._pairs[peer]
        payload, reply = pair.encode(snap), empty(self.flat.numel, self.dist.wire)
        requests = [self.t.isend(message(MIX), peer, TAG_MIX), self.t.isend(payload, peer, TAG_PAYLOAD),
                    self.t.irecv(reply, peer, TAG_MIX_REPLY)]

        def complete() -> None:
            theirs = pair.decode(reply)
            self.flat.add_(pair_average_delta(snap, theirs))
            pair.move_to((pair.decode(payload) + theirs) * np.float32(0.5))
            self._turn += 1

        self._pending = _Exchange(f"AD-PSGD mixing with rank {peer}", requests, complete)

    def _answer(self) -> None:
        """A passive host: finish the mixing under way, or start answering the next neighbour that asked."""
        if self._answering is not None:
            peer, request, reply, own, started = self._answering
            if not self.t.test(request):
                if stalled([request]) > self.timeout:
                    self.t.abort(f"AD-PSGD mixing asked by rank {peer} made no progress for {self.timeout} s")
                return
            pair = self._pairs[peer]
            theirs = pair.decode(self._inbox)
            self.flat.add_(pair_average_delta(own, theirs))
            pair.move_to((theirs + pair.decode(reply.buffer)) * np.float32(0.5))
            self.t.stats.exchanged(time.monotonic() - started, [request, reply])
            self._answering = None
            self._asked[peer] = self.t.irecv(self._headers[peer], peer, TAG_MIX)
        for peer, request in list(self._asked.items()):
            if not self.t.test(request):
                continue
            del self._asked[peer]
            if self._headers[peer][0] == BYE:
                self._byes.add(peer)
                continue
            own = self.flat.snapshot()
            reply = self.t.isend(self._pairs[peer].encode(own), peer, TAG_MIX_REPLY)
            self._answering = (peer, self.t.irecv(self._inbox, peer, TAG_PAYLOAD), reply, own, time.monotonic())
            return


def make_agent(transport, flat: FlatParams, dist: DistConfig, roles: list[str], steps: Callable[[], int],
               start: np.ndarray | None = None) -> HostAgent:
    """The communication agent for `dist.algorithm` on this training host; `start`: the model every rank held after
    the initial synchronisation (the first reference of a 16-bit wire format; default: the parameters now)."""
    from .central_agents import DownpourAgent, ElasticAgent  # they build on HostAgent, below them
    agents = {"allreduce": AllreduceAgent, "adpsgd": RingAgent, "easgd": ElasticAgent, "eamsgd": ElasticAgent,
              "downpour": DownpourAgent}
    return agents[dist.algorithm](transport, flat, dist, roles, steps, flat.snapshot() if start is None else start)
