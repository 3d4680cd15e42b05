"""`run.py plot`: training loss and the held-out metric against wall time and against updates, one line per run
(a 2 x 2 grid of matplotlib panels saved as PNG, or in the format the file's suffix names: .pdf, .svg ...). The
reproduction scripts draw their figures with it too.

Usage: `plot_runs(["runs/a", "runs/b"], "curves.png", labels=["1 worker", "2 workers"])`
"""
from __future__ import annotations

import io
import math
import stat
from collections.abc import Sequence
from pathlib import Path

from hogwild.files import write_atomic
from hogwild.tasks.options import OptionError
from hogwild.tasks.rundir import Curves, RunDirError, engine_dir, read_curves

_METRIC_NAMES = {"accuracy": "held-out accuracy", "bleu": "held-out BLEU", "loss": "held-out loss"}
# Past about 1e307 matplotlib's linear ticks overflow ("arange: cannot compute length"); an axis with a value beyond
# this (a diverged loss) is drawn on a symlog scale instead, which spans the whole float range.
LINEAR_LIMIT = 1e300


def plot_curves(curves: Sequence[Curves], out: str | Path, title: str | None = None,
                minutes: bool | None = None) -> Path:
    """Draw the curves; time in minutes when the longest run exceeds 5 minutes (or as `minutes` says)."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    if not curves:
        raise ValueError("plot: give at least one run directory")
    out = figure_path(out)  # refused before anything is drawn
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
    image = io.BytesIO()
    with np.errstate(over="ignore"):  # a symlog axis near the float limit: ticks computed past it are dropped anyway
        for axis in axes.flat:
            _symlog_past_linear_limit(axis)
        figure.tight_layout()
        figure.savefig(image, format=out.suffix[1:].lower(), dpi=110)
    plt.close(figure)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(out, lambda file: file.write(image.getvalue()))  # a failed write leaves no partial file
    except OSError as error:
        error.option = "out"  # run.py names the flag: `--out: PATH: cannot write: no space left on device ...`
        raise
    return out


def _symlog_past_linear_limit(axis) -> None:
    """Put an axis holding a value beyond LINEAR_LIMIT on a symlog scale, its limits the data's own: matplotlib's
    margins around such values overflow to infinity (and its limits fall back to +-0.001)."""
    for data, set_scale, set_limits in ((lambda line: line.get_xdata(), axis.set_xscale, axis.set_xlim),
                                        (lambda line: line.get_ydata(), axis.set_yscale, axis.set_ylim)):
        values = [float(v) for line in axis.get_lines() for v in data(line) if math.isfinite(v)]
        if values and max(abs(v) for v in values) > LINEAR_LIMIT:
            low, high = min(values), max(values)
            set_scale("symlog")
            set_limits(min(low, 0.0), max(high, 0.0)) if low == high else set_limits(low, high)


def figure_path(out: str | Path) -> Path:
    """The file a figure goes to: `out`, `out/curves.png` for a folder, `out.png` without a suffix (as matplotlib
    would write it, so that the path printed is the file written). Something there that is neither a folder nor a
    regular file (a device such as /dev/full, a pipe) is refused: it would be replaced, or `out.png` written beside
    it; so is a suffix that names no format matplotlib writes (a PNG named curves.txt)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    out = Path(out)
    if out.is_dir():
        return out / "curves.png"
    if out.exists() and not stat.S_ISREG(out.stat().st_mode):
        raise OptionError("out", f"{out} is not a regular file or a folder: give the PNG file (or a folder) to write")
    out = out if out.suffix else out.with_name(out.name + ".png")
    formats = FigureCanvasAgg.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise OptionError("out", f"{out}: {out.suffix} names no format matplotlib writes ({', '.join(sorted(formats))})"
                                 f"; give a .png file, or another of these")
    return out


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path, labels: Sequence[str] | None = None,
              title: str | None = None) -> Path:
    """Read each run directory's metrics.jsonl and draw them together."""
    if labels is not None and len(labels) != len(run_dirs):
        raise OptionError("labels", f"{len(labels)} labels for {len(run_dirs)} run directories: give one per run")
    for run_dir in run_dirs:
        metrics = engine_dir(Path(run_dir)) / "metrics.jsonl"
        if metrics.is_dir():
            raise RunDirError(f"{metrics}: a folder, not a metrics file (a run writes its records to the file "
                              f"metrics.jsonl)")
    names = labels or [Path(d).name for d in run_dirs]
    return plot_curves([read_curves(d, name=n) for d, n in zip(run_dirs, names)], out, title)
