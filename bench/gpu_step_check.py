"""The graphed worker step (Config.graphs, hogwild/worker/step_graph.py) on one GPU, with the real models: does a
captured step give the eager step's gradients, and what does a step cost with graphs off and on, packed and padded,
in fp32 and under bf16 autocast? A prepared check for a GPU session; bench/bench_gpu.py owns the engine's headline
rates.

Equality: one step of each model (paper presets, run.py's recipe: NMT clipped to 1.0, POS with sparse embedding
tables) through StepGraphs (captured, replayed on another batch of the same bucket) against the eager padded loss
and backward on that batch, clipped as the eager worker clips; every gradient within --rtol of the largest. Timing:
the median of --timed-steps steps per configuration, interleaved; an eager step is zero_grad + forward + backward (packed
at the batch's own length, padded at its bucket edge); a graphed step is copy-in + replay + the gradient copy-out to
the host, waited for (what a worker's update thread waits for). Batches: seeded ids with mixed lengths
(bench/bench_padded.py's), NMT 64 pairs, POS one sentence.

On the CPU (`--device cpu --quick`) nothing is captured (it says so): the graphed rows run the same step without a
graph, small presets, one step: it checks the script, and measures nothing.

Usage:
    python -m bench.gpu_step_check --device cuda:0            (about a minute on an H100)
    python -m bench.gpu_step_check --device cpu --quick
"""
from __future__ import annotations

import argparse
import copy
import functools
import statistics
import sys
import time

import torch

import hogwild
from hogwild.models import AttentionNMT, POSTagger, nmt_loss, nmt_preset, pos_loss, pos_preset
from hogwild.models.host_fields import to_device
from hogwild.share.run_state import PhaseClock
from hogwild.tasks.defaults import POS_BUCKET_EDGES, graph_bucket_edges
from hogwild.tasks.run_flags import parse_run_options
from hogwild.worker.gradients import gradient_norm
from hogwild.worker.step_graph import StepGraphs

from bench import command_line
from bench.bench_models import POS_VOCAB, step_parser, time_update
from bench.bench_padded import bucketed_nmt, bucketed_pos, nmt_batch, pos_batch

CLIP = {"nmt": 1.0, "pos": None}  # run.py's recipes (tasks/defaults.py)


def models(preset: str, vocab: int) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"nmt": AttentionNMT(nmt_preset(preset, src_words=vocab, tgt_words=vocab)),
            "pos": POSTagger(pos_preset(preset, **POS_VOCAB, sparse_embeddings=True))}


def task_batches(pairs: int, vocab: int) -> dict[str, tuple[dict, dict, dict]]:
    """Per task: (a batch at its own length, the same padded to its bucket, another batch of that bucket)."""
    g = torch.Generator().manual_seed(0)
    found = {}
    nmt_edges = graph_bucket_edges("nmt", 50)
    while len(found) < 2:  # two batches per task whose bucket shapes agree
        for task, make, bucket, edges in (("nmt", lambda: nmt_batch(pairs, vocab, g), bucketed_nmt, nmt_edges),
                                          ("pos", lambda: pos_batch(1, g), bucketed_pos, POS_BUCKET_EDGES)):
            if task in found:
                continue
            a, b = make(), make()
            a_bucket, b_bucket = bucket(a, edges), bucket(b, edges)
            if all(a_bucket[k].shape == b_bucket[k].shape for k in a_bucket if torch.is_tensor(a_bucket[k])):
                found[task] = (a, a_bucket, b_bucket)
    return found


def graphed(model, task: str, device: torch.device, amp: str | None, batches: list[dict]) -> StepGraphs:
    config = hogwild.Config(devices=["cuda:0" if device.type == "cuda" else "cpu-replica"], clip_norm=CLIP[task],
                            amp=amp, graphs="on", progress=False, tensorboard=False)
    loss_fn = functools.partial(nmt_loss if task == "nmt" else pos_loss, padded=True)
    step = StepGraphs(model, loss_fn, device, config)
    step.prepare(batches)
    step.pull.prefetch(0)
    step.pull.make_current()
    return step


def graphed_step(step: StepGraphs, batch: dict, device: torch.device) -> tuple[bool, float, list]:
    clock = PhaseClock(device)
    clock.mark()
    clock.mark()
    finite, loss, grads, _ = step.run(batch, 0, clock).resolve()
    return finite, loss, grads


def equality(task: str, model, batches: tuple[dict, dict, dict], device: torch.device, rtol: float) -> bool:
    """One captured step (replayed on the second batch of the bucket) against the eager padded step."""
    _, first, second = batches
    step = graphed(model, task, device, None, [first])
    finite, _, grads = graphed_step(step, second, device)
    replica = copy.deepcopy(model).to(device)
    loss, _ = functools.partial(nmt_loss if task == "nmt" else pos_loss, padded=True)(replica, to_device(second,
                                                                                                       device))
    loss.backward()
    params = [p for p in replica.parameters() if p.requires_grad]
    gradient_norm(params, CLIP[task])
    expected = [p.grad.to_dense().cpu() for p in params]
    worst = max(float((g.to_dense() - e).abs().max()) for g, e in zip(grads, expected))
    scale = max(float(e.abs().max()) for e in expected)
    ok = finite and worst <= rtol * scale
    print(f"equal {task}: max |graphed - eager| {worst:.3e}, largest gradient {scale:.3e}: {'OK' if ok else 'FAIL'}")
    return ok


def build_parser() -> argparse.ArgumentParser:
    p = step_parser(__doc__)
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (no capture)")
    p.add_argument("--timed-steps", type=int, default=20, help="timed steps per configuration")
    p.add_argument("--rtol", type=float, default=1e-4, help="equality: tolerance relative to the largest gradient")
    p.add_argument("--quick", action="store_true", help="small presets, 1 step, 4 NMT pairs of 500 words (CI)")
    return p


def main(argv: list[str] | None = None) -> int:
    _, args = parse_run_options(build_parser(), argv)  # the run options' values are checked, then read from args
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_step_check: --device cuda asked for, but torch sees no GPU")
    preset, vocab, pairs = ("small", 500, 4) if args.quick else ("paper", args.vocab_size, 64)
    steps = 1 if args.quick else args.timed_steps
    print(f"# gpu_step_check: {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    print("# command: " + command_line())
    if device.type != "cuda":
        print("# capture skipped: no GPU; the graphed rows run the same step without a graph (this measures nothing)")
    batches, nets = task_batches(pairs, vocab), models(preset, vocab)
    ok = all([equality(task, nets[task], batches[task], device, args.rtol) for task in ("nmt", "pos")])
    cases = {}  # name -> zero-argument step
    for task in ("nmt", "pos"):
        own, bucket, other = (to_device(b, device) for b in batches[task])
        loss_fn = nmt_loss if task == "nmt" else pos_loss
        replica = copy.deepcopy(nets[task]).to(device)
        for amp in (None, "bf16"):
            precision = amp or "fp32"
            cases[f"{task} {precision} eager packed"] = functools.partial(time_update, replica, loss_fn, own, device,
                                                                          amp)
            cases[f"{task} {precision} eager padded"] = functools.partial(
                time_update, replica, functools.partial(loss_fn, padded=True), bucket, device, amp)
            step = graphed(nets[task], task, device, amp, [batches[task][1]])
            cases[f"{task} {precision} graphed padded"] = functools.partial(
                lambda s, b: _timed(lambda: graphed_step(s, b, device), device), step, batches[task][2])
    for run in cases.values():  # warm-up
        run()
    times = {name: [] for name in cases}
    for _ in range(steps):
        for name, run in cases.items():
            times[name].append(run())
    print(f"{'configuration':28s} {'ms/step':>9s} {'x eager packed':>15s}")
    for name in cases:
        unit = statistics.median(times[name.rsplit(" ", 2)[0] + " eager packed"])
        median = statistics.median(times[name])
        print(f"{name:28s} {median * 1e3:9.2f} {median / unit:15.2f}")
    return 0 if ok else 1


def _timed(run, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
