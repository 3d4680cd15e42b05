"""tasks: what `run.py` and the reproduction scripts call - the POS and NMT jobs wired to `hogwild.train`, run
directories and summary.json, inference from a run directory, and plots.

Usage: `from hogwild.tasks import RunOptions, run_training`;
`summary = run_training(RunOptions(task="pos", time_limit=60))`
"""
from hogwild.tasks.options import RunOptions
from hogwild.tasks.training import run_training

__all__ = ["RunOptions", "run_training"]
