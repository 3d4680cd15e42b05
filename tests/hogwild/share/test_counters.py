"""hogwild.share.counters: the phase clock of a worker's update (CPU clock here; CUDA events on a GPU)."""
import time

import pytest
import torch

from hogwild.share.counters import PhaseClock


def test_phase_clock_gives_the_time_between_consecutive_marks_and_restarts():
    clock = PhaseClock(torch.device("cpu"))
    clock.mark()
    time.sleep(0.02)
    clock.mark()
    seconds = clock.seconds()
    assert len(seconds) == 1 and seconds[0] >= 0.02
    for _ in range(4):  # the next update may mark four boundaries again: the marks restart at seconds()
        clock.mark()
    assert len(clock.seconds()) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: events time GPU work")
def test_phase_clock_times_gpu_work_not_its_launch():
    clock = PhaseClock(torch.device("cuda"))
    a = torch.randn(4096, 4096, device="cuda")
    clock.mark()
    for _ in range(20):
        a = a @ a / 4096
    clock.mark()
    (gpu_seconds,) = clock.seconds()  # waits for the events
    assert gpu_seconds > 0
