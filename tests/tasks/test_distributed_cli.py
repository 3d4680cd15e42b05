"""`mpiexec -n 2 python run.py ... --distributed allreduce --workers 1`: two training hosts (MPI ranks) each with a
local Hogwild worker, averaging parameters; one summary.json for the job, per-host engine files in host<i>/, and the
run directory usable for inference (run.py tag in this process: the round trip is a computation on the run's files;
tag's own process is tests/tasks/test_inference.py's). The run trains with POS's default optimizer (plain SGD: no
torch.optim in a worker, whose first step imports torch._dynamo, seconds of each process's CPU)."""
import json
import os
import subprocess
import sys

import pytest

from hogwild.tasks.cli import main
from tests.mpi import MPIEXEC, mpi_missing
from tests.tasks.helpers import REPO, run_py
from tests.tasks.misuse_helpers import fingerprint

pytestmark = [pytest.mark.slow, pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))]


def test_run_py_under_mpiexec_with_allreduce(tmp_path, capsys):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(REPO / "run.py"), "--task", "pos",
                           "--synthetic-size", "200", "--steps", "40", "--workers", "1",
                           "--distributed", "allreduce", "--period", "4", "--eval-every", "20", "--out", str(out),
                           "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("best held-out accuracy") == 1  # one rank speaks for the job
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["distributed"], summary["hosts"], summary["workers"]) == ("allreduce", 2, 1)
    assert summary["updates"] >= 40 and summary["best"]["metric"] == "accuracy"
    assert (out / "host0" / "last.pt").exists() and (out / "host1" / "last.pt").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["distributed"] == "allreduce" and config["run"]["period"] == 4
    sentence = tmp_path / "in.txt"
    sentence.write_text("ta bagor fimat .\n")
    capsys.readouterr()
    assert main(["tag", "--checkpoint", str(out), str(sentence)]) == 0
    assert [token.rsplit("/", 1)[0] for token in capsys.readouterr().out.split()] == ["ta", "bagor", "fimat", "."]
    before = fingerprint(out)  # without mpiexec the job has one training host: each host's shard would not fit
    alone = run_py("--resume", "--out", str(out), "--steps", "80")
    assert alone.returncode == 1
    assert alone.stderr.strip().splitlines()[-1] == (
        f"run.py: error: --resume: {out} was trained on 2 hosts (host0, host1 hold their last.pt), this job has 1 "
        f"training rank(s): resume it under mpiexec -n 2 as it ran (each host continues its own shard of the data)")
    assert fingerprint(out) == before
