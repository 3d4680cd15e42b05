"""How fast a GPU worker's CPU update is against its thread count (Config.update_threads, run.py --update-threads).

Usage: `python -m bench.bench_update_threads --threads 1,2,4,8 --steps 20 --rounds 3`
       `python -m bench.bench_update_threads --quick` (small model, 3 steps, 1 round: checks it runs, measures nothing)

A GPU worker applies each update on the CPU, in its background update thread, to the shared parameters: the shared
optimizer's step over the model's every tensor (hogwild/worker/updates.py). This times exactly that path - an `Updater`
with background=True and `threads` torch threads, fed host gradients - for the paper NMT model's parameter shapes
(`--preset paper`, 15k-word vocabularies: 28.7M parameters) with plain SGD (the paper's recipe) and Adam with the
fused CPU kernel (what GPU workers use). Thread counts run in rounds whose order rotates; the median ms per update
of each is printed, with its speed-up over 1 thread and the automatic count for this machine.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench import command_line
from hogwild import Config
from hogwild.models import AttentionNMT, nmt_preset
from hogwild.share.resources import usable_cores
from hogwild.share.run_state import SharedCounters
from hogwild.shared_optim import SharedOptimizer
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options
from hogwild.worker.updates import HostGradients, Update, Updater, update_threads

BENCH_DEFAULTS = {"preset": "paper", "steps": 20}  # this benchmark's defaults of run.py's options
OPTIMIZERS = (("sgd", False), ("adam", True))  # (name, fused): the paper's SGD; Adam as GPU workers step it


def update_ms(params: list[torch.Tensor], grads: list[torch.Tensor], name: str, fused: bool, threads: int,
              steps: int) -> float:
    """Median milliseconds of one update (submit, release, landed) in a background thread with `threads` threads."""
    optimizer = SharedOptimizer(params, name)
    optimizer.attach(params, fused=fused)
    updater = Updater(optimizer, params, lambda step, epoch: 1e-6, SharedCounters(1).worker_view(0),
                      background=True, threads=threads)
    times = []
    try:
        for step in range(steps + 1):  # the first one starts the thread: not timed
            start = time.perf_counter()
            updater.submit(Update(HostGradients(grads), step, 0))
            updater.release()
            updater.wait()
            times.append(time.perf_counter() - start)
    finally:
        updater.shutdown()
    return 1000 * statistics.median(times[1:])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] + "\n\nOf run.py's options it takes "
                                     "--preset (the NMT model's sizes) and --steps (the timed updates of each "
                                     "measurement), or --config FILE's.", formatter_class=HelpFormatter)
    add_run_options(parser, only=("preset", "steps"), defaults=BENCH_DEFAULTS)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts to compare")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, thread order rotating; medians reported")
    parser.add_argument("--quick", action="store_true",
                        help="small preset, 3 steps, 1 round: seconds, measures nothing")
    return parser


def main(argv: list[str] | None = None) -> dict[tuple[str, int], float]:
    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # the run options' values are checked, then read from args
    if args.quick:
        args.preset, args.steps, args.rounds = "small", 3, 1
    try:
        counts = [int(count) for count in args.threads.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or not args.steps or args.steps < 1 or args.rounds < 1:
        parser.error("--threads must list integers >= 1 (e.g. 1,2,4); --steps and --rounds must be >= 1")
    torch.manual_seed(0)
    model = AttentionNMT(nmt_preset(args.preset))
    params = [param.detach().share_memory_() for param in model.parameters()]
    grads = [torch.randn_like(param) for param in params]
    total = sum(param.numel() for param in params)
    measured: dict[tuple[str, int], list[float]] = {(name, count): [] for name, _ in OPTIMIZERS for count in counts}
    for round_ in range(args.rounds):
        order = counts[round_ % len(counts):] + counts[:round_ % len(counts)]
        for name, fused in OPTIMIZERS:
            for count in order:
                ms = update_ms(params, grads, name, fused, count, args.steps)
                measured[name, count].append(ms)
                print(f"round {round_ + 1} {name:5s} {count:3d} threads {ms:8.2f} ms/update", flush=True)
    medians = {key: statistics.median(values) for key, values in measured.items()}
    cores = usable_cores()
    automatic = update_threads(Config(devices=["cuda:0"]), "cuda:0", cores)
    print(f"\nNMT {args.preset} preset ({total / 1e6:.1f}M parameters, {len(params)} tensors), torch "
          f"{torch.__version__}, {cores} usable cores (automatic update threads for one GPU worker: {automatic}); "
          f"medians over {args.rounds} rounds of {args.steps} updates:")
    for name, fused in OPTIMIZERS:
        base = medians[name, counts[0]]
        for count in counts:
            print(f"  {name:5s}{' (fused)' if fused else '        '} {count:3d} threads {medians[name, count]:8.2f} "
                  f"ms/update   x{base / medians[name, count]:.2f} against {counts[0]} thread(s)")
    print("command:", command_line())
    return medians


if __name__ == "__main__":
    main()
