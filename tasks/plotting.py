"""`run.py plot`: training loss and the held-out metric against wall time and against updates, one line per run
(a 2 x 2 grid of matplotlib panels saved as PNG). The reproduction scripts draw their figures with it too.

Usage: `plot_runs(["runs/a", "runs/b"], "curves.png", labels=["1 worker", "2 workers"])`
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hogwild.tasks.rundir import Curves, read_curves

_METRIC_NAMES = {"accuracy": "held-out accuracy", "bleu": "held-out BLEU", "loss": "held-out loss"}


def plot_curves(curves: Sequence[Curves], out: str | Path, title: str | None = None,
                minutes: bool | None = None) -> Path:
    """Draw the curves; time in minutes when the longest run exceeds 5 minutes (or as `minutes` says)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    if not curves:
        raise ValueError("plot: give at least one run directory")
    longest = max([c.loss_seconds[-1] for c in curves if c.loss_seconds] + [0.0])
    minutes = longest > 300 if minutes is None else minutes
    scale, unit = (60.0, "minutes") if minutes else (1.0, "seconds")
    metrics = sorted({c.metric for c in curves if c.metric})
    metric_label = " / ".join(_METRIC_NAMES.get(m, m) for m in metrics) or "held-out metric"
    figure, axes = plt.subplots(2, 2, figsize=(11, 7.5), squeeze=False)
    for curve in curves:
        single = {"marker": "o", "markersize": 3} if len(curve.loss) == 1 else {}  # one record: a point, not a line
        axes[0][0].plot([s / scale for s in curve.loss_seconds], curve.loss, label=curve.name, **single)
        axes[0][1].plot(curve.loss_updates, curve.loss, label=curve.name, **single)
        axes[1][0].plot([s / scale for s in curve.eval_seconds], curve.values, marker="o", markersize=3,
                        label=curve.name)
        axes[1][1].plot(curve.eval_updates, curve.values, marker="o", markersize=3, label=curve.name)
    for column, xlabel in enumerate((f"wall time ({unit})", "updates")):
        axes[0][column].set(xlabel=xlabel, ylabel="training loss")
        axes[1][column].set(xlabel=xlabel, ylabel=metric_label)
        for row in range(2):
            axes[row][column].grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    out = figure_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def figure_path(out: str | Path) -> Path:
    """The file a figure goes to: `out`, `out/curves.png` for a folder, `out.png` without a suffix (as matplotlib
    would write it, so that the path printed is the file written)."""
    out = Path(out)
    if out.is_dir():
        return out / "curves.png"
    return out if out.suffix else out.with_name(out.name + ".png")


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path, labels: Sequence[str] | None = None,
              title: str | None = None) -> Path:
    """Read each run directory's metrics.jsonl and draw them together."""
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"plot: {len(labels)} labels for {len(run_dirs)} runs")
    names = labels or [Path(d).name for d in run_dirs]
    return plot_curves([read_curves(d, name=n) for d, n in zip(run_dirs, names)], out, title)
