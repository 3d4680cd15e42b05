"""The POS tagging job: corpus (or the synthetic task) -> vocabularies -> char-BiLSTM tagger -> accuracy; and tagging
new text with a trained run directory.

Usage: `job = pos_job(RunOptions(task="pos").resolved())`; `tagger = PosTagging.load(run_dir); tagger.tag(lines)`
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from hogwild.data.encoders import PosEncoder
from hogwild.data.pos_dataset import (PosDataConfig, PosDataset, build_pos_dataset, load_pos_dataset, split_sentences,
                                      synthetic_pos_dataset)
from hogwild.models import POSConfig, POSTagger, evaluate_pos, pos_loss, pos_preset, tag_sentences
from hogwild.tasks.defaults import METRICS
from hogwild.tasks.heldout import EVAL_BATCH, full_and_periodic, pos_heldout
from hogwild.tasks.task_job import TaskJob, trained_model, training_batches


def load_data(options) -> PosDataset:
    """The synthetic dataset, the cached single-corpus dataset, or (several --train paths) a dataset built from the
    concatenated corpora."""
    if options.word_min_freq is None:  # options not yet resolved: the recipe's vocabulary threshold
        options = options.resolved()
    if options.synthetic:
        return synthetic_pos_dataset(num_train=options.synthetic_size or 2000, seed=options.seed,
                                     batch_size=options.batch_size, word_min_freq=options.word_min_freq)
    config = PosDataConfig(train=options.train[0], dev=options.dev, format=options.format, tag=options.tag,
                           word_column=options.word_column, tag_column=options.tag_column,
                           separator=options.separator, encoding=options.encoding,
                           word_min_freq=options.word_min_freq, batch_size=options.batch_size, seed=options.seed)
    if len(options.train) == 1:
        return load_pos_dataset(config)
    sentences = [s for path in options.train for s in config.read(path)]
    if options.dev:
        train, dev = sentences, config.read(options.dev)
    else:
        train, dev = split_sentences(sentences, config.dev_fraction, config.seed)
    return build_pos_dataset(train, dev, config, {"train_path": list(options.train), "dev_path": options.dev})


def pos_job(options, dataset: PosDataset | None = None, sparse_embeddings: bool = True,
            fixed_shapes: bool = False) -> TaskJob:
    """The POS job for resolved options; `dataset` (default: `load_data(options)`) when the caller already holds it.

    The embedding tables get sparse gradients: an update touches only the rows of the sentence's words and
    characters. Plain SGD's arithmetic is the same (the other rows' gradient is zero) and its step skips a dense
    (words x 128) gradient; adaptive optimizers update those rows' moments lazily (as torch.optim.SparseAdam).
    Measured on Brown (28,775 words, small preset, 1 process, optimizer step per update on a loaded 2-core machine):
    SGD 24-29 ms dense -> 6-7 ms sparse, Adam 229 ms -> 58 ms; forward+backward unchanged.

    fixed_shapes (workers that capture their step, hogwild.Config.graphs, or compile it): the padded loss (no host
    read) and sentence lengths padded to data/buckets.py's edges, so that the batches fall into a few shapes."""
    dataset = load_data(options) if dataset is None else dataset
    config = pos_preset(options.preset, n_words=len(dataset.words), n_chars=len(dataset.chars),
                        n_tags=len(dataset.tags), dropout=options.dropout, sparse_embeddings=sparse_embeddings)
    torch.manual_seed(options.seed)
    model = POSTagger(config)
    count = min(options.dev_limit or dataset.dev.size, dataset.dev.size)
    full, periodic = full_and_periodic(pos_heldout, dataset.dev, count, options.eval_sentences, options.seed)

    if periodic is full:  # every evaluation scores the same sentences: all compete for best.pt
        def evaluate(snapshot: torch.nn.Module) -> dict[str, float]:
            return evaluate_pos(snapshot, full.batches)
    else:
        def evaluate(snapshot: torch.nn.Module, final: bool = False) -> dict[str, float]:
            """Accuracy on the periodic sample during training, on every held-out sentence when final."""
            return evaluate_pos(snapshot, (full if final else periodic).batches)

    def finish(best: torch.nn.Module, run_dir: Path) -> dict[str, Any]:
        results: dict[str, Any] = {"dev": evaluate_pos(best, full.batches)}
        if options.test:
            results["test"] = evaluate_pos(best, dataset.eval_set(options.test, EVAL_BATCH))
        return results

    spec = {"task": "pos", "preset": options.preset, "config": dataclasses.asdict(config)}
    loss_fn, batches = training_batches("pos", pos_loss, dataset.train, fixed_shapes)
    return TaskJob("pos", model, loss_fn, batches, evaluate, METRICS["pos"], spec, dataset.save,
                   finish, dict(dataset.info, dev_eval_sentences=count, dev_periodic_sentences=len(periodic.rows)))


class PosTagging:
    """A trained tagger read from a run directory (model.json, vocab.*.json, best.pt or last.pt)."""

    def __init__(self, model: POSTagger, encoder: PosEncoder):
        self.model, self.encoder = model, encoder
        self.checkpoint: Path | None = None  # the file the parameters came from (set by tasks.inference)

    @classmethod
    def load(cls, run_dir: Path, spec: dict, state: dict[str, torch.Tensor]) -> "PosTagging":
        return cls(trained_model(POSTagger, POSConfig, spec, state), PosEncoder.load(run_dir))

    def tag(self, sentences: Sequence[Sequence[str]], batch_size: int = 32) -> list[list[str]]:
        """Tag tokenized sentences (encoded as the training data were: data.encoders); one tag per token."""
        return tag_sentences(self.model, sentences, self.encoder.encode_sentences, self.encoder.tags.itos, batch_size)
