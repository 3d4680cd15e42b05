"""Multi-host training over a real network stack: ranks on simulated hosts (network namespaces on a bridge, TCP,
links shaped by tc; hogwild/multihost/simulated_hosts.py), each job's bytes checked on the links' counters by
hogwild.multihost.simulate. Every algorithm across three hosts; a slow link under a big transfer; run.py's job through
a short cut (survived), a long cut (named, checkpoints kept) and its --resume (exact step count).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hogwild.multihost.simulated_hosts import SimulatedHosts, unavailable
from hogwild.share.checkpoint import read_checkpoint
from tests.hogwild.simulate_here import simulate_here
from tests.mpi import MPIEXEC, mpi_missing

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

pytestmark = [pytest.mark.slow, pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing())),
              pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]


@pytest.fixture
def simulate(capfd, monkeypatch):
    """simulate(ARGS) -> (exit status, output) of python -m hogwild.multihost.simulate ARGS (in this process: see
    simulate_here), the ranks started with ENV's variables: exit 1 when a rank's bytes did not cross its link."""
    for name in ("PYTHONPATH", "OMP_NUM_THREADS", "PYTHONUNBUFFERED"):
        monkeypatch.setenv(name, ENV[name])
    return lambda *args: simulate_here(capfd, *args)


def assert_no_warning(output: str) -> None:
    """Nothing a user would read as a fault: no UCX or MPI warning (e.g. messages left unmatched at finalize)."""
    assert not re.search(r"WARN|[Ww]arning|pending \d+ references", output), output


@pytest.mark.timeout(240)
def test_every_algorithm_trains_across_three_hosts_over_tcp_in_bf16(tmp_path, simulate):
    """easgd, eamsgd, downpour (1 server + 2 hosts), allreduce and adpsgd (3 hosts), one after the other in one job,
    every message in pieces and in bf16: each ends with the same model on every rank, trained, no warning, its bytes
    on the links (the simulate command checks every rank's line against its link's counters), 2 bytes a parameter
    per exchange (fp32 runs: tests/hogwild/test_distributed.py on one machine, and below)."""
    code, output = simulate("--hosts", "3", "--", sys.executable, str(SCRIPTS / "every_algorithm.py"), "--out",
                            str(tmp_path), "--wire", "bf16")
    assert code == 0, output
    assert_no_warning(output)
    for algorithm in ("allreduce", "adpsgd", "easgd", "eamsgd", "downpour"):
        ranks = [json.loads((tmp_path / f"{algorithm}-rank{r}.json").read_text()) for r in range(3)]
        assert len({r["checksum"] for r in ranks}) == 1, (algorithm, ranks)  # exactly the same final model
        assert ranks[0]["loss"] < 0.5 * 0.8245, (algorithm, ranks[0])  # from the seeded start's 0.8245
        hosts = [r for r in ranks if r["role"] == "worker"]
        assert len(hosts) == (2 if algorithm in ("easgd", "eamsgd", "downpour") else 3)
        assert all(h["updates"] == 48 and h["exchanges"] >= 1 for h in hosts), (algorithm, hosts)
        assert all(f["bytes_sent"] > 0 and f["bytes_received"] > 0 for f in ranks[0]["figures"]), ranks[0]
        numel = 16 * 32 + 32 + 32 + 1  # the tiny task's MLP (fp32: 4 bytes each); plus a 4-byte header or a flag
        per_exchange = [f["bytes_per_exchange"] for f in ranks[0]["figures"] if f["role"] == "worker"]
        assert all(2 * numel <= n <= 2 * numel + 4 for n in per_exchange), (algorithm, per_exchange)


@pytest.mark.timeout(240)
def test_a_transfer_longer_than_the_timeout_is_no_false_dead_or_hung(tmp_path, simulate):
    """A 1.2 MB model over a 3 Mbit/s link: each message takes 3.1 s, the timeout is 2 s. A heartbeat waits behind
    what MPI and the sockets hold of a transfer (seconds here), but each piece received (128 KiB: 0.35 s) is a sign of
    life of its sender, so the job ends normally. (Heartbeats alone: 'no heartbeat from rank 0 ... dead or hung' in
    the elastic exchange, both directions of the link busy.)"""
    code, output = simulate("--hosts", "2", "--rate", "3mbit", "--", sys.executable,
                            str(SCRIPTS / "every_algorithm.py"), "--out", str(tmp_path), "--algorithms", "easgd",
                            "--hidden", "16384", "--steps", "2", "--piece-bytes", str(128 * 1024), "--timeout", "2")
    assert code == 0, output
    assert "dead or hung" not in output
    host = json.loads((tmp_path / "easgd-rank1.json").read_text())
    assert host["exchanges"] == 1 and host["figures"][1]["exchange_seconds_max"] > 2.0, host


@pytest.mark.timeout(240)
def test_a_peer_still_receiving_at_the_end_is_waited_for(simulate):
    """A 0.6 MB broadcast over a 1 Mbit/s link (4.8 s), the timeout 3 s: rank 0's broadcast ends while most of it is
    still in the sockets' buffers. Rank 1 hears its pieces (rank 0's heartbeats wait behind them), rank 0 at its
    goodbye hears rank 1's heartbeats until rank 1's goodbye comes, more than the timeout later; both end normally.
    (A goodbye bounded by the timeout ended the job: 'no goodbye from rank 1 ... within 3.0 s of the end'.)"""
    code, output = simulate("--hosts", "2", "--rate", "1mbit", "--", sys.executable,
                            str(SCRIPTS / "broadcast_then_close.py"), "--megabytes", "0.6", "--piece-bytes",
                            str(128 * 1024), "--timeout", "3")
    assert code == 0 and "dead or hung" not in output, output
    ended = {int(rank): float(at) for rank, at in re.findall(r"rank (\d) broadcast done at ([\d.]+)", output)}
    assert ended[1] - ended[0] > 3.0, output  # rank 1 was still receiving when rank 0 said goodbye
    assert len(re.findall(r"exchanged: 0 exchanges, sent [\d,]+ bytes", output)) == 2, output


def test_run_py_survives_a_short_cut_names_a_long_one_and_resumes_to_the_exact_step(tmp_path):
    """run.py, allreduce over 3 hosts, --hang-timeout 8: host2's link down 1 s (the job goes on), later down for good
    (the job ends 8 to 8 + 10 s later, naming rank 2 on host2; the reachable hosts write last.pt); link back,
    --resume --steps S ends at exactly S on every host, with the same final model, and the exchanges in summary.json
    and metrics. The first run's --steps is out of reach, so that the cut falls in training however fast it goes."""
    run = tmp_path / "run"
    args = [sys.executable, "run.py", "--task", "pos", "--workers", "1", "--distributed", "allreduce", "--steps",
            "100000", "--hang-timeout", "8", "--checkpoint-every", "20", "--log-every", "20", "--no-progress",
            "--out", str(run)]
    with SimulatedHosts(3) as hosts:
        mpiexec = hosts.mpiexec(args, str(MPIEXEC))
        job = subprocess.Popen(mpiexec, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            lines = _until(job, lambda line: line.startswith("[eval]"))  # training has started on host0
            hosts.cut(2)
            time.sleep(1.0)
            hosts.restore(2)
            time.sleep(3.0)
            assert job.poll() is None, "".join(lines)  # the short cut was survived ...
            hosts.cut(2)
            cut = time.monotonic()
            output = "".join(lines) + job.communicate(timeout=60)[0]
            ended = time.monotonic() - cut
        finally:
            job.kill()
        assert job.returncode != 0 and 8 - 0.5 < ended < 8 + 10, (ended, output)  # ... and not named later
        assert re.search(r"rank [01] \(worker, pid \d+ on host[01]\) aborts the job: WorkerFailed: training stopped: "
                         r"multi-host: no heartbeat from rank 2 \(worker, pid \d+ on host2\) for more than 8\.0 s: "
                         r"dead or hung\ncheckpoint written to .*/host[01]/last\.pt", output), output
        saved = [read_checkpoint(str(run / f"host{host}" / "last.pt"))["global_step"] for host in range(3)]
        assert all(0 < step for step in saved), saved
        steps = max(saved) + 10
        hosts.restore(2)
        resumed = subprocess.run(hosts.mpiexec([sys.executable, "run.py", "--resume", "--out", str(run), "--steps",
                                                str(steps), "--no-progress"], str(MPIEXEC)),
                                 cwd=REPO, env=ENV, timeout=240, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        carried = [hosts.link_bytes(i) for i in range(3)]
    assert resumed.returncode == 0, resumed.stdout
    assert_no_warning(resumed.stdout)
    models = [read_checkpoint(str(run / f"host{i}" / "last.pt")) for i in range(3)]
    assert [m["global_step"] for m in models] == [steps] * 3
    for other in models[1:]:
        assert all(torch.equal(other["model"][k], models[0]["model"][k]) for k in models[0]["model"])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["updates"] == steps and [e["host"] for e in summary["exchange"]] == ["host0", "host1", "host2"]
    for figures, link in zip(summary["exchange"], carried):
        assert figures["exchanges"] >= 1 and 0 < figures["bytes_sent"] <= link.out_of, (figures, link)
    assert re.search(r"; host0: \d+ exchanges \([\d.]+ MB sent, [\d.]+ MB received; [\d.]+ s mean, [\d.]+ s max\), "
                     r"[\d.]+ s waiting at the end\n", resumed.stdout), resumed.stdout
    records = [json.loads(line) for line in (run / "host1" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r["kind"] == "train"]
    assert trained and trained[-1]["exchange"]["exchanges"] >= 1 and trained[-1]["exchange"]["wait_seconds"] >= 0


def _until(job: subprocess.Popen, found) -> list[str]:
    lines = []
    while True:
        line = job.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
        if found(line):
            return lines
