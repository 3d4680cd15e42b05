"""tasks.devices: one device per worker, and the --gpus error when fewer GPUs are visible."""
import pytest

from hogwild.tasks import devices
from hogwild.tasks.devices import DeviceError, worker_devices


def test_cpu_workers_and_single_mode():
    assert worker_devices(0, 3) == ["cpu", "cpu", "cpu"]
    assert worker_devices(0, 3, mode="single") == ["cpu"]


def test_cpu_workers_train_in_place_or_on_replicas():
    assert worker_devices(0, 2, cpu_workers="replica") == ["cpu-replica", "cpu-replica"]
    assert worker_devices(0, 2, cpu_workers="in-place") == ["cpu", "cpu"]
    assert worker_devices(0, 2, mode="single", cpu_workers="replica") == ["cpu-replica"]


def test_cpu_workers_default_per_task_and_the_flag_wins():
    from hogwild.tasks.cli import train_parser
    from hogwild.tasks.options import RunOptions
    resolved = lambda **values: RunOptions(**values).resolved().cpu_workers  # noqa: E731
    assert resolved(task="nmt") == "replica"  # 2 Hogwild workers: Adam moves every weight mid-step
    assert resolved(task="nmt", mode="single") == resolved(task="nmt", mode="sync") == "in-place"
    assert resolved(task="nmt", workers=1) == "in-place"
    assert resolved(task="pos") == "in-place"
    assert resolved(task="pos", cpu_workers="replica") == "replica"
    assert resolved(task="nmt", cpu_workers="in-place") == "in-place"
    assert train_parser().parse_args(["--cpu-workers", "replica"]).cpu_workers == "replica"
    with pytest.raises(ValueError, match=r"^--cpu-workers: must be one of in-place, replica; got 'gpu'"):
        RunOptions(cpu_workers="gpu")


def test_gpus_map_to_cuda_devices_when_visible(monkeypatch):
    monkeypatch.setattr(devices, "visible_gpus", lambda: 4)
    assert worker_devices(2, 7) == ["cuda:0", "cuda:1"]
    assert worker_devices(2, 7, per_gpu=2) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    assert worker_devices(2, 7, mode="single", per_gpu=2) == ["cuda:0"]


def test_workers_per_gpu_flag_reaches_the_options():
    from hogwild.tasks.cli import train_parser
    assert train_parser().parse_args(["--gpus", "1", "--workers-per-gpu", "2"]).workers_per_gpu == 2
    assert train_parser().parse_args([]).workers_per_gpu == 1


def test_too_many_gpus_names_what_is_visible_and_suggests_workers(monkeypatch):
    monkeypatch.setattr(devices, "visible_gpus", lambda: 1)
    monkeypatch.setattr(devices, "describe_visible", lambda: "1 CUDA GPU visible")
    with pytest.raises(DeviceError) as error:
        worker_devices(4, 2)
    assert str(error.value) == ("--gpus 4: 1 CUDA GPU visible. Train on CPU cores instead with --workers 4 "
                                "(or ask for at most --gpus 1)")


def test_this_machine_reports_its_real_gpu_count():
    import torch
    expected = torch.cuda.device_count() if torch.backends.cuda.is_built() else 0
    assert devices.visible_gpus() == expected
    if expected == 0:
        with pytest.raises(DeviceError, match=r"^--gpus 1: .*no GPU is visible|^--gpus 1: 0 CUDA GPUs visible"):
            worker_devices(1, 1)
