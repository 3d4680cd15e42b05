"""GPU benchmark: a plain single-GPU PyTorch loop against the engine's GPU workers, for both paper models.

Usage (real numbers, one GPU):  python bench/bench_gpu.py --device cuda:0 --updates 300 --workers 1,2,3,4
Smoke run without a GPU:        python bench/bench_gpu.py --device cpu-replica --preset small --updates 12 --workers 1,2

For each task (POS tagger, attention NMT; `paper` presets, seeded random batches of the paper's shapes) and each
optimizer it prints:
  plain      model and optimizer on the device, batches copied in every step (torch.optim, fused on a GPU)
  engine N   hogwild.train with N workers sharing the one device (N from --workers), default device options
             (on a GPU: page-locked shared parameters, overlapped update thread, fused CPU optimizer step)
  engine1/plain, the throughput ratio measured in the same run
  per-phase milliseconds per update from the engine (CUDA events on a GPU): pull, compute, push, update (the CPU
  optimizer step), and the device's idle time per update (wall per update minus pull + compute + push)
  a projection to 1..4 GPUs, each with one worker: a worker's update takes max(its device time alone, its host
  work when N workers share the host's memory bandwidth) with overlap (their sum without), next to the paper's
  Table 1 (26.89 / 16.56 / 9.24 / 6.96 hours per 90k updates on 1 / 2 / 3 / 4 GPUs).
Throughput counts only the steady middle 80% of the updates (each batch's forward stamps the time), so start-up
and spawning are excluded alike from every variant.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hogwild  # noqa: E402
from bench_models import POS_VOCAB, nmt_batch, pos_batch  # noqa: E402
from hogwild.models import AttentionNMT, POSTagger, nmt_loss, nmt_preset, pos_loss, pos_preset  # noqa: E402
from hogwild.replica import move_batch, torch_device  # noqa: E402
from hogwild.worker import device_options  # noqa: E402

PAPER_HOURS = {1: 26.89, 2: 16.56, 3: 9.24, 4: 6.96}  # Table 1: hours per 90k updates on 1..4 GPUs
UPDATES_90K = 90_000


class StampedLoss:
    """loss_fn(model, batch) stamping time.perf_counter() (system-wide) into a shared slot per batch."""

    def __init__(self, loss_fn, stamps: torch.Tensor):
        self.loss_fn, self.stamps = loss_fn, stamps  # stamps: (N,) float64 in shared memory

    def __call__(self, model, batch: dict):
        self.stamps[batch["index"]] = time.perf_counter()
        return self.loss_fn(model, {k: v for k, v in batch.items() if k != "index"})


def steady_rate(stamps: torch.Tensor) -> float:
    """Updates/s over the middle 80% of the stamped updates (stamps of batches never trained are 0)."""
    times = stamps[stamps > 0].sort().values
    first, last = int(0.1 * len(times)), max(int(0.9 * len(times)) - 1, 1)
    return (last - first) / max(float(times[last] - times[first]), 1e-9)


def build(task: str, preset: str, sentences: int, seed: int, count: int):
    """(model on the CPU, loss_fn, batches with an 'index') for a task."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    if task == "pos":
        model = POSTagger(pos_preset(preset, **POS_VOCAB))
        batches = [pos_batch(sentences, 25, g) for _ in range(count)]
        loss_fn = pos_loss
    else:
        model = AttentionNMT(nmt_preset(preset))
        batches = [nmt_batch(sentences, model.config.src_words, g) for _ in range(count)]
        loss_fn = nmt_loss
    for index, batch in enumerate(batches):
        batch["index"] = index  # a Python int: moving the batch to a device leaves it on the host
    return model, loss_fn, batches


def run_plain(model, loss_fn, batches, device: torch.device, optimizer: str, lr: float) -> float:
    """The plain loop on one device; returns steady updates/s."""
    model.to(device)
    fused = {"fused": True} if device.type == "cuda" and optimizer == "adam" else {}
    opt = (torch.optim.Adam(model.parameters(), lr=lr, **fused) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=lr))
    stamps = torch.zeros(len(batches), dtype=torch.float64)
    stamped = StampedLoss(loss_fn, stamps)
    for batch in batches:
        on_device = move_batch(batch, device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss, _ = stamped(model, on_device)
        loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steady_rate(stamps)


def run_engine(model, loss_fn, batches, device: str, workers: int, optimizer: str, lr: float):
    """hogwild.train with `workers` workers on one device; returns (steady updates/s, phase ms per update)."""
    stamps = torch.zeros(len(batches), dtype=torch.float64).share_memory_()
    config = hogwild.Config(devices=[device] * workers, optimizer=optimizer, lr=lr, epochs=1, progress=False,
                            tensorboard=False, log_every=10 ** 9, threads_per_worker=1)
    result = hogwild.train(model, StampedLoss(loss_fn, stamps), batches, config)
    return steady_rate(stamps), result.phase_ms


def report(task: str, optimizer: str, plain: float, engine: dict[int, tuple[float, dict]], overlap: bool) -> None:
    print(f"\n{task} / {optimizer}: plain {plain:.2f} updates/s; engine1/plain = {engine[min(engine)][0] / plain:.3f}")
    print("  N  updates/s   pull  compute   push  update  idle   (ms per update, per worker)")
    for n, (rate, ms) in sorted(engine.items()):
        device = ms["pull"] + ms["compute"] + ms["push"]
        idle = max(n * 1000 / rate - device, 0.0)  # each worker's wall time per update minus its device work
        print(f"  {n}  {rate:9.2f} {ms['pull']:6.2f} {ms['compute']:8.2f} {ms['push']:6.2f} {ms['update']:7.2f} "
              f"{idle:5.2f}")
    alone = engine[min(engine)][1]
    device_ms = alone["pull"] + alone["compute"] + alone["push"]
    print(f"  projection, one worker per GPU ({'overlapped' if overlap else 'serial'} update):")
    print("  GPUs  ms/update  hours per 90k   paper Table 1")
    for n in range(1, 5):
        host_ms = engine.get(n, engine[max(engine)])[1]["update"]  # host work when n workers share the host
        per_update = max(device_ms, host_ms) if overlap else device_ms + host_ms
        hours = UPDATES_90K * per_update / n / 3.6e6
        print(f"  {n}     {per_update:9.2f} {hours:14.2f}   {PAPER_HOURS[n]:13.2f}"
              + ("" if n in engine else f"   (host work measured at N={max(engine)})"))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu-replica for a smoke run without a GPU")
    p.add_argument("--tasks", default="pos,nmt", help="comma-separated: pos, nmt")
    p.add_argument("--optimizers", default="sgd,adam", help="comma-separated: sgd, adam")
    p.add_argument("--preset", default="paper", choices=("paper", "small"))
    p.add_argument("--updates", type=int, default=300, help="updates per run (every variant)")
    p.add_argument("--workers", default="1,2,3,4", help="worker counts sharing the one device")
    p.add_argument("--pos-sentences", type=int, default=1, help="POS sentences per batch (paper: 1 of 25 tokens)")
    p.add_argument("--nmt-pairs", type=int, default=64, help="NMT sentence pairs per batch")
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args(argv)
    counts = sorted({int(n) for n in args.workers.split(",")})
    tasks, optimizers = args.tasks.split(","), args.optimizers.split(",")
    if not set(tasks) <= {"pos", "nmt"} or not set(optimizers) <= {"sgd", "adam"} or counts[0] < 1:
        p.error("--tasks takes pos,nmt; --optimizers sgd,adam; --workers positive counts")
    if args.updates < 10:
        p.error("--updates must be >= 10")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"bench_gpu: --device {args.device}, but torch sees no GPU (use --device cpu-replica)")
    torch.set_num_threads(1)
    plain_device = torch_device(args.device)
    options = device_options(hogwild.Config(devices=[args.device]), args.device, "sgd")
    name = torch.cuda.get_device_name(plain_device) if plain_device.type == "cuda" else "CPU"
    print(f"bench_gpu: device {args.device} ({name}), preset {args.preset}, {args.updates} updates per run, "
          f"torch {torch.__version__}")
    for task in tasks:
        sentences = args.pos_sentences if task == "pos" else args.nmt_pairs
        for optimizer in optimizers:
            model, loss_fn, batches = build(task, args.preset, sentences, 0, args.updates)
            if optimizer == optimizers[0]:
                print(f"\n{task}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
            plain = run_plain(model, loss_fn, batches, plain_device, optimizer, args.lr)
            engine = {}
            for n in counts:
                model, loss_fn, batches = build(task, args.preset, sentences, 0, args.updates)
                engine[n] = run_engine(model, loss_fn, batches, args.device, n, optimizer, args.lr)
            report(task, optimizer, plain, engine, options["overlap"])
    print("\ncommand:", shlex.join([Path(sys.executable).name] + sys.argv))


if __name__ == "__main__":
    main()
