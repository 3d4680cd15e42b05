"""Rank 0 broadcasts --megabytes to every rank through MPITransport (in pieces of --piece-bytes), then every rank
closes the transport (its goodbye); each rank prints when its broadcast ended, then its exchange line (the bytes
hogwild.multihost.simulate checks against its link's counters).

Usage: python -m hogwild.multihost.simulate --hosts 2 --rate 1mbit -- \\
           python tests/hogwild/mpi_scripts/broadcast_then_close.py --megabytes 0.6 --timeout 3
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

import without_torch  # noqa: F401  (first: hogwild's init without torch)
from hogwild.multihost import pieces
from hogwild.multihost.dist_config import DistConfig
from hogwild.multihost.exchange_stats import report_line
from hogwild.multihost.transport import MPITransport, say


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=0.6)
    parser.add_argument("--piece-bytes", type=int, default=128 * 1024)
    parser.add_argument("--timeout", type=float, default=3.0, help="DistConfig.timeout_seconds")
    args = parser.parse_args()
    pieces.PIECE_BYTES = args.piece_bytes
    world = MPI.COMM_WORLD
    dist = DistConfig(algorithm="allreduce", heartbeat_seconds=0.2, timeout_seconds=args.timeout)
    t = MPITransport(world, ["worker"] * world.Get_size(), dist)
    values = np.full(int(args.megabytes * 1e6 / 4), t.rank, dtype=np.float32)
    t.wait([t.ibcast(values, [(0, 0, values.size)])], "the broadcast", deadline=False)
    assert not values.any(), "rank 0's values did not arrive"
    say(f"rank {t.rank} broadcast done at {time.monotonic():.3f}")  # one clock for every namespace of the machine
    t.close()
    say(report_line(t.describe(t.rank), t.stats))


if __name__ == "__main__":
    main()
