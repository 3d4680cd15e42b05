"""The graphed worker step (Config.graphs, hogwild/worker/step_graph.py) on one GPU, with the real models, answering
first what a first GPU run must know, then what a step costs:
  1. equality: per task, one captured step (replayed on another batch of its bucket) against the eager padded loss
     and backward on that batch, clipped as the eager worker clips; every gradient within --rtol of the largest;
  2. dropout: per task with dropout 0.2, the same graph replayed under two batch seeds (seed_batch, as the worker
     seeds each step) against eager steps under the same seeds: each pair equal, and the two replays different (a
     replay draws fresh masks, from the seed);
  3. pool: in this process, the worker's own fallback (worker.make_step, graphs 'auto') on the NMT step with a loss
     that reads the device on the host only while a graph is being captured (a sync CUDA refuses during capture:
     the capture fails as a real one does, after the warm-up succeeded): the eager step, a warning, and
     torch.cuda.memory_reserved() before the step was made and after it is gone; a pool the failed capture kept
     (torch 2.13's capture_end leaves its use to nobody: hogwild/worker/capture.py) stays reserved;
  4. fallback: in a child process started first (its runs overlap the checks above), hogwild.train with one worker on
     the device, Config.graphs 'auto' and the same kind of loss (POS): the worker must warn, run the eager step and
     train every batch; with graphs 'on' the same run must fail with a message naming graphs='off'.
The POS steps pull their embedding rows by the batch's ids (Config.sparse_pull, as run.py sets it for POS).
Then `verdict: OK` or `verdict: FAIL (...)` at once, and (unless --timed-steps 0; --timing-only: this alone) the
median of --timed-steps steps per configuration, interleaved: an eager step is zero_grad + forward + backward (packed
at the batch's own length, padded at its bucket edge); a graphed step is the rows' pull (POS) + copy-in + replay + the
gradient copy-out to the host, waited for (what a worker's update thread waits for); fp32 and under bf16 autocast.
Batches: seeded ids with mixed lengths (bench/bench_padded.py's), NMT 64 pairs, POS one sentence. The exit status is
1 when the verdict is FAIL.

On the CPU (`--device cpu --quick`) nothing is captured (it says so): the graphed step runs the same step without a
graph, small presets; the pool check makes the worker's step on 'cpu-replica' (nothing to fail, nothing to measure) and
the fallback child trains there, where nothing can fail to capture (they say so). It checks the script, and measures
nothing.

Usage:
    python -m bench.gpu_step_check --device cuda:0 --timed-steps 0   (the checks: gpu_check.sh's stage a, 90 s)
    python -m bench.gpu_step_check --device cpu --quick
"""
from __future__ import annotations

import copy
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from types import SimpleNamespace

import torch

import hogwild
from hogwild.data.buckets import POS_EDGES, training_buckets
from hogwild.models import AttentionNMT, POSTagger, nmt_loss, nmt_preset, pos_loss, pos_preset
from hogwild.models.host_fields import to_device
from hogwild.share.run_state import PhaseClock, SharedCounters
from hogwild.tasks.run_flags import parse_run_options
from hogwild.worker.gradients import gradient_norm, seed_batch
from hogwild.worker.step_graph import StepGraphs
from hogwild.worker.worker import make_step

from bench import command_line
from bench.bench_models import POS_VOCAB, step_parser, time_update
from bench.bench_padded import bucketed_nmt, bucketed_pos, nmt_batch, pos_batch

CLIP = {"nmt": 1.0, "pos": None}  # run.py's recipes (tasks/defaults.py)
LOSS = {"nmt": nmt_loss, "pos": pos_loss}
DROPOUT = 0.2
SEEDS = (11, 12)  # the dropout pair's two batch seeds
FALLBACK_BATCHES = 6  # the fallback child's run: POS sentences of one bucket
FALLBACK_SECONDS = 75  # the child's two runs, from this script's checks' start: stage a of gpu_check.sh has 90 s
KEPT_MIB = 256  # memory still reserved after the forced fallback past which a pool was kept (the NMT step's pool
#                 holds its forward's activations, hundreds of MiB; cuBLAS keeps a few MiB per new stream)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def models(preset: str, vocab: int, dropout: float = 0.0) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"nmt": AttentionNMT(nmt_preset(preset, src_words=vocab, tgt_words=vocab, dropout=dropout)),
            "pos": POSTagger(pos_preset(preset, **POS_VOCAB, sparse_embeddings=True, dropout=dropout))}


def task_batches(pairs: int, vocab: int) -> dict[str, tuple[dict, dict, dict]]:
    """Per task: (a batch at its own length, the same padded to its bucket, another batch of that bucket)."""
    g = torch.Generator().manual_seed(0)
    found = {}
    nmt_edges = training_buckets("nmt", True, max_len=50).edges
    while len(found) < 2:  # two batches per task whose bucket shapes agree
        for task, make, bucket, edges in (("nmt", lambda: nmt_batch(pairs, vocab, g), bucketed_nmt, nmt_edges),
                                          ("pos", lambda: pos_batch(1, g), bucketed_pos, POS_EDGES)):
            if task in found:
                continue
            a, b = make(), make()
            a_bucket, b_bucket = bucket(a, edges), bucket(b, edges)
            if all(a_bucket[k].shape == b_bucket[k].shape for k in a_bucket if torch.is_tensor(a_bucket[k])):
                found[task] = (a, a_bucket, b_bucket)
    return found


def padded(task: str):
    return functools.partial(LOSS[task], padded=True)


def graphed(model, task: str, device: torch.device, amp: str | None, batches: list[dict]) -> StepGraphs:
    """The worker's graphed step for `model`, captured for every shape of the batches, its parameters pulled (POS:
    its embedding rows by each step's batch, Config.sparse_pull)."""
    config = hogwild.Config(devices=["cuda:0" if device.type == "cuda" else "cpu-replica"], clip_norm=CLIP[task],
                            amp=amp, graphs="on", graph_limit=len(batches), sparse_pull=task == "pos",
                            progress=False, tensorboard=False)
    step = StepGraphs(model, padded(task), device, config)
    step.prepare(batches)  # graph_limit: a graph for each shape, however often it is used
    step.pull.prefetch(0)
    step.pull.make_current()
    return step


def graphed_grads(step: StepGraphs, batch: dict, device: torch.device, seed: int = 0) -> tuple[bool, list]:
    """One step of `step` on `batch` under batch seed `seed`, the batch's embedding rows pulled first (POS, sparse_pull;
    the rest was pulled by `graphed`), waited for: (finite, host gradients, copied out of the outbox's slot, which the
    next step overwrites)."""
    seed_batch(device, seed)
    clock = PhaseClock(device)
    clock.mark()
    step.pull.prefetch(None, batch)
    step.pull.make_current()
    clock.mark()
    result = step.run(batch, 0, clock)
    if result.eager:
        raise RuntimeError("the graphed step ran eagerly: no graph for this batch's shape")
    finite, _, grads, _ = result.resolve()
    return finite, [g.to_dense().clone() for g in grads]


def eager_grads(task: str, model, batch: dict, device: torch.device, seed: int = 0) -> list:
    """The eager worker's gradients of the padded loss on `batch` under batch seed `seed`, clipped, on the host."""
    replica = copy.deepcopy(model).to(device)
    seed_batch(device, seed)
    loss, _ = padded(task)(replica, to_device(batch, device))
    loss.backward()
    params = [p for p in replica.parameters() if p.requires_grad]
    gradient_norm(params, CLIP[task])
    return [p.grad.to_dense().cpu() for p in params]


def largest_gap(a: list, b: list) -> tuple[float, float]:
    """(max |a - b| over every gradient, the largest |b|)."""
    return (max(float((x - y).abs().max()) for x, y in zip(a, b)), max(float(y.abs().max()) for y in b))


def equality(task: str, model, batches: tuple[dict, dict, dict], device: torch.device, rtol: float) -> bool:
    """One captured step (replayed on the second batch of the bucket) against the eager padded step."""
    _, first, second = batches
    step = graphed(model, task, device, None, [first])
    finite, grads = graphed_grads(step, second, device)
    worst, scale = largest_gap(grads, eager_grads(task, model, second, device))
    ok = finite and worst <= rtol * scale
    rows = f"; rows pulled by the batch's ids: {len(step.pull.tables)} tables" if step.pull.tables else ""
    print(f"equal {task}: max |graphed - eager| {worst:.3e}, largest gradient {scale:.3e}{rows}: "
          f"{'OK' if ok else 'FAIL'}")
    return ok


def dropout_pair(task: str, model, batches: tuple[dict, dict, dict], device: torch.device, rtol: float) -> bool:
    """With dropout: one graph replayed under two seeds, each against the eager step under the same seed; the two
    replays must differ (fresh masks per replay)."""
    _, first, second = batches
    step = graphed(model, task, device, None, [first])
    replays = [graphed_grads(step, second, device, seed) for seed in SEEDS]
    gaps = [largest_gap(grads, eager_grads(task, model, second, device, seed)) for seed, (_, grads) in
            zip(SEEDS, replays)]
    apart, scale = largest_gap(replays[0][1], replays[1][1])
    equal = all(finite for finite, _ in replays) and all(worst <= rtol * s for worst, s in gaps)
    fresh = apart > 100 * rtol * scale
    ok = equal and fresh
    print(f"dropout {task}: max |graphed - eager| under seeds {SEEDS[0]}, {SEEDS[1]}: "
          f"{gaps[0][0]:.3e}, {gaps[1][0]:.3e}; the two replays apart by {apart:.3e} (largest gradient {scale:.3e}): "
          f"{'OK' if ok else 'FAIL'}{'' if fresh else ' (the same masks twice)'}")
    return ok


class CaptureFailingLoss:
    """A padded loss that reads the device on the host while a CUDA graph is being captured, and only then: CUDA
    refuses the sync and invalidates the capture, as a real capture failure does, after the probe and the warm-up
    (not captured) succeeded. Module level: the worker unpickles it."""

    def __init__(self, task: str):
        self.loss_fn = padded(task)

    def __call__(self, model, batch: dict):
        loss, count = self.loss_fn(model, batch)
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            float(loss)  # the host read that fails the capture
        return loss, count


def fallback_run(device: str, graphs: str, preset: str) -> dict:
    """hogwild.train of FALLBACK_BATCHES POS sentences of one bucket, one worker on `device`, a loss whose capture
    fails: what the run did (in the child process that `fallback` starts)."""
    model = models(preset, 500)["pos"]
    g = torch.Generator().manual_seed(1)
    batches = [bucketed_pos(pos_batch(1, g), (64,)) for _ in range(FALLBACK_BATCHES)]
    config = hogwild.Config(devices=[device], graphs=graphs, epochs=1, progress=False, tensorboard=False,
                            lr=0.03, hang_timeout=60)
    try:
        result = hogwild.train(model, CaptureFailingLoss("pos"), batches, config)
    except hogwild.WorkerFailed as error:
        return {"graphs": graphs, "failed": str(error).strip()[-1500:]}  # the end names the worker's own error
    return {"graphs": graphs, "updates": result.updates, "captured": result.graphs, "eager_steps": result.eager_steps}


def forced_fallback(device: torch.device, model, batch: dict) -> bool:
    """The worker's fallback in this process: worker.make_step with graphs 'auto' on the NMT step (`model`, one
    `batch`) whose capture fails (CaptureFailingLoss): the eager step and a warning, and torch.cuda.memory_reserved()
    before the step was made and after it is gone (more than KEPT_MIB still reserved: a pool the failed capture
    kept). On the CPU nothing can fail: the step is made on 'cpu-replica' with graphs 'on', and nothing is measured."""
    cuda = device.type == "cuda"
    config = hogwild.Config(devices=["cuda:0" if cuda else "cpu-replica"], graphs="auto" if cuda else "on",
                            graph_limit=1, clip_norm=CLIP["nmt"], progress=False, tensorboard=False)
    spec = SimpleNamespace(model=model, loss_fn=CaptureFailingLoss("nmt"), device=config.devices[0], worker=0,
                           counters=SharedCounters(1), config=config)
    before = _reserved(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = make_step(spec, [batch])
    graphed, warned = step.graphed, any("runs the eager step" in str(w.message) for w in caught)
    del step
    gc.collect()
    after = _reserved(device)
    if not cuda:
        ok = graphed
        print(f"pool: not exercised on the CPU (nothing is captured); the step was made with its static inputs: "
              f"{'OK' if ok else 'FAIL'}")
        return ok
    kept = (after - before) / 2 ** 20
    ok = not graphed and warned and kept <= KEPT_MIB
    print(f"pool: torch.cuda.memory_reserved() {before / 2 ** 20:.0f} MiB before the forced fallback, "
          f"{after / 2 ** 20:.0f} MiB after it (its eager step gone too): {kept:.0f} MiB kept"
          f"{' (a pool the failed capture kept?)' if kept > KEPT_MIB else ''}; eager step {not graphed}, warned "
          f"{warned}: {'OK' if ok else 'FAIL'}")
    return ok


def _reserved(device: torch.device) -> int:
    """Bytes the caching allocator holds on `device`, once its cache is emptied (0 on the CPU)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device)


def start_fallback(device: torch.device, preset: str) -> subprocess.Popen:
    """The fallback child, started first (its runs overlap the other checks): graphs 'auto' then 'on' on a GPU;
    on the CPU nothing is captured, so nothing can fail: it runs 'auto' only, to show the run trains."""
    where, modes = ("cuda:0", ("auto", "on")) if device.type == "cuda" else ("cpu-replica", ("auto",))
    code = (f"import json; from bench.gpu_step_check import fallback_run; "
            f"[print('fallback:', json.dumps(fallback_run({where!r}, g, {preset!r})), flush=True) for g in {modes!r}]")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def fallback(device: torch.device, child: subprocess.Popen, deadline: float) -> bool:
    """The child's verdict, waited for until `deadline` (time.monotonic()): auto must warn and train every batch
    eagerly; on must fail naming graphs='off'."""
    try:
        stdout, stderr = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, stderr = child.communicate()
        print(f"fallback: the child did not finish within {FALLBACK_SECONDS} s of the checks' start: FAIL")
        print(f"fallback child's stderr (end):\n{stderr[-3000:]}")
        return False
    runs = {r["graphs"]: r for r in (json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines()
                                     if line.startswith("fallback: "))}
    auto, on = runs.get("auto", {}), runs.get("on", {})
    if device.type != "cuda":
        ok = child.returncode == 0 and auto.get("updates") == FALLBACK_BATCHES
        print(f"fallback: not exercised on the CPU (nothing is captured); the child trained {auto.get('updates')} of "
              f"{FALLBACK_BATCHES} batches: {'OK' if ok else 'FAIL'}")
    else:
        warned = "eager step" in stderr
        eager = auto.get("updates") == FALLBACK_BATCHES and auto.get("captured") == 0 and warned
        named = "graphs='off'" in on.get("failed", "") or "--graphs off" in on.get("failed", "")
        ok = child.returncode == 0 and eager and named
        print(f"fallback: graphs auto {json.dumps(auto)}, warned of the eager step: {warned}; graphs on "
              f"{json.dumps(on)}: {'OK' if ok else 'FAIL'}")
    if not ok:
        print(f"fallback child exit {child.returncode}; its stderr (end):\n{stderr[-3000:]}")
    return ok


def build_parser():
    p = step_parser(__doc__)
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (no capture)")
    p.add_argument("--timed-steps", type=int, default=20, help="timed steps per configuration (0: no timing)")
    p.add_argument("--rtol", type=float, default=1e-4, help="equality: tolerance relative to the largest gradient")
    p.add_argument("--timing-only", action="store_true", help="the timing alone, without the checks and the verdict")
    p.add_argument("--quick", action="store_true", help="small presets, 1 timed step, 4 NMT pairs of 500 words (CI)")
    return p


def timing(nets: dict, batches: dict, device: torch.device, steps: int) -> None:
    """The median step time of each configuration, interleaved, with its ratio to the eager packed step."""
    cases = {}  # name -> zero-argument step returning its seconds
    for task in ("nmt", "pos"):
        own, bucket, other = (to_device(b, device) for b in batches[task])
        replica = copy.deepcopy(nets[task]).to(device)
        for amp in (None, "bf16"):
            precision = amp or "fp32"
            cases[f"{task} {precision} eager packed"] = functools.partial(time_update, replica, LOSS[task], own,
                                                                          device, amp)
            cases[f"{task} {precision} eager padded"] = functools.partial(time_update, replica, padded(task), bucket,
                                                                          device, amp)
            step = graphed(nets[task], task, device, amp, [batches[task][1]])
            cases[f"{task} {precision} graphed padded"] = functools.partial(
                lambda s, b: _timed(lambda: graphed_grads(s, b, device), device), step, batches[task][2])
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


def main(argv: list[str] | None = None) -> int:
    _, args = parse_run_options(build_parser(), argv)  # the run options' values are checked, then read from args
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_step_check: --device cuda asked for, but torch sees no GPU")
    preset, vocab, pairs = ("small", 500, 4) if args.quick else ("paper", args.vocab_size, 64)
    print(f"# gpu_step_check: {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    print("# command: " + command_line(), flush=True)
    if device.type != "cuda":
        torch.set_num_threads(1)  # it measures nothing here; 2+ spinning threads on a busy machine take 30x longer
        print("# capture skipped: no GPU; the graphed step runs the same step without a graph (this measures nothing)")
    if args.timing_only and args.timed_steps < 1:
        raise SystemExit("gpu_step_check: --timing-only needs --timed-steps 1 or more")
    batches, nets, noisy = task_batches(pairs, vocab), models(preset, vocab), models(preset, vocab, DROPOUT)
    if args.timing_only:
        timing(nets, batches, device, 1 if args.quick else args.timed_steps)
        return 0
    began = time.monotonic()
    child = start_fallback(device, preset)  # first: its two runs overlap the checks in this process
    checks = {f"equal {t}": functools.partial(equality, t, nets[t], batches[t], device, args.rtol) for t in LOSS}
    checks.update({f"dropout {t}": functools.partial(dropout_pair, t, noisy[t], batches[t], device, args.rtol)
                   for t in LOSS})
    checks["pool"] = functools.partial(forced_fallback, device, nets["nmt"], batches["nmt"][1])
    checks["fallback"] = functools.partial(fallback, device, child, began + FALLBACK_SECONDS)
    failed = []
    for name, check in checks.items():  # each runs whatever the others gave; an error is that check's failure
        try:
            ok = check()
        except Exception as error:  # noqa: BLE001 - said in the verdict, the next checks still run
            print(f"{name}: {type(error).__name__}: {str(error).strip()[:2000]}: FAIL")
            ok = False
        sys.stdout.flush()
        if not ok:
            failed.append(name)
    if child.poll() is None:  # a check raised before the child was waited for
        child.kill()
    print(f"verdict: {'FAIL (' + ', '.join(failed) + ')' if failed else 'OK'}", flush=True)
    if args.timed_steps > 0:
        timing(nets, batches, device, 1 if args.quick else args.timed_steps)
    return 1 if failed else 0


def _timed(run, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
