"""bench/bench_gpu.py (with corpus_batches.py and gpu_timing.py) and bench/gpu_check.sh: the projection's arithmetic,
corpus-like batches, the plain loop against the engine on the same model and recipe, the --quick run on the CPU as
the docstring shows it, and gpu_check.sh's budget (a step past its limit is cut and reported, never left hanging)."""
import copy
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
from bench.gpu_timing import steady_window
from tests.bench.usage_errors import assert_refused

REPO = Path(__file__).resolve().parents[2]
PHASES = {1: {"pull": 1.0, "compute": 10.0, "push": 2.0, "update": 5.0},
          2: {"pull": 1.5, "compute": 20.0, "push": 3.0, "update": 15.0}}


def test_projection_cycle_is_pull_plus_the_longer_of_device_work_and_host_update():
    overlapped = B.projection(PHASES, overlap=True)
    # 1 GPU: 1 + max(10 + 2, 5) = 13 ms; 2+ GPUs: the update with 2 workers on the host, 1 + max(12, 15) = 16 ms
    assert [(g, c) for g, c, _ in overlapped] == [(1, 13.0), (2, 16.0), (3, 16.0), (4, 16.0)]
    assert [round(h, 6) for _, _, h in overlapped] == [0.325, 0.2, round(0.4 / 3, 6), 0.1]  # 90k x cycle / GPUs
    assert [c for _, c, _ in B.projection(PHASES, overlap=False)] == [18.0, 28.0, 28.0, 28.0]


def test_steady_window_counts_the_middle_80_percent_of_the_stamped_updates():
    stamps = torch.zeros(120, dtype=torch.float64)
    stamps[:100] = 5.0 + 0.1 * torch.arange(100, dtype=torch.float64)  # 10 updates/s; 20 slots never trained
    rate, start, end = steady_window(stamps)
    assert rate == pytest.approx(10.0) and start == pytest.approx(6.0) and end == pytest.approx(13.9)


def test_batches_are_bucketed_by_length_within_pools_and_all_drawn_from_the_corpus():
    rng = np.random.default_rng(0)
    lengths = np.array([[3, 4], [9, 8], [5, 5], [1, 2], [7, 6]])
    plan = C.bucketed(lengths, batch_size=2, count=3, rng=rng)
    assert [len(b) for b in plan] == [2, 2, 2]
    rows = np.concatenate(plan)
    assert {tuple(r) for r in rows} <= {tuple(r) for r in lengths}
    in_order = np.concatenate(sorted(plan, key=lambda b: tuple(b[0])))  # one pool: the batches are its sorted cuts
    assert [tuple(r) for r in in_order] == sorted(tuple(r) for r in rows)


def test_batches_hold_exactly_the_drawn_lengths_for_the_models_losses():
    g = torch.Generator().manual_seed(0)
    nmt = C.make_batch("nmt", np.array([[3, 2], [5, 4]]), 50, g)
    assert nmt["src"].shape == (2, 6) and nmt["tgt"].shape == (2, 6)
    assert nmt["src_mask"].sum(1).tolist() == [4, 6] and nmt["tgt_mask"].sum(1).tolist() == [4, 6]  # + eos, + bos
    assert nmt["src"][0, 3] == 3 and nmt["tgt"][1, 0] == 2 and nmt["tgt"][1, 5] == 3
    pos = C.make_batch("pos", np.array([2, 4]), 0, g)
    assert (pos["tags"] == -100).tolist() == [[False, False, True, True], [False] * 4]
    assert ((pos["words"] == 0) == (pos["tags"] == -100)).all() and pos["lengths"].tolist() == [2, 4]


def test_fallback_lengths_have_the_corpora_means():
    rng = np.random.default_rng(0)
    pos, nmt = C.fallback_lengths("pos", 50_000, rng), C.fallback_lengths("nmt", 50_000, rng)
    assert 19.5 < pos.mean() < 21.0 and pos.min() >= 1
    assert 24.5 < nmt[:, 0].mean() < 26.0 and 22.0 < nmt[:, 1].mean() < 24.0 and nmt.max() <= C.NMT_MAX_LEN


@pytest.mark.corpora
def test_lengths_come_from_brown_when_it_is_there(corpus):
    lengths, source = C.corpus_lengths("pos", corpus("brown").parent)
    assert len(lengths) > 50_000 and 19.0 < lengths.mean() < 22.0 and "brown" in source


def test_both_sides_get_run_py_recipe_and_the_plain_loop_splits_sparse_tables():
    args = B.parse(["--quick"])
    nmt, pos = B.run_options("nmt", args), B.run_options("pos", args)
    assert (nmt.optimizer, nmt.lr, nmt.clip_norm) == ("sgd", 0.1, 1.0)  # the paper recipe, clipping at 1
    assert (pos.optimizer, pos.lr, pos.clip_norm) == ("sgd", 0.03, None)
    config = B.engine_config(pos, "cpu-replica", 2)
    assert config.devices == ["cpu-replica"] * 2 and config.sparse_pull and config.clip_norm is None
    assert B.engine_config(nmt, "cpu-replica", 1).clip_norm == 1.0
    model, *_ = B.build("pos", pos, 1, Path("/nonexistent"), 0)
    sgd, sparse = B.plain_optimizers(model, "sgd", 0.03, torch.device("cpu"))
    assert [p.shape for p in sparse.param_groups[0]["params"]] == [model.word_embedding.weight.shape,
                                                                    model.char_embedding.weight.shape]
    assert type(B.plain_optimizers(model, "adam", 1e-3, torch.device("cpu"))[1]) is torch.optim.SparseAdam


def test_steady_window_refuses_a_run_with_fewer_than_two_stamps():
    with pytest.raises(ValueError, match="^1 of 5 batches were stamped: no steady window to time$"):
        steady_window(torch.tensor([0.0, 3.0, 0.0, 0.0, 0.0], dtype=torch.float64))


def test_an_engine_run_stopped_before_its_epoch_is_named_and_the_bench_goes_on(monkeypatch, capsys):
    """A SIGINT during the workers' start-up stops the run with no update: run_engine says so (IncompleteRun, with
    the stop reason) instead of timing it, and bench_task reports that run and measures the others."""
    args = B.parse(["--device", "cpu", "--quick", "--tasks", "pos", "--variants", "plain,engine", "--workers", "1"])
    options = B.run_options("pos", args)
    model, loss_fn, batches, _ = B.build("pos", options, 20, Path("/nonexistent"), 0)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(B.IncompleteRun, match=r"^the run ended after 0 of 20 updates \(stop reason "
                                                  r"'signal SIGINT', per worker \[0\], "):
            B.run_engine("pos", "engine", model, loss_fn, batches, "cpu-replica", 1, options, nvml=False)
    finally:
        timer.cancel()

    def incomplete(*_args):
        raise B.IncompleteRun("the run ended after 3 of 20 updates")

    monkeypatch.setattr(B, "run_engine", incomplete)
    measured = B.bench_task("pos", args, nvml=False)
    out = capsys.readouterr().out
    assert "[1/1] engine x1: NOT MEASURED: the run ended after 3 of 20 updates" in out
    assert [(m.variant, m.workers) for m in measured] == [("plain", 1)]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pos", "nmt"])
def test_plain_loop_and_one_engine_worker_make_the_same_updates(task):
    """Same model, recipe (POS: sparse embedding gradients; NMT: clipping at 1) and optimizer on both sides: the
    plain loop and one serial 'cpu-replica' engine worker end with the same parameters."""
    args = B.parse(["--quick", "--batch-size", "2"])
    options = B.run_options(task, args)
    model, loss_fn, batches, _ = B.build(task, options, 3, Path("/nonexistent"), 0)
    plain = copy.deepcopy(model)
    bad = B.plain_steps(plain, loss_fn, [{k: v for k, v in b.items() if k != "index"} for b in batches],
                        torch.device("cpu"), B.plain_optimizers(plain, options.optimizer, options.lr,
                                                                torch.device("cpu")), options.clip_norm)
    config = B.engine_config(options, "cpu-replica", 1)
    config = hogwild.Config(**{**config.to_dict(), "overlap_update": False, "shuffle": False})
    engine = copy.deepcopy(model)
    result = hogwild.train(engine, B.StampedLoss(loss_fn, torch.zeros(3, dtype=torch.float64).share_memory_()),
                           batches, config)
    assert int(bad) == 0 and result.updates == 3 and result.skipped_updates == 0
    for (name, a), b in zip(plain.named_parameters(), engine.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert any(not torch.equal(a, b) for a, b in zip(plain.parameters(), model.parameters()))


def test_bench_gpu_refuses_bad_flags_and_cuda_without_a_gpu(capsys):
    assert_refused(B.main, ["--workers", "0"], "--workers", capsys)
    assert_refused(B.main, ["--variants", "plain,fast"], "--variants", capsys)
    assert_refused(B.main, ["--updates", "5"], "--updates", capsys)
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="torch sees no GPU"):
            B.main(["--device", "cuda:0", "--quick"])


def quick_run(tmp_path, *flags):
    done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--quick", "--json", str(tmp_path / "runs.json"),
                           *flags], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads((tmp_path / "runs.json").read_text())


@pytest.mark.slow
def test_quick_run_on_the_cpu_as_the_docstring_shows(tmp_path):
    out, saved = quick_run(tmp_path, "--device", "cpu", "--variants", "plain,engine")
    command = "python bench/bench_gpu.py --quick --json"
    assert out.startswith(f"command: {command}") and out.count(f"command: {command}") == 2
    for task in ("pos", "nmt"):
        assert f"\n{task}: preset small" in out
    assert out.count("  plain              1 ") == 2 and out.count("  engine             2 ") == 2
    assert out.count("best plain: plain; engine 1 worker(s) / best plain = ") == 2
    assert out.count("cycle = pull + compute + push + update") == 2
    # the paper's column of each task's projection table, read from its rows (measured figures share those lines)
    projected = re.findall(r"^  ([1-4])  +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +(\d+\.\d\d)(?:   \(update measured with 2 "
                           r"workers\))?$", out, re.M)
    assert projected == [(str(g), f"{B.PAPER_HOURS[g]:.2f}") for _ in ("pos", "nmt") for g in (1, 2, 3, 4)], out
    assert [B.PAPER_HOURS[g] for g in (1, 2, 3, 4)] == [26.89, 16.56, 9.24, 6.96]  # Table 1 of the paper
    assert [(r["task"], r["variant"], r["workers"]) for r in saved["runs"]] == [
        (t, v, k) for t in ("pos", "nmt") for v, k in (("plain", 1), ("engine", 1), ("engine", 2))]
    assert all(r["rate"] > 0 and r["nonfinite"] == 0 for r in saved["runs"])


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_quick_run_on_a_gpu_with_every_variant(tmp_path):
    out, saved = quick_run(tmp_path, "--device", "cuda:0", "--variants", ",".join(B.VARIANTS))
    assert "cycle = pull + max(compute + push, update)" in out
    assert {r["variant"] for r in saved["runs"]} == set(B.VARIANTS) and all(r["rate"] > 0 for r in saved["runs"])


def gpu_check(out: Path, script: str, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "HOGWILD_GPU_CHECK_CPU": "1", **env}
    return subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=900, env=full)


def test_gpu_check_cuts_a_step_past_its_limit_and_skips_what_no_longer_fits(tmp_path):
    began = time.monotonic()
    done = gpu_check(tmp_path, "source bench/gpu_check.sh; mkdir -p $OUT; START_S=$SECONDS; BUDGET_S=12; "
                               "step fast 5 1 true; step slow 3 1 sleep 60; step later 30 10 true; finish; "
                               "exit $FAILED")
    assert time.monotonic() - began < 20 and done.returncode == 1, done.stdout + done.stderr
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert lines[0].split() == ["fast", "ok", "0s"]
    assert lines[1].startswith("slow         timed out (limit 3s) ") and lines[1].split()[-1] in ("3s", "4s")
    assert lines[2].startswith("later        skipped (") and "needs 10s" in lines[2]
    assert lines[3].startswith("total ") and (tmp_path / "slow.log").exists()


@pytest.mark.slow
def test_gpu_check_runs_every_step_on_the_cpu(tmp_path):
    done = gpu_check(tmp_path, "bash bench/gpu_check.sh", BUDGET_S="800")
    summary = (tmp_path / "summary.txt").read_text()
    assert done.returncode == 0, summary + done.stdout[-3000:] + done.stderr[-3000:]
    steps = [line.split()[0] for line in summary.splitlines()]
    assert steps == ["env", "modules", "tests", "bench-nmt", "bench-pos", "run-pos", "run-nmt", "tag", "translate",
                     "total"]
    assert all(line.split()[1] == "ok" for line in summary.splitlines()[:-1])
    for name in steps[:-1]:
        assert (tmp_path / f"{name}.log").exists()
    assert "/" in (tmp_path / "tag.log").read_text() and (tmp_path / "runs" / "nmt" / "summary.json").exists()
    assert json.loads((tmp_path / "bench-pos.json").read_text())["runs"]
