"""The NMT job: parallel corpus (or the synthetic task) -> vocabularies -> attention GRU translator -> held-out BLEU;
and translating new text with a trained run directory.

During training a fixed seeded sample of the held-out set (`--eval-sentences`, default 500) is translated greedily
(fast) for the periodic checks and best.pt; the engine's final evaluation translates all of it. At the end the best
checkpoint translates it with `--beam` and the translations are written to `<run dir>/dev.hyp` (and `test.hyp` with
`--test`). Every evaluation is bounded: batches sorted by length, pairs cut to heldout.EVAL_MAX_LEN units (counted
in the job's info as dev_truncated), translations capped at heldout.DECODE_MAX_LEN words.

Usage: `job = nmt_job(RunOptions(task="nmt").resolved())`; `Translator.load(run_dir, spec, state).translate(lines)`
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hogwild.data.encoders import NmtEncoder
from hogwild.data.nmt_dataset import NmtDataConfig, NmtDataset, load_nmt_dataset, synthetic_nmt_dataset
from hogwild.models import (AttentionNMT, NMTConfig, corpus_bleu, evaluate_nmt, heldout_loss, nmt_loss, nmt_preset,
                            translate)
from hogwild.tasks.defaults import METRICS
from hogwild.tasks.heldout import DECODE_MAX_LEN, EVAL_BATCH, EVAL_MAX_LEN, cap_source, full_and_periodic, nmt_heldout
from hogwild.tasks.task_job import TaskJob, trained_model, training_batches


def load_data(options) -> NmtDataset:
    if options.synthetic:
        return synthetic_nmt_dataset(num_train=options.synthetic_size or 5000, seed=options.seed,
                                     batch_size=options.batch_size)
    if len(options.train) > 1:
        raise ValueError("--train: --task nmt takes one corpus prefix (e.g. europarl-fr-en/train)")
    return load_nmt_dataset(NmtDataConfig(train=options.train[0], dev=options.dev, src_lang=options.src_lang,
                                          tgt_lang=options.tgt_lang, max_len=options.max_len,
                                          vocab_size=options.vocab_size, subwords=options.subwords,
                                          subword_vocab_size=options.subword_vocab_size,
                                          train_limit=options.train_limit, batch_size=options.batch_size,
                                          seed=options.seed, encoding=options.encoding))


def nmt_job(options, dataset: NmtDataset | None = None, fixed_shapes: bool = False) -> TaskJob:
    """The NMT job for resolved options; `dataset` (default: `load_data(options)`) when the caller already holds it.
    fixed_shapes (workers that capture their step, hogwild.Config.graphs, or compile it): the padded loss (no host
    read) and source and target lengths padded to data/buckets.py's edges, so that the batches fall into a few
    shapes."""
    dataset = load_data(options) if dataset is None else dataset
    config = nmt_preset(options.preset, src_words=len(dataset.src_vocab), tgt_words=len(dataset.tgt_vocab),
                        dropout=options.dropout)
    torch.manual_seed(options.seed)
    model = AttentionNMT(config)
    count = min(options.dev_limit or len(dataset.dev_references), len(dataset.dev_references))
    full, periodic = full_and_periodic(nmt_heldout, dataset.dev, count, options.eval_sentences, options.seed)
    references, sources = dataset.dev_references[:count], dataset.dev_sources[:count]

    def evaluate(snapshot: torch.nn.Module, final: bool = False) -> dict[str, float]:
        """Greedy BLEU and loss: on the periodic sample during training, on the whole held-out set when final."""
        heldout = full if final else periodic
        hypotheses = [dataset.decode(ids) for ids in translate(snapshot, heldout.batches, beam_size=1,
                                                            max_len=DECODE_MAX_LEN)]
        loss = heldout_loss(snapshot, heldout.batches, nmt_loss)
        return {"bleu": corpus_bleu(hypotheses, [references[i] for i in heldout.rows]).bleu, "loss": loss["loss"],
                "perplexity": loss["perplexity"]}

    def finish(best: torch.nn.Module, run_dir: Path) -> dict[str, Any]:
        (run_dir / "dev.src").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
        (run_dir / "dev.ref").write_text("".join(r + "\n" for r in references), encoding="utf-8")
        dev = evaluate_nmt(best, full.batches, references, dataset.decode, beam_size=options.beam,
                           out_path=run_dir / "dev.hyp", max_len=DECODE_MAX_LEN)
        results = {"dev": {"bleu": dev.bleu, "beam": options.beam, "sentences": dev.sentences,
                           "signature": dev.signature}}
        if options.test:
            test = dataset.eval_set(options.test, batch_size=EVAL_BATCH)  # encoded exactly like the training text
            test_set = nmt_heldout(test.batcher, len(test.references))
            scored = evaluate_nmt(best, test_set.batches, test.references, dataset.decode, beam_size=options.beam,
                                  out_path=run_dir / "test.hyp", max_len=DECODE_MAX_LEN)
            results["test"] = {"bleu": scored.bleu, "beam": options.beam, "sentences": scored.sentences,
                               "signature": scored.signature}
        return results

    spec = {"task": "nmt", "preset": options.preset, "config": dataclasses.asdict(config)}
    # built by each worker from the (memory-mapped) arrays: nothing corpus-sized is built or pickled here
    loss_fn, batches = training_batches("nmt", nmt_loss, dataset.train, fixed_shapes, options.max_len,
                                        options.length_bucket)
    return TaskJob("nmt", model, loss_fn, batches, evaluate, METRICS["nmt"], spec, dataset.save, finish,
                   dict(dataset.info, dev_eval_sentences=len(references), dev_periodic_sentences=len(periodic.rows),
                        dev_truncated=full.truncated))


class Translator:
    """A trained translator read from a run directory (model.json, checkpoint, and the encoder: vocab.src/tgt.json,
    text.json, the sentencepiece models of a subword run)."""

    def __init__(self, model: AttentionNMT, encoder: NmtEncoder):
        self.model, self.encoder = model, encoder
        self.checkpoint: Path | None = None  # the file the parameters came from (set by tasks.inference)
        self.cut = 0  # lines of the last translate() longer than EVAL_MAX_LEN units, translated from their start

    @classmethod
    def load(cls, run_dir: Path, spec: dict, state: dict[str, torch.Tensor]) -> "Translator":
        return cls(trained_model(AttentionNMT, NMTConfig, spec, state), NmtEncoder.load(run_dir))

    def translate(self, lines: Sequence[str], beam: int = 5, batch_size: int = 32) -> list[str]:
        """Raw source lines -> detokenized translations (an empty line translates to an empty line), on the model's
        device. Sentences are batched by length (a translation does not depend on its batch: models/search.py).
        Bounded as the held-out evaluation is: a line is cut to its first EVAL_MAX_LEN units (counted in `cut`) and
        its translation has at most min(2 x source units + 10, DECODE_MAX_LEN) words."""
        out = [""] * len(lines)
        rows = [i for i, line in enumerate(lines) if line.strip()]
        ids = self.encoder.source_ids([lines[i] for i in rows])  # tokenized and encoded as in training, eos last
        self.cut = sum(1 for sentence in ids if len(sentence) > EVAL_MAX_LEN + 1)
        encoded = sorted(zip(rows, ids), key=lambda item: len(item[1]))
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start:start + batch_size]
            batch = cap_source(self.encoder.source_batch([sentence for _, sentence in chunk]))
            for (index, _), words in zip(chunk, translate(self.model, [batch], beam_size=beam,
                                                          max_len=DECODE_MAX_LEN)):
                out[index] = self.encoder.decode(words)
        return out
