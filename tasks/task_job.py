"""A training job made ready for the engine: model, loss, batches, evaluation, and the files a run directory needs.

`tasks.pos_task.pos_job(options)` and `tasks.nmt_task.nmt_job(options)` build one (`tasks.job_builders.build_job` picks
by task); `tasks.training.run_training` hands its parts to `hogwild.train`, whose docstring states the contract:
`loss_fn(model, batch) -> loss or (loss, tokens)` and `evaluate(model) -> dict`. The batches are the dicts documented
in `data/batching.py`.

Usage: `job = pos_job(options); result = hogwild.train(job.model, job.loss_fn, job.batches, config, job.evaluate)`
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from hogwild.data.batch_set import BatchSet
from hogwild.data.buckets import training_buckets

MODEL_FILE = "model.json"  # which model class and sizes: enough to rebuild it for inference


@dataclass
class TaskJob:
    task: str  # 'pos' | 'nmt'
    model: nn.Module  # on the CPU; the engine shares it
    loss_fn: Callable  # module-level (picklable): models.pos_loss / models.nmt_loss
    batches: Sequence[dict]  # training batches (data/batching.py's dicts), one update each: a data.batch_set.BatchSet
    evaluate: Callable[[nn.Module], dict[str, float]]  # held-out metrics, the main metric first
    metric: str  # 'accuracy' | 'bleu': decides the best checkpoint
    model_spec: dict[str, Any]  # {"task", "preset", "config": model config fields}
    save_vocabularies: Callable[[Path], None]  # writes vocab.*.json (+ sentencepiece models) into the run dir
    finish: Callable[[nn.Module, Path], dict[str, Any]]  # final held-out evaluation of the best model; may write files
    info: dict[str, Any] = field(default_factory=dict)  # corpus statistics

    def write_files(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.save_vocabularies(run_dir)
        (run_dir / MODEL_FILE).write_text(json.dumps(self.model_spec, indent=2) + "\n", encoding="utf-8")


def training_batches(task: str, loss_fn: Callable, batcher: Any, fixed_shapes: bool, max_len: int = 0,
                     length_bucket: int = 1) -> tuple[Callable, BatchSet]:
    """What the workers train on: the batcher's batches as a BatchSet, their lengths padded by
    data.buckets.training_buckets (fixed_shapes: workers that capture or compile their step, hogwild.Config.graphs,
    --compile, so that the batches fall into a few shapes; NMT's --length-bucket), and with fixed_shapes the task's
    padded loss (no host read)."""
    buckets = training_buckets(task, fixed_shapes, max_len, length_bucket)
    loss = functools.partial(loss_fn, padded=True) if fixed_shapes else loss_fn
    return loss, BatchSet(batcher if buckets is None else batcher.with_buckets(buckets))


def trained_model(model_class: type[nn.Module], config_class: type, spec: dict[str, Any],
                  state: dict[str, Any]) -> nn.Module:
    """A model rebuilt from its model.json `spec` and a checkpoint's state_dict, in eval mode (tag / translate)."""
    model = model_class(config_class(**spec["config"]))
    model.load_state_dict(state)
    return model.eval()
