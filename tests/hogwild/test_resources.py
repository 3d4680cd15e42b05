"""hogwild.resources: more CPU workers than usable cores warns; a memory estimate above what is available refuses,
saying how many workers fit; /proc/meminfo is read as the kernel writes it."""
import warnings

import pytest

from hogwild.resources import (GPU_WORKER_BYTES, WORKER_BYTES, OversubscriptionWarning, ResourceError,
                               available_memory, check_resources, estimate_memory, tensor_nbytes)

GIB = 2**30


def test_more_cpu_workers_than_cores_warns_naming_the_numbers():
    with pytest.warns(OversubscriptionWarning, match=r"^100 CPU workers on 2 usable cores: workers will take turns, "
                                                     r".* at most 2 keep every core busy"):
        check_resources(["cpu"] * 100, 1, 0, 0, 0, cores=2, available=100 * GIB)
    with pytest.warns(OversubscriptionWarning, match=r"^2 CPU workers x 2 threads on 3 usable cores.* at most 1 "):
        check_resources(["cpu"] * 2, 2, 0, 0, 0, cores=3, available=100 * GIB)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_resources(["cpu"] * 2, 1, 0, 0, 0, cores=2, available=100 * GIB)  # one worker per core: quiet
        check_resources(["cuda:0", "cuda:1", "cuda:2"], 1, 0, 0, 0, cores=2, available=100 * GIB)


def test_a_memory_estimate_above_what_is_available_is_refused():
    assert estimate_memory(["cpu"] * 3, 10, 20, 5) == 3 * (WORKER_BYTES + 10) + 10 + 20 + 2 * 5
    assert estimate_memory(["cuda:0"], 0, 0, 0) == WORKER_BYTES + GPU_WORKER_BYTES
    with pytest.raises(ResourceError, match=r"^100 workers need about 14\.6 GiB of memory \(150 MiB per process "
                                            r"plus 0\.0 MiB of gradients each, .*\), but 2\.0 GiB is available; "
                                            r"about 13 workers fit$") as refused:
        check_resources(["cpu"] * 100, 1, 0, 0, 0, cores=100, available=2 * GIB)
    assert refused.value.option == "workers"
    check_resources(["cpu"] * 13, 1, 0, 0, 0, cores=100, available=2 * GIB)  # 13 fit


def test_meminfo_and_tensor_sizes(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  1000 kB\nMemAvailable:   22000000 kB\n")
    assert available_memory(str(meminfo)) == 22000000 * 1024
    assert available_memory(str(tmp_path / "none")) is None
    import torch
    assert tensor_nbytes([{"a": torch.zeros(3, 2)}, (torch.zeros(4, dtype=torch.int64), "x")]) == 24 + 32
