"""tasks.summary: summary.json from a TrainResult, for a fresh run and for a resumed one."""
from types import SimpleNamespace

from hogwild.tasks.options import RunOptions
from hogwild.tasks.summary import eager_note, make_summary


def _result(updates, wall, best, best_step, reason="max_steps"):
    """The TrainResult fields make_summary reads (hogwild.TrainResult has more)."""
    return SimpleNamespace(final_metrics={"accuracy": 0.8}, best_metrics=best, best_step=best_step, history=[],
                       updates=updates, wall_seconds=wall, worker_updates=[updates // 2, updates - updates // 2],
                       examples=10 * updates, final_loss=0.5, staleness_mean=0.75, staleness_histogram=[1, 2],
                       skipped_updates=1, stop_reason=reason, graphs=3, eager_steps=2, eager_share=0.01,
                       restarts=1)


def test_fresh_run_summary():
    options = RunOptions(task="pos", optimizer="adam").resolved()
    summary = make_summary(options, ["cpu", "cpu"], _result(200, 40.0, {"accuracy": 0.9}, 150), "accuracy", 0,
                           None, {"dev": {"accuracy": 0.9}}, {"train_sentences": 3})
    assert {k: summary[k] for k in ("task", "workers", "devices", "mode", "updates", "wall_seconds",
                                    "updates_per_second", "best", "final_train_loss", "staleness_mean",
                                    "skipped_updates", "restarts", "segments", "lr", "graphs", "eager_steps",
                                    "eager_share")} == {
        "task": "pos", "workers": 2, "devices": ["cpu", "cpu"], "mode": "hogwild", "updates": 200,
        "wall_seconds": 40.0, "updates_per_second": 5.0, "best": {"metric": "accuracy", "value": 0.9, "update": 150},
        "final_train_loss": 0.5, "staleness_mean": 0.75, "skipped_updates": 1, "restarts": 1, "segments": 1,
        "lr": 0.001, "graphs": 3, "eager_steps": 2, "eager_share": 0.01}


def test_the_end_of_run_line_names_an_eager_share_above_one_percent():
    assert eager_note({"eager_share": None, "eager_steps": 0}) is None  # no graphed worker
    assert eager_note({"eager_share": 0.01, "eager_steps": 2}) is None
    assert eager_note({"eager_share": 0.125, "eager_steps": 25}) == (
        "12% of the graphed workers' steps ran eagerly (25 steps: batch shapes without a graph, or a capture that "
        "failed; summary.json's eager_share)")


def test_resumed_run_adds_wall_time_and_keeps_an_earlier_better_best():
    options = RunOptions(task="pos").resolved()
    previous = {"wall_seconds": 30.0, "segments": 1, "best": {"metric": "accuracy", "value": 0.95, "update": 90}}
    summary = make_summary(options, ["cpu"], _result(300, 20.0, {"accuracy": 0.93}, 250), "accuracy", 100,
                           previous, None, {}, prior_seconds=30.0)
    assert (summary["wall_seconds"], summary["updates_per_second"], summary["segments"]) == (50.0, 10.0, 2)
    killed = make_summary(options, ["cpu"], _result(300, 20.0, {"accuracy": 0.93}, 250), "accuracy", 100, None, None,
                          {}, prior_seconds=12.5)  # the segment before was killed: no summary, its time from the log
    assert (killed["wall_seconds"], killed["segments"], killed["best"]["value"]) == (32.5, 2, 0.93)
    assert summary["best"] == {"metric": "accuracy", "value": 0.95, "update": 90}
