"""The POS device worker's copy-out and CPU update, measured on the CPU side: what one step's copy to the host moves and
costs when it sends only the rows of the sentence's ids (the copy-out now) against the tables' whole capacity (before),
and what its update costs.

Usage: `python -m bench.gpu_copy_out --preset paper --steps 8 --rounds 3`
       `python -m bench.gpu_copy_out --quick` (small model, 3 steps, 1 round: checks it runs, measures nothing)

A GPU worker's step gathers its gradients into one flat outbox on the device and copies it to a page-locked host slot
(hogwild/worker/copy_out.py); its update thread then applies it to the shared parameters. This runs the real step of
the POS tagger (`--preset paper`: 33.1M dense parameters and a 10,000 x 800 word table with sparse gradients, as
run.py's POS job builds it; Config.sparse_pull on, as run.py sets it) on the CPU, uncaptured, on sentences with Brown's
lengths under $HOGWILD_CORPORA (else a gamma fit), padded to the engine's length buckets, with Brown's longest sentence
(180 words) among the run's batches, as a whole run's batches hold it: it sizes the tables' row capacity (the most
integer elements of a batch). For each step it then times, interleaved, the copy of the outbox to a host slot (memcpy
on the CPU, where a GPU makes a DMA at its host-link bandwidth) sending each table's capacity or only the step's rows,
and the update (read the slot, set the shared gradients, the shared SGD step: Updater's path). Printed: per step the
bytes each copy moves and the medians in ms with their ratio, the update's median, and what a copy at --bandwidth GB/s
would take (an estimate: a GPU's copy is not measured here). docs/benchmarks.md turns them into the worker's period.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

import numpy as np
import torch

from bench import command_line
from bench.bench_models import POS_VOCAB
from bench.corpus_batches import LENGTH_EDGES, POS_MAX_LEN, bucketed, corpus_lengths, fallback_lengths, make_batch, \
    pad_to_edges
from hogwild import Config
from hogwild.data.corpora import corpora_dir
from hogwild.models import POSTagger, pos_loss, pos_preset
from hogwild.share.run_state import PhaseClock, SharedCounters
from hogwild.shared_optim import SharedOptimizer
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options
from hogwild.worker.device_step import DeviceStep
from hogwild.worker.gradients import NonFiniteStreak
from hogwild.worker.updates import SkipRule, Update, Updater

BENCH_DEFAULTS = {"preset": "paper", "steps": 8}  # this benchmark's defaults of run.py's options
MODES = ("capacity", "rows")  # what the copy sends of each sparse table: its whole capacity (before), the step's rows


def pos_batches(steps: int, quick: bool, seed: int = 0) -> tuple[list[dict], str]:
    """`steps` one-sentence batches with corpus-like lengths padded to the length buckets, then one of the corpus's
    longest sentence (not timed: it sizes the capacity); and where the lengths came from."""
    rng, g = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    found = None if quick else corpus_lengths("pos", corpora_dir())
    lengths, source = found or (fallback_lengths("pos", 10_000, rng), "a gamma fit")
    plan = bucketed(lengths, 1, steps, rng) + [np.array([POS_MAX_LEN])]
    return [pad_to_edges(make_batch("pos", lens, 0, g), LENGTH_EDGES["pos"]) for lens in plan], source


def prepared_step(preset: str, batches: list[dict]) -> tuple[DeviceStep, Updater]:
    """The worker's device step on the CPU (uncaptured) over a shared POS tagger; a serial Updater with plain SGD."""
    torch.manual_seed(0)
    model = POSTagger(pos_preset(preset, **POS_VOCAB, sparse_embeddings=True)).share_memory()
    config = Config(devices=["cpu-replica"], optimizer="sgd", lr=1e-6, sparse_pull=True, progress=False,
                    tensorboard=False)
    step = DeviceStep(model, functools.partial(pos_loss, padded=True), torch.device("cpu"), config, graphs=False)
    step.prepare(batches)
    optimizer = SharedOptimizer(step.shared, "sgd")
    optimizer.attach(step.shared)
    view = SharedCounters(1).worker_view(0)
    updater = Updater(optimizer, step.shared, lambda version, epoch: 1e-6, view, background=False,
                      skip=SkipRule(view, None, NonFiniteStreak(0, None)))
    return step, updater


def measure(step: DeviceStep, updater: Updater, batch: dict, rounds: int) -> dict[str, list[float]]:
    """One real step on `batch`, then its copy to the host `rounds` times per mode (order rotating) and its update:
    seconds, and the elements each copy moves."""
    clock = PhaseClock(torch.device("cpu"))
    clock.mark()
    step.pull.prefetch(0, batch)
    step.pull.make_current()
    clock.mark()
    result = step.run(batch, 0, clock)
    outbox = step.outbox
    counts = {"capacity": [entry.capacity for entry in outbox.sparse], "rows": [len(ids) for ids in result.ids]}
    out: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_ in range(rounds):
        for mode in MODES[round_ % 2:] + MODES[:round_ % 2]:
            start = time.perf_counter()
            outbox.send(0, counts[mode])
            out[mode].append(time.perf_counter() - start)
    start = time.perf_counter()
    updater.submit(Update(result, 0, 0))
    out["update"] = [time.perf_counter() - start]
    out.update({f"{mode} elements": [sum(p.stop - p.start for p in outbox.segments(counts[mode]))] for mode in MODES})
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] + "\n\nOf run.py's options it takes "
                                     "--preset (the tagger's sizes) and --steps (the sentences timed), or --config "
                                     "FILE's.", formatter_class=HelpFormatter)
    add_run_options(parser, only=("preset", "steps"), defaults=BENCH_DEFAULTS)
    parser.add_argument("--rounds", type=int, default=3, help="copies per mode and step, order rotating; medians")
    parser.add_argument("--bandwidth", type=float, default=52.0,
                        help="GB/s of a GPU's copy to the host, for the estimate (docs/benchmarks.md: an H100's "
                             "pull moved 115 MB in 2.2 ms)")
    parser.add_argument("--quick", action="store_true", help="small preset, 3 steps, 1 round, no corpus: seconds, "
                                                             "measures nothing")
    return parser


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # the run options' values are checked, then read from args
    if args.quick:
        args.preset, args.steps, args.rounds = "small", 3, 1
    if not args.steps or args.steps < 1 or args.rounds < 1 or args.bandwidth <= 0:
        parser.error("--steps and --rounds must be >= 1, --bandwidth > 0")
    batches, source = pos_batches(args.steps, args.quick)
    step, updater = prepared_step(args.preset, batches)
    runs = [measure(step, updater, batch, args.rounds) for batch in batches[:-1]]
    medians = {key: statistics.median(v for run in runs for v in run[key]) for key in runs[0]}
    width = step.outbox.outbox.element_size()
    params = sum(p.numel() for p in step.shared)
    print(f"POS {args.preset} preset ({params / 1e6:.1f}M parameters; sparse tables "
          + ", ".join(f"{tuple(step.params[e.index].shape)} of capacity {e.capacity}" for e in step.outbox.sparse)
          + f"), lengths from {source}, torch {torch.__version__}, {torch.get_num_threads()} threads; medians over "
            f"{args.steps} steps x {args.rounds} rounds:")
    for mode in MODES:
        megabytes = medians[f"{mode} elements"] * width / 1e6
        print(f"  copy-out, {mode:8s} {megabytes:8.2f} MB/step {1000 * medians[mode]:8.2f} ms on the CPU  "
              f"{megabytes / args.bandwidth:6.2f} ms at {args.bandwidth:g} GB/s (estimate)")
    print(f"  copy-out rows / capacity: bytes x{medians['rows elements'] / medians['capacity elements']:.3f}, "
          f"CPU time x{medians['rows'] / medians['capacity']:.3f}")
    print(f"  update (read the slot, shared SGD step) {1000 * medians['update']:8.2f} ms on the CPU")
    print("command:", command_line())
    return medians


if __name__ == "__main__":
    main()
