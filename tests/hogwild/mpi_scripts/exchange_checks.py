"""One exchange of each algorithm on hand-set parameters, checked against its closed form on every rank.

Usage: mpiexec -n N python tests/hogwild/mpi_scripts/exchange_checks.py [--piece-bytes B] allreduce adpsgd easgd downpour
(N >= 2; the algorithms run one after the other in the same job, each with its own transport; --piece-bytes 8 sends
the 7 parameters in pieces of 2, as a big model travels.)
Prints "CHECKED <algorithm> rank <r>" on success; any mismatch raises (the job then aborts naming the rank).
"""
import sys
import time

import numpy as np
import torch

from hogwild.multihost import pieces
from hogwild.multihost.host import sync_model
from hogwild.multihost.transport import MPITransport, import_mpi
from hogwild.multihost.agents import make_agent
from hogwild.multihost.dist_config import DistConfig, ranks_with
from hogwild.multihost.math import FlatParams, partition_bounds, ring_pairing
from hogwild.multihost.server import ParameterServer, Tester


def values_of(rank: int) -> list[torch.Tensor]:
    """Distinct, exactly representable parameters per rank: a (2, 2) matrix and a (3,) vector."""
    return [torch.tensor([[1.0, 2.0], [3.0, 4.0]]) * (rank + 1), torch.tensor([0.5, -1.0, 8.0]) - rank]


def wait_until(condition, what: str, transport, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.002)


def main(algorithm: str) -> None:
    MPI = import_mpi()
    world = MPI.COMM_WORLD
    # EASGD: one host only (its exchanges with the center are then order-free): -n 2 = 1 server + 1 host,
    # -n 4 = 2 servers (2 partitions) + 1 host + a tester rank
    easgd_wide = algorithm == "easgd" and world.Get_size() >= 4
    dist = DistConfig(algorithm=algorithm, servers=2 if easgd_wide else 1, period=1, n_push=1, tester=easgd_wide,
                      n_fetch=10**9, alpha=0.25, heartbeat_seconds=0.2, timeout_seconds=20.0)
    roles = dist.roles(world.Get_size())
    t = MPITransport(world, roles, dist)
    rank, hosts, servers = t.rank, ranks_with(roles, "worker"), ranks_with(roles, "server")
    params = values_of(rank)
    flat = FlatParams(params)
    every = np.stack(world.allgather(flat.snapshot()))  # (size, N): every rank's starting parameters
    step = [0]
    if algorithm == "downpour":  # hosts start from the central model, then each "trains" by its own delta
        sync_model(t, flat, [(0, 0, flat.numel)])
        start = flat.snapshot()
    if roles[rank] == "server":
        lo, hi = partition_bounds(flat.numel, len(servers))[servers.index(rank)]
        center = flat.snapshot()[lo:hi].copy()
        ParameterServer(t, dist, roles, center).run()
        if algorithm == "easgd":  # the host's periodic exchange, then its last one when its training ends
            x, c = easgd_twice(every[hosts[0]][lo:hi], every[rank][lo:hi])
            np.testing.assert_allclose(center, c, rtol=1e-6)
        else:
            np.testing.assert_allclose(center, start[lo:hi] + sum(deltas(h)[lo:hi] for h in hosts), rtol=1e-6)
    elif roles[rank] == "tester":
        history = Tester(t, dist, roles, flat, lambda: {"sum": float(flat.snapshot().sum())}).run()
        assert history == [], history  # tester_every_seconds (5 s) never came: it only waited for the stop
    else:
        agent = make_agent(t, flat, dist, roles, steps=lambda: step[0])
        if algorithm == "downpour":
            flat.add_(deltas(rank))
        agent.start()
        step[0] = 1  # one exchange is due
        if algorithm == "allreduce":
            wait_until(lambda: agent.exchanges >= 1, "allreduce round", t)
            np.testing.assert_allclose(flat.snapshot(), every[hosts].mean(axis=0), rtol=1e-6)
        elif algorithm == "adpsgd":
            index = hosts.index(rank)
            active, _ = ring_pairing(index, len(hosts))
            callers = [i for i in range(len(hosts)) if ring_pairing(i, len(hosts))[0]
                       and ring_pairing(i, len(hosts))[1][:1] == [index]]
            wait_until(lambda: agent.exchanges >= (1 if active else len(callers)), "AD-PSGD mixing", t)
            mixed = np.stack(world.allgather(flat.snapshot()))  # every rank, before the final average
            np.testing.assert_allclose(mixed.sum(axis=0), every[hosts].sum(axis=0), rtol=1e-6)
            assert not np.allclose(mixed, every[hosts]), "no mixing happened"
            if len(hosts) == 2:
                np.testing.assert_allclose(mixed, np.repeat(every[hosts].mean(axis=0, keepdims=True), 2, 0))
        elif algorithm == "easgd":
            wait_until(lambda: agent.exchanges >= 1, "elastic exchange", t)
            center0 = np.concatenate([every[s][lo:hi] for s, (lo, hi) in
                                      zip(servers, partition_bounds(flat.numel, len(servers)))])
            x = every[rank]
            np.testing.assert_allclose(flat.snapshot(), x - 0.25 * (x - center0), rtol=1e-6)
        elif algorithm == "downpour":
            wait_until(lambda: agent.exchanges >= 1, "downpour push", t)
        agent.finish()
        if algorithm == "easgd":
            center0 = np.concatenate([every[s][lo:hi] for s, (lo, hi) in
                                      zip(servers, partition_bounds(flat.numel, len(servers)))])
            np.testing.assert_allclose(flat.snapshot(), easgd_twice(every[rank], center0)[0], rtol=1e-6)
        if algorithm in ("allreduce", "adpsgd"):  # the closing protocol leaves every host at the mean
            np.testing.assert_allclose(flat.snapshot(), every[hosts].mean(axis=0), rtol=1e-6)
    t.close()
    print(f"CHECKED {algorithm} rank {rank}", flush=True)


def easgd_twice(x: np.ndarray, center: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host and center after two elastic exchanges (alpha 0.25) with no training in between."""
    for _ in range(2):
        d = 0.25 * (x - center)
        x, center = x - d, center + d
    return x, center


def deltas(rank: int) -> np.ndarray:
    """The local update host `rank` makes in the downpour check.  # (7,)"""
    return np.arange(7, dtype=np.float32) * np.float32(0.5) + rank


if __name__ == "__main__":
    names = sys.argv[1:]
    if names[:1] == ["--piece-bytes"]:
        pieces.PIECE_BYTES, names = int(names[1]), names[2:]
    for name in names:
        main(name)
