"""Simulated hosts on one machine: each host a network namespace with its own hostname (a UTS namespace) and address
on a bridge, its link optionally shaped to a rate (tc's token bucket), cut and restored at will, its bytes counted
by the kernel; plus the launcher shim and the MPI variables with which an MPICH job runs one rank per host over TCP.

Usage (root, `ip` and `nsenter` on the machine; see .simulate for the command line):
    with SimulatedHosts(3, rate="100mbit") as hosts:
        subprocess.run(hosts.mpiexec(["python", "run.py", "--distributed", "easgd"], mpiexec="mpiexec"))
        print(hosts.link_bytes(1))          # LinkBytes(into=..., out_of=...)

Every kernel object is named after the owner's pid (namespaces hw<pid>h<i>, links hw<pid>v<i>, bridge hwb<pid>) and
recorded with the owner's start time under STATE_DIR; `remove()` (the context's exit) takes them away, and every new
owner first removes those of owners no longer running (a test killed with -9 included), with the processes left in
them. Without `UCX_TLS=tcp,self` MPICH's UCX finds the ranks on one machine and talks through shared memory: the
byte counters (`link_bytes`) are how a run proves that its bytes crossed the links.
"""
from __future__ import annotations

import dataclasses
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

STATE_DIR = Path("/run/hogwild-hosts")  # <pid>.owner (the owner's start time) and <pid>/ (shim, hostfile)
SUBNETS = ipaddress.ip_network("10.213.0.0/16")  # each simulation takes the first /24 of these no route uses
INTERFACE = "eth0"  # every host's own link, as it sees it
_NAME = re.compile(r"^hwb?(\d+)(?:[hv](\d+))?$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmg]?)bit$")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
# what makes MPICH's ch4:ucx talk over the hosts' links: TCP only (else shared memory between ranks on one kernel)
MPI_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": INTERFACE}


@dataclasses.dataclass(frozen=True)
class LinkBytes:
    """Bytes a host's link carried (the kernel's counters of the bridge's end of it)."""

    into: int  # towards the host
    out_of: int  # from the host

    def __sub__(self, other: "LinkBytes") -> "LinkBytes":
        return LinkBytes(self.into - other.into, self.out_of - other.out_of)


def rate_bits(rate: str) -> int:
    """'100mbit' -> 100_000_000 (tc's units: kbit, mbit, gbit, bit); a ValueError naming the value otherwise."""
    match = _RATE.match(rate.lower())
    if not match:
        raise ValueError(f"link rate {rate!r}: expected a number and kbit, mbit or gbit (e.g. 100mbit, 1gbit)")
    bits = int(float(match.group(1)) * _UNITS[match.group(2)])
    if bits < 10_000:
        raise ValueError(f"link rate {rate!r}: below 10kbit, no MPI job would start")
    return bits


def unavailable() -> str | None:
    """None when this machine can simulate hosts, else why not (for a skip or an error)."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces, a bridge, tc)"
    missing = [tool for tool in ("ip", "tc", "nsenter", "unshare") if shutil.which(tool) is None]
    if missing:
        return f"simulated hosts need {', '.join(missing)} (iproute2, util-linux)"
    probe = f"hw{os.getpid()}h999"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`ip netns add` fails here: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _started(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot), None when it does not run: a pid alone may have been
    reused by another process since it owned a simulation."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


class SimulatedHosts:
    """`hosts` simulated hosts host0..host<n-1>, each at 10.213.X.(10+i) on its own link to one bridge."""

    def __init__(self, hosts: int, rate: str | None = None) -> None:
        if hosts < 1:
            raise ValueError(f"simulated hosts: need at least 1 host, got {hosts}")
        self.count, self.rate = hosts, rate
        if rate is not None:
            rate_bits(rate)
        self.pid = os.getpid()
        self.bridge = f"hwb{self.pid}"
        self.namespaces = [f"hw{self.pid}h{i}" for i in range(hosts)]
        self.links = [f"hw{self.pid}v{i}" for i in range(hosts)]
        self.folder = STATE_DIR / str(self.pid)
        self.shim, self.hostfile = self.folder / "shim", self.folder / "hosts"
        self.addresses: list[str] = []

    # ---- lifecycle ---------------------------------------------------------------------------------------------------
    def __enter__(self) -> "SimulatedHosts":
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def create(self) -> None:
        reason = unavailable()
        if reason:
            raise OSError(reason)
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        with open(STATE_DIR / ".lock", "w") as lock:  # one owner at a time sweeps and picks a subnet
            fcntl.flock(lock, fcntl.LOCK_EX)
            remove_stale()
            self.folder.mkdir(exist_ok=True)
            (STATE_DIR / f"{self.pid}.owner").write_text(_started(self.pid) or "")
            try:
                self._build(_free_subnet())
            except BaseException:
                self.remove()
                raise

    def _build(self, subnet: ipaddress.IPv4Network) -> None:
        gateway = subnet.network_address + 1
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for namespace, link, i in zip(self.namespaces, self.links, range(self.count)):
            address = str(subnet.network_address + 10 + i)
            _ip("netns", "add", namespace)
            _ip("link", "add", link, "type", "veth", "peer", "name", INTERFACE, "netns", namespace)
            _ip("link", "set", link, "master", self.bridge, "up")
            _ip("-n", namespace, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", INTERFACE)
            _ip("-n", namespace, "link", "set", INTERFACE, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            self.addresses.append(address)
            if self.rate is not None:
                self.set_rate(i, self.rate)
        self.hostfile.write_text("".join(f"{namespace}:1\n" for namespace in self.namespaces))
        # hydra's rsh launcher runs `SHIM HOST COMMAND` (COMMAND one string, as for ssh): the proxy it starts, and so
        # every rank on that host, lives in the host's network namespace under a hostname of its own
        self.shim.write_text(
            "#!/bin/sh\n"
            f"# launcher shim of simulated hosts hw{self.pid}h<i>: SHIM HOST COMMAND\n"
            'host=$1; shift\n'
            f'case $host in hw{self.pid}h*) ;; *) echo "$0: $host is not a simulated host" >&2; exit 1;; esac\n'
            'exec ip netns exec "$host" unshare --uts sh -c "hostname host${host##*h} && exec $*"\n')
        self.shim.chmod(0o755)

    def remove(self) -> None:
        """Remove everything this simulation made: its processes still in the hosts, namespaces, links, bridge."""
        _remove_owner(self.pid)

    # ---- the MPI job --------------------------------------------------------------------------------------------
    def mpiexec(self, command: list[str], mpiexec: str = "mpiexec", ranks: int | None = None,
                env: dict[str, str] | None = None) -> list[str]:
        """The command line that runs `command` as `ranks` (default: one per host) MPI ranks, rank r on host
        r % hosts, over the hosts' links (hydra: -launcher rsh through the shim, -iface the bridge)."""
        variables = {**MPI_ENV, **(env or {})}
        genv = [item for name, value in variables.items() for item in ("-genv", name, value)]
        return [mpiexec, "-f", str(self.hostfile), "-ppn", "1", "-n", str(ranks or self.count), "-launcher", "rsh",
                "-launcher-exec", str(self.shim), "-iface", self.bridge, *genv, *command]

    # ---- links -------------------------------------------------------------------------------------------------
    def link_bytes(self, host: int) -> LinkBytes:
        """What host `host`'s link has carried so far (the bridge's end: its tx goes into the host)."""
        stats = Path("/sys/class/net") / self.links[host] / "statistics"
        return LinkBytes(int((stats / "tx_bytes").read_text()), int((stats / "rx_bytes").read_text()))

    def set_rate(self, host: int, rate: str | None) -> None:
        """Shape host `host`'s link to `rate` both ways (a token bucket at each end; None: unlimited)."""
        for prefix, device in ((), self.links[host]), (("-n", self.namespaces[host]), INTERFACE):
            if rate is None:
                subprocess.run(["tc", *prefix, "qdisc", "del", "dev", device, "root"], capture_output=True)
                continue
            per_second = rate_bits(rate) // 8
            burst = max(128 * 1024, per_second // 250)  # at least one segmentation-offload packet, and a tick's worth
            done = subprocess.run(["tc", *prefix, "qdisc", "replace", "dev", device, "root", "tbf", "rate", rate,
                                   "burst", str(burst), "latency", "100ms"], capture_output=True, text=True)
            if done.returncode != 0:
                raise OSError(f"tc qdisc replace dev {device} ... tbf rate {rate}: {done.stderr.strip()}")

    def cut(self, host: int) -> None:
        """Take host `host`'s link down (as a pulled cable: nothing goes in or out; connections stay open)."""
        _ip("link", "set", self.links[host], "down")

    def restore(self, host: int) -> None:
        _ip("link", "set", self.links[host], "up")


def _free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of SUBNETS that no route of this machine covers (another simulation's bridge, a real network)."""
    used = []
    routes = [line.split()[0] for line in _ip("-4", "route", "show").stdout.splitlines() if line.strip()]
    addresses = [line.split()[3] for line in _ip("-4", "-o", "addr", "show").stdout.splitlines() if line.strip()]
    for target in routes + addresses:
        try:
            used.append(ipaddress.ip_network(target, strict=False))
        except ValueError:  # 'default'
            continue
    for subnet in SUBNETS.subnets(new_prefix=24):
        if not any(subnet.overlaps(route) for route in used):
            return subnet
    raise OSError(f"simulated hosts: every /24 of {SUBNETS} is in use by a route")


def _owners() -> set[int]:
    """The pids that own kernel objects or state of simulated hosts on this machine."""
    names = _ip("netns", "list", check=False).stdout.split()
    names += [line.split(":")[1].strip().split("@")[0] for line in _ip("-o", "link", "show", check=False)
              .stdout.splitlines() if line.count(":") >= 2]
    names += [path.name.split(".")[0] for path in STATE_DIR.glob("*")] if STATE_DIR.is_dir() else []
    owners = set()
    for name in names:
        match = _NAME.match(name) or re.match(r"^(\d+)$", name)
        if match:
            owners.add(int(match.group(1)))
    return owners


def remove_stale() -> list[int]:
    """Remove the simulations of owners no longer running (their start time recorded in STATE_DIR tells a reused
    pid apart); returns their pids."""
    stale = []
    for pid in sorted(_owners()):
        owner = STATE_DIR / f"{pid}.owner"
        recorded = owner.read_text().strip() if owner.exists() else None
        started = _started(pid)
        if started is None or recorded != started:
            _remove_owner(pid)
            stale.append(pid)
    return stale


def _remove_owner(pid: int) -> None:
    """Kill what still runs in the namespaces of owner `pid` (its MPI ranks), then delete its links, namespaces,
    bridge and state."""
    namespaces = [name for name in _ip("netns", "list", check=False).stdout.split()
                  if (m := _NAME.match(name)) and int(m.group(1)) == pid and m.group(2) is not None]
    for namespace in namespaces:
        for process in _ip("netns", "pids", namespace, check=False).stdout.split():
            try:
                os.kill(int(process), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for namespace in namespaces:  # the link first: it goes now, not when the kernel gets round to the namespace
        _ip("link", "delete", f"hw{pid}v{_NAME.match(namespace).group(2)}", check=False)
        _ip("netns", "delete", namespace, check=False)
    _ip("link", "delete", f"hwb{pid}", check=False)
    shutil.rmtree(STATE_DIR / str(pid), ignore_errors=True)
    (STATE_DIR / f"{pid}.owner").unlink(missing_ok=True)
