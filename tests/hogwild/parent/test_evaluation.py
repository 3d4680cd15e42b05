"""hogwild.parent.evaluation: the Evaluator's private snapshots, best checkpoint by metric and early stopping (unit and
through train); the evaluation budget's arithmetic and evaluations on a thread beside the parent's loop, and through
train: the loop keeps checkpointing, stopping on time and noticing failures while evaluate runs; an evaluate that
raises stops the run after a checkpoint. The runs through train take one worker where what they check (the
schedule, snapshots, best.pt, the stops) is the parent's alone; two where a worker's failure is the subject."""
import json
import pathlib
import re
import multiprocessing
import threading
import time

import pytest
import torch

import hogwild
from hogwild.parent.evaluation import EvalBudget, EvaluationFailed, Evaluator, PeriodicEvaluation, takes_final
from tests.hogwild import engine_helpers as H
from tests.worker_processes import worker_pids


def scripted(values, seen):
    """evaluate() returning the next scripted accuracy and recording the snapshot it was given."""
    calls = iter(values)

    def evaluate(model):
        seen.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"acc": next(calls), "loss": 1.0}

    return evaluate


def test_snapshot_is_private_and_best_and_patience_follow_the_metric():
    model = torch.nn.Linear(2, 1).share_memory()
    seen, best_calls = [], []
    evaluator = Evaluator(model, scripted([0.5, 0.7, 0.6, 0.65], seen),
                          hogwild.Config(best_metric="acc", best_mode="max", patience=2),
                          on_best=lambda state, metrics, updates: best_calls.append((updates, metrics["acc"])))
    evaluator(10)
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on after the snapshot
    assert not torch.equal(seen[0]["weight"], model.weight)
    evaluator(20)
    assert torch.equal(seen[1]["weight"], model.weight)
    evaluator(30)
    assert not evaluator.should_stop
    evaluator(40)
    assert evaluator.should_stop  # 2 evaluations without beating 0.7
    assert best_calls == [(10, 0.5), (20, 0.7)]
    assert evaluator.best_metrics == {"acc": 0.7, "loss": 1.0} and evaluator.best_step == 20
    assert [h["updates"] for h in evaluator.history] == [10, 20, 30, 40]


def test_min_mode_and_unknown_metric():
    model = torch.nn.Linear(2, 1)
    evaluator = Evaluator(model, lambda m: {"loss": 2.0}, hogwild.Config(best_metric="loss", best_mode="min"))
    evaluator(1)
    assert evaluator.best_value == 2.0
    missing = Evaluator(model, lambda m: {"bleu": 1.0}, hogwild.Config(best_metric="acc"))
    with pytest.raises(KeyError, match="best_metric 'acc' is not among"):
        missing(1)


def test_train_keeps_the_best_checkpoint_and_stops_early(tmp_path):
    seen = []
    evaluate = scripted([0.5, 0.7, 0.6, 0.65, 0.1], seen)
    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
        workers=1, epochs=100, lr=0.01, eval_every=4, best_metric="acc", patience=2, progress=False,
        tensorboard=False, checkpoint_dir=str(tmp_path)), evaluate=evaluate)
    assert result.stop_reason == "early_stopping"
    assert [h["acc"] for h in result.history] == [0.5, 0.7, 0.6, 0.65, 0.1]  # the last is the final evaluation
    assert result.history[-1]["final"] and result.final_metrics["acc"] == 0.1
    assert result.best_metrics == {"acc": 0.7, "loss": 1.0}
    assert result.best_step == result.history[1]["updates"]
    best = torch.load(result.best_checkpoint, weights_only=False)
    assert best["metrics"]["acc"] == 0.7 and best["best_step"] == result.best_step
    for name, tensor in seen[1].items():  # the very snapshot that scored 0.7
        assert torch.equal(best["model"][name], tensor)
    assert result.updates < 100 * 16


def test_evaluator_state_round_trip_keeps_best_and_patience():
    model = torch.nn.Linear(2, 1)
    config = hogwild.Config(best_metric="acc", patience=2)
    first = Evaluator(model, scripted([0.7, 0.6], []), config)
    first(1)
    first(2)
    resumed = Evaluator(model, scripted([0.65, 0.9], []), config)
    resumed.load_state_dict(first.state_dict())
    resumed(3)
    assert resumed.should_stop and resumed.best_value == 0.7  # 0.65 did not beat the best from before resume
    assert [h["acc"] for h in resumed.history] == [0.7, 0.6, 0.65]


def test_target_stops_once_the_best_value_reaches_it_in_either_direction():
    model = torch.nn.Linear(2, 1)
    up = Evaluator(model, scripted([0.5, 0.79, 0.8, 0.7], []), hogwild.Config(best_metric="acc", target=0.8))
    up(1)
    up(2)
    assert not up.reached_target and not up.should_stop  # 0.79 < 0.8
    up(3)
    assert up.reached_target and up.should_stop  # 0.8 >= 0.8
    up(4)
    assert up.reached_target  # the best value stays at the target
    down = Evaluator(model, lambda m: {"loss": 2.0}, hogwild.Config(best_metric="loss", best_mode="min", target=2.5))
    assert not down.reached_target  # nothing evaluated yet
    down(1)
    assert down.reached_target and down.should_stop
    assert not Evaluator(model, scripted([1.0], []), hogwild.Config(best_metric="acc")).reached_target
    with pytest.raises(ValueError, match=r"^Config\.target: must be a finite number"):
        hogwild.Config(target=float("nan"))


def test_train_stops_at_the_target(tmp_path):
    evaluate = scripted([0.5, 0.7, 0.9, 0.95, 0.99, 1.0], [])
    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
        workers=1, epochs=100, lr=0.01, eval_every=4, best_metric="acc", target=0.9, progress=False,
        tensorboard=False, checkpoint_dir=str(tmp_path)), evaluate=evaluate)
    assert result.stop_reason == "target"
    assert [h["acc"] for h in result.history] == [0.5, 0.7, 0.9, 0.95]  # the last is the final evaluation
    assert result.best_metrics["acc"] == 0.95 and result.updates < 100 * 16

def test_takes_final_reads_the_signature():
    import functools


    def plain(model):
        return {}

    def with_final(model, final=False):
        return {}

    def with_kwargs(model, **options):
        return {}

    assert not takes_final(plain) and not takes_final(lambda m: {})
    assert takes_final(with_final) and takes_final(with_kwargs)
    assert takes_final(functools.partial(with_final)) and not takes_final(functools.partial(plain))


def test_final_evaluation_of_an_evaluate_taking_final_is_reported_not_compared():
    model, calls, best = torch.nn.Linear(2, 1), [], []

    def evaluate(snapshot, final=False):  # the final one scores the whole set: higher numbers, other data
        calls.append(final)
        return {"acc": 0.9 if final else 0.5 + 0.1 * len(calls)}

    evaluator = Evaluator(model, evaluate, hogwild.Config(best_metric="acc"),
                          on_best=lambda state, metrics, updates: best.append(updates))
    evaluator(10)
    evaluator(20)
    evaluator(30, final=True)
    assert calls == [False, False, True] and best == [10, 20]
    assert evaluator.best_step == 20 and evaluator.best_metrics == {"acc": pytest.approx(0.7)}
    assert [h["final"] for h in evaluator.history] == [False, False, True]
    alone = Evaluator(model, evaluate, hogwild.Config(best_metric="acc"))
    alone(5, final=True)  # no periodic evaluation ran: the final one is the best
    assert alone.best_step == 5
    legacy = Evaluator(model, scripted([0.5, 0.9], []), hogwild.Config(best_metric="acc"))
    legacy(10)
    legacy(20, final=True)  # evaluate(model) scores the same data every time: the final one competes
    assert legacy.best_step == 20


def test_the_snapshot_lives_on_the_evaluation_device():
    model = torch.nn.Linear(2, 1)
    assert Evaluator(model, lambda m: {"a": 1.0}, hogwild.Config(workers=2)).private.weight.device.type == "cpu"
    assert Evaluator(model, lambda m: {"a": 1.0},
                     hogwild.Config(devices=["cpu-replica"])).private.weight.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_evaluates_beside_training_on_the_cpu_and_finally_on_the_worker_gpu():
    from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
    from hogwild.models.nmt_eval import heldout_loss, translate
    from tests.models.conftest import nmt_batch

    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))
    batch = nmt_batch([5, 3], [4, 2], seed=1)

    devices = []

    def evaluate(snapshot, final):
        devices.append(next(snapshot.parameters()).device.type)
        return {"loss": heldout_loss(snapshot, [batch], nmt_loss)["loss"],
                "words": float(sum(map(len, translate(snapshot, [batch], beam_size=2))))}

    # every visible GPU hosts a worker: periodic evaluations stay off it, the final one (workers gone) uses it
    evaluator = Evaluator(model, evaluate, hogwild.Config(devices=[f"cuda:{i}" for i in range(
        torch.cuda.device_count())]))
    on_cpu = evaluator(1)
    on_gpu = evaluator(2, final=True)
    assert devices == ["cpu", "cuda"]
    assert on_gpu["loss"] == pytest.approx(on_cpu["loss"], rel=1e-4)


def test_budget_spaces_evaluations_by_their_measured_time():
    budget = EvalBudget(0.1, started=100.0)
    assert budget.allows(100.0)  # nothing measured yet
    budget.add(2.0)  # next: 100 + (2 + 2) / 0.1 - 2 = 138, so that 4 s of 40 s are evaluation
    assert budget.earliest_start() == pytest.approx(138.0)
    assert not budget.allows(137.9) and budget.allows(138.0)
    budget.add(4.0)  # spent 6, last 4: 100 + 10 / 0.1 - 4 = 196
    assert budget.earliest_start() == pytest.approx(196.0)
    for share in (None, 0):
        unlimited = EvalBudget(share, started=5.0)
        unlimited.add(1000.0)
        assert unlimited.allows(5.0)


def _clocked(seconds_per_call):
    """A fake clock and an evaluate() that advances it by the next of seconds_per_call."""
    now, durations = [0.0], iter(seconds_per_call)

    def evaluate(model):
        now[0] += next(durations)
        return {"acc": now[0]}

    return now, evaluate


def test_periodic_evaluation_follows_the_schedule_the_budget_and_one_at_a_time():
    now, evaluate = _clocked([3.0, 1.0, 0.5])
    config = hogwild.Config(eval_every=10, eval_budget=0.25)
    evaluator = Evaluator(torch.nn.Linear(2, 1), evaluate, config)
    periodic = PeriodicEvaluation(evaluator, config, 0, clock=lambda: now[0])
    assert not periodic.maybe_start(9)  # not due
    assert periodic.maybe_start(10)
    assert not periodic.maybe_start(30)  # one at a time
    periodic.thread.join()
    assert periodic.poll() == (10, {"acc": 3.0})
    assert periodic.poll() is None
    # took 3 s: the next may start at 0 + (3 + 3) / 0.25 - 3 = 21 (the clock reads 3 now)
    assert not periodic.maybe_start(25)
    now[0] = 20.9
    assert not periodic.maybe_start(25)
    now[0] = 21.0
    assert periodic.maybe_start(25)
    assert periodic.finish() == (25, {"acc": 22.0})
    # spent 4, last 1: the budget allows from (4 + 1) / 0.25 - 1 = 19 on (the clock reads 22); due at 25 + 10
    assert periodic.budget.earliest_start() == pytest.approx(19.0)
    assert not periodic.maybe_start(34) and periodic.maybe_start(35)
    assert periodic.finish() == (35, {"acc": 22.5})
    assert [h["updates"] for h in evaluator.history] == [10, 25, 35]


def test_a_failing_periodic_evaluation_raises_naming_evaluate_and_the_update():
    def evaluate(model):
        raise ValueError("no held-out data")

    config = hogwild.Config(eval_every=1)
    periodic = PeriodicEvaluation(Evaluator(torch.nn.Linear(2, 1), evaluate, config), config, 0)
    assert periodic.maybe_start(3)
    with pytest.raises(EvaluationFailed, match=r"evaluate\(\) failed .* at update 3: ValueError: no held-out data"):
        periodic.finish()


def _records(run_dir):
    """metrics.jsonl's complete lines (the parent may be writing the next one)."""
    text = (run_dir / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.split("\n")[:-1]]


def test_loop_checkpoints_and_stops_on_time_while_an_evaluation_runs(tmp_path):
    """The first evaluation lasts until the run has stopped for its time limit; meanwhile the loop logs and
    checkpoints. Evaluations are recorded in order, the one that was running included."""
    batches, calls = H.regression_batches(n=16), []

    def evaluate(model, final=False):
        calls.append({"final": final, "start": len(_records(tmp_path))})
        if len(calls) == 1:  # hold the first evaluation until the parent has written the stop record
            while not any(r["kind"] == "stop" for r in _records(tmp_path)):
                threading.Event().wait(0.05)
        calls[-1]["end"] = len(_records(tmp_path))
        return {"loss": H.dataset_loss(model, batches)}

    result = hogwild.train(H.regression_model(), H.slow_loss, batches, hogwild.Config(
        workers=1, epochs=100000, time_limit=1.0, eval_every=3, eval_budget=None, checkpoint_every=3, log_every=3,
        lr=0.01, checkpoint_dir=str(tmp_path), progress=False, tensorboard=False), evaluate=evaluate)
    assert result.stop_reason == "time_limit"
    records = _records(tmp_path)
    during = records[calls[0]["start"]:calls[0]["end"]]
    assert [r["kind"] for r in during if r["kind"] == "stop"] == ["stop"]
    assert any(r["kind"] == "checkpoint" for r in during) and any(r["kind"] == "train" for r in during)
    assert [c["final"] for c in calls] == [False, True]
    evaluations = [r for r in records if r["kind"] in ("eval", "final_eval")]
    assert [(r["kind"], r["updates"]) for r in evaluations] == [
        ("eval" if not h["final"] else "final_eval", h["updates"]) for h in result.history]
    assert result.history[0]["updates"] < result.history[1]["updates"] == result.updates
    # evaluate takes `final`: the final evaluation is reported but best.pt comes from the periodic one
    assert result.best_step == result.history[0]["updates"] and result.final_metrics == {
        k: v for k, v in result.history[1].items() if k not in ("updates", "final")}


def test_a_worker_failure_is_noticed_while_an_evaluation_runs(tmp_path, monkeypatch):
    flag, release, seen = tmp_path / "fail-now", threading.Event(), []
    monkeypatch.setenv("HOGWILD_TEST_FAIL_FLAG", str(flag))

    def evaluate(model):
        flag.touch()  # the workers fail from now on, while this evaluation runs
        seen.append("started")
        try:
            while not release.wait(0.05):  # Python lines between the waits, as in a real evaluate's loop
                pass
        except BaseException as stopped:  # the run, failed, stops the evaluation it no longer waits for
            seen.append(type(stopped).__name__)
            raise
        return {"loss": 1.0}

    with pytest.raises(hogwild.WorkerFailed, match="deliberate failure: the flag file exists"):
        hogwild.train(H.regression_model(), H.flagged_loss, H.regression_batches(n=16), hogwild.Config(
            workers=2, epochs=100000, eval_every=2, eval_budget=None, lr=0.01, progress=False, tensorboard=False,
            checkpoint_dir=str(tmp_path)), evaluate=evaluate)
    still_evaluating = not release.is_set()
    release.set()
    assert seen == ["started", "EvaluationAbandoned"] and still_evaluating
    assert (tmp_path / "last.pt").exists() and multiprocessing.active_children() == []


@pytest.mark.parametrize("fail_at", ["periodic", "final"])
def test_an_evaluate_that_raises_checkpoints_then_names_evaluate(tmp_path, fail_at):
    calls = []

    def evaluate(model, final=False):
        calls.append(final)
        if (fail_at == "periodic" and len(calls) == 2) or (fail_at == "final" and final):
            raise ValueError("deliberate evaluate failure")
        return {"loss": 1.0}

    config = hogwild.Config(workers=1, lr=0.01, eval_every=5, eval_budget=None, checkpoint_every=100000,
                            checkpoint_dir=str(tmp_path), progress=False, tensorboard=False,
                            **({"epochs": 100000} if fail_at == "periodic" else {"max_steps": 12}))
    with pytest.raises(EvaluationFailed) as raised:
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), config, evaluate=evaluate)
    message = str(raised.value)
    assert "evaluate() failed in the " + ("periodic" if fail_at == "periodic" else "final") in message
    assert "ValueError: deliberate evaluate failure" in message and f"checkpoint written to {tmp_path}" in message
    assert isinstance(raised.value.__cause__, ValueError) and raised.value.checkpoint == str(tmp_path / "last.pt")
    stop = [r for r in _records(tmp_path) if r["kind"] == "stop"]
    assert len(stop) == 1
    saved = torch.load(tmp_path / "last.pt", weights_only=False)
    assert saved["global_step"] == stop[0]["updates"] > 0
    if fail_at == "periodic":
        assert stop[0]["reason"] == "failure" and "deliberate evaluate failure" in stop[0]["failure"]
    else:
        assert stop[0]["reason"] == "max_steps" and saved["global_step"] >= 12 and calls[-1] is True
    assert multiprocessing.active_children() == []
    assert not any(t.name == "hogwild-evaluate" and t.is_alive() for t in threading.enumerate())


def test_the_budget_spaces_evaluations_in_a_real_run(tmp_path):
    """evaluate takes 0.2 s and is due after every update; with a 20% budget each evaluation k starts no earlier
    than (spent + last) / 0.2 - last after training started (measured here from before train was called): at 0 and
    1.8 s of a 2.5 s run (as at 0 and 3.6 s of 4 s with a 0.4 s evaluate)."""
    spans = []

    def evaluate(model, final=False):
        start = time.monotonic()
        threading.Event().wait(0.2)
        spans.append((start, time.monotonic(), final))
        return {"loss": 1.0}

    called = time.monotonic()
    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
        workers=1, epochs=100000, time_limit=2.5, eval_every=1, eval_budget=0.2, lr=0.01, progress=False,
        tensorboard=False), evaluate=evaluate)
    periodic = [(start, end) for start, end, final in spans if not final]
    assert result.stop_reason == "time_limit" and len(periodic) >= 1
    spent = 0.0
    for k, (start, end) in enumerate(periodic):
        if k:
            last = periodic[k - 1][1] - periodic[k - 1][0]
            assert start >= called + (spent + last) / 0.2 - last
        spent += end - start




def test_eval_at_start_scores_the_starting_parameters_while_training_begins():
    model, seen = H.regression_model(), []
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}

    def evaluate(snapshot):
        seen.append({name: tensor.clone() for name, tensor in snapshot.state_dict().items()})
        return {"loss": 1.0}

    result = hogwild.train(model, H.slow_loss, H.regression_batches(n=8), hogwild.Config(
        workers=1, epochs=1, lr=0.01, eval_at_start=True, progress=False, tensorboard=False), evaluate=evaluate)
    assert [(h["updates"], h["final"]) for h in result.history] == [(0, False), (8, True)]
    assert all(torch.equal(seen[0][name], tensor) for name, tensor in initial.items())
    assert not torch.equal(seen[1]["0.weight"], initial["0.weight"])
    with pytest.raises(ValueError, match=r"^Config\.eval_at_start: must be True or False"):
        hogwild.Config(eval_at_start=1)


def test_a_nan_evaluation_never_becomes_best():
    best_calls = []
    evaluator = Evaluator(torch.nn.Linear(2, 1), scripted([float("nan"), 0.4, float("nan"), 0.3], []),
                          hogwild.Config(best_metric="acc"), on_best=lambda state, m, updates: best_calls.append(updates))
    for updates in (10, 20, 30, 40):
        evaluator(updates)
    assert best_calls == [20] and evaluator.best_value == 0.4 and evaluator.evaluations_without_improvement == 2


def test_an_evaluate_returning_nan_is_warned_about_and_the_run_goes_on(tmp_path, capsys):
    """NaN once gave no best.pt and no word: now each NaN evaluation is a metrics.jsonl event and a warning, the run
    goes on, and best.pt holds the best finite evaluation (here the first evaluation, of the starting parameters,
    is NaN and every later one 0.4)."""
    calls = []

    def evaluate(model):
        calls.append(1)
        return {"acc": float("nan") if len(calls) == 1 else 0.4, "loss": 1.0}

    result = hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=16), hogwild.Config(
        workers=1, max_steps=10, lr=0.01, eval_every=5, eval_at_start=True, best_metric="acc", progress=False,
        tensorboard=False, checkpoint_dir=str(tmp_path), eval_budget=None), evaluate=evaluate)
    assert result.stop_reason == "max_steps" and result.updates == 10
    assert result.best_metrics == {"acc": 0.4, "loss": 1.0} and result.best_step > 0
    assert torch.load(result.best_checkpoint, weights_only=False)["metrics"] == {"acc": 0.4, "loss": 1.0}
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["updates"], r["metrics"], r["final"]) for r in records if r["kind"] == "nan_metrics"] == [
        (0, ["acc"], False)]
    err = capsys.readouterr().err
    assert ("warning: evaluate() returned NaN for acc at update 0: not a candidate for best.pt (the best finite "
            "value is kept); training goes on") in err


def test_a_run_whose_evaluations_are_all_nan_writes_no_best_pt_but_says_so(tmp_path, capsys):
    result = hogwild.train(H.regression_model(), H.mse_loss, H.regression_batches(n=8), hogwild.Config(
        workers=1, max_steps=4, lr=0.01, eval_at_start=True, progress=False, tensorboard=False,
        checkpoint_dir=str(tmp_path)), evaluate=lambda model: {"loss": float("nan")})
    assert result.best_checkpoint is None and not (tmp_path / "best.pt").exists()
    assert result.updates == 4 and (tmp_path / "last.pt").exists()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    warned = [(r["updates"], r["final"]) for r in records if r["kind"] == "nan_metrics"]
    assert warned == [(0, False), (4, True)]  # the start and the final evaluation
    assert capsys.readouterr().err.count("warning: evaluate() returned NaN for loss") == 2


def test_a_worker_killed_during_an_evaluation_ends_the_process_with_its_own_status(tmp_path):
    """The evaluation thread, still inside torch when the process exited, aborted it: "terminate called without an
    active exception", exit 134 (run.py's NMT run, a worker killed during its first evaluation: 3 of 3). The run now
    stops the evaluation it no longer waits for, and exits 1 within seconds, not after the evaluation's minute."""
    import os
    import signal
    import subprocess
    import sys

    script = pathlib.Path(__file__).parents[1] / "engine_scripts" / "evaluate_while_a_worker_dies.py"
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert H.wait_for(lambda: (tmp_path / "evaluating").exists() and worker_pids(process.pid), timeout=120)
        time.sleep(0.5)
        os.kill(sorted(worker_pids(process.pid))[-1], signal.SIGKILL)
        killed = time.monotonic()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, err
    assert re.fullmatch(r"training stopped: worker \d \(cpu, pid \d+\) was killed by signal SIGKILL\n", out)
    assert "terminate called" not in err and time.monotonic() - killed < 30
    assert (tmp_path / "last.pt").exists()

