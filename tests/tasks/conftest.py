"""Fixtures of the tasks tests: tiny corpora written to a temporary folder."""
from __future__ import annotations

import pathlib

import pytest

from tests.tasks.helpers import write_parallel, write_tagged


@pytest.fixture
def tiny_pos(tmp_path) -> dict[str, pathlib.Path]:
    return {"train": write_tagged(tmp_path / "train.txt", 150, 0), "dev": write_tagged(tmp_path / "dev.txt", 30, 1)}


@pytest.fixture
def tiny_nmt(tmp_path) -> dict[str, pathlib.Path]:
    return {"train": write_parallel(tmp_path / "train", 120, 0), "dev": write_parallel(tmp_path / "dev", 20, 1)}
