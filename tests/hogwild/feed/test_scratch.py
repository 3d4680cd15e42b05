"""hogwild/feed/scratch.py: a run's scratch folder is locked while its process lives; the folders of runs that are
gone (their lock free) are removed by the next run, anything else in $TMPDIR is left alone."""
import os
import subprocess
import sys

from hogwild.feed import scratch


def test_only_the_folders_of_runs_that_are_gone_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path))
    code = "from hogwild.feed.scratch import make_scratch; print(make_scratch())"  # exits without removing it
    gone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "TMPDIR": str(tmp_path)}).stdout.strip()
    (tmp_path / gone / "batches.bin").write_bytes(b"x" * 10)
    for name in ("hogwild-test-cache", "hogwild-other"):  # not scratch folders: no .owner
        (tmp_path / name).mkdir()
    (tmp_path / "hogwild-file").write_text("a file")
    mine = scratch.make_scratch()  # removes the dead run's folder first
    try:
        assert sorted(os.listdir(tmp_path)) == sorted(["hogwild-test-cache", "hogwild-other", "hogwild-file",
                                                       os.path.basename(mine)])
        assert os.listdir(mine) == [".owner"]
        assert scratch.remove_abandoned(str(tmp_path)) == []  # this process holds its lock
    finally:
        scratch.remove_scratch(mine)
    assert not os.path.exists(mine)
