"""Serial tests of the multi-host arithmetic and configuration (no MPI needed): hogwild.multihost.math,
hogwild.multihost.dist_config, hogwild.multihost.distributed_checkpoint, and the clear error of hogwild.multihost
without mpi4py."""
import sys

import numpy as np
import pytest
import torch

from hogwild.multihost.agents import make_agent
from hogwild.multihost.dist_config import DistConfig, ranks_with
from hogwild.multihost.math import (DownpourTracker, FlatParams, elastic_difference, pair_average_delta,
                                    partition_bounds, ring_pairing)
from hogwild.multihost.protocol import FETCH, PUSH, TAG_SERVER


def test_flat_params_snapshot_and_add_across_tensor_boundaries():
    a, b = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([5.0, 6.0, 7.0])
    flat = FlatParams([a, b])
    assert flat.numel == 7
    np.testing.assert_array_equal(flat.snapshot(), [1, 2, 3, 4, 5, 6, 7])
    flat.add_(np.array([10.0, 20.0, 30.0], dtype=np.float32), start=3)  # spans a[1, 1], b[0], b[1]
    assert a.tolist() == [[1.0, 2.0], [3.0, 14.0]]
    assert b.tolist() == [25.0, 36.0, 7.0]
    flat.assign_(np.zeros(7, dtype=np.float32))
    assert a.abs().sum().item() == 0 and b.abs().sum().item() == 0


def test_flat_params_rejects_integer_tensors():
    with pytest.raises(ValueError, match="parameter 1 must be a floating-point CPU tensor"):
        FlatParams([torch.zeros(2), torch.zeros(2, dtype=torch.int64)])


def test_partition_bounds_cover_everything_in_nearly_equal_parts():
    assert partition_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert partition_bounds(7, 1) == [(0, 7)]
    assert partition_bounds(2, 3) == [(0, 0), (0, 1), (1, 2)]


def test_elastic_exchange_formula():
    x, center = np.array([1.0, 4.0], dtype=np.float32), np.array([3.0, 0.0], dtype=np.float32)
    d = elastic_difference(x, center, 0.25)
    np.testing.assert_array_equal(x - d, [1.5, 3.0])  # host: x - alpha (x - center)
    np.testing.assert_array_equal(center + d, [2.5, 1.0])  # server: center + alpha (x - center)
    np.testing.assert_array_equal((x - d) + (center + d), x + center)  # the exchange conserves the sum


def test_pair_average_keeps_the_sum():
    own, peer = np.array([1.0, -2.0], dtype=np.float32), np.array([3.0, 6.0], dtype=np.float32)
    np.testing.assert_array_equal(own + pair_average_delta(own, peer), [2.0, 2.0])
    np.testing.assert_array_equal(peer + pair_average_delta(peer, own), [2.0, 2.0])


@pytest.mark.parametrize("hosts, expected", [
    (1, [(True, [])]),
    (2, [(True, [1]), (False, [0])]),
    (3, [(True, [1]), (False, [0, 2]), (True, [1])]),
    (4, [(True, [1, 3]), (False, [0, 2]), (True, [1, 3]), (False, [0, 2])]),
    (5, [(True, [1]), (False, [0, 2]), (True, [1, 3]), (False, [2, 4]), (True, [3])]),
])
def test_ring_pairing_is_bipartite_and_symmetric(hosts, expected):
    pairing = [ring_pairing(i, hosts) for i in range(hosts)]
    assert pairing == expected
    for i, (active, neighbours) in enumerate(pairing):
        for q in neighbours:
            assert pairing[q][0] != active and i in pairing[q][1]


def test_downpour_tracker_push_and_fetch_keep_unpushed_local_updates():
    start = np.array([1.0, 1.0], dtype=np.float32)
    tracker = DownpourTracker(start)
    np.testing.assert_array_equal(tracker.push(np.array([1.5, 0.0], dtype=np.float32)), [0.5, -1.0])
    # two more local steps (+0.25 each coordinate), then the servers answer with a central model of [4, 4]
    current = np.array([1.75, 0.25], dtype=np.float32)
    delta = tracker.fetch(np.array([4.0, 4.0], dtype=np.float32), current)
    np.testing.assert_array_equal(current + delta, [4.25, 4.25])  # central + the not yet pushed +0.25
    np.testing.assert_array_equal(tracker.push(current + delta), [0.25, 0.25])  # ... which the next push sends


class _SentHeaders:
    """A transport that records the kind of each request header sent to a server (the requests never complete)."""
    rank = 1

    def __init__(self) -> None:
        self.kinds = []

    def isend(self, values, dest, tag):
        if tag == TAG_SERVER:
            self.kinds.append({PUSH: "push", FETCH: "fetch"}[float(values[0])])

    def irecv(self, buffer, source, tag):
        return None


def test_a_downpour_host_whose_steps_outpace_its_exchanges_fetches_between_pushes():
    """Both a push and a fetch are due at every tick when the local steps run ahead of the exchanges: the host
    alternates them (a push first, then the fetch of the same step); pushing first every time it never fetched, and
    the servers summed both hosts' whole local runs (the tiny task's loss went from 0.82 to 1.04 on 3 ranks)."""
    transport, step = _SentHeaders(), [0]
    agent = make_agent(transport, FlatParams([torch.zeros(3)]), DistConfig(algorithm="downpour", n_push=4, n_fetch=4),
                       ["server", "worker", "worker"], steps=lambda: step[0])
    for step[0] in (2, 4, 9, 13, 14, 30, 31, 32):  # what the local workers had reached at each of the agent's ticks
        agent._pending = None  # the previous exchange completed
        agent.tick(local_done=False)
    assert transport.kinds == ["push", "fetch", "push", "fetch", "push", "fetch", "push"]
    paced = _SentHeaders()  # steps slower than the exchanges: each due push is followed by its fetch
    agent = make_agent(paced, FlatParams([torch.zeros(3)]), DistConfig(algorithm="downpour", n_push=4, n_fetch=8),
                       ["server", "worker", "worker"], steps=lambda: step[0])
    for step[0] in range(1, 18):
        agent._pending = None
        agent.tick(local_done=False)
    assert paced.kinds == ["push", "push", "fetch", "push", "push", "fetch"]


def test_dist_config_roles_and_validation():
    assert DistConfig(algorithm="easgd", servers=2, tester=True).roles(5) == [
        "server", "server", "worker", "worker", "tester"]
    assert DistConfig(algorithm="allreduce", servers=3).roles(2) == ["worker", "worker"]  # no servers: ignored
    assert ranks_with(["server", "worker", "worker"], "worker") == [1, 2]
    with pytest.raises(ValueError, match=r"mpiexec -n 2 is too small .* \(use -n 3 or more\)"):
        DistConfig(algorithm="downpour", servers=1, tester=True).roles(2)
    with pytest.raises(ValueError, match="DistConfig.algorithm must be one of"):
        DistConfig(algorithm="hogwild")
    with pytest.raises(ValueError, match="DistConfig.period must be an integer >= 1"):
        DistConfig(period=0)
    with pytest.raises(ValueError, match=r"DistConfig.alpha must be in \(0, 1\)"):
        DistConfig(alpha=1.5)
    with pytest.raises(ValueError, match="DistConfig.servers must be >= 1 for algorithm 'downpour'"):
        DistConfig(algorithm="downpour", servers=0)
    with pytest.raises(ValueError, match="DistConfig.timeout_seconds"):
        DistConfig(heartbeat_seconds=1.0, timeout_seconds=1.5)


def test_without_mpi4py_the_error_says_how_to_install(monkeypatch):
    from hogwild import multihost
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now raises ImportError
    with pytest.raises(RuntimeError, match=r"pip install '\.\[mpi\]'"):
        multihost.import_mpi()


def test_single_host_modules_never_import_mpi4py():
    import subprocess
    code = ("import sys, hogwild.multihost, hogwild.multihost.host, hogwild.multihost.agents, hogwild.multihost.server; "
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported at module level'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[2]))


def test_distributed_checkpoint_partitions_round_trip_and_refuse_another_layout(tmp_path):
    from hogwild.multihost.distributed_checkpoint import DistributedCheckpoint
    store = DistributedCheckpoint(str(tmp_path), "easgd", numel=10, servers=3)
    assert not store.has_partition(1)
    store.save_partition(1, np.arange(3, dtype=np.float32), updates=7)
    assert store.has_partition(1)
    np.testing.assert_array_equal(store.load_partition(1), [0, 1, 2])
    other = DistributedCheckpoint(str(tmp_path), "easgd", numel=10, servers=2)  # server 1 would now own [5, 10)
    with pytest.raises(ValueError, match=r"server1\.pt holds partition \(3, 6\) of a 10-parameter model, but this "
                                         r"job needs partition \(5, 10\)"):
        other.load_partition(1)
    with pytest.raises(FileNotFoundError, match=r"server0\.pt does not exist"):
        store.load_partition(0)


class _CreatesAFile:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):  # unpickling calls open(path, 'w'): code of the file's choosing
        return (open, (self.path, "w"))


def test_a_crafted_or_foreign_server_checkpoint_is_refused_naming_it(tmp_path):
    import torch

    from hogwild.share.checkpoint import CheckpointError
    from hogwild.multihost.distributed_checkpoint import DistributedCheckpoint
    store = DistributedCheckpoint(str(tmp_path), "easgd", numel=10, servers=1)
    path, marker = tmp_path / "distributed" / "server0.pt", tmp_path / "created-by-the-pickle"
    path.parent.mkdir()
    torch.save({"center": torch.zeros(10), "numel": 10, "x": _CreatesAFile(marker)}, path)
    with pytest.raises(CheckpointError, match=r"server0\.pt: not a hogwild checkpoint \(it needs io\.open unpickled"):
        store.load_partition(0)
    assert not marker.exists()
    torch.save({"weights": torch.zeros(10)}, path)
    with pytest.raises(CheckpointError, match=r"server0\.pt: not a hogwild parameter-server checkpoint \(no "
                                              r"'center' entry\)"):
        store.load_partition(0)


def test_assign_sets_the_values_exactly_where_adding_their_difference_would_not():
    """The final model is assigned on every rank: p + (v - p) can differ from v in the last bit."""
    p = torch.tensor([0.1, 1e8], dtype=torch.float32)
    v = np.array([0.3, 3.0], dtype=np.float32)
    assert (p + (torch.from_numpy(v) - p)).tolist() != v.tolist()  # the old way, off in the last bit
    FlatParams([p]).assign_(v)
    assert p.tolist() == v.tolist()


def test_a_rank_stopped_by_a_signal_says_so_without_a_traceback(monkeypatch):
    from hogwild.multihost.host import abort_reason
    monkeypatch.delenv("HOGWILD_TRACEBACK", raising=False)
    assert abort_reason(KeyboardInterrupt()) == "stopped by a signal (SIGINT, or SIGTERM/SIGHUP under run.py)"
