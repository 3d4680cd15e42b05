"""Engine throughput benchmark: one interleaved run comparing Hogwild engine workers with the usual alternatives.

Usage: `flock /tmp/hogwild-heavy.lock python -m bench.bench_engine --updates 400 --rounds 3`
       `python -m bench.bench_engine --quick` (40 updates, 1 round: checks the benchmark runs, measures nothing)

Variants (same model, same synthetic batches, same number of total updates, SGD, 1 torch thread per process):
  plain      a plain PyTorch training loop in this process (torch.optim.SGD)
  engine1/2  hogwild.train with 1 / 2 CPU workers (SharedOptimizer, feed queue, counters, ...)
  mnist1/2   the pytorch/examples mnist_hogwild pattern: model.share_memory() plus torch.multiprocessing
             Processes, each with its own torch.optim.SGD, each training on its own 1/P share of the batches
They run in rounds (the order rotates each round) and each variant's median is printed, with the target ratios.

Throughput is measured the same way for every variant, inside the loss function: every batch carries its index
and the loss function stamps time.perf_counter() (a system-wide monotonic clock) into a shared tensor slot of its
own. updates/s = updates in the middle 80% of stamps / the time they span: start-up (spawning, importing torch,
mapping batches) and the last stragglers are excluded alike, so the ratios compare steady-state training speed.
Also printed: CPU milliseconds per update (each training process's CPU clock between its first and last stamp;
much less sensitive than wall time to other jobs on a shared machine) and the end-to-end wall time of each run.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import Tensor, nn

from bench import command_line


VARIANTS = ("plain", "engine1", "engine2", "mnist1", "mnist2")
BENCH_DEFAULTS = {"batch_size": 16, "lr": 0.1}  # this benchmark's defaults of run.py's options
TARGETS = (("engine2", "engine1", 1.9), ("engine1", "plain", 0.97), ("engine2", "mnist2", 1.0))


class Tagger(nn.Module):
    """A small RNN sequence tagger: embedding -> 1-layer LSTM -> linear. (B, T) word ids -> (B, T, n_tags)."""

    def __init__(self, n_words: int, n_tags: int, emb: int, hidden: int, sparse: bool = False):
        super().__init__()
        self.embedding = nn.Embedding(n_words, emb, sparse=sparse)  # sparse: updates write only the rows used
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, n_tags)

    def forward(self, words: Tensor) -> Tensor:
        hidden, _ = self.lstm(self.embedding(words))  # (B, T, H)
        return self.out(hidden)  # (B, T, n_tags)


def synthetic_batches(count: int, batch_size: int, length: int, n_words: int, n_tags: int, seed: int) -> list[dict]:
    """Random sentences whose tag is a fixed function of the current and previous word (learnable by the LSTM)."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for index in range(count):
        words = torch.randint(4, n_words, (batch_size, length), generator=generator)  # (B, T)
        tags = (words + torch.roll(words, 1, dims=1)) % n_tags  # (B, T)
        batches.append({"words": words, "tags": tags, "index": torch.tensor(index)})
    return batches


class StampedLoss:
    """loss_fn(model, batch) -> (mean token cross-entropy, tokens), stamping each batch's forward:
    wall clock, the process's CPU time, and its pid."""

    def __init__(self, stamps: Tensor, profile: str | None = None, window: tuple[int, int] = (0, 0)):
        self.stamps = stamps  # (N, 3) float64 in shared memory, one row per batch
        self.profile, self.window, self.calls = profile, window, 0  # profile: path prefix for cProfile stats

    def __call__(self, model: nn.Module, batch: dict) -> tuple[Tensor, int]:
        if self.profile:  # profile this process's training loop between its window[0]-th and window[1]-th update
            self.calls += 1
            if self.calls == self.window[0]:
                self.profiler = cProfile.Profile()
                self.profiler.enable()
            elif self.calls == self.window[1]:
                self.profiler.disable()
                self.profiler.dump_stats(f"{self.profile}-{os.getpid()}.prof")
        self.stamps[int(batch["index"])] = torch.tensor([time.perf_counter(), time.process_time(), os.getpid()],
                                                        dtype=torch.float64)
        logits = model(batch["words"])  # (B, T, n_tags)
        loss = F.cross_entropy(logits.flatten(0, 1), batch["tags"].flatten())
        return loss, batch["tags"].numel()


def steady_rate(stamps: Tensor) -> float:
    """Updates/s over the middle 80% of the stamped updates. stamps: (N, 3) wall, cpu, pid."""
    times = stamps[:, 0].sort().values  # (N,)
    assert bool((times > 0).all()), "some batches were never trained"
    first, last = int(0.1 * len(times)), int(0.9 * len(times)) - 1
    return (last - first) / float(times[last] - times[first])


def cpu_ms_per_update(stamps: Tensor) -> float:
    """CPU milliseconds a training process spends per update (insensitive to other jobs taking the cores):
    per process, CPU time between its first and last stamp over the updates in between; averaged."""
    spent, updates = 0.0, 0
    for pid in stamps[:, 2].unique():
        cpu = stamps[stamps[:, 2] == pid, 1].sort().values  # (n,) this process's CPU clock, ascending
        spent, updates = spent + float(cpu[-1] - cpu[0]), updates + len(cpu) - 1
    return 1000 * spent / max(updates, 1)


def mnist_hogwild_train(model: nn.Module, batches: Iterable[dict], loss_fn: Callable, optimizers: list,
                        clip_norm: float | None = None) -> None:
    """pytorch/examples mnist_hogwild/train.py's loop, over the parameters the process was given (shared or not),
    with its own optimizers. `batches` may be a generator that stops early or sets the rate between steps."""
    model.train()
    for batch in batches:
        model.zero_grad()
        loss = loss_fn(model, batch)
        (loss[0] if isinstance(loss, tuple) else loss).backward()
        if clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        for optimizer in optimizers:
            optimizer.step()


def mnist_process(rank: int, model: nn.Module, batches: list[dict], loss_fn: StampedLoss, lr: float) -> None:
    """One mnist_hogwild training process: 1 thread, its own torch.optim.SGD over the shared parameters."""
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    mnist_hogwild_train(model, batches, loss_fn, [torch.optim.SGD(model.parameters(), lr=lr)])


def run_mnist_hogwild(model: nn.Module, batches: list[dict], loss_fn: StampedLoss, lr: float, count: int) -> None:
    model.share_memory()
    context = mp.get_context("spawn")
    workers = [context.Process(target=mnist_process, args=(rank, model, batches[rank::count], loss_fn, lr))
               for rank in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"mnist_hogwild worker exited with {worker.exitcode}")


def run_engine(model: nn.Module, batches: list[dict], loss_fn: StampedLoss, lr: float, workers: int) -> None:
    import hogwild

    config = hogwild.Config(workers=workers, optimizer="sgd", lr=lr, epochs=1, threads_per_worker=1,
                            progress=False, tensorboard=False, log_every=10 ** 9)
    hogwild.train(model, loss_fn, batches, config)


def processes(variant: str) -> int:
    """Training processes of a variant: plain 1, engine2 2, mnist1 1, ..."""
    return 1 if variant == "plain" else int(variant[-1])


def run_variant(variant: str, args: argparse.Namespace, batches: list[dict], round_: int) -> tuple[float, float, float]:
    """Train a fresh, identically initialised model; return (steady updates/s, CPU ms/update, end-to-end s)."""
    torch.manual_seed(args.seed)
    model = Tagger(args.words, args.tags, args.emb, args.hidden, args.sparse)
    stamps = torch.zeros(len(batches), 3, dtype=torch.float64).share_memory_()
    window = (10, 10 + len(batches) // (2 * processes(variant)))
    profile = f"{args.profile}/{variant}-round{round_ + 1}" if args.profile else None
    loss_fn = StampedLoss(stamps, profile, window)
    start = time.perf_counter()
    if variant == "plain":  # the same loop in this process
        mnist_hogwild_train(model, batches, loss_fn, [torch.optim.SGD(model.parameters(), lr=args.lr)])
    elif variant.startswith("engine"):
        run_engine(model, batches, loss_fn, args.lr, processes(variant))
    else:
        run_mnist_hogwild(model, batches, loss_fn, args.lr, processes(variant))
    return steady_rate(stamps), cpu_ms_per_update(stamps), time.perf_counter() - start


def build_parser() -> argparse.ArgumentParser:
    # here, not at the top: every spawned training process imports this module, and the mnist ones need only torch
    from hogwild.tasks.run_flags import HelpFormatter, add_run_options

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] + "\n\nOf run.py's options it takes "
                                     "--batch-size, --lr and --seed (or --config FILE's); every variant steps with "
                                     "plain SGD.", formatter_class=HelpFormatter)
    add_run_options(parser, only=("batch_size", "lr", "seed"), defaults=BENCH_DEFAULTS)
    parser.add_argument("--updates", type=int, default=400, help="total updates per run (every variant)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {VARIANTS}")
    parser.add_argument("--length", type=int, default=20, help="tokens per sentence")
    parser.add_argument("--words", type=int, default=2000, help="vocabulary size")
    parser.add_argument("--tags", type=int, default=20)
    parser.add_argument("--emb", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--sparse", action="store_true", help="sparse embedding gradients (only used rows updated)")
    parser.add_argument("--quick", action="store_true", help="40 updates, 1 round: seconds (CI), measures nothing")
    parser.add_argument("--profile", metavar="DIR", help="write cProfile stats of every training process's steady "
                        "state to DIR/<variant>-round<r>-<pid>.prof and print each variant's top functions")
    return parser


def main(argv: list[str] | None = None) -> dict[str, float]:
    from hogwild.tasks.run_flags import parse_run_options

    parser = build_parser()
    _, args = parse_run_options(parser, argv)  # the run options' values are checked, then read from args
    if args.quick:
        args.updates, args.rounds = 40, 1
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or args.updates < 20 or args.rounds < 1:
        parser.error(f"--variants: unknown {unknown}" if unknown else "--updates must be >= 20, --rounds >= 1")
    torch.set_num_threads(1)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    batches = synthetic_batches(args.updates, args.batch_size, args.length, args.words, args.tags, args.seed)
    rates: dict[str, list[float]] = {v: [] for v in variants}
    walls: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        order = variants[round_ % len(variants):] + variants[:round_ % len(variants)]
        for variant in order:
            rate, cpu, wall = run_variant(variant, args, batches, round_)
            rates[variant].append(rate)
            cpus[variant].append(cpu)
            walls[variant].append(wall)
            print(f"round {round_ + 1} {variant:8s} {rate:8.1f} updates/s  {cpu:6.2f} CPU ms/update  "
                  f"{wall:6.2f} s end-to-end", flush=True)
    medians = {v: statistics.median(r) for v, r in rates.items()}
    print(f"\nmedians over {args.rounds} rounds, {args.updates} updates each, torch {torch.__version__}, "
          f"1 thread per process:")
    for variant in variants:
        print(f"  {variant:8s} {medians[variant]:8.1f} updates/s  {statistics.median(cpus[variant]):6.2f} CPU ms/update"
              f"  (end-to-end {statistics.median(walls[variant]):.2f} s)")
    cpu = {v: statistics.median(c) for v, c in cpus.items()}
    print("ratios of measured updates/s (medians):")
    for top, bottom, target in TARGETS:
        if top in medians and bottom in medians:
            ratio = medians[top] / medians[bottom]
            print(f"  {top}/{bottom} = {ratio:.3f}   target >= {target}   {'met' if ratio >= target else 'MISSED'}")
    print("CPU-time projection (each process on a core of its own; a cross-check on a busy machine, not a "
          "measurement of throughput):")
    for top, bottom, target in TARGETS:
        if top in cpu and bottom in cpu:
            ratio = processes(top) * cpu[bottom] / (cpu[top] * processes(bottom))  # (P / CPU per update) ratio
            print(f"  {top}/{bottom} ~ {ratio:.3f}   target >= {target}")
    if args.profile:
        print_profiles(args.profile, variants)
    print("command:", command_line())
    return medians


def print_profiles(directory: str, variants: list[str], top: int = 15) -> None:
    """Each variant's functions by own time, summed over its processes and rounds, per profiled update."""
    for variant in variants:
        files = sorted(Path(directory).glob(f"{variant}-round*.prof"))
        if not files:
            continue
        stats = pstats.Stats(*map(str, files))
        updates = sum(stat[1] for (file, _, name), stat in stats.stats.items()  # StampedLoss.__call__: once per update
                      if name == "__call__" and Path(file).name == Path(__file__).name) or 1
        print(f"\n{variant}: top {top} by own time, microseconds per update ({updates} profiled updates)")
        rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]
        for (file, line, name), (_, calls, own, cumulative, _) in rows:
            print(f"  {1e6 * own / updates:8.1f} own {1e6 * cumulative / updates:8.1f} cum  {calls / updates:5.1f}x "
                  f" {Path(file).name}:{line}({name})")


if __name__ == "__main__":
    main()
