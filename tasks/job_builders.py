"""Which job builder serves which task: `build_job(options)` for run.py's training runs (tasks.training).

The builders live beside their task (tasks.pos_task, tasks.nmt_task) and import only tasks.task_job; this module
sits above them, so the imports run one way: job_builders -> pos_task/nmt_task -> task_job.

Usage: `job = build_job(RunOptions(task="nmt").resolved())`
"""
from __future__ import annotations

from hogwild.tasks.nmt_task import nmt_job
from hogwild.tasks.pos_task import pos_job
from hogwild.tasks.task_job import TaskJob

JOB_BUILDERS = {"pos": pos_job, "nmt": nmt_job}  # keys: tasks.defaults.TASKS


def build_job(options, fixed_shapes: bool = False) -> TaskJob:
    """The job for `options.task` (options must be `RunOptions.resolved()`); fixed_shapes: its workers run the
    graphed step (hogwild.Config.graphed) or a compiled one, which want the task's padded loss (no host read, no graph
    break) and length-bucketed batches (a few shapes: a graph or a compile each)."""
    return JOB_BUILDERS[options.task](options, fixed_shapes=fixed_shapes)
