"""tasks.rundir: curves from metrics.jsonl (resumed segments laid end to end), and clear errors for bad run
directories."""
import json

import pytest
import torch

from hogwild.tasks.rundir import RunDirError, load_trained, read_curves, run_dir_of, write_config


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_curves_join_resumed_segments_and_pick_the_summary_metric(tmp_path):
    _write(tmp_path / "metrics.jsonl", [
        {"kind": "eval", "elapsed": 0.0, "updates": 0, "metrics": {"accuracy": 0.1, "unk_accuracy": 0.0}},
        {"kind": "train", "elapsed": 5.0, "updates": 50, "loss": 2.0},
        {"kind": "train", "elapsed": 9.0, "updates": 90, "loss": None},  # no loss in the interval: skipped
        {"kind": "eval", "elapsed": 10.0, "updates": 100, "metrics": {"accuracy": 0.5, "unk_accuracy": 0.3}},
        {"kind": "stop", "elapsed": 11.0, "reason": "signal SIGINT"},
        {"kind": "train", "elapsed": 4.0, "updates": 150, "loss": 1.0},  # resumed: the clock restarted
        {"kind": "final_eval", "elapsed": 6.0, "updates": 160, "metrics": {"accuracy": 0.7, "unk_accuracy": 0.6}},
    ])
    (tmp_path / "summary.json").write_text(json.dumps({"best": {"metric": "unk_accuracy"}}))
    curves = read_curves(tmp_path)
    assert (curves.name, curves.metric) == (tmp_path.name, "unk_accuracy")
    assert (curves.loss_seconds, curves.loss_updates, curves.loss) == ([5.0, 15.0], [50, 150], [2.0, 1.0])
    assert (curves.eval_seconds, curves.eval_updates, curves.values) == ([0.0, 10.0, 17.0], [0, 100, 160],
                                                                         [0.0, 0.3, 0.6])
    assert read_curves(tmp_path, metric="accuracy", name="x").values == [0.1, 0.5, 0.7]


def test_a_killed_segment_loses_what_it_logged_past_the_checkpoint_it_resumed_from(tmp_path):
    from hogwild.tasks.rundir import segment_start
    _write(tmp_path / "metrics.jsonl", [
        {"kind": "train", "elapsed": 5.0, "updates": 50, "loss": 2.0},
        {"kind": "checkpoint", "elapsed": 6.0, "updates": 60},
        {"kind": "eval", "elapsed": 8.0, "updates": 55, "metrics": {"accuracy": 0.4}},  # began before the checkpoint
        {"kind": "train", "elapsed": 9.0, "updates": 90, "loss": 1.5},  # killed here (SIGKILL): lost work
        {"kind": "resume", "elapsed": 0.5, "updates": 60},
        {"kind": "train", "elapsed": 2.5, "updates": 80, "loss": 1.4},
        {"kind": "eval", "elapsed": 3.0, "updates": 85, "metrics": {"accuracy": 0.6}},
    ])
    curves = read_curves(tmp_path)
    assert (curves.loss_seconds, curves.loss_updates, curves.loss) == ([5.0, 10.0], [50, 80], [2.0, 1.4])
    assert (curves.eval_seconds, curves.eval_updates, curves.values) == ([8.0, 10.5], [55, 85], [0.4, 0.6])
    assert segment_start(tmp_path) == 7.5  # the resumed segment's clock starts where the kept records end
    (tmp_path / "fresh").mkdir()
    _write(tmp_path / "fresh" / "metrics.jsonl", [{"kind": "train", "elapsed": 1.0, "updates": 4, "loss": 3.0}])
    assert segment_start(tmp_path / "fresh") == 0.0


def test_multi_host_runs_read_host0(tmp_path):
    (tmp_path / "host0").mkdir()
    _write(tmp_path / "host0" / "metrics.jsonl", [{"kind": "train", "elapsed": 1.0, "updates": 4, "loss": 3.0}])
    assert read_curves(tmp_path).loss == [3.0]


def test_bad_metrics_line_is_named(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train"}\nnot json\n')
    with pytest.raises(RunDirError, match=r"metrics.jsonl:2: not a JSON record"):
        read_curves(tmp_path)


def test_load_trained_errors_name_what_is_missing(tmp_path):
    with pytest.raises(RunDirError, match=rf"^--checkpoint {tmp_path}: no model\.json in {tmp_path} \(is it a run\.py "
                                          r"run directory\?\)$"):
        load_trained(tmp_path)
    (tmp_path / "model.json").write_text('{"task": "pos"}')
    with pytest.raises(RunDirError, match=r"no best.pt or last.pt in"):
        load_trained(tmp_path)
    (tmp_path / "last.pt").write_bytes(b"truncated")
    with pytest.raises(RunDirError, match=r"last.pt: cannot read the checkpoint"):
        load_trained(tmp_path)


class CreatesAFile:
    """A crafted best.pt: unpickling it calls open(path, 'w'), i.e. runs code of the file's choosing."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_load_trained_refuses_a_crafted_checkpoint_and_names_a_foreign_one(tmp_path):
    (tmp_path / "model.json").write_text('{"task": "pos"}')
    marker = tmp_path / "created-by-the-pickle"
    torch.save({"format": 1, "model": {"w": torch.zeros(1)}, "x": CreatesAFile(marker)}, tmp_path / "best.pt")
    with pytest.raises(RunDirError, match=r"best\.pt: not a hogwild checkpoint \(it needs io\.open unpickled; "
                                          r"refused: loading it could run code\)"):
        load_trained(tmp_path)
    assert not marker.exists()
    torch.save({"w": torch.ones(2)}, tmp_path / "best.pt")  # a harmless foreign file: once a bare KeyError 'model'
    with pytest.raises(RunDirError, match=rf"^{tmp_path}/best\.pt: not a hogwild checkpoint \(no 'model' entry\)$"):
        load_trained(tmp_path)
    torch.save({"format": 1, "model": {"w": torch.ones(2)}}, tmp_path / "best.pt")
    spec, state, path = load_trained(tmp_path)
    assert spec == {"task": "pos"} and state["w"].tolist() == [1.0, 1.0] and path == tmp_path / "best.pt"


def test_a_checkpoint_file_inside_a_run_directory_is_accepted(tmp_path):
    """--checkpoint RUN/last.pt (or RUN/host0/best.pt) means that file of RUN: it said "no such run directory"."""
    (tmp_path / "model.json").write_text('{"task": "pos"}')
    (tmp_path / "host0").mkdir()
    for name, value in [("best.pt", 1.0), ("last.pt", 2.0), ("host0/best.pt", 3.0)]:
        torch.save({"format": 1, "model": {"w": torch.full((2,), value)}}, tmp_path / name)
    assert run_dir_of(tmp_path) == (tmp_path, None)
    for name, value in [("last.pt", 2.0), ("host0/best.pt", 3.0)]:
        run_dir, chosen = run_dir_of(tmp_path / name)
        assert (run_dir, chosen) == (tmp_path, tmp_path / name)
        spec, state, path = load_trained(run_dir, chosen)
        assert (path, state["w"].tolist()) == (tmp_path / name, [value, value])
    (tmp_path / "elsewhere.pt").write_bytes(b"x")
    outside = tmp_path / "host0" / "stray"
    outside.mkdir()
    (outside / "last.pt").write_bytes(b"x")
    with pytest.raises(RunDirError, match=rf"^--checkpoint {outside}/last\.pt is not inside a run directory: no "
                                          rf"model\.json in {outside} "):
        load_trained(*run_dir_of(outside / "last.pt"))
    with pytest.raises(RunDirError, match=rf"^--checkpoint {tmp_path}/none: no such run directory \(give the folder "
                                          r"run\.py wrote, or a checkpoint file in it\)$"):
        load_trained(tmp_path / "none")


def test_write_config_keeps_the_engines_part(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"config": {"lr": 0.1}, "command": ["run.py"]}))
    write_config(tmp_path, run={"task": "pos"})
    assert json.loads((tmp_path / "config.json").read_text()) == {"config": {"lr": 0.1}, "command": ["run.py"],
                                                                  "run": {"task": "pos"}}


def test_run_py_tag_on_a_crafted_best_pt_runs_nothing_and_exits_1(tmp_path):
    """The reported case, end to end: `run.py tag --checkpoint R` once unpickled R/best.pt, running its payload."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "model.json").write_text('{"task": "pos"}')
    marker = tmp_path / "created-by-the-pickle"
    torch.save({"format": 1, "model": {"w": torch.zeros(1)}, "x": CreatesAFile(marker)}, tmp_path / "best.pt")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(root / "run.py"), "tag", "--checkpoint", str(tmp_path)], cwd=root,
                          input="a b\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"run.py tag: error: {tmp_path}/best.pt: not a hogwild checkpoint (it needs io.open unpickled; refused: "
        f"loading it could run code)")
    assert not marker.exists()


def test_a_damaged_summary_or_model_json_is_named_with_its_line(tmp_path):
    _write(tmp_path / "metrics.jsonl", [{"kind": "train", "elapsed": 1.0, "updates": 5, "loss": 2.0}])
    (tmp_path / "summary.json").write_text('{"best": \n')
    with pytest.raises(ValueError, match=rf"^{tmp_path}/summary\.json:2:1: not valid JSON \(Expecting value\)$"):
        read_curves(tmp_path)
    (tmp_path / "model.json").write_text("ta/DET lavial/VERB\n")
    torch.save({"format": 1, "model": {"w": torch.ones(2)}}, tmp_path / "last.pt")
    with pytest.raises(ValueError, match=rf"^{tmp_path}/model\.json:1:1: not valid JSON \(Expecting value\)$"):
        load_trained(tmp_path)


def test_an_out_that_is_the_data_cache_or_overlaps_it_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """HOGWILD_CACHE equal to --out prepared the data into the folder, then refused it as "holds other files" and
    removed it: such a run could never start."""
    from hogwild.tasks.rundir import check_out
    from tests.tasks.helpers import run_py

    cache = tmp_path / "cache"
    monkeypatch.setenv("HOGWILD_CACHE", str(cache))
    for out, how in ((cache, "is"), (cache / "run", "overlaps"), (tmp_path, "overlaps")):
        with pytest.raises(RunDirError, match=rf"^--out {out}: {how} the data cache {cache} \(\$HOGWILD_CACHE\): the "
                                              r"prepared data and the run's files would mix; give them separate "
                                              r"folders$"):
            check_out(out, resume=False)
    check_out(tmp_path / "run", resume=False)
    done = run_py("--task", "pos", "--synthetic-size", "100", "--steps", "1", "--out", str(cache),
                  env={"HOGWILD_CACHE": str(cache)})
    assert done.returncode == 1 and done.stderr.splitlines()[-1].startswith(f"run.py: error: --out {cache}: is the "
                                                                           f"data cache")
    assert not cache.exists()
