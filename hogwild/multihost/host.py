"""The entry point of multi-host training: one rank per host, local Hogwild workers inside each, hosts exchanging
parameters.

Usage (launched as `mpiexec -n H python script.py`):
    result = train_distributed(model, loss_fn, batches, Config(workers=1, max_steps=200),
                               DistConfig(algorithm="easgd", period=4), evaluate=None)

This module picks each rank's role (training host, parameter server, tester), synchronises the initial and final
model, and plugs the host's agent into the local engine. The algorithms live in .agents (training hosts) and .server
(servers, tester); MPI itself only in .transport.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np
from torch import nn

from ..parent.agent import CommunicationAgent
from .agents import make_agent
from .dist_config import DistConfig, ranks_with
from .distributed_checkpoint import DistributedCheckpoint
from .exchange_stats import report_line
from .leftovers import RankFiles
from .math import FlatParams
from .server import ParameterServer, Tester
from .transport import MPITransport, import_mpi, say


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
    # every rank's exchange figures, in rank order: {rank, role, host, exchanges, bytes_sent, bytes_received,
    # exchange_seconds_mean, exchange_seconds_max, wait_seconds} (exchange_stats.ExchangeStats.as_dict)
    exchange_stats: list = dataclasses.field(default_factory=list)


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
        with RankFiles(f"hogwild-rank{t.rank}-"):  # what an abort leaves, its janitor removes
            return _run_rank(t, model, loss_fn, batches, config, dist, evaluate, start)
    except BaseException as error:  # noqa: BLE001 - one rank failing must end the job, never leave the others waiting
        t.abort(abort_reason(error))


def abort_reason(error: BaseException) -> str:
    """What a rank's abort says: an expected failure (bad input, a failed worker or peer: a ValueError, OSError or
    RuntimeError, whose message names the cause) as its type and message, as run.py prints one, a signal as such;
    anything else (a bug) with its traceback. HOGWILD_TRACEBACK=1 shows the traceback always."""
    if isinstance(error, KeyboardInterrupt) and not os.environ.get("HOGWILD_TRACEBACK"):
        return "stopped by a signal (SIGINT, or SIGTERM/SIGHUP under run.py)"  # a server or tester rank: no last.pt
    if isinstance(error, (ValueError, OSError, RuntimeError)) and not os.environ.get("HOGWILD_TRACEBACK"):
        return f"{type(error).__name__}: {error}"
    import traceback
    return f"{error!r}\n{''.join(traceback.format_exception(error))}"


def _run_rank(t: MPITransport, model, loss_fn, batches, config, dist, evaluate, start: float) -> DistributedResult:
    roles, rank = t.roles, t.rank
    role = roles[rank]
    hosts, servers = ranks_with(roles, "worker"), ranks_with(roles, "server")
    say(f"hogwild.distributed: {t.describe(rank)} of {len(roles)}, algorithm {dist.algorithm}")
    flat = FlatParams(list(model.parameters()))
    store = DistributedCheckpoint(config.checkpoint_dir, dist.algorithm, flat.numel, len(servers))
    sync_model(t, flat, [(0, 0, flat.numel)])  # identical starting parameters everywhere
    initial = flat.snapshot()  # ... before a resume restores each rank's own: where 16-bit wire formats start
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
        exchanges = ParameterServer(t, dist, roles, center, save, initial[lo:hi]).run()
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
        agent = HostCommunication(t, dist, roles, finals, store if index == 0 else None, initial)
        from ..engine import train
        local = train(model, loss_fn, shard, dataclasses.replace(config, **changes),
                      evaluate if index == 0 else None, agent=agent)
        exchanges = agent.exchanges
    t.close()
    say(report_line(t.describe(rank), t.stats))
    figures = t.world.allgather({"rank": rank, "role": role, "host": t.where[rank][1], **t.stats.as_dict()})
    final = None
    if evaluate is not None and role == "tester":
        final = evaluate(model)
        history.append({"seconds": round(time.monotonic() - start, 3), "final": 1.0, **final})
    elif local is not None:
        final = local.final_metrics
    return DistributedResult(rank, role, dist.algorithm, len(hosts), local, exchanges, final, history,
                             time.monotonic() - start, figures)


class HostCommunication(CommunicationAgent):
    """Plugs a host's multi-host agent into the local engine (hogwild.train(..., agent=...)): the agent thread starts
    when the engine's shared parameters are ready, and when the local workers have stopped the closing protocol and
    the final model synchronisation run before the engine writes its final checkpoint and evaluates."""

    def __init__(self, transport: MPITransport, dist: DistConfig, roles: list[str],
                 finals: list[tuple[int, int, int]], store: DistributedCheckpoint | None, start: np.ndarray) -> None:
        self.t, self.dist, self.roles, self.finals, self.store = transport, dist, roles, finals, store
        self.initial = start  # the model after the initial synchronisation  # (N,)
        self.agent = None
        self.exchanges = 0
        self.stats = transport.stats
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
        self.agent = make_agent(self.t, self.flat, self.dist, self.roles, state.global_updates, self.initial)
        self.t.defer_aborts_in(self.agent._thread)  # a dead peer: this host writes last.pt before the job aborts
        self.agent.start()

    def failure(self) -> str | None:
        """Another rank died, went silent or failed an exchange: the engine stops, writes last.pt and raises."""
        return None if self.agent is None or self.agent.failed is None else f"multi-host: {self.agent.failed}"

    def report(self) -> dict:
        """This host's exchange figures so far, for each record of its metrics.jsonl."""
        return {"exchange": self.stats.as_dict()}

    def stop(self, state) -> None:
        if state.failure:  # a local worker failed: no closing protocol, train() raises, we abort
            return
        stopped = time.monotonic()
        self.agent.finish()
        self.exchanges = self.agent.exchanges
        if self.agent.failed is not None:  # a peer died or went silent in the closing exchanges: failure() says so,
            return  # and the engine writes last.pt and raises, as when it happens while the workers train
        sync_model(self.t, self.flat, self.finals)
        self.stats.wait_seconds = time.monotonic() - stopped
        if self.store is not None:
            self.store.save_model(state.model)


def sync_model(t: MPITransport, flat: FlatParams, sources: list[tuple[int, int, int]]) -> None:
    """Every rank ends with params[lo:hi] = those of rank `root`, for every (root, lo, hi) in sources."""
    values = flat.snapshot()
    t.wait([t.ibcast(values, sources)], f"model broadcast from rank(s) {[s[0] for s in sources]}", deadline=False)
    flat.assign_(values)
