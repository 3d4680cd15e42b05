"""The models' precision under bf16 autocast (Config.amp='bf16', bench's bf16 rows): every multi-step nn.GRU /
nn.LSTM call (NMT's encoder, POS's char and word LSTMs, packed and padded) runs with autocast off on fp32 inputs and
weights, so that torch's cuDNN RNN autocast kernel, which casts to fp16 whatever the autocast dtype, never runs
(models/padded_rnn.py). On the CPU the recorded autocast state at each RNN call shows it; on a GPU (marked cuda) the
whole step, forward and backward, produces no fp16 tensor while the matrix products still run in bf16."""
import functools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hogwild.models.nmt import nmt_loss
from hogwild.models.pos_tagger import pos_loss
from tests.models.conftest import nmt_batch, pos_batch
from tests.models.test_padded_paths import counted, tiny_nmt, tiny_tagger

CASES = {"nmt": (tiny_nmt, nmt_loss, lambda: counted(nmt_batch([4, 2, 5], [3, 2, 1]))),
         "pos": (tiny_tagger, pos_loss, lambda: counted(pos_batch([3, 1, 4], extra_pad=1)))}


def recorded_rnn_calls(monkeypatch, device_type):
    """Wrap torch._VF.gru / lstm (what nn.GRU, nn.LSTM and padded_rnn call): (autocast on?, dtypes seen) per call."""
    calls = []
    for name in ("gru", "lstm"):
        original = getattr(torch._VF, name)

        def record(*args, _original=original, **kwargs):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            tensors += [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
            calls.append((torch.is_autocast_enabled(device_type), {t.dtype for t in tensors if t.is_floating_point()}))
            return _original(*args, **kwargs)
        monkeypatch.setattr(torch._VF, name, record)
    return calls


@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_every_rnn_call_runs_in_fp32_with_autocast_off_under_bf16_autocast(monkeypatch, task, padded):
    make, loss_fn, batch = CASES[task]
    calls = recorded_rnn_calls(monkeypatch, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as the worker builds it for Config.amp='bf16'
        loss, _ = loss_fn(make(), batch(), padded=padded)
    loss.backward()
    expected = {"nmt": 2 if padded else 1, "pos": 2 + (4 if padded else 1)}[task]  # padded: one per direction
    assert len(calls) == expected
    assert calls == [(False, {torch.float32})] * expected


class Dtypes(TorchDispatchMode):
    """The dtypes of every floating output of every op run under it."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.seen.add(t.dtype)
        return out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (cuDNN's RNN autocast kernel)")
@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_a_bf16_step_on_a_gpu_makes_no_fp16_tensor(task, padded):
    from hogwild.models.host_fields import to_device
    make, loss_fn, batch = CASES[task]
    model = make().cuda()
    with Dtypes() as dtypes:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _ = functools.partial(loss_fn, padded=padded)(model, to_device(batch(), torch.device("cuda")))
        loss.backward()
    assert torch.float16 not in dtypes.seen and torch.bfloat16 in dtypes.seen
