"""bench/bench_convergence.py: the --quick run, as CI runs it (`python -m bench.bench_convergence --quick`), reaches
its target through hogwild.train's Config.target and through the mnist_hogwild pattern, and reports times, updates
and ratios; offline scoring, levels and the auto target on stand-in snapshots; bad options refused (in process)."""
import json

import pytest

from tests.bench.usage_errors import assert_refused


@pytest.mark.slow
def test_quick_run_reaches_the_target_with_the_engine_and_the_torch_pattern(tmp_path, run_bench):
    out = tmp_path / "curves.json"
    done = run_bench("bench_convergence", "--quick", "--scoring", "online", "--variants", "single,torch2",
                     "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["task"] == "pos" and result["target"] == 0.3 and set(result["runs"]) == {"single", "torch2"}
    for name, run in result["runs"].items():
        assert run["best"] >= 0.3, name  # stopped at the target, not at the time limit
        points = run["evaluations"]
        assert [p["metric"] >= 0.3 for p in points].count(True) >= 1
        assert all(a["seconds"] <= b["seconds"] and a["updates"] <= b["updates"] for a, b in zip(points, points[1:]))
        assert run["minutes"] * 60 == pytest.approx(next(p["seconds"] for p in points if p["metric"] >= 0.3))
        assert run["updates"] >= 25  # evaluations every 25 updates
    assert result["runs"]["single"]["ratio_to_single"] == 1.0
    assert "| time ratio to single |" in done.stdout and "| single |" in done.stdout and "| torch2 |" in done.stdout
    assert "command: python -m bench.bench_convergence --quick --scoring online --variants single,torch2" in done.stdout


def test_unknown_variant_is_refused(capsys):
    assert_refused(_bench().main, ["--quick", "--variants", "single,async9"], "--variants: unknown ['async9']", capsys)


def _bench():
    from bench import bench_convergence
    return bench_convergence


def _snapshots(values: list[float], updates_per_point: int = 1) -> list[dict]:
    """Offline snapshots whose one weight is the value their evaluation will score."""
    import torch
    return [{"seconds": float(i), "updates": updates_per_point * i, "state": {"weight": torch.tensor([[v]])}}
            for i, v in enumerate(values)]


def _fake_job(scored: list[int]):
    """A TaskJob stand-in whose model's one weight is the metric; `scored` collects the weights it scored."""
    from types import SimpleNamespace

    import torch

    def evaluate(model):
        value = float(model.weight.detach())
        scored.append(value)
        return {"accuracy": value}

    return SimpleNamespace(model=torch.nn.Linear(1, 1, bias=False), evaluate=evaluate, metric="accuracy")


def test_offline_scoring_scores_coarse_snapshots_then_back_to_the_first_reaching_the_target():
    bench = _bench()
    values = [0.1, 0.2, 0.3, 0.95, 0.4, 0.5, 0.96, 0.97, 0.98, 0.99, 0.6]  # 0.95 at 3 is a blip before a coarse miss
    curve = bench.Curve("x", "accuracy", _snapshots(values, 10))
    scored = []
    bench.score_offline(_fake_job(scored), curve, target=0.9, coarse=4)
    # coarse: 0 (0.1), 4 (0.4), 8 (0.98 reaches) -> back from 5: 0.5, then 6 (0.96) reaches; the last (10) is not
    # needed once the target is found
    assert scored == pytest.approx([0.1, 0.4, 0.98, 0.5, 0.96])
    assert [p["seconds"] for p in curve.points] == [0.0, 4.0, 5.0, 6.0, 8.0]
    assert curve.first_reaching(0.9) == {"seconds": 6.0, "updates": 60, "metric": pytest.approx(0.96)}
    assert all("state" not in p for p in curve.points)


def test_offline_scoring_scores_the_last_snapshot_when_the_target_is_not_reached():
    bench = _bench()
    curve = bench.Curve("x", "accuracy", _snapshots([i / 10 for i in range(6)]))
    scored = []
    bench.score_offline(_fake_job(scored), curve, target=0.9, coarse=4)
    assert scored == pytest.approx([0.0, 0.4, 0.5]) and curve.first_reaching(0.9) is None


def test_minutes_per_variant_and_bad_values_are_refused(capsys):
    import argparse
    bench = _bench()
    parser = argparse.ArgumentParser()
    assert bench.parse_minutes(parser, "12,single=22", ["single", "hogwild2"]) == {"single": 22.0, "hogwild2": 12.0}
    assert bench.parse_minutes(parser, "7", ["sync2"]) == {"sync2": 7.0}
    for text, message in (("single=22", "no time for hogwild2"), ("12,solo=3", "unknown variant 'solo'"),
                          ("ten", "'ten' is not MINUTES"), ("0", "must be positive")):
        assert_refused(bench.main, ["--quick", "--variants", "single,hogwild2", "--minutes", text], message, capsys)


@pytest.mark.slow
def test_quick_offline_run_trains_for_its_minutes_then_scores_snapshots(tmp_path, run_bench):
    out = tmp_path / "curves.json"
    done = run_bench("bench_convergence", "--quick", "--scoring", "offline", "--variants", "hogwild2",
                     "--minutes", "0.05", "--coarse", "3", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(out.read_text())["runs"]["hogwild2"]
    points = run["evaluations"]
    assert run["best"] >= 0.3 and run["minutes"] * 60 == pytest.approx(
        next(p["seconds"] for p in points if p["metric"] >= 0.3))
    assert all(a["seconds"] < b["seconds"] for a, b in zip(points, points[1:]))
    assert "hogwild2  scored" in done.stdout


def test_levels_above_the_target_score_every_snapshot_up_to_the_hardest_level(monkeypatch):
    """run_variant with --levels: the snapshots are scored one by one (not every --coarse-th) until the hardest
    level is reached, also past the target."""
    import argparse
    bench = _bench()
    scored = []
    monkeypatch.setattr(bench, "build_job", lambda options: _fake_job(scored))
    monkeypatch.setattr(bench, "run_engine", lambda job, options, args, variant: bench.Curve(
        variant, "accuracy", _snapshots([0.125, 0.25, 0.5, 0.75, 0.875, 0.9375, 0.96875], 10)))  # exact in float32
    from hogwild.tasks.options import RunOptions
    args = argparse.Namespace(options=RunOptions(synthetic_size=20, dev_limit=10), quick=True,
                              minutes={"single": 1.0}, scoring="offline", scoring_threads=1, target=0.2, coarse=1,
                              levels=[0.125, 0.875], metric="accuracy")
    curve = bench.run_variant(args, "single")
    assert scored == [0.125, 0.25, 0.5, 0.75, 0.875]
    assert curve.first_reaching(0.2)["updates"] == 10 and curve.first_reaching(0.875)["updates"] == 40


def test_auto_target_is_the_last_snapshot_score_rounded_down():
    bench = _bench()
    curve = bench.Curve("single", "accuracy", _snapshots([0.5, 0.95678]))
    scored = []
    assert bench.auto_target(_fake_job(scored), curve) == 0.956  # accuracy: rounded down to 0.1%
    assert scored == pytest.approx([0.95678]) and curve.points[-1]["metric"] == pytest.approx(0.95678)
    bleu = _fake_job([])
    bleu.evaluate = lambda model: {"bleu": float(model.weight.detach()) * 10}  # 9.5678 BLEU
    curve = bench.Curve("single", "bleu", _snapshots([0.95678]))
    assert bench.auto_target(bleu, curve) == 9.5  # BLEU: rounded down to 0.1


def test_a_lower_is_better_metric_takes_the_target_rounded_up_and_reaches_it_from_above():
    bench = _bench()
    job = _fake_job([])
    job.evaluate = lambda model: {"bleu": 1.0, "perplexity": float(model.weight.detach()), "loss": 4.0}
    values = [300.0, 150.0, 97.42, 95.0, 95.96]
    curve = bench.Curve("single", "perplexity", _snapshots(values))
    assert bench.auto_target(job, curve) == 96.0  # perplexity 95.96: rounded up to 0.1
    bench.score_offline(job, curve, target=97.5, coarse=2)
    # coarse: 0 (300), 2 (97.42 <= 97.5 reaches) -> back: 1 (150) does not
    assert [p["metric"] for p in curve.points] == pytest.approx([300.0, 150.0, 97.42, 95.96])
    assert curve.first_reaching(97.5)["seconds"] == 2.0 and curve.best() == pytest.approx(95.96)
    assert curve.points[0]["heldout"] == {"bleu": 1.0, "loss": 4.0}
    assert bench.rounded_target(4.4539, "loss") == 4.46 and bench.rounded_target(4.46, "loss") == 4.46


def test_metric_must_belong_to_the_task_and_lower_is_better_needs_offline_scoring(capsys):
    for extra, message in ((["--quick", "--metric", "bleu"], "--metric bleu: --task pos measures accuracy"),
                           (["--task", "nmt", "--metric", "perplexity", "--scoring", "online"],
                            "--metric perplexity needs --scoring offline")):
        assert_refused(_bench().main, extra, message, capsys)


def test_auto_target_needs_single_and_offline_scoring(capsys):
    for extra, message in ((["--variants", "hogwild2"], "add it to --variants"),
                           (["--variants", "single", "--scoring", "online"], "needs --scoring offline"),
                           (["--variants", "single", "--target", "high"], "'high' is not a number or 'auto'")):
        assert_refused(_bench().main, ["--quick", "--target", "auto", *extra], message, capsys)


def test_scored_points_keep_the_evaluations_other_numbers():
    bench = _bench()
    job = _fake_job([])
    job.evaluate = lambda model: {"accuracy": float(model.weight.detach()), "loss": 2.5}  # as NMT: bleu, loss, ...
    curve = bench.Curve("x", "accuracy", _snapshots([0.2, 0.95]))
    bench.score_offline(job, curve, target=0.9, coarse=1)
    assert curve.points == [{"seconds": 0.0, "updates": 0, "metric": pytest.approx(0.2), "heldout": {"loss": 2.5}},
                            {"seconds": 1.0, "updates": 1, "metric": pytest.approx(0.95), "heldout": {"loss": 2.5}}]


def test_variants_train_their_cpu_workers_in_place_or_on_replicas():
    import argparse
    bench = _bench()
    import dataclasses
    from hogwild.tasks.options import RunOptions
    args = argparse.Namespace(options=RunOptions(dev_limit=10, synthetic_size=50),
                              minutes={v: 1.0 for v in bench.VARIANTS})
    chosen = {v: bench.job_options(args, v).cpu_workers for v in ("hogwild2", "inplace2", "replica2", "torch2")}
    assert chosen == {"hogwild2": "in-place", "inplace2": "in-place", "replica2": "replica", "torch2": "in-place"}
    # run.py's default for NMT Hogwild workers (the synthetic NMT task: no corpus needed)
    args.options = dataclasses.replace(args.options, task="nmt")
    assert bench.job_options(args, "hogwild2").cpu_workers == "replica"


def test_levels_give_minutes_updates_and_ratios_to_single_at_each_level(capsys):
    bench = _bench()
    single = bench.Curve("single", "accuracy", [{"seconds": 60.0 * i, "updates": 100 * i, "metric": m}
                                                for i, m in enumerate([0.5, 0.9, 0.94, 0.95])])
    pair = bench.Curve("hogwild2", "accuracy", [{"seconds": 30.0 * i, "updates": 190 * i, "metric": m}
                                                for i, m in enumerate([0.5, 0.92, 0.93, 0.945])])
    table = bench.report_levels({"single": single, "hogwild2": pair}, [0.9, 0.94, 0.95])
    assert table["0.9"]["single"] == {"minutes": 1.0, "updates": 100, "ratio_to_single": 1.0}
    assert table["0.9"]["hogwild2"] == {"minutes": 0.5, "updates": 190, "ratio_to_single": 0.5}
    assert table["0.94"]["hogwild2"] == {"minutes": 1.5, "updates": 570, "ratio_to_single": 0.75}  # single at 2 min
    assert table["0.95"]["hogwild2"] == {"minutes": None, "updates": None, "ratio_to_single": None}
    out = capsys.readouterr().out
    assert "| 0.94 | 2.00 (200) | 1.50 (570) | 0.750 |" in out and "| 0.95 | 3.00 (300) | n/a (n/a) | n/a |" in out


def test_bad_levels_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        _bench().main(["--quick", "--levels", "0.9,high"])
    assert exit_.value.code == 2 and "--levels" in (err := capsys.readouterr().err) and "'0.9,high'" in err


@pytest.mark.slow
def test_online_run_with_a_level_above_the_target_trains_on_to_that_level(tmp_path, run_bench):
    out = tmp_path / "curves.json"
    done = run_bench("bench_convergence", "--quick", "--variants", "single", "--target", "0.2", "--levels", "0.6",
                     "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    points = data["runs"]["single"]["evaluations"]
    first = next(i for i, p in enumerate(points) if p["metric"] >= 0.6)
    assert first >= len(points) - 2  # it stopped there (the engine's final evaluation may follow), not at 0.2
    assert data["levels"]["0.6"]["single"]["updates"] == points[first]["updates"]
