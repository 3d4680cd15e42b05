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
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hogwild.data.batching import NmtBatcher, ParallelData
from hogwild.data.nmt_dataset import NmtDataConfig, NmtDataset, TextDecoder, load_nmt_dataset, synthetic_nmt_dataset
from hogwild.data.parallel import read_parallel
from hogwild.data.moses import MosesText, tokenize_lines
from hogwild.data.vocab import Vocabulary
from hogwild.models import (AttentionNMT, NMTConfig, corpus_bleu, evaluate_nmt, heldout_loss, nmt_loss, nmt_preset,
                            translate)
from hogwild.tasks.heldout import DECODE_MAX_LEN, EVAL_BATCH, full_and_periodic, nmt_heldout
from hogwild.tasks.job import TaskJob

TEXT_FILE = "text.json"  # how to turn text into tokens and back: {"kind": "moses"|"join", "src_lang", "tgt_lang"}


def load_data(options) -> NmtDataset:
    if options.synthetic:
        return synthetic_nmt_dataset(num_train=options.synthetic_size or 5000, seed=options.seed,
                                     batch_size=options.batch_size)
    if len(options.train) > 1:
        raise ValueError("--train: --task nmt takes one corpus prefix (e.g. europarl-fr-en/train)")
    return load_nmt_dataset(NmtDataConfig(train=options.train[0], dev=options.dev, src_lang=options.src_lang,
                                          tgt_lang=options.tgt_lang, max_len=options.max_len,
                                          vocab_size=options.vocab_size, train_limit=options.train_limit,
                                          batch_size=options.batch_size, seed=options.seed,
                                          encoding=options.encoding))


def nmt_job(options, dataset: NmtDataset | None = None) -> TaskJob:
    """The NMT job for resolved options; `dataset` (default: `load_data(options)`) when the caller already holds it."""
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
            test = read_parallel(options.test, options.src_lang, options.tgt_lang, None,
                                 lambda lines, lang: tokenize_lines(lines, lang), options.encoding)
            data = ParallelData.tensorize(list(zip(test.src, test.tgt)), dataset.src_vocab, dataset.tgt_vocab)
            test_set = nmt_heldout(NmtBatcher(data, EVAL_BATCH, shuffle=False), len(data))
            scored = evaluate_nmt(best, test_set.batches, test.tgt_lines, dataset.decode, beam_size=options.beam,
                                  out_path=run_dir / "test.hyp", max_len=DECODE_MAX_LEN)
            results["test"] = {"bleu": scored.bleu, "beam": options.beam, "sentences": scored.sentences,
                               "signature": scored.signature}
        return results

    def save(run_dir: Path) -> None:
        dataset.save(run_dir)
        kind = "join" if options.synthetic else "moses"
        (run_dir / TEXT_FILE).write_text(json.dumps({"kind": kind, "src_lang": options.src_lang,
                                                     "tgt_lang": options.tgt_lang}) + "\n", encoding="utf-8")

    spec = {"task": "nmt", "preset": options.preset, "config": dataclasses.asdict(config)}
    return TaskJob("nmt", model, nmt_loss, list(dataset.train.epoch(0)), evaluate, "bleu", spec, save, finish,
                   dict(dataset.info, dev_eval_sentences=len(references), dev_periodic_sentences=len(periodic.rows),
                        dev_truncated=full.truncated))


class Translator:
    """A trained translator read from a run directory (model.json, vocab.src/tgt.json, text.json, checkpoint)."""

    def __init__(self, model: AttentionNMT, src: Vocabulary, tgt: Vocabulary, text: dict):
        self.model, self.src, self.tgt = model, src, tgt
        moses = text["kind"] == "moses"
        self._tokenize = MosesText(text["src_lang"]).tokenize if moses else str.split
        self._detokenize = TextDecoder("moses", text["tgt_lang"]) if moses else TextDecoder("join")

    @classmethod
    def load(cls, run_dir: Path, spec: dict, state: dict[str, torch.Tensor]) -> "Translator":
        model = AttentionNMT(NMTConfig(**spec["config"]))
        model.load_state_dict(state)
        model.eval()
        text = json.loads((run_dir / TEXT_FILE).read_text(encoding="utf-8"))
        return cls(model, Vocabulary.load(run_dir / "vocab.src.json"), Vocabulary.load(run_dir / "vocab.tgt.json"),
                   text)

    def translate(self, lines: Sequence[str], beam: int = 5, batch_size: int = 32) -> list[str]:
        """Raw source lines -> detokenized translations (an empty line translates to an empty line), on the model's
        device. Sentences are batched by length (a translation does not depend on its batch: models/search.py)."""
        out = [""] * len(lines)
        encoded = sorted(((i, self.src.encode(self._tokenize(line), eos=True)) for i, line in enumerate(lines)
                          if line.strip()), key=lambda item: len(item[1]))
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start:start + batch_size]
            width = max(len(ids) for _, ids in chunk)
            src = torch.zeros(len(chunk), width, dtype=torch.int64)  # (B, S), pad 0
            for row, (_, ids) in enumerate(chunk):
                src[row, :len(ids)] = torch.tensor(ids)
            batch = {"src": src, "src_mask": src != 0}
            for (index, _), ids in zip(chunk, translate(self.model, [batch], beam_size=beam)):
                out[index] = self._detokenize(self.tgt.decode(ids))
        return out
