"""An mpi4py job for the simulated hosts' byte check: every rank takes part in an allreduce of --megabytes and prints
its exchange line, claiming --claim bytes sent (default: what it handed to MPI).

Usage: python -m hogwild.multihost.simulate --hosts 2 -- python tests/hogwild/mpi_scripts/link_check.py [--claim N]
"""
import argparse
import os
import socket

import numpy as np
from mpi4py import MPI

import without_torch  # noqa: F401  (first: hogwild's init without torch)
from hogwild.multihost.exchange_stats import ExchangeStats, report_line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=4.0)
    parser.add_argument("--claim", type=int, default=None, help="bytes this rank says it sent")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    values = np.full(int(args.megabytes * 1e6 / 4), world.Get_rank() + 1, dtype=np.float32)
    total = np.empty_like(values)
    world.Allreduce(values, total)
    assert total[0] == world.Get_size() * (world.Get_size() + 1) / 2, total[0]
    stats = ExchangeStats(exchanges=1, bytes_sent=values.nbytes if args.claim is None else args.claim,
                          bytes_received=0)
    who = f"rank {world.Get_rank()} (worker, pid {os.getpid()} on {socket.gethostname()})"
    print(report_line(who, stats), flush=True)


if __name__ == "__main__":
    main()
