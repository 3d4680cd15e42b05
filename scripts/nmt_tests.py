"""Scoring finished NMT runs on test sets, and whether two systems differ: what scripts.reproduce_nmt reports for
Table 1 beyond the training runs themselves.

A run's best checkpoint translates each test set once (beam search, on the given device). The translations and
their sacreBLEU score stay in the run directory (`test.<name>.beam<K>.hyp` and `.json`), so a stopped or repeated
report decodes nothing twice. `paired_bootstrap` is sacreBLEU's paired bootstrap resampling (the `sacrebleu
--paired-bs` test) of one baseline against other systems on the same sentences; beside each p-value it gives the
smallest BLEU difference the same test, on the same resamples, would have called significant (p < 0.05): the size
of difference a "no significant difference" could have missed.

Usage:
    europarl = TestSet("europarl", "../shared/corpora/europarl-fr-en/test", "fr", "en")
    score = score_test_set(Path("runs/x/workers-1-seed0"), europarl, beam=5)   # {"bleu": ..., "signature": ...}
    rows, signature = paired_bootstrap(refs, [("1 worker", hyps_a), ("2 workers", hyps_b)], samples=1000)
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hogwild.data.compressed import find_compressed, read_lines
from hogwild.files import write_text_atomic
from hogwild.models.nmt_eval import corpus_bleu


@dataclass(frozen=True)
class TestSet:
    """A line-aligned test corpus PREFIX.SRC / PREFIX.TGT (optionally compressed), by a short name."""
    name: str
    prefix: str
    src_lang: str
    tgt_lang: str

    def lines(self) -> tuple[list[str], list[str]]:
        """(source lines, reference lines); a clear error when the two sides differ in length."""
        src_path = find_compressed(f"{self.prefix}.{self.src_lang}")
        tgt_path = find_compressed(f"{self.prefix}.{self.tgt_lang}")
        sources, references = read_lines(src_path), read_lines(tgt_path)
        if len(sources) != len(references):
            raise ValueError(f"test set {self.name}: {src_path} has {len(sources)} lines but {tgt_path} has "
                             f"{len(references)}")
        return sources, references


def hypothesis_path(run_dir: Path, test: TestSet, beam: int) -> Path:
    return Path(run_dir) / f"test.{test.name}.beam{beam}.hyp"


def score_path(run_dir: Path, test: TestSet, beam: int) -> Path:
    """The sacreBLEU score of hypothesis_path's translations; written last, so it marks a finished decoding."""
    return hypothesis_path(run_dir, test, beam).with_suffix(".json")


def score_test_set(run_dir: Path, test: TestSet, beam: int, device: str = "cpu",
                   batch_size: int = 64) -> dict[str, Any]:
    """BLEU of the run's best checkpoint on `test` with beam `beam`; decoded once, then read from the run dir (again
    when the kept score came from another test corpus of the same name)."""
    hyp_path, scored = hypothesis_path(run_dir, test, beam), score_path(run_dir, test, beam)
    if scored.exists() and hyp_path.exists():
        kept = json.loads(scored.read_text(encoding="utf-8"))
        if kept.get("prefix") == test.prefix and kept.get("beam") == beam:
            return kept
    from hogwild.tasks.inference import load_translator

    sources, references = test.lines()
    translator = load_translator(run_dir)
    translator.model.to(device)
    hypotheses = translator.translate(sources, beam=beam, batch_size=batch_size)
    bleu = corpus_bleu(hypotheses, references)
    write_text_atomic(hyp_path, "".join(line + "\n" for line in hypotheses))
    score = {"test": test.name, "prefix": test.prefix, "beam": beam, "sentences": bleu.sentences,
             "bleu": bleu.bleu, "signature": bleu.signature, "detail": bleu.text}
    write_text_atomic(scored, json.dumps(score, indent=2) + "\n")
    return score


def paired_bootstrap(references: Sequence[str], systems: Sequence[tuple[str, Sequence[str]]], samples: int = 1000,
                     seed: int = 12345) -> tuple[list[dict[str, Any]], str]:
    """sacreBLEU's paired bootstrap resampling: the first system is the baseline. One row per system: BLEU, the
    bootstrap mean and 95% confidence half-width, and (for the others) sacreBLEU's p-value of the difference from
    the baseline (two-sided: how often the resampled difference is at least as far from its mean as zero).
    Returns (rows, signature)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ValueError("paired_bootstrap: needs a baseline and at least one other system")
    for name, hypotheses in systems:
        if len(hypotheses) != len(references):
            raise ValueError(f"paired_bootstrap: {name} has {len(hypotheses)} lines for {len(references)} references")
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)  # sacreBLEU reads its resampling seed from here
    try:
        test = PairedTest([(name, list(h)) for name, h in systems], {"BLEU": BLEU(references=[list(references)])},
                          references=None, test_type="bs", n_samples=samples)
        signatures, scores = test()
    finally:
        if previous is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = previous
    differences = resampled_differences(references, systems, samples, seed)
    rows = [{"system": name, "bleu": result.score, "mean": result.mean, "ci95": result.ci, "p_value": result.p_value,
             "detectable": None if centered is None else smallest_significant(centered)}
            for name, result, centered in zip(scores["System"], scores["BLEU"], [None, *differences])]
    return rows, str(signatures["BLEU"])


def resampled_differences(references: Sequence[str], systems: Sequence[tuple[str, Sequence[str]]], samples: int,
                          seed: int) -> list[Any]:
    """For each system after the first, sacreBLEU's bootstrap statistic against the first: |BLEU(system) -
    BLEU(baseline)| on each resample, less its mean. The resamples are sacreBLEU's own (the same generator, seed and
    draw as `PairedTest`), so its p-value is (the count of these above the real difference + 1) / (samples + 1)."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    metric = BLEU(references=[list(references)])
    picks = np.random.default_rng(seed).choice(len(references), size=(samples, len(references)), replace=True)

    def resampled(hypotheses):
        stats = np.array(metric._extract_corpus_statistics(list(hypotheses), None), dtype="float32")
        return np.array([metric._compute_score_from_stats(sample.sum(0)).score for sample in stats[picks]])

    baseline = resampled(systems[0][1])
    differences = []
    for _, hypotheses in systems[1:]:
        spread = np.abs(resampled(hypotheses) - baseline)
        differences.append(spread - spread.mean())
    return differences


def smallest_significant(centered, alpha: float = 0.05) -> float | None:
    """The smallest real BLEU difference that sacreBLEU's paired bootstrap, given these resampled statistics
    (resampled_differences), calls significant: p = (count above it + 1) / (samples + 1) < alpha. None when no
    difference can be (too few samples)."""
    most_above = math.ceil(alpha * (len(centered) + 1) - 1) - 1  # the largest count above that keeps p < alpha
    if most_above < 0:
        return None
    return float(sorted(centered, reverse=True)[most_above])
