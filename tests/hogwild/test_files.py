"""hogwild.files: whole-record appends (a full disk leaves no half record and names the file), torn-tail repair,
atomic replacement, one writer per config.json section. A full disk is real: /dev/full, and a small tmpfs where
this process may mount one (root)."""
import json
import os

import pytest
import torch

from hogwild.files import RecordLog, WriteFailed, repair_torn_tail, update_sections, write_text_atomic
from hogwild.share import checkpoint as C


@pytest.fixture
def small_disk(tmpfs):
    """A 64 KiB tmpfs: writes past it fail with ENOSPC, as on a full disk."""
    return tmpfs("64k")


def test_a_torn_last_line_is_cut_off_and_reported(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "train", "updates": 1}\n{"kind": "tr')
    log = RecordLog(path)
    assert log.repaired == len('{"kind": "tr')
    log.append({"kind": "eval", "updates": 2})
    log.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"kind": "train", "updates": 1},
                                                                         {"kind": "eval", "updates": 2}]
    assert repair_torn_tail(path) == 0  # ends with a newline: nothing to do
    (tmp_path / "one.jsonl").write_text('{"no newline at all"')
    assert repair_torn_tail(tmp_path / "one.jsonl") == 20 and (tmp_path / "one.jsonl").read_text() == ""


def test_dev_full_write_names_the_file():
    log = RecordLog("/dev/full")
    with pytest.raises(WriteFailed, match=r"^/dev/full: cannot write: no space left on device"):
        log.append({"kind": "train"})
    log.close()


def test_records_stay_whole_when_the_disk_fills_up(small_disk):
    path = small_disk / "metrics.jsonl"
    log = RecordLog(path)
    record = {"kind": "train", "payload": "x" * 700}
    with pytest.raises(WriteFailed, match=rf"^{path}: cannot write: no space left on device"):
        for _ in range(1000):
            log.append(record)
    log.close()
    text = path.read_text()
    assert text.endswith("\n") and len(text.splitlines()) > 10
    assert all(json.loads(line) == record for line in text.splitlines())


def test_a_checkpoint_on_a_full_disk_names_the_file_and_keeps_the_old_one(small_disk):
    path = str(small_disk / "last.pt")
    C.save_checkpoint(path, {"value": torch.tensor([1.0])})
    with pytest.raises(WriteFailed, match=rf"^{path}: cannot write: no space left on device"):
        C.save_checkpoint(path, {"value": torch.zeros(100_000)})  # 400 KB on a 64 KiB disk
    assert C.read_checkpoint(path)["value"].item() == 1.0
    assert os.listdir(small_disk) == ["last.pt"]  # no temporary file left behind


def test_a_truncated_checkpoint_is_named(tmp_path):
    path = str(tmp_path / "last.pt")
    C.save_checkpoint(path, {"value": torch.zeros(1000)})
    with open(path, "r+b") as file:
        file.truncate(os.path.getsize(path) // 2)
    with pytest.raises(C.CheckpointError, match=rf"^{path}: cannot read the checkpoint \(truncated or not a "):
        C.read_checkpoint(path)


def test_atomic_text_and_sections(tmp_path):
    path = tmp_path / "config.json"
    write_text_atomic(path, '{"config": {"lr": 0.1}}')
    update_sections(path, run={"task": "pos"})
    update_sections(path, config={"lr": 0.2})
    assert json.loads(path.read_text()) == {"config": {"lr": 0.2}, "run": {"task": "pos"}}
    assert sorted(os.listdir(tmp_path)) == ["config.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # the mode open() gives, not mkstemp's private 0600
