"""run.py end to end on tiny corpora (real subprocesses, 2 CPU workers, ~20 s per task): the run directory, the
summary.json keys, learning, and the tag/translate round trip from the trained run directory (run.py's tag, translate
and plot called in this process: the round trips are computations on the run's files; their processes, streams and
signals are tests/tasks/test_inference.py's)."""
import json

import pytest

from hogwild.tasks.cli import main
from tests.tasks.helpers import run_py, write_parallel, write_tagged

pytestmark = pytest.mark.slow

SUMMARY_KEYS = {"task", "workers", "devices", "mode", "updates", "wall_seconds", "updates_per_second", "best",
                "final_train_loss", "staleness_mean", "skipped_updates"}


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def pos_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pos")
    train, dev = write_tagged(folder / "train.txt", 150, 0), write_tagged(folder / "dev.txt", 30, 1)
    out = folder / "run"
    done = run_py("--task", "pos", "--train", str(train), "--dev", str(dev), "--test", str(dev), "--format", "slash",
                  "--workers", "2", "--optimizer", "adam", "--steps", "240", "--eval-every", "80", "--log-every", "20",
                  "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    return {"out": out, "dev": dev, "stdout": done.stdout}


@pytest.fixture(scope="module")
def nmt_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nmt")
    train, dev = write_parallel(folder / "train", 120, 0), write_parallel(folder / "dev", 16, 1)
    out = folder / "run"
    done = run_py("--task", "nmt", "--train", str(train), "--dev", str(dev), "--src-lang", "fr", "--tgt-lang", "en",
                  "--workers", "2", "--optimizer", "adam", "--lr", "0.005", "--batch-size", "8", "--steps", "40",
                  "--eval-every", "20", "--beam", "2", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    return {"out": out, "dev": dev, "stdout": done.stdout}


def test_pos_run_directory_summary_and_learning(pos_run):
    out = pos_run["out"]
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "command.txt", "metrics.jsonl", "last.pt", "best.pt", "summary.json", "model.json",
            "vocab.words.json", "vocab.chars.json", "vocab.tags.json"} <= names
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert (summary["task"], summary["workers"], summary["devices"], summary["mode"]) == ("pos", 2, ["cpu", "cpu"],
                                                                                         "hogwild")
    assert summary["updates"] >= 240 and summary["skipped_updates"] == 0 and summary["stop_reason"] == "max_steps"
    assert summary["best"]["metric"] == "accuracy" and summary["best"]["update"] > 0
    assert summary["heldout"]["test"]["accuracy"] == summary["heldout"]["dev"]["accuracy"]  # --test = --dev here
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["optimizer"] == "adam" and config["config"]["max_steps"] == 240
    assert "--steps 240" in (out / "command.txt").read_text()
    evaluations = [r for r in _records(out) if r["kind"] == "eval"]
    assert evaluations[0]["updates"] == 0  # the untrained model, for the learning curve
    assert summary["best"]["value"] >= evaluations[0]["metrics"]["accuracy"] + 0.2  # it learned
    assert "[eval]" in pos_run["stdout"] and "best held-out accuracy" in pos_run["stdout"]


def test_nmt_run_directory_translations_and_learning(nmt_run):
    out = nmt_run["out"]
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "command.txt", "metrics.jsonl", "last.pt", "best.pt", "summary.json", "model.json",
            "vocab.src.json", "vocab.tgt.json", "text.json", "dev.src", "dev.ref", "dev.hyp"} <= names
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert (summary["task"], summary["best"]["metric"], summary["heldout"]["dev"]["beam"]) == ("nmt", "bleu", 2)
    # NMT Hogwild workers train on replicas by default (tasks.defaults.default_cpu_workers), and the run records it
    assert summary["devices"] == ["cpu-replica", "cpu-replica"]
    assert json.loads((out / "config.json").read_text())["run"]["cpu_workers"] == "replica"
    assert len((out / "dev.hyp").read_text().splitlines()) == 16
    evaluations = [r["metrics"] for r in _records(out) if r["kind"] in ("eval", "final_eval")]
    assert evaluations[-1]["loss"] < evaluations[0]["loss"] - 0.3  # held-out loss fell: it learned


def test_tag_round_trip_reproduces_the_held_out_accuracy(pos_run, tmp_path):
    gold = [[token.rsplit("/", 1) for token in line.split()] for line in pos_run["dev"].read_text().splitlines()]
    words = tmp_path / "words.txt"
    words.write_text("\n".join(" ".join(w for w, _ in sentence) for sentence in gold) + "\n", encoding="utf-8")
    assert main(["tag", "--checkpoint", str(pos_run["out"]), str(words), "--output", str(tmp_path / "tags.txt")]) == 0
    lines = (tmp_path / "tags.txt").read_text().splitlines()
    tagged = [[token.rsplit("/", 1) for token in line.split()] for line in lines]
    assert [[w for w, _ in s] for s in tagged] == [[w for w, _ in s] for s in gold]
    pairs = [(p[1], g[1]) for ps, gs in zip(tagged, gold) for p, g in zip(ps, gs)]
    accuracy = sum(p == g for p, g in pairs) / len(pairs)
    summary = json.loads((pos_run["out"] / "summary.json").read_text())
    assert accuracy == pytest.approx(summary["heldout"]["dev"]["accuracy"], abs=1e-12)
    # batch files, CoNLL output: one token line per word, a blank line between sentences
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("ta bagor fimat .\n\n", encoding="utf-8")
    second.write_text("ke dulic rosum fimat .\n", encoding="utf-8")
    assert main(["tag", "--checkpoint", str(pos_run["out"]), str(first), str(second), "--format", "conll",
                 "--output", str(tmp_path / "out.conll")]) == 0
    blocks = (tmp_path / "out.conll").read_text().split("\n\n")
    assert [[line.split("\t")[0] for line in b.splitlines()] for b in blocks] == [
        ["ta", "bagor", "fimat", "."], ["ke", "dulic", "rosum", "fimat", "."]]  # the empty line has no block


def test_translate_round_trip_matches_the_saved_held_out_translations(nmt_run, tmp_path):
    out = nmt_run["out"]
    assert main(["translate", "--checkpoint", str(out), "--beam", "2", str(out / "dev.src"), "--output",
                 str(tmp_path / "all.txt")]) == 0
    assert (tmp_path / "all.txt").read_text().splitlines() == (out / "dev.hyp").read_text().splitlines()
    source = tmp_path / "in.txt"
    source.write_text("\n".join((out / "dev.src").read_text().splitlines()[:3]) + "\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", str(out), "--beam", "2", str(source), "--output",
                 str(tmp_path / "out.txt")]) == 0
    assert (tmp_path / "out.txt").read_text().splitlines() == (out / "dev.hyp").read_text().splitlines()[:3]


def test_plot_draws_a_png_for_both_runs(pos_run, nmt_run, tmp_path):
    assert main(["plot", str(pos_run["out"]), str(nmt_run["out"]), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_data_line_says_where_the_lines_not_trained_on_went():
    """A 12-line corpus reported as "7 training pairs" said nothing of the 5 others (--subwords bpe dropped most of
    a corpus as longer than --max-len in pieces, silently)."""
    from hogwild.tasks.training import _data_line
    info = {"train_pairs": 7, "dev_eval_sentences": 1, "src_vocab": 13, "tgt_vocab": 12,
            "train": {"total": 12, "kept": 7, "dropped_empty": 1, "dropped_long": 4, "held_out": 0}}
    assert _data_line(info, 30) == ("7 training pairs (of 12 lines: 4 over --max-len 30 units, dropped; 1 empty, "
                                    "dropped), 1 held-out for evaluation, vocabularies 13 / 12")
    info["train"] = {"total": 20, "kept": 18, "dropped_empty": 0, "dropped_long": 0, "held_out": 2}
    info["train_pairs"] = 18
    assert _data_line(info, 50).startswith("18 training pairs (of 20 lines: 2 held out as the dev set), ")
    info["train"]["held_out"] = 0
    assert _data_line(info, 50).startswith("18 training pairs, 1 held-out")
