"""`run.py plot` (tasks/plotting.py) at its edges: values near the float limit, an --out that is a device or on a full
disk or whose suffix names the format, a metrics.jsonl that is a folder, --labels not one per run."""
import os
import warnings

import matplotlib
import numpy as np
import pytest

from hogwild.tasks.cli import main
from hogwild.tasks.plotting import LINEAR_LIMIT, _symlog_past_linear_limit

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _run(tmp_path, *records: str):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(record + "\n" for record in records))
    return run


def test_values_near_the_float_limit_are_drawn_on_a_symlog_axis(tmp_path, capsys):
    """A diverged loss of +-1e308 (and a metric and a clock there too): linear ticks overflowed ("arange: cannot
    compute length"); the axis is symlog, its limits the data's, and nothing is printed but the file."""
    run = _run(tmp_path, '{"kind": "train", "elapsed": 0.5, "updates": 5, "loss": 1e308}',
               '{"kind": "train", "elapsed": 1.0, "updates": 10, "loss": -1e308}',
               '{"kind": "train", "elapsed": 1e308, "updates": 15, "loss": 3.0}',
               '{"kind": "eval", "elapsed": 2.0, "updates": 20, "metrics": {"accuracy": 1.7976931348623157e308}}')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow warnings, printed with a line of matplotlib's source
        assert main(["plot", str(run), "--out", str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr() == (f"{tmp_path / 'p.png'}\n", "")
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG
    figure, (huge, ordinary) = plt.subplots(1, 2)
    huge.plot([0.0, 1.0, 2.0], [1e308, -1e308, 3.0])
    ordinary.plot([0.0, 1.0], [2.5, LINEAR_LIMIT])
    with np.errstate(over="ignore"):  # as plot_curves draws
        for axis in (huge, ordinary):
            _symlog_past_linear_limit(axis)
    assert (huge.get_xscale(), huge.get_yscale(), huge.get_ylim()) == ("linear", "symlog", (-1e308, 1e308))
    assert (ordinary.get_xscale(), ordinary.get_yscale()) == ("linear", "linear")
    plt.close(figure)


def test_an_out_that_is_not_a_file_or_folder_is_refused_naming_out(tmp_path, capsys):
    """/dev/full (a device) and a FIFO: a usage error naming --out, nothing written beside them (it wrote
    /dev/full.png)."""
    run = _run(tmp_path, '{"kind": "train", "elapsed": 1.0, "updates": 10, "loss": 2.5}')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for out in [fifo] + [p for p in ("/dev/full",) if os.path.exists(p)]:
        with pytest.raises(SystemExit) as exit:
            main(["plot", str(run), "--out", str(out)])
        assert exit.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"run.py plot: error: --out: {out} is not a regular file or a folder: give the PNG file (or a folder) "
            f"to write")
        assert not os.path.exists(f"{out}.png")


def test_a_full_disk_is_named_with_out_and_leaves_no_partial_png(tmp_path, tmpfs, capsys):
    run = _run(tmp_path, '{"kind": "train", "elapsed": 1.0, "updates": 10, "loss": 2.5}')
    disk = tmpfs("8k")  # the PNG is ~50 kB
    assert main(["plot", str(run), "--out", str(disk / "p.png")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"run.py plot: error: --out: {disk / 'p.png'}: cannot write: no space left on device"), err
    assert list(disk.iterdir()) == []


def test_a_metrics_file_that_is_a_folder_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "metrics.jsonl").mkdir(parents=True)
    assert main(["plot", str(run), "--out", str(tmp_path / "p.png")]) == 1
    assert capsys.readouterr().err == (f"run.py plot: error: {run / 'metrics.jsonl'}: a folder, not a metrics file "
                                       f"(a run writes its records to the file metrics.jsonl)\n")
    assert not (tmp_path / "p.png").exists()


def test_the_suffix_of_out_names_the_format_written(tmp_path, capsys):
    """--out curves.pdf (or .svg) was a PNG under that name; a suffix of no format is refused naming --out."""
    run = _run(tmp_path, '{"kind": "train", "elapsed": 1.0, "updates": 10, "loss": 2.5}')
    for name, magic in (("c.pdf", b"%PDF"), ("c.svg", b"<?xml"), ("c.PNG", PNG), ("c", PNG)):
        assert main(["plot", str(run), "--out", str(tmp_path / name)]) == 0
        written = tmp_path / (name if "." in name else name + ".png")
        assert capsys.readouterr().out == f"{written}\n"
        assert written.read_bytes().startswith(magic)
    with pytest.raises(SystemExit) as exit:
        main(["plot", str(run), "--out", str(tmp_path / "curves.v2")])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        f"run.py plot: error: --out: {tmp_path / 'curves.v2'}: .v2 names no format matplotlib writes (")
    assert not (tmp_path / "curves.v2").exists()


def test_labels_not_one_per_run_are_a_usage_error_naming_labels(tmp_path, capsys):
    run = _run(tmp_path, '{"kind": "train", "elapsed": 1.0, "updates": 10, "loss": 2.5}')
    with pytest.raises(SystemExit) as exit:
        main(["plot", str(run), str(run), "--labels", "one", "--out", str(tmp_path / "p.png")])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("run.py plot: error: --labels: 1 labels for 2 run "
                                                        "directories: give one per run")
