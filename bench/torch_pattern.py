"""The pytorch/examples mnist_hogwild pattern as a bench_convergence variant (torch2): model.share_memory() and
torch.multiprocessing Processes, each with its own torch.optim optimizer and its own share of the batches.

Usage: `curve = run_torch(job, options, args, "torch2")` with bench_convergence's parsed arguments.
"""
from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.multiprocessing as mp
from hogwild.tasks.job_builders import build_job
from hogwild.tasks.task_job import TaskJob
from hogwild.tasks.options import RunOptions

from bench import interleave
from bench.curves import Curve, reaches, scores, snapshot, stop_at


def torch_worker(rank: int, model: torch.nn.Module, options: RunOptions, counts: torch.Tensor,
                 stop: torch.Tensor) -> None:
    """pytorch/examples mnist_hogwild/train.py's worker with the recipe's optimizer, schedule and clipping. Like
    the example's workers, each loads its data itself (the same seeded batches as the parent's job, from the
    on-disk cache): handing 51k Brown batches of small tensors to a process took one file descriptor each with
    torch's default sharing and ran out of them, and one memory map each with 'file_system' sharing, past the
    kernel's map limit ("unable to mmap ... Cannot allocate memory", 2026-11-25)."""
    torch.set_num_threads(1)
    job = build_job(options)
    loss_fn, batches, metric = job.loss_fn, job.batches, job.metric
    del job  # its model is not the shared one
    torch.manual_seed(options.seed + rank)
    config = options.engine_config(["cpu"] * options.workers, metric)
    schedule = config.schedule()
    sparse = [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse]
    dense = [p for p in model.parameters() if all(p is not q for q in sparse)]
    if config.optimizer == "adam":  # torch.optim.Adam refuses sparse gradients: SparseAdam (lazy) takes those rows
        optimizers = [torch.optim.Adam(dense, lr=config.lr, **config.optimizer_args)] + (
            [torch.optim.SparseAdam(sparse, lr=config.lr)] if sparse else [])
    else:
        optimizers = [torch.optim.SGD(model.parameters(), lr=config.lr, **config.optimizer_args)]
    shard = batches[rank::options.workers]
    model.train()
    for epoch in range(10 ** 9):
        for index in torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch * 100 + rank)).tolist():
            if stop[0]:
                return
            for group in (g for optimizer in optimizers for g in optimizer.param_groups):
                group["lr"] = schedule(int(counts[rank]) * options.workers, epoch)  # global step: own count x P
            model.zero_grad()
            loss = loss_fn(model, shard[index])
            (loss[0] if isinstance(loss, tuple) else loss).backward()
            if config.clip_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            for optimizer in optimizers:
                optimizer.step()
            counts[rank] += 1


def run_torch(job: TaskJob, options: RunOptions, args: argparse.Namespace, variant: str) -> Curve:
    if options.optimizer not in ("sgd", "adam"):
        raise SystemExit(f"--variants torch2 supports the sgd and adam recipes, not {options.optimizer!r}")
    curve, model = Curve(variant, args.metric), job.model.share_memory()
    private = copy.deepcopy(model)
    counts = torch.zeros(options.workers, dtype=torch.long).share_memory_()  # (P,) updates per process
    stop = torch.zeros(1, dtype=torch.long).share_memory_()
    context = mp.get_context("spawn")
    start = curve.started = time.perf_counter()
    workers = [context.Process(target=torch_worker, args=(rank, model, options, counts, stop))
               for rank in range(options.workers)]
    for worker in workers:
        worker.start()
    next_eval = start + args.eval_seconds if not args.eval_updates else None
    next_updates = args.eval_updates
    goal = stop_at(args)
    try:
        while True:
            time.sleep(0.05)
            now, updates = time.perf_counter(), int(counts.sum())
            if any(w.exitcode not in (None, 0) for w in workers):
                raise RuntimeError(f"a torch2 worker failed: exit codes {[w.exitcode for w in workers]}")
            due = updates >= next_updates if next_updates else now >= next_eval
            if due or now - start >= args.minutes[variant] * 60 or interleave.stop_requested:
                point = {"seconds": round(now - start, 2), "updates": updates}
                if args.scoring == "offline":
                    point["state"] = snapshot(model)
                else:
                    private.load_state_dict(model.state_dict())
                    private.eval()
                    point.update(scores(job, private, args.metric))
                curve.points.append(point)
                if "metric" in point and reaches(point["metric"], goal, args.metric):
                    curve.stop_reason = "target"
                elif now - start >= args.minutes[variant] * 60 or interleave.stop_requested:
                    curve.stop_reason = "time_limit"
                if curve.stop_reason:
                    break
                next_eval = time.perf_counter() + args.eval_seconds if not args.eval_updates else None
                next_updates = updates + args.eval_updates if args.eval_updates else None
    finally:
        stop[0] = 1
        for worker in workers:
            worker.join()
    return curve
