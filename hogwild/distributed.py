"""Multi-host training over MPI: one rank per host, local Hogwild workers inside each, hosts exchanging parameters.

Usage (launched as `mpiexec -n H python script.py`):
    result = train_distributed(model, loss_fn, batches, Config(workers=1, max_steps=200),
                               DistConfig(algorithm="easgd", period=4), evaluate=None)

This is the only module that imports mpi4py, lazily, inside functions: single-host use never needs MPI. The
algorithms live in hogwild.multihost_agents (training hosts) and hogwild.multihost_server (servers, tester); this
module owns the MPI transport (non-blocking point-to-point and collectives, heartbeats, abort), the rank roles,
initial/final model synchronisation, distributed checkpoints and the entry point.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time
from typing import Any, Callable, NoReturn, Sequence

import numpy as np
from torch import nn

from hogwild.agent import CommunicationAgent
from hogwild.multihost_agents import make_agent
from hogwild.multihost_checkpoint import DistributedCheckpoint
from hogwild.multihost_config import DistConfig, ranks_with
from hogwild.multihost_math import FlatParams
from hogwild.multihost_server import ParameterServer, Tester

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

    # ---- naming and aborting ---------------------------------------------------------------------------------------
    def describe(self, rank: int) -> str:
        pid, host = self.where[rank]
        return f"rank {rank} ({self.roles[rank]}, pid {pid} on {host})"

    def abort(self, reason: str) -> NoReturn:
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


@dataclasses.dataclass
class DistributedResult:
    """What train_distributed returns on every rank."""

    rank: int
    role: str  # 'worker' (training host), 'server' or 'tester'
    algorithm: str
    hosts: int  # number of training hosts
    local: Any  # the local engine's TrainResult on training hosts, else None
    exchanges: int  # exchanges this host made / updates this server applied / evaluations of the tester
    final_metrics: dict | None  # evaluate(final model), on the first training host and on the tester
    tester_history: list  # the tester's periodic metrics (tester rank only)
    wall_seconds: float


def train_distributed(model: nn.Module, loss_fn: Callable, batches: Sequence, config, dist: DistConfig,
                      evaluate: Callable[[nn.Module], dict] | None = None) -> DistributedResult:
    """Train `model` on every training host with its local Hogwild engine (hogwild.train with `config`, the
    communication agent plugged in), while the hosts exchange parameters by `dist.algorithm`. Every rank calls this
    with the same arguments; every rank returns with `model` holding the final model (the servers' central model, or
    the hosts' average).

    batches: the whole data set; with dist.shard_data training host i trains on batches[i::hosts].
    config: the hogwild.Config of each host's engine (workers per host, optimizer, stop condition...); its
    checkpoint_dir is the job's run directory (hosts write to host<i>/ inside, servers to distributed/).
    evaluate(model) -> metrics: run by the first host's engine (Config.eval_every..., best checkpoint, early stopping,
    on that host's model) and, with DistConfig.tester, also by the tester on the latest central/averaged model.
    """
    start = time.monotonic()
    MPI = import_mpi()
    world = MPI.COMM_WORLD
    roles = dist.roles(world.Get_size())
    if dist.algorithm == "eamsgd" and config.optimizer not in ("msgd", "nesterov"):
        raise ValueError(f"Config.optimizer must be 'msgd' or 'nesterov' for EAMSGD (elastic averaging with momentum), "
                         f"got {config.optimizer!r}; use algorithm='easgd' for plain SGD")
    if dist.tester and evaluate is None:
        raise ValueError("DistConfig.tester=True needs an evaluate(model) function")
    t = MPITransport(world, roles, dist)
    try:
        return _run_rank(t, model, loss_fn, batches, config, dist, evaluate, start)
    except BaseException as error:  # noqa: BLE001 - one rank failing must end the job, never leave the others waiting
        import traceback
        t.abort(f"{error!r}\n{traceback.format_exc()}")


def _run_rank(t: MPITransport, model, loss_fn, batches, config, dist, evaluate, start: float) -> DistributedResult:
    roles, rank = t.roles, t.rank
    role = roles[rank]
    hosts, servers = ranks_with(roles, "worker"), ranks_with(roles, "server")
    say(f"hogwild.distributed: {t.describe(rank)} of {len(roles)}, algorithm {dist.algorithm}")
    flat = FlatParams(list(model.parameters()))
    store = DistributedCheckpoint(config.checkpoint_dir, dist.algorithm, flat.numel, len(servers))
    sync_model(t, flat, [(0, 0, flat.numel)])  # identical starting parameters everywhere
    finals = [(s, lo, hi) for s, (lo, hi) in zip(servers, store.bounds)] if servers else [(hosts[0], 0, flat.numel)]

    local, exchanges, history = None, 0, []
    if role == "server":
        index = servers.index(rank)
        lo, hi = store.bounds[index]
        center = flat.snapshot()[lo:hi].copy()
        if config.resume and store.has_partition(index):
            center = store.load_partition(index)
        elif config.resume:  # like the engine's resume: nothing saved yet means a fresh start
            say(f"hogwild.distributed: server {index}: resume found no {store.partition_path(index)}; starting fresh")
        save = None if config.checkpoint_dir is None else lambda c, n: store.save_partition(index, c, n)
        exchanges = ParameterServer(t, dist, roles, center, save).run()
        flat.add_(center - flat.snapshot()[lo:hi], start=lo)
        sync_model(t, flat, finals)
    elif role == "tester":
        history = Tester(t, dist, roles, flat, lambda: evaluate(model)).run()
        exchanges = len(history)
        sync_model(t, flat, finals)
    else:
        index = hosts.index(rank)
        changes: dict[str, Any] = {"seed": config.seed + index, "progress": config.progress and index == 0}
        if config.checkpoint_dir is not None:
            changes["checkpoint_dir"] = os.path.join(config.checkpoint_dir, f"host{index}")
        shard = list(batches)[index::len(hosts)] if dist.shard_data else batches
        if not shard:
            raise ValueError(f"training host {index} got no batches: {len(batches)} batches for {len(hosts)} hosts")
        agent = HostCommunication(t, dist, roles, finals, store if index == 0 else None)
        from hogwild import train
        local = train(model, loss_fn, shard, dataclasses.replace(config, **changes),
                      evaluate if index == 0 else None, agent=agent)
        exchanges = agent.exchanges
    t.close()
    final = None
    if evaluate is not None and role == "tester":
        final = evaluate(model)
        history.append({"seconds": round(time.monotonic() - start, 3), "final": 1.0, **final})
    elif local is not None:
        final = local.final_metrics
    return DistributedResult(rank, role, dist.algorithm, len(hosts), local, exchanges, final, history,
                             time.monotonic() - start)


class HostCommunication(CommunicationAgent):
    """Plugs a host's multi-host agent into the local engine (hogwild.train(..., agent=...)): the agent thread starts
    when the engine's shared parameters are ready, and when the local workers have stopped the closing protocol and
    the final model synchronisation run before the engine writes its final checkpoint and evaluates."""

    def __init__(self, transport: MPITransport, dist: DistConfig, roles: list[str],
                 finals: list[tuple[int, int, int]], store: DistributedCheckpoint | None) -> None:
        self.t, self.dist, self.roles, self.finals, self.store = transport, dist, roles, finals, store
        self.agent = None
        self.exchanges = 0
        # until the engine starts the agent (it first builds the optimizer, stores the batches, maybe loads a
        # checkpoint), a helper thread keeps answering heartbeats so that a slow start is not taken for a hang
        self._started = threading.Event()
        self._keepalive = threading.Thread(target=self._keep_alive, name="hogwild-keepalive", daemon=True)
        self._keepalive.start()

    def _keep_alive(self) -> None:
        while not self._started.wait(0.05):
            self.t.service()

    def start(self, state) -> None:
        self._started.set()
        self._keepalive.join()  # from here on only the agent thread talks to MPI
        self.flat = FlatParams(state.params)
        self.agent = make_agent(self.t, self.flat, self.dist, self.roles, steps=state.global_updates)
        self.agent.start()

    def stop(self, state) -> None:
        if state.failure:  # a local worker failed: no closing protocol, train() raises, we abort
            return
        self.agent.finish()
        self.exchanges = self.agent.exchanges
        sync_model(self.t, self.flat, self.finals)
        if self.store is not None:
            self.store.save_model(state.model)


def sync_model(t: MPITransport, flat: FlatParams, sources: list[tuple[int, int, int]]) -> None:
    """Every rank ends with params[lo:hi] = those of rank `root`, for every (root, lo, hi) in sources."""
    values = flat.snapshot()
    requests = [t.ibcast(values[lo:hi], root) for root, lo, hi in sources]
    t.wait(requests, f"model broadcast from rank(s) {[s[0] for s in sources]}", deadline=False)
    flat.assign_(values)
