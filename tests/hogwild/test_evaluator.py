"""hogwild.evaluator: private snapshots, best checkpoint by metric, early stopping (unit and through train)."""
import pytest
import torch

import hogwild
from hogwild.evaluator import Evaluator
from tests.hogwild import engine_helpers as H


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
        workers=2, epochs=100, lr=0.01, eval_every=4, best_metric="acc", patience=2, progress=False,
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
        workers=2, epochs=100, lr=0.01, eval_every=4, best_metric="acc", target=0.9, progress=False,
        tensorboard=False, checkpoint_dir=str(tmp_path)), evaluate=evaluate)
    assert result.stop_reason == "target"
    assert [h["acc"] for h in result.history] == [0.5, 0.7, 0.9, 0.95]  # the last is the final evaluation
    assert result.best_metrics["acc"] == 0.95 and result.updates < 100 * 16
