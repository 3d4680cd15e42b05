"""Configuration of multi-host training: which algorithm, how often hosts talk, and which MPI rank plays which role.

Usage: `DistConfig(algorithm="easgd", period=4, alpha=0.3).roles(world_size)` -> ["server", "worker", "worker"].

One MPI rank per host. Rank layout (fixed so that every rank derives the same roles without talking):
parameter servers first (downpour/easgd/eamsgd only), then the training hosts ("workers", each running its own local
Hogwild workers), then the optional tester last.
"""
from __future__ import annotations

import dataclasses
import math

ALGORITHMS = ("allreduce", "adpsgd", "downpour", "easgd", "eamsgd")
WIRE_FORMATS = ("fp32", "bf16", "fp16")  # hogwild.multihost.wire
SERVER_ALGORITHMS = ("downpour", "easgd", "eamsgd")  # the ones with a central model held by parameter servers
ROLES = ("server", "worker", "tester")


@dataclasses.dataclass
class DistConfig:
    """How the hosts of one job exchange parameters (see docs/multihost.md for the algorithms)."""

    algorithm: str = "allreduce"
    # downpour/easgd/eamsgd: number of parameter-server ranks; the central model is split into this many partitions.
    servers: int = 1
    # allreduce: average every `period` local updates; easgd/eamsgd: elastic exchange every `period` (tau);
    # adpsgd: an active host mixes with a neighbour every `period` local updates.
    period: int = 4
    # downpour: push the accumulated local update every n_push local updates, fetch the central model every n_fetch.
    n_push: int = 4
    n_fetch: int = 4
    # easgd/eamsgd: elastic coefficient (moving rate) alpha in (0, 1).
    alpha: float = 0.3
    # one extra rank (the last) that evaluates the latest central/averaged model every tester_every_seconds.
    tester: bool = False
    tester_every_seconds: float = 5.0
    # each training host trains on its own shard batches[i::hosts] (False: every host iterates over all batches).
    shard_data: bool = True
    # failure detection: every rank sends a heartbeat to every other rank each heartbeat_seconds; a rank silent for
    # timeout_seconds (or an exchange not finished within it) aborts the whole job with a message naming the rank.
    heartbeat_seconds: float = 0.5
    timeout_seconds: float = 60.0
    # servers write their partition of the central model every checkpoint_every updates they apply (0: at the end
    # only) under Config.checkpoint_dir/distributed/; Config.resume=True restores it (and each host's engine state).
    checkpoint_every: int = 0
    # what the exchanges' values travel as: fp32, or bf16/fp16 (half the bytes; differences from a value both ends
    # hold, accumulated in fp32 where they land; .wire). The initial and final model always travel as fp32.
    wire: str = "fp32"

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"DistConfig.algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        for name in ("period", "n_push", "n_fetch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"DistConfig.{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.servers, int) or self.servers < 0:
            raise ValueError(f"DistConfig.servers must be an integer >= 0, got {self.servers!r}")
        if self.algorithm in SERVER_ALGORITHMS and self.servers < 1:
            raise ValueError(f"DistConfig.servers must be >= 1 for algorithm {self.algorithm!r}, got {self.servers}")
        if not (0.0 < self.alpha < 1.0) or not math.isfinite(self.alpha):
            raise ValueError(f"DistConfig.alpha must be in (0, 1), got {self.alpha!r}")
        for name in ("tester_every_seconds", "heartbeat_seconds", "timeout_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"DistConfig.{name} must be a positive number of seconds, got {value!r}")
        if self.timeout_seconds <= 2 * self.heartbeat_seconds:
            raise ValueError(
                f"DistConfig.timeout_seconds ({self.timeout_seconds}) must exceed twice heartbeat_seconds "
                f"({self.heartbeat_seconds}), or healthy ranks would be declared dead")
        if self.wire not in WIRE_FORMATS:
            raise ValueError(f"DistConfig.wire must be one of {WIRE_FORMATS}, got {self.wire!r}")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0:
            raise ValueError(f"DistConfig.checkpoint_every must be an integer >= 0, got {self.checkpoint_every!r}")

    @property
    def n_servers(self) -> int:
        return self.servers if self.algorithm in SERVER_ALGORITHMS else 0

    def roles(self, world_size: int) -> list[str]:
        """The role of every rank 0..world_size-1; raises ValueError when the job has no room for a training host."""
        hosts = world_size - self.n_servers - int(self.tester)
        if hosts < 1:
            raise ValueError(
                f"mpiexec -n {world_size} is too small for algorithm {self.algorithm!r} with {self.n_servers} "
                f"server rank(s){' and a tester rank' if self.tester else ''}: at least one training rank is needed "
                f"(use -n {self.n_servers + int(self.tester) + 1} or more)")
        return ["server"] * self.n_servers + ["worker"] * hosts + ["tester"] * int(self.tester)


def ranks_with(roles: list[str], role: str) -> list[int]:
    """The ranks that play `role`, in rank order."""
    return [rank for rank, r in enumerate(roles) if r == role]
