"""A training job made ready for the engine: model, loss, batches, evaluation, and the files a run directory needs.

`tasks.pos_task.pos_job(options)` and `tasks.nmt_task.nmt_job(options)` build one (`tasks.job_builders.build_job` picks
by task); `tasks.training.run_training` hands its parts to `hogwild.train`, whose docstring states the contract:
`loss_fn(model, batch) -> loss or (loss, tokens)` and `evaluate(model) -> dict`. The batches are the dicts documented
in `data/batching.py`.

Usage: `job = pos_job(options); result = hogwild.train(job.model, job.loss_fn, job.batches, config, job.evaluate)`
"""
from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from hogwild.data.batching import check_edges
from hogwild.tasks.defaults import graph_bucket_edges

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


def fixed_shape_training(loss_fn: Callable, batcher: Any, task: str, max_len: int = 0) -> tuple[Callable, Any]:
    """What workers that capture or compile their step train on (hogwild.Config.graphs, --compile): the task's padded
    loss (no host read) and a copy of its batcher padding lengths to tasks.defaults' bucket edges, so that the
    batches fall into a few shapes."""
    batcher = copy.copy(batcher)
    batcher.bucket_edges = check_edges(graph_bucket_edges(task, max_len))
    return functools.partial(loss_fn, padded=True), batcher


def trained_model(model_class: type[nn.Module], config_class: type, spec: dict[str, Any],
                  state: dict[str, Any]) -> nn.Module:
    """A model rebuilt from its model.json `spec` and a checkpoint's state_dict, in eval mode (tag / translate)."""
    model = model_class(config_class(**spec["config"]))
    model.load_state_dict(state)
    return model.eval()
