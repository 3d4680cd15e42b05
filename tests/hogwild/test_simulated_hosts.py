"""hogwild/multihost/simulated_hosts.py and simulate.py: hosts as network namespaces with their own names, addresses
and shaped links, removed on exit (and after kill -9 by the next owner); the command line's check that a job's bytes
crossed the links. The checks of the byte counters and rates run without a network."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hogwild.multihost import simulate
from hogwild.multihost.exchange_stats import ExchangeStats, read_reports, report_line
from hogwild.multihost.simulated_hosts import STATE_DIR, LinkBytes, SimulatedHosts, rate_bits, unavailable
from tests.hogwild.simulate_here import simulate_here
from tests.mpi import mpi_missing

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"
needs_network = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
needs_mpi = pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))


def test_rates_in_tc_units_and_bad_ones_named():
    assert rate_bits("100mbit") == 100_000_000 and rate_bits("1gbit") == 10**9 and rate_bits("2.5Mbit") == 2_500_000
    for bad in ("100", "fast", "5bit", "100mb"):
        with pytest.raises(ValueError, match=f"link rate '{bad}'"):
            rate_bits(bad)


def test_a_rank_whose_bytes_did_not_cross_its_link_is_named():
    line = report_line("rank 1 (worker, pid 7 on host1)", ExchangeStats(exchanges=3, bytes_sent=10_000_000,
                                                                         bytes_received=8_000_000))
    reports = read_reports(f"noise\n{line}\nmore noise\n")
    assert [(r.rank, r.host, r.exchanges, r.bytes_sent, r.bytes_received) for r in reports] == [
        (1, "host1", 3, 10_000_000, 8_000_000)]
    crossed = [LinkBytes(0, 0), LinkBytes(into=8_100_000, out_of=10_200_000)]
    assert simulate.check_crossed(reports, crossed) == []
    shared_memory = [LinkBytes(0, 0), LinkBytes(into=20_000, out_of=30_000)]  # control traffic only
    problems = simulate.check_crossed(reports, shared_memory)
    assert len(problems) == 2 and problems[0].startswith("rank 1 (worker on host1) sent 10,000,000 bytes but its link "
                                                         "carried 30,000: the bytes did not cross the network")
    elsewhere = read_reports(line.replace("on host1", "on vm"))
    assert simulate.check_crossed(elsewhere, crossed) == ["rank 1 ran on 'vm', not on a simulated host"]


def test_the_command_line_refuses_bad_arguments(capsys):
    for argv, expected in ((["--hosts", "2"], "no command"), (["--rate", "fast", "--", "true"], "--rate: link rate"),
                           (["--hosts", "2", "--ranks", "3", "--", "true"], "--ranks between 1 and --hosts")):
        with pytest.raises(SystemExit) as stop:
            simulate.main(argv)
        assert stop.value.code == 2 and expected in capsys.readouterr().err


@needs_network
def test_hosts_have_their_own_names_addresses_and_shaped_links_and_leave_nothing():
    with SimulatedHosts(2, rate="50mbit") as hosts:
        for i, namespace in enumerate(hosts.namespaces):
            def inside(command: str) -> str:  # as hydra's launcher runs its proxy there
                return subprocess.run([str(hosts.shim), namespace, command], capture_output=True, text=True,
                                      check=True).stdout

            assert inside("hostname") == f"host{i}\n"
            assert f"inet {hosts.addresses[i]}/24" in inside("ip -4 -o addr show eth0")
            shaping = subprocess.run(["tc", "qdisc", "show", "dev", hosts.links[i]], capture_output=True,
                                     text=True).stdout
            assert "tbf" in shaping and "rate 50Mbit" in shaping
        named = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        assert set(hosts.namespaces) <= named and f"hw{os.getpid()}h" in hosts.namespaces[0]
    assert not set(hosts.namespaces) & set(_netns()) and not Path(f"/sys/class/net/{hosts.bridge}").exists()
    assert not hosts.folder.exists() and not (STATE_DIR / f"{os.getpid()}.owner").exists()


@needs_network
def test_the_hosts_of_an_owner_killed_with_kill_9_are_removed_by_the_next_owner():
    code = ("import subprocess, sys, time\n"
            "from hogwild.multihost.simulated_hosts import SimulatedHosts\n"
            "hosts = SimulatedHosts(1).__enter__()\n"
            "rank = subprocess.Popen(['ip', 'netns', 'exec', hosts.namespaces[0], 'sleep', '600'])\n"
            "print(hosts.namespaces[0], rank.pid, flush=True)\n"
            "time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    namespace, rank = owner.stdout.readline().split()
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    assert namespace in _netns() and _running(int(rank))  # left behind
    with SimulatedHosts(1):
        assert namespace not in _netns()
    deadline = time.monotonic() + 5
    while _running(int(rank)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(int(rank))


@needs_network
@needs_mpi
@pytest.mark.timeout(240)  # two jobs in this process: a hung one ends here
def test_a_job_passes_when_its_bytes_crossed_the_links_and_fails_when_they_did_not(capfd):
    """The same allreduce of 4 MB twice: its ranks' lines claim what they sent, then 40 MB they never sent."""
    code, honest = simulate_here(capfd, "--hosts", "2", "--rate", "200mbit", "--", sys.executable,
                                 str(SCRIPTS / "link_check.py"))
    assert code == 0, honest
    carried = [float(mb) for mb in __import__("re").findall(r"host\d ([\d.]+) MB in", honest)]
    assert len(carried) == 2 and min(carried) >= 4.0, honest
    code, claimed = simulate_here(capfd, "--hosts", "2", "--", sys.executable, str(SCRIPTS / "link_check.py"),
                                  "--claim", "40000000")
    assert code == 1, claimed
    assert "sent 40,000,000 bytes but its link carried" in claimed


def _netns() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
