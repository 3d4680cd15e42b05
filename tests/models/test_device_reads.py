"""The model losses read tensor values (item, int, bool, boolean masks) only before their first compute op.

On a GPU every such read of a device tensor waits for all queued work; one after the forward stalls the launch
queue between forward and backward. The reads are found with a TorchDispatchMode on the CPU, where the same ops
run; only reads made by the models' own code count (torch's packed RNNs read their batch_sizes, which torch
always keeps on the CPU). A CUDA test checks the same on a GPU.
"""
import os
import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import hogwild.models
from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
from hogwild.models.pos_tagger import POSConfig, POSTagger, pos_loss

aten = torch.ops.aten
READS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
         aten.masked_scatter.default, aten.is_nonzero.default}


# The package's own folder, not any path holding "models/" (a checkout in a folder of that name holds torch too).
MODELS = os.path.join(os.path.dirname(os.path.abspath(hogwild.models.__file__)), "")


PLUMBING = tuple(os.path.join("torch", name) for name in ("_tensor.py", "_ops.py", "overrides.py", "_compile.py",
                                                          os.path.join("_dynamo", "eval_frame.py"),
                                                          os.path.join("utils", "_python_dispatch.py")))


def by_models() -> bool:
    """Did one of the models' files make this call itself (not through a torch module such as nn.LSTM)?"""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename != __file__ and not frame.filename.endswith(PLUMBING):
            return os.path.abspath(frame.filename).startswith(MODELS)
    return False


class OpLog(TorchDispatchMode):
    """Records ('read' | 'compute' | 'other', op name) for every aten op, in order."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        boolean_index = func is aten.index.Tensor and any(
            i is not None and i.dtype == torch.bool for i in args[1])
        floating = any(isinstance(a, torch.Tensor) and a.is_floating_point() and a.requires_grad for a in args)
        kind = "read" if (func in READS or boolean_index) and by_models() else "compute" if floating or func in (
            aten.embedding.default,) else "other"
        self.ops.append((kind, str(func)))
        return func(*args, **(kwargs or {}))


def reads_after_compute(loss_fn, model, batch):
    log = OpLog()
    with log:
        loss, _ = loss_fn(model, batch)
    first = next(i for i, (kind, _) in enumerate(log.ops) if kind == "compute")
    return [name for kind, name in log.ops[first:] if kind == "read"], [n for k, n in log.ops[:first] if k == "read"]


def test_nmt_loss_reads_the_device_only_before_its_forward(make_nmt_batch):
    torch.manual_seed(0)
    model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))
    late, early = reads_after_compute(nmt_loss, model, make_nmt_batch([3, 5], [4, 2], extra_pad=1))
    assert late == []
    assert early  # the lengths and token count are read, once, up front


def test_pos_loss_reads_the_device_only_before_its_forward(make_pos_batch):
    torch.manual_seed(0)
    model = POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=4, word_emb=6, char_hidden=5,
                                word_hidden=6))
    late, early = reads_after_compute(pos_loss, model, make_pos_batch([3, 1, 4], extra_pad=2))
    assert late == []
    assert early


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: synchronisations exist only on a GPU")
@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_no_synchronisation_after_the_first_kernel_on_a_gpu(task, make_nmt_batch, make_pos_batch):
    torch.manual_seed(0)
    if task == "nmt":
        model = AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=8, hidden=8, attention=8, readout=8))
        batch, loss_fn = make_nmt_batch([3, 5], [4, 2]), nmt_loss
    else:
        model = POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=4, word_emb=6, char_hidden=5,
                                    word_hidden=6))
        batch, loss_fn = make_pos_batch([3, 1, 4]), pos_loss
    model.cuda()
    batch = {k: v.cuda() for k, v in batch.items()}
    loss_fn(model, batch)[0].backward()  # warm-up: cuDNN plans, allocator
    log = OpLog()
    with log:
        loss_fn(model, batch)
    first = next(i for i, (kind, _) in enumerate(log.ops) if kind == "compute")
    assert [n for k, n in log.ops[first:] if k == "read"] == []
