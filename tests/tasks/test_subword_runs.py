"""run.py --subwords end to end on a tiny corpus: sentencepiece models trained on the training side and kept in the run
directory, BLEU and dev.hyp on decoded (detokenized) text, `run.py translate` with the saved models, and --resume
rebuilding the same models from another cache folder."""
import json

import pytest

from hogwild.data.synthetic import synthetic_parallel
from hogwild.tasks.cli import main
from tests.tasks.helpers import run_py

pytestmark = pytest.mark.slow


def write_text(prefix, count, seed):
    """Capitalised sentences with a final full stop (so that decoding must restore spacing), fr and en."""
    pairs = synthetic_parallel(count, seed=seed)
    for lang, side in (("fr", 0), ("en", 1)):
        lines = [" ".join(pair[side]).capitalize() + "." for pair in pairs]
        prefix.with_name(f"{prefix.name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return prefix


def test_subword_run_trains_translates_and_resumes(tmp_path):
    train, dev = write_text(tmp_path / "train", 80, 0), write_text(tmp_path / "dev", 6, 1)
    out = tmp_path / "run"
    command = ["--task", "nmt", "--train", str(train), "--dev", str(dev), "--test", str(dev), "--subwords", "bpe",
               "--subword-vocab-size", "60", "--mode", "single", "--optimizer", "adam", "--batch-size", "8",
               "--eval-every", "3", "--beam", "2", "--out", str(out), "--no-progress"]
    done = run_py(*command, "--steps", "6", env={"HOGWILD_CACHE": str(tmp_path / "cache-a")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((out / "text.json").read_text()) == {"kind": "subwords", "src_lang": "fr", "tgt_lang": "en",
                                                          "lowercase": False}
    assert (out / "spm.src.model").is_file() and (out / "spm.tgt.model").is_file()
    assert json.loads((out / "config.json").read_text())["run"]["subwords"] == "bpe"
    pieces = json.loads((out / "vocab.tgt.json").read_text())["tokens"]
    assert any(piece.startswith("\u2581") for piece in pieces)  # the vocabulary holds pieces, not words
    references = (dev.with_name("dev.en")).read_text().splitlines()
    assert (out / "dev.ref").read_text().splitlines() == references  # raw text: BLEU on detokenized output
    hypotheses = (out / "dev.hyp").read_text().splitlines()
    assert len(hypotheses) == 6 and not any("\u2581" in line for line in hypotheses)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heldout"]["test"]["bleu"] == summary["heldout"]["dev"]["bleu"]  # --test is --dev, same path

    # run.py translate in this process: the saved models decode as the run did (its process: test_inference.py)
    translated = tmp_path / "translated.txt"
    assert main(["translate", "--checkpoint", str(out), "--beam", "2", str(out / "dev.src"), "--output",
                 str(translated)]) == 0
    assert translated.read_text().splitlines() == hypotheses

    done = run_py(*command, "--steps", "9", "--resume", env={"HOGWILD_CACHE": str(tmp_path / "cache-b")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming" in done.stdout and json.loads((out / "summary.json").read_text())["updates"] == 9
