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


def test_takes_final_reads_the_signature():
    import functools

    from hogwild.evaluator import takes_final

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
def test_auto_evaluates_on_the_first_worker_gpu_with_cpu_batches():
    from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
    from hogwild.models.nmt_eval import heldout_loss, translate
    from tests.models.conftest import nmt_batch

    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))
    batch = nmt_batch([5, 3], [4, 2], seed=1)

    def evaluate(snapshot):
        assert next(snapshot.parameters()).device.type == "cuda"
        return {"loss": heldout_loss(snapshot, [batch], nmt_loss)["loss"],
                "words": float(sum(map(len, translate(snapshot, [batch], beam_size=2))))}

    on_gpu = Evaluator(model, evaluate, hogwild.Config(devices=["cuda:0"]))(1)
    on_cpu = heldout_loss(model, [batch], nmt_loss)["loss"]
    assert on_gpu["loss"] == pytest.approx(on_cpu, rel=1e-4)
