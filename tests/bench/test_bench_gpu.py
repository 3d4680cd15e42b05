"""bench/bench_gpu.py (with corpus_batches.py, plain_loop.py, gpu_engine.py, gpu_timing.py, gpu_report.py): the
projection's arithmetic, corpus-like batches padded to length buckets, the graphed plain loop in its CPU form
(bucketing, static-buffer copy-in, warm-up undone, the eager fallback counted) against the eager loop, the plain loop
against the engine on the same model and recipe, run.py's options and --engine-option, a failed run reported as NOT
MEASURED, and the --quick run on a GPU. Its --quick run on the CPU is stage b of gpu_check.sh's CPU mode, checked with
that run (tests/bench/test_gpu_check.py)."""
import copy
import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import hogwild
from bench import bench_gpu as B
from bench import corpus_batches as C
from bench import gpu_engine
from bench import gpu_report as R
from bench import plain_loop as P
from bench.gpu_timing import StepSpans, steady_records, steady_tokens, steady_window
from hogwild.models import nmt_loss
from hogwild.worker.capture import CaptureFailed
from hogwild.worker.device_step import batch_signature, graph_shapes, shape_counts
from tests.bench.usage_errors import assert_refused
from tests.hogwild.worker.fake_cuda import FakeCuda

REPO = Path(__file__).resolve().parents[2]
PHASES = {1: {"pull": 1.0, "compute": 10.0, "push": 2.0, "update": 5.0},
          2: {"pull": 1.5, "compute": 20.0, "push": 3.0, "update": 15.0}}


def test_projection_cycle_is_the_depth_2_pipeline_of_compute_copy_out_and_host_update():
    """Overlapped: max(G, (G + C + U) / 2, U, P); the GPU's own compute bounds it once copy-out and update are short."""
    overlapped = R.projection(PHASES, overlap=True)
    # 1 GPU: max(10, (10 + 2 + 5) / 2, 5, 1) = 10 ms; 2+ GPUs: the update with 2 workers, max(10, 13.5, 15, 1) = 15 ms
    assert [(g, c) for g, c, _ in overlapped] == [(1, 10.0), (2, 15.0), (3, 15.0), (4, 15.0)]
    assert [round(h, 6) for _, _, h in overlapped] == [0.25, 0.1875, 0.125, 0.09375]  # 90k x cycle / GPUs
    assert [c for _, c, _ in R.projection(PHASES, overlap=False)] == [18.0, 28.0, 28.0, 28.0]
    assert R.cycle_ms(1.0, 4.0, 3.0, 6.0, overlap=True, host=1.0) == 7.0  # (4 + 3 + 6 + 1) / 2: the pipeline's coupling


def test_steady_window_counts_the_middle_80_percent_of_the_stamped_updates_and_their_tokens():
    stamps = torch.zeros(120, dtype=torch.float64)
    stamps[:100] = 5.0 + 0.1 * torch.arange(100, dtype=torch.float64)  # 10 updates/s; 20 slots never trained
    rate, start, end = steady_window(stamps)  # steps 10..89 timed, from step 10's start to step 90's
    assert rate == pytest.approx(10.0) and start == pytest.approx(6.0) and end == pytest.approx(14.0)
    tokens = [i * i for i in range(120)]  # batch i trains i^2 tokens; the window holds batches 10..89 in index order
    assert steady_tokens(stamps, tokens) == pytest.approx(sum(i * i for i in range(10, 90)) / 8.0)
    shuffled = stamps.clone()
    shuffled[:100] = stamps[:100].flip(0)  # the same times, batch 99 first: the window holds batches 89..10
    assert steady_tokens(shuffled, tokens) == pytest.approx(sum(i * i for i in range(10, 90)) / 8.0)
    assert steady_window(5.0 + 0.1 * torch.arange(750, dtype=torch.float64))[0] * 60.0 == pytest.approx(600)


def tick(time, updates, examples_per_s, phases):
    return {"time": time, "updates": updates, "examples_per_s": examples_per_s,
            "phase_ms": dict(zip(("pull", "compute", "push", "update"), phases))}


def test_an_engine_window_spans_the_tick_records_from_10_to_90_percent_of_the_updates():
    """Ticks every 0.1 s of a 100-update run: start-up (1 update in 0.3 s), 10 updates a tick, then the join; the
    window runs from the last record at or below 10 updates to the first at or above 90, and its phases are those
    of the updates landed inside it, weighted by their count."""
    records = [tick(0.3, 1, 10, (9, 9, 9, 9)), tick(0.4, 10, 900, (1, 2, 3, 4)), tick(0.5, 30, 2000, (1, 2, 3, 4)),
               tick(0.6, 60, 3000, (2, 4, 6, 8)), tick(0.7, 95, 3500, (1, 2, 3, 4)), tick(2.0, 100, 1, (9, 9, 9, 9))]
    window = steady_records(records, 100)
    assert (window.start, window.end, window.updates) == (0.4, 0.7, 85)
    assert window.rate == pytest.approx(85 / 0.3) and window.tokens_rate == pytest.approx(850 / 0.3)
    assert window.phase_ms == pytest.approx({"pull": 1 + 30 / 85, "compute": 2 + 60 / 85, "push": 3 + 90 / 85,
                                             "update": 4 + 120 / 85})
    assert steady_records(records[:2], 100) is None  # no record reaches 90%: not a window
    assert steady_records([tick(0.3, 100, 1, (1, 1, 1, 1))], 100) is None


def test_steady_window_refuses_a_run_with_fewer_than_two_stamps():
    with pytest.raises(ValueError, match="^1 of 5 batches were stamped: no steady window to time$"):
        steady_window(torch.tensor([0.0, 3.0, 0.0, 0.0, 0.0], dtype=torch.float64))


def test_step_spans_stamp_each_step_start_on_the_host_clock():
    spans = StepSpans(torch.device("cpu"))
    before = time.perf_counter()
    for _ in range(3):
        spans.start()
        time.sleep(0.01)
        spans.end()
    starts, seconds = spans.starts(), spans.seconds()
    assert starts.dtype == torch.float64 and len(starts) == 3 and bool((starts.diff() >= 0.01).all())
    assert before <= float(starts[0]) and all(0.01 <= s < 1 for s in seconds)


def test_batches_are_bucketed_by_length_within_pools_and_all_drawn_from_the_corpus():
    rng = np.random.default_rng(0)
    lengths = np.array([[3, 4], [9, 8], [5, 5], [1, 2], [7, 6]])
    plan = C.bucketed(lengths, batch_size=2, count=3, rng=rng)
    assert [len(b) for b in plan] == [2, 2, 2]
    rows = np.concatenate(plan)
    assert {tuple(r) for r in rows} <= {tuple(r) for r in lengths}
    in_order = np.concatenate(sorted(plan, key=lambda b: tuple(b[0])))  # one pool: the batches are its sorted cuts
    assert [tuple(r) for r in in_order] == sorted(tuple(r) for r in rows)


def test_batches_hold_exactly_the_drawn_lengths_and_their_host_token_count():
    g = torch.Generator().manual_seed(0)
    nmt = C.make_batch("nmt", np.array([[3, 2], [5, 4]]), 50, g)
    assert nmt["src"].shape == (2, 6) and nmt["tgt"].shape == (2, 6)
    assert nmt["src_mask"].sum(1).tolist() == [4, 6] and nmt["tgt_mask"].sum(1).tolist() == [4, 6]  # + eos, + bos
    assert nmt["src"][0, 3] == 3 and nmt["tgt"][1, 0] == 2 and nmt["tgt"][1, 5] == 3
    assert nmt["tokens"] == 8 == int(nmt["tgt_mask"][:, 1:].sum())  # words + eos
    pos = C.make_batch("pos", np.array([2, 4]), 0, g)
    assert (pos["tags"] == -100).tolist() == [[False, False, True, True], [False] * 4]
    assert ((pos["words"] == 0) == (pos["tags"] == -100)).all() and pos["lengths"].tolist() == [2, 4]
    assert pos["tokens"] == 6


def test_padding_to_bucket_edges_keeps_the_loss_and_a_length_past_the_last_edge():
    g = torch.Generator().manual_seed(0)
    batch = C.make_batch("nmt", np.array([[3, 2], [5, 4]]), 50, g)  # S = 6, T = 6
    padded = C.pad_to_edges(batch, (4, 8))
    assert padded["src"].shape == (2, 8) and padded["tgt_mask"].shape == (2, 8) and padded["tokens"] == 8
    assert torch.equal(padded["src"][:, :6], batch["src"]) and not padded["src_mask"][:, 6:].any()
    assert int(padded["src"][:, 6:].abs().sum()) == 0
    assert C.pad_to_edges(batch, (2, 4))["src"].shape == (2, 6)  # past the last edge: its own length
    pos = C.pad_to_edges(C.make_batch("pos", np.array([2, 3]), 0, g), (4,))
    assert pos["words"].shape == (2, 4) and pos["prefixes"].shape == (2, 4, C.AFFIX)
    assert pos["tags"][:, 3].tolist() == [-100, -100] and pos["lengths"].tolist() == [2, 3]


def test_fallback_lengths_have_the_corpora_means():
    rng = np.random.default_rng(0)
    pos, nmt = C.fallback_lengths("pos", 50_000, rng), C.fallback_lengths("nmt", 50_000, rng)
    assert 19.5 < pos.mean() < 21.0 and pos.min() >= 1
    assert 24.5 < nmt[:, 0].mean() < 26.0 and 22.0 < nmt[:, 1].mean() < 24.0 and nmt.max() <= C.NMT_MAX_LEN


@pytest.mark.corpora
def test_lengths_come_from_brown_when_it_is_there(corpus):
    lengths, source = C.corpus_lengths("pos", corpus("brown").parent)
    assert len(lengths) > 50_000 and 19.0 < lengths.mean() < 22.0 and "brown" in source


def tiny_nmt_case(lengths, edges=(4, 8)):
    """A tiny NMT model and padded batches of these (source, target) lengths, one pair each."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = hogwild.models.AttentionNMT(hogwild.models.NMTConfig(src_words=30, tgt_words=30, embedding=6, hidden=7,
                                                                 attention=5, readout=4))
    return model, [C.pad_to_edges(C.make_batch("nmt", np.array([pair]), 30, g), edges) for pair in lengths]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_graphed_loop_in_its_cpu_form_makes_the_eager_loops_updates(optimizer):
    """Two bucket shapes and one past the last edge: prepare() makes static buffers for the two, warms up on them
    and undoes it; each step copies its batch into its shape's buffers (or runs eagerly, counted); the parameters
    end as the eager loop's on the same batches."""
    model, batches = tiny_nmt_case([(2, 1), (3, 2), (5, 4), (2, 2), (9, 3), (4, 5)])  # (9, 3): S = 10 > 8
    loss = functools.partial(nmt_loss, padded=True)
    runs = {}
    for graphed in (False, True):
        net = copy.deepcopy(model)
        step = P.PlainStep(net, loss, P.plain_optimizers(net, optimizer, 0.1, torch.device("cpu")), clip_norm=1.0)
        if graphed:
            graphs = P.BucketGraphs(step, torch.device("cpu"), (4, 8))
            assert graphs.prepare(batches) == 2  # (S, T) = (4, 4) and (8, 8)
            assert all(torch.equal(a, b) for a, b in zip(net.parameters(), model.parameters()))  # warm-up undone
            assert all(float(v.abs().sum()) == 0 for s in step.optimizers[0].state.values() for v in s.values())
            for batch in batches:
                graphs.step(batch)
            last = graphs.static[P.batch_shape(batches[-1])]
            assert torch.equal(last["tgt"], batches[-1]["tgt"]) and graphs.eager == 1
            assert {shape[0][1] for shape in graphs.static} == {(1, 4), (1, 8)}  # src (B, S) of each bucket
        else:
            P.eager_steps(step, batches)
        assert int(step.nonfinite) == 0
        runs[graphed] = net
    for (name, a), b in zip(runs[False].named_parameters(), runs[True].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    assert any(not torch.equal(a, b) for a, b in zip(runs[True].parameters(), model.parameters()))


def test_a_graphed_plain_loop_whose_capture_fails_leaves_the_process_able_to_go_on(monkeypatch):
    """The graphed loop captures through hogwild/worker/capture.py. On a model of CUDA's capture bookkeeping
    (tests/hogwild/worker/fake_cuda.py), a capture that meets an op CUDA graphs refuse (in the step's loss) raises
    CaptureFailed with no capture left under way, the default stream current and the pool given back: the bench's
    empty_cache after that run, and the next run's captures, work."""
    cuda = FakeCuda.install(monkeypatch)
    model, batches = tiny_nmt_case([(2, 1), (3, 2), (5, 4)])
    refuse = [True]

    def loss(net, batch):
        if refuse[0] and torch.cuda.is_current_stream_capturing():
            cuda.refuse()
        return nmt_loss(net, batch, padded=True)

    def graphed_loop():
        step = P.PlainStep(model, loss, P.plain_optimizers(model, "sgd", 0.1, torch.device("cpu")), clip_norm=1.0)
        graphs = P.BucketGraphs(step, torch.device("cpu"), (4, 8))
        graphs.capture, graphs.pool = True, torch.cuda.MemPool()  # capture on the model of CUDA
        return graphs

    with pytest.raises(CaptureFailed, match="operation not permitted when stream is capturing"):
        graphed_loop().prepare(batches)
    assert cuda.healthy(), cuda.log
    B.release(torch.device("cuda"))  # empty_cache: no capture under way
    refuse[0] = False
    assert graphed_loop().prepare(batches) == 2 and not cuda.underway and cuda.current is cuda.default


def test_plain_optimizers_split_sparse_tables_and_the_graphed_loop_makes_them_dense():
    options, args = B.parse(["--quick"])
    pos = B.task_options("pos", options, args)
    model, _ = B.build("pos", pos, 1, Path("/nonexistent"), 0)
    sgd, sparse = P.plain_optimizers(model, "sgd", 0.03, torch.device("cpu"))
    assert [p.shape for p in sparse.param_groups[0]["params"]] == [model.word_embedding.weight.shape,
                                                                    model.char_embedding.weight.shape]
    assert type(P.plain_optimizers(model, "adam", 1e-3, torch.device("cpu"))[1]) is torch.optim.SparseAdam
    assert len(P.plain_optimizers(P.dense_embeddings(copy.deepcopy(model)), "sgd", 0.03, torch.device("cpu"))) == 1
    with pytest.raises(ValueError, match="the plain loop takes sgd or adam, got 'adagrad'"):
        P.plain_optimizers(model, "adagrad", 0.1, torch.device("cpu"))


def test_run_py_options_recipes_and_quick_defaults():
    options, args = B.parse(["--quick"])
    nmt, pos = B.task_options("nmt", options, args), B.task_options("pos", options, args)
    assert (nmt.preset, nmt.vocab_size, nmt.batch_size, args.updates, args.counts) == ("small", 500, 4, 20, [1, 2])
    assert (nmt.optimizer, nmt.lr, nmt.clip_norm) == ("sgd", 0.1, 1.0)  # the paper recipe, clipping at 1
    assert (pos.optimizer, pos.lr, pos.clip_norm, pos.batch_size) == ("sgd", 0.03, None, 1)
    config = B.engine_config(pos, "cpu-replica", 2)
    assert config.devices == ["cpu-replica"] * 2 and config.sparse_pull and config.clip_norm is None
    assert config.log_every == 1 and not config.tf32  # a record every tick: the timing
    options, args = B.parse(["--batch-size", "8", "--lr", "0.5"])
    full = B.task_options("nmt", options, args)
    assert (full.preset, full.vocab_size, full.batch_size, full.lr, args.updates, args.repeats) == (
        "paper", 15000, 8, 0.5, 750, 2)
    help_text = " ".join(B.build_parser().format_help().split())
    assert "(default: paper here; run.py: small)" in help_text
    assert "--updates UPDATES updates per run, every variant; its middle 80% is timed (default: 750) --repeats" \
        in help_text
    assert B.engine_config(full, "cuda:0", 1, "engine-compiled").hang_timeout is None
    assert B.engine_config(full, "cuda:0", 1, "engine-bf16").amp == "bf16"


def test_engine_options_are_config_fields_converted_by_type_or_refused_by_name(capsys):
    assert B.engine_overrides(["update_threads=4", "overlap_update=false", "hang_timeout=none", "pull_every=8",
                               "compile=default", "eval_budget=0.5"]) == {
        "update_threads": 4, "overlap_update": False, "hang_timeout": None, "pull_every": 8, "compile": "default",
        "eval_budget": 0.5}
    for bad, why in [("speed=3", "'speed' is not a hogwild.Config field"), ("epochs=2", "'epochs' is set by the bench"),
                     ("lr=0.5", "'lr' belongs to the recipe"), ("pull_every=two", "pull_every=two: expected int"),
                     ("tf32=true", "'tf32' belongs to the recipe every side shares"),
                     ("overlap_update=maybe", "overlap_update=maybe: expected true or false"),
                     ("tf32", "'tf32': expected FIELD=VALUE")]:
        with pytest.raises(ValueError, match=re.escape(why)):
            B.engine_overrides([bad])
    # a value Config refuses, named by the flag before anything runs
    assert_refused(B.main, ["--quick", "--device", "cpu", "--engine-option", "pull_every=0"],
                   "--engine-option: Config.", capsys)


def test_the_plain_loops_and_the_engine_rows_share_one_precision_setting(monkeypatch, capsys):
    """TF32 matrix products off on every row by default and on every row with --tf32: the plain loops' losses run
    under the process's setting, the engine's workers get the same Config.tf32, and the header says which."""
    seen, real = [], B.task_loss

    def recording(task, padded):
        loss = real(task, padded)

        def recorded(model, batch):
            seen.append(torch.backends.cuda.matmul.allow_tf32)
            return loss(model, batch)
        return recorded

    monkeypatch.setattr(B, "task_loss", recording)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for flags, on in (([], False), (["--tf32"], True)):
            seen.clear()
            B.main(["--device", "cpu", "--quick", "--tasks", "pos", "--variants", "plain,plain-graphed",
                    "--worker-counts", "1", *flags])
            assert set(seen) == {on}
            assert f"TF32 matrix products {'on' if on else 'off'} on every row (--tf32)" in capsys.readouterr().out
            options, args = B.parse(["--quick", *flags])
            assert B.engine_config(B.task_options("pos", options, args), "cuda:0", 1).tf32 is on
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_runs_rotate_and_shared_workers_repeat_less():
    _, args = B.parse(["--quick", "--variants", "plain,engine", "--worker-counts", "1,2", "--repeats", "2"])
    assert B.schedule(args) == [[("plain", 1), ("engine", 1), ("engine", 2)], [("engine", 1), ("plain", 1)]]


def test_a_failed_or_stopped_run_is_named_and_the_bench_goes_on(monkeypatch, capsys, tmp_path):
    """A SIGINT during the workers' start-up stops the run with no update: run_engine says so (IncompleteRun, with
    the stop reason) instead of timing it. In bench_task any failure ends its own run only, printed as NOT MEASURED
    with its reason (and kept in --json): a capture that fails in the graphed plain loop, even when giving the device
    memory back fails after it (as empty_cache does while a failed capture is still counted as under way), and a
    worker that really fails (graphs on with the packed loss, which reads the device on the host: no graph can
    replay it); the eager plain loop after them is measured."""
    options, args = B.parse(["--device", "cpu", "--quick", "--tasks", "pos", "--variants", "plain,engine",
                             "--worker-counts", "1"])
    pos = B.task_options("pos", options, args)
    model, batches = B.build("pos", pos, 20, Path("/nonexistent"), 0)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(B.IncompleteRun, match=r"^the run ended after 0 of 20 updates \(stop reason "
                                                  r"'signal SIGINT', per worker \[0\], "):
            B.run_engine("pos", "engine", model, B.task_loss("pos", False), batches.exact,
                         B.engine_config(pos, "cpu-replica", 1), False)
    finally:
        timer.cancel()

    def capture_fails(self, batches):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")

    releases = iter([RuntimeError("captures_underway.empty() INTERNAL ASSERT FAILED")])

    def release(device):
        error = next(releases, None)
        if error is not None:
            raise error

    monkeypatch.setattr(P.BucketGraphs, "prepare", capture_fails)
    monkeypatch.setattr(B, "release", release)
    B.main(["--device", "cpu", "--quick", "--tasks", "pos", "--variants", "plain-graphed,engine,plain",
            "--engine-loss", "packed", "--engine-option", "graphs=on", "--engine-option", "graph_limit=1",
            "--worker-counts", "1", "--repeats", "1",
            "--json", str(tmp_path / "runs.json")])
    lines = capsys.readouterr().out.splitlines()
    assert ("    [1/1] plain-graphed x1: NOT MEASURED: RuntimeError: CUDA error: operation not permitted when stream "
            "is capturing (then releasing the device failed: RuntimeError: captures_underway.empty() INTERNAL ASSERT "
            "FAILED)") in lines
    assert any(line.startswith("    [1/1] engine x1: NOT MEASURED: WorkerFailed: training stopped: worker 0 ")
               for line in lines), lines
    assert any(line.startswith("    [1/1] plain x1: ") and "updates/s" in line for line in lines), lines
    saved = json.loads((tmp_path / "runs.json").read_text())
    assert [(r["variant"], r["workers"]) for r in saved["runs"]] == [("plain", 1)]
    assert [m["variant"] for m in saved["not_measured"]] == ["plain-graphed", "engine"]


def test_an_engine_row_says_which_step_its_workers_ran_and_is_timed_by_their_update_counters():
    """One 'cpu-replica' worker with graphs on (the graphed step's CPU form) on 120 bucketed POS batches: the row names
    its step and graphs, and is timed over the window its update counters span (at least the middle 80%), its phases
    and GPU share from that window."""
    options, args = B.parse(["--device", "cpu", "--quick"])
    pos = B.task_options("pos", options, args)
    model, batches = B.build("pos", pos, 120, Path("/nonexistent"), 0)
    config = B.engine_config(pos, "cpu-replica", 1, overrides={"graphs": "on"})
    m = B.run_engine("pos", "engine", model, B.task_loss("pos", True), batches.bucketed, config, False)
    shapes = {signature for signature, _ in graph_shapes(shape_counts(batches.bucketed), None, 1)}  # used 4+ times
    eager = sum(batch_signature(b) not in shapes for b in batches.bucketed)
    assert (m.step, m.graphs, m.eager_steps, m.updates, m.timing) == ("graphed", len(shapes), eager, 120, "counters")
    assert m.eager_share == pytest.approx(eager / 120)
    assert 96 <= m.window <= 120 and m.tokens_rate > m.rate > 0 and m.label == "engine"
    assert set(m.phase_ms) == {"pull", "compute", "push", "update"} and 0 < m.gpu <= 100


def test_an_engine_run_names_the_workers_that_fell_back_from_the_graphs_their_batches_call_for():
    """Four batches of one shape and one of another: with graphs asked for, each worker captures the shape used 4
    times (a run's rarer shapes run eagerly); a worker whose capture failed captured none."""
    batches = [{"x": torch.zeros(2, 3)}] * 4 + [{"x": torch.zeros(2, 5)}]
    four, result = hogwild.Config(devices=["cuda:0"] * 4), type("Result", (), {"graphs": 4})()
    assert gpu_engine.engine_step(four, result, batches) == "graphed"
    result.graphs = 3
    assert gpu_engine.engine_step(four, result, batches) == "1 of 4 fell back"
    result.graphs = 0
    assert gpu_engine.engine_step(four, result, batches) == "fell back to eager"
    assert gpu_engine.engine_step(four, result, batches[3:]) == "no shape graphed"
    assert gpu_engine.engine_step(hogwild.Config(devices=["cuda:0"], graphs="off"), result, batches) == "eager"
    limited = hogwild.Config(devices=["cuda:0"] * 4, graph_limit=2)  # both shapes, each worker
    assert gpu_engine.engine_step(limited, type("Result", (), {"graphs": 6})(), batches) == "1 of 4 fell back"


def test_the_report_names_a_fallen_back_row_and_keeps_it_out_of_the_engines_figures(capsys, tmp_path):
    def engine(rate, step, phases, eager=0):
        return R.Measurement("nmt", "engine", 1, rate, 10 * rate, "fp32", 0, 50.0, "nvml", dict(zip(
            ("pull", "compute", "push", "update"), phases)), graphs=16 if step == "graphed" else 0, eager_steps=eager,
            updates=750, window=600, timing="counters", step=step)
    runs = [R.Measurement("nmt", "plain-graphed", 1, 40.0, 400.0, "fp32", 0, 90.0, "nvml", graphs=20, eager_steps=0,
                          prepare_s=3.0, updates=750, window=600),
            engine(30.0, "graphed", (1, 20, 2, 5), eager=75),
            engine(15.0, "fell back to eager", (1, 60, 2, 5), eager=750)]
    runs[0].eager_share, runs[1].eager_share, runs[2].eager_share = 0.0, 0.1, 1.0
    R.save(str(tmp_path / "runs.json"), "cmd", "GPU", runs, [])
    saved = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert [(r["label"], r["step"], r["eager_share"]) for r in saved] == [
        ("plain-graphed", None, 0.0), ("engine", "graphed", 0.1),
        ("engine (fell back to eager)", "fell back to eager", 1.0)]
    R.report(runs, overlap=True, repeats=1)
    out = capsys.readouterr().out
    rows = {line[2:36].strip(): line[36:].split() for line in out.splitlines()[1:4]}
    assert list(rows) == ["plain-graphed", "engine", "engine (fell back to eager)"]
    assert rows["engine"][8:9] + rows["engine"][13:15] == ["0.750", "16/75", "10.0"]  # x graphed; graphs/eager, %
    assert rows["engine (fell back to eager)"][8:10] + rows["engine (fell back to eager)"][13:15] == [
        "0.375", "600", "0/750", "100.0"]  # a worker whose capture failed ran every step eagerly
    assert "one engine worker / graphed plain loop (fp32): engine 0.750, engine (fell back to eager) 0.375" in out
    assert "  1        20.00      50.00" in out  # the projection: max(20, (20 + 2 + 5) / 2, 5, 1) ms, the graphed row


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pos", "nmt"])
def test_plain_loop_and_one_engine_worker_make_the_same_updates(task):
    """Same model, recipe (POS: sparse embedding gradients; NMT: clipping at 1) and optimizer on both sides: the
    plain loop and one serial 'cpu-replica' engine worker end with the same parameters."""
    options, args = B.parse(["--quick", "--batch-size", "2"])
    options = B.task_options(task, options, args)
    model, batches = B.build(task, options, 3, Path("/nonexistent"), 0)
    plain = copy.deepcopy(model)
    step = P.PlainStep(plain, B.task_loss(task, False), P.plain_optimizers(plain, options.optimizer, options.lr,
                                                                            torch.device("cpu")), options.clip_norm)
    P.eager_steps(step, batches.exact)
    config = B.engine_config(options, "cpu-replica", 1)
    config = hogwild.Config(**{**config.to_dict(), "overlap_update": False, "shuffle": False})
    engine = copy.deepcopy(model)
    result = hogwild.train(engine, B.task_loss(task, False), batches.exact, config)
    assert int(step.nonfinite) == 0 and result.updates == 3 and result.skipped_updates == 0
    for (name, a), b in zip(plain.named_parameters(), engine.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert any(not torch.equal(a, b) for a, b in zip(plain.parameters(), model.parameters()))


def test_bench_gpu_refuses_bad_flags_and_cuda_without_a_gpu(capsys):
    assert_refused(B.main, ["--worker-counts", "0"], "--worker-counts", capsys)
    assert_refused(B.main, ["--variants", "plain,fast"], "--variants", capsys)
    assert_refused(B.main, ["--updates", "5"], "--updates", capsys)
    assert_refused(B.main, ["--optimizer", "adagrad"], "--optimizer: the plain loops take sgd or adam", capsys)
    assert_refused(B.main, ["--engine-option", "speed=3"], "--engine-option: 'speed' is not a hogwild.Config", capsys)
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="torch sees no GPU"):
            B.main(["--device", "cuda:0", "--quick"])


def quick_run(tmp_path, *flags):
    done = subprocess.run([sys.executable, "-m", "bench.bench_gpu", "--quick", "--json", str(tmp_path / "runs.json"),
                           *flags], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads((tmp_path / "runs.json").read_text())


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_quick_run_on_a_gpu_with_every_variant(tmp_path):
    out, saved = quick_run(tmp_path, "--device", "cuda:0", "--variants", ",".join(B.VARIANTS))
    assert "cycle = max(compute, (compute + push + update) / 2, update, pull): the depth-2 pipeline" in out
    assert {r["variant"] for r in saved["runs"]} == set(B.VARIANTS) and all(r["rate"] > 0 for r in saved["runs"])
