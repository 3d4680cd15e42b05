"""GPU workers on CUDA: per-device seeds, one worker against a serial GPU loop, two workers sharing a GPU,
page-locked registration, a killed GPU worker, and run.py --gpus 1 end to end with tag/translate on a CPU-only
process. Every test here needs CUDA and is skipped with a reason without it (the same code paths run on the CPU
as 'cpu-replica' in test_replica.py and test_overlap.py)."""
import json
import multiprocessing
import os
import signal
import threading
import time

import pytest
import torch

import hogwild
from hogwild.worker.gradients import batch_seed, seed_batch
from hogwild.worker.process_prelude import bind_device
from hogwild.worker.replica import PageLocked
from tests.hogwild import engine_helpers as H

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (no GPU on this machine)")


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "devices": ["cuda:0"], **kwargs})


def gpu_reference(batches, optimizer_factory, delayed):
    """The serial GPU loop (model, optimizer and batches on cuda:0), plain or with one step of delay."""
    reference = H.regression_model().cuda()
    on_gpu = [tuple(t.cuda() for t in batch) for batch in batches]
    loop = H.delayed_reference if delayed else H.serial_reference
    loop(reference, H.mse_loss, on_gpu, optimizer_factory(reference.parameters()), epochs=2, seed=3)
    return [p.detach().cpu() for p in reference.parameters()]


def test_dropout_masks_follow_the_batch_seed_on_every_device():
    masks = []
    current = torch.cuda.current_device()
    try:
        for index in range(torch.cuda.device_count()):
            device = torch.device(f"cuda:{index}")
            bind_device(device)  # what a worker on this device does at start
            seed_batch(device, batch_seed(3, 0, 7))
            masks.append(torch.nn.functional.dropout(torch.ones(1000, device=device), 0.5).cpu())
            seed_batch(device, batch_seed(3, 0, 8))
            other = torch.nn.functional.dropout(torch.ones(1000, device=device), 0.5).cpu()
            assert not torch.equal(masks[-1], other)  # a different batch, a different mask
    finally:
        torch.cuda.set_device(current)
    for mask in masks[1:]:
        assert torch.equal(mask, masks[0])  # the same batch gets the same mask whichever GPU trains it


@pytest.mark.parametrize("graphs", ["off", "on"])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("name, lr, factory", [
    ("sgd", 0.05, lambda params: torch.optim.SGD(params, lr=0.05)),
    ("adam", 0.01, lambda params: torch.optim.Adam(params, lr=0.01, fused=True)),
])
def test_one_gpu_worker_equals_the_serial_gpu_loop(name, lr, factory, overlap, graphs):
    """The eager step and the captured one (Config.graphs; dropout masks from the batch's seed in a replay too)."""
    batches = H.regression_batches(n=10)
    model = H.regression_model()
    result = hogwild.train(model, H.mse_loss, batches, config(optimizer=name, lr=lr, epochs=2, graphs=graphs,
                                                               overlap_update=overlap, fused_step=name == "adam"))
    assert result.graphs == (1 if graphs == "on" else 0) and result.eager_steps == 0
    assert result.updates == 20, (result.stop_reason, result.worker_updates, result.wall_seconds)
    histogram = result.staleness_histogram
    assert (histogram[0] == 1 and sum(histogram[1:3]) == 19) if overlap else histogram[:2] == [20, 0]
    assert all(ms > 0 for ms in result.phase_ms.values())  # CUDA events timed every phase
    if overlap and histogram[1] != 19:
        return  # a pull read beside an update still landing (it does not wait for it): no serial reference
    for got, expected in zip(model.parameters(), gpu_reference(batches, factory, delayed=overlap)):
        torch.testing.assert_close(got.detach(), expected, rtol=1e-5, atol=1e-6)


def test_two_workers_share_one_gpu_and_stop_cleanly():
    model = H.regression_model()
    before = H.dataset_loss(model, H.regression_batches(n=24))
    result = hogwild.train(model, H.mse_loss, H.regression_batches(n=24), config(
        devices=["cuda:0", "cuda:0"], optimizer="adam", lr=0.01, epochs=3))
    assert result.updates == 72 and all(n > 0 for n in result.worker_updates)
    assert result.stop_reason == "epochs" and multiprocessing.active_children() == []
    assert H.dataset_loss(model, H.regression_batches(n=24)) < before


def test_page_locked_registration_is_undone_at_close():
    tensors = [torch.zeros(1000).share_memory_(), torch.ones(10).share_memory_()]
    pinned = PageLocked(tensors + tensors[:1])  # the same storage twice is registered once
    assert all(t.is_pinned() for t in tensors) and len(pinned.pointers) == 2
    on_gpu = tensors[0].to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(on_gpu.cpu(), tensors[0])
    pinned.close()
    assert not any(t.is_pinned() for t in tensors) and pinned.pointers == []


def test_a_killed_gpu_worker_stops_the_run_with_the_checkpoint_intact(tmp_path):
    def kill_worker_one():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            workers = [p for p in multiprocessing.active_children() if p.name == "hogwild-worker-1"]
            if workers and (tmp_path / "metrics.jsonl").exists():
                os.kill(workers[0].pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    threading.Thread(target=kill_worker_one, daemon=True).start()
    with pytest.raises(hogwild.WorkerFailed, match=r"worker 1 \(cuda:0, pid \d+\) was killed by signal SIGKILL"):
        # graphs off: slow_loss sleeps in Python, which a captured step would do once, at capture
        hogwild.train(H.regression_model(), H.slow_loss, H.regression_batches(n=400), config(
            devices=["cuda:0", "cuda:0"], epochs=5, checkpoint_dir=str(tmp_path), log_every=1, graphs="off"))
    saved = torch.load(tmp_path / "last.pt", weights_only=False)
    model = H.regression_model()
    model.load_state_dict(saved["model"])  # loads: the checkpoint is whole
    assert multiprocessing.active_children() == []


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pos", "nmt"])
def test_run_py_gpus_1_end_to_end_then_tag_or_translate_on_a_cpu_only_process(task, tmp_path):
    from tests.tasks.helpers import run_py, write_parallel, write_tagged
    out = tmp_path / "run"
    if task == "pos":
        train, dev = write_tagged(tmp_path / "train.txt", 150, 0), write_tagged(tmp_path / "dev.txt", 30, 1)
        args = ["--task", "pos", "--train", str(train), "--dev", str(dev), "--format", "slash", "--steps", "120"]
    else:
        train, dev = write_parallel(tmp_path / "train", 120, 0), write_parallel(tmp_path / "dev", 16, 1)
        args = ["--task", "nmt", "--train", str(train), "--dev", str(dev), "--src-lang", "fr", "--tgt-lang", "en",
                "--batch-size", "8", "--steps", "40", "--beam", "2"]
    done = run_py(*args, "--gpus", "1", "--optimizer", "adam", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["devices"] == ["cuda:0"] and summary["updates"] >= 40
    cpu_only = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    if task == "pos":
        done = run_py("tag", "--checkpoint", str(out), input="ta bagor fimat .\n", env=cpu_only)
        assert done.returncode == 0, done.stderr
        assert [token.rsplit("/", 1)[0] for token in done.stdout.split()] == ["ta", "bagor", "fimat", "."]
    else:
        done = run_py("translate", "--checkpoint", str(out), "--beam", "2", input=(out / "dev.src").read_text(),
                      env=cpu_only)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == (out / "dev.hyp").read_text().splitlines()
