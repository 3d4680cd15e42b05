"""Train the tiny task with each multi-host algorithm in turn, in one MPI job of 3 ranks (easgd, eamsgd, downpour:
1 server + 2 hosts; allreduce, adpsgd: 3 hosts), with pieces of --piece-bytes so that a model of a few thousand
parameters travels in several pieces as a big one does.

Usage: mpiexec -n 3 python tests/hogwild/mpi_scripts/every_algorithm.py --out OUT [--hidden 32] [--piece-bytes 1024]
       [--algorithms easgd,...] [--steps 48] [--timeout 20] [--wire bf16]
Writes OUT/<algorithm>-rank<r>.json per algorithm and rank: role, the final model's full-data loss and its checksum,
exchanges, local updates.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import hogwild  # noqa: E402
from hogwild.multihost import pieces, train_distributed  # noqa: E402
from hogwild.multihost.dist_config import ALGORITHMS, DistConfig  # noqa: E402
from tiny_task import full_loss, loss_fn, make_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=48, help="local updates per host")
    parser.add_argument("--piece-bytes", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=20.0, help="DistConfig.timeout_seconds")
    parser.add_argument("--wire", default="fp32", help="DistConfig.wire")
    args = parser.parse_args()
    pieces.PIECE_BYTES = args.piece_bytes
    torch.set_num_threads(1)
    for algorithm in args.algorithms.split(","):
        model, batches = make_task(seed=0, hidden=args.hidden)
        momentum = algorithm == "eamsgd"  # Nesterov: a smaller step (lr 0.1 diverges with elastic averaging here)
        config = hogwild.Config(workers=1, optimizer="nesterov" if momentum else "sgd", lr=0.03 if momentum else 0.1,
                                max_steps=args.steps, seed=0, progress=False, tensorboard=False, log_every=10**6)
        dist = DistConfig(algorithm=algorithm, servers=1, period=4, n_push=4, n_fetch=4, heartbeat_seconds=0.2,
                          timeout_seconds=args.timeout, wire=args.wire)
        out = train_distributed(model, loss_fn, batches, config, dist)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        result = {"rank": out.rank, "role": out.role, "exchanges": out.exchanges,
                  "updates": out.local.updates if out.local else 0, "loss": full_loss(model, batches),
                  "checksum": float(flat.double().sum()), "figures": out.exchange_stats}
        with open(os.path.join(args.out, f"{algorithm}-rank{out.rank}.json"), "w") as file:
            json.dump(result, file)


if __name__ == "__main__":
    main()
