"""The padded paths of both models (nmt_loss / pos_loss with padded=True, models/padded_rnn.py) against the packed
ones, the eager reference: the same loss and every parameter's gradient, no host read, fixed launch shapes.

Tolerances: float64 atol 1e-12, float32 atol 1e-5 (rtol 0), on mixed lengths padded past the longest sentence as a
bucket edge pads them. The host-read tests run the padded path with every way of reading a tensor's value patched
to raise, and on the 'meta' device (tensors without data: any read or copy to the host fails); the packed path
trips both, so the tests can fail. On a GPU (tests marked cuda) the padded step runs under torch's sync debug mode
set to error, and replays as a captured CUDA graph on another batch of its shape with the packed path's values.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hogwild.models import nmt as nmt_module
from hogwild.models import pos_tagger as pos_module
from hogwild.models.host_fields import to_device
from hogwild.models.nmt import AttentionNMT, NMTConfig, nmt_loss
from hogwild.models.padded_rnn import (_direction_weights, _flat, flatten_per_direction, padded_bidirectional,
                                       reverse_index)
from hogwild.models.pos_tagger import POSConfig, POSTagger, pos_loss

TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5}


def tiny_nmt(dropout=0.0):
    torch.manual_seed(0)
    return AttentionNMT(NMTConfig(src_words=25, tgt_words=25, embedding=6, hidden=7, attention=5, readout=4,
                                  dropout=dropout))


def tiny_tagger(dropout=0.0, word_layers=2):
    torch.manual_seed(0)
    return POSTagger(POSConfig(n_words=30, n_chars=20, n_tags=7, char_emb=4, word_emb=6, char_hidden=5,
                               word_hidden=6, word_layers=word_layers, dropout=dropout))


def counted(batch):
    """The batch with its host-side `tokens`, as data/batching.py's batchers add it."""
    if "tgt_mask" in batch:
        return {**batch, "tokens": int(batch["tgt_mask"][:, 1:].sum())}
    return {**batch, "tokens": int((batch["tags"] != -100).sum())}


def nmt_case(make_nmt_batch, seed=0, src=(3, 6, 1), tgt=(4, 1, 5)):
    return tiny_nmt, nmt_loss, counted(make_nmt_batch(list(src), list(tgt), extra_pad=2, seed=seed))


def pos_case(make_pos_batch, seed=0, lengths=(3, 1, 5, 2)):
    return tiny_tagger, pos_loss, counted(make_pos_batch(list(lengths), extra_pad=3, seed=seed))


def loss_and_grads(model, loss_fn, batch, seed=None, **kwargs):
    if seed is not None:
        torch.manual_seed(seed)  # the dropout masks
    loss, tokens = loss_fn(model, batch, **kwargs)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return loss, tokens, [g.to_dense() for g in grads]


def assert_paths_agree(model, loss_fn, batch, tolerance, seed=None):
    packed, n_packed, packed_grads = loss_and_grads(model, loss_fn, batch, seed)
    padded, n_padded, padded_grads = loss_and_grads(model, loss_fn, batch, seed, padded=True)
    assert n_padded == n_packed == batch["tokens"]
    torch.testing.assert_close(padded, packed, rtol=0, atol=tolerance)
    assert len(padded_grads) == len(list(model.parameters()))
    for (name, _), a, b in zip(model.named_parameters(), packed_grads, padded_grads):
        torch.testing.assert_close(b, a, rtol=0, atol=tolerance, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_padded_loss_and_every_gradient_equal_the_packed_path(task, mode, dtype, make_nmt_batch, make_pos_batch):
    make, loss_fn, batch = nmt_case(make_nmt_batch) if task == "nmt" else pos_case(make_pos_batch)
    model = make(dropout=0.0 if mode == "train" else 0.4).to(dtype).train(mode == "train")
    assert_paths_agree(model, loss_fn, batch, TOLERANCE[dtype])


def test_with_dropout_both_paths_draw_the_same_masks_where_the_shapes_agree(make_nmt_batch, make_pos_batch):
    """NMT's dropouts act on (B, S, E), (B, T, E) and the readout in both paths; a one-layer tagger's on (B, T, D)
    and (B, T, 2H). (Between stacked word LSTM layers the packed path drops packed rows: other masks.)"""
    _, _, batch = nmt_case(make_nmt_batch, seed=3)
    assert_paths_agree(tiny_nmt(dropout=0.3).double(), nmt_loss, batch, 1e-12, seed=11)
    _, _, batch = pos_case(make_pos_batch, seed=3)
    assert_paths_agree(tiny_tagger(dropout=0.3, word_layers=1).double(), pos_loss, batch, 1e-12, seed=11)


def test_sparse_embedding_gradients_agree(make_nmt_batch, make_pos_batch):
    _, _, batch = pos_case(make_pos_batch, seed=1)
    model = tiny_tagger().double()
    model.word_embedding.sparse = model.char_embedding.sparse = True
    assert_paths_agree(model, pos_loss, batch, 1e-12)


def test_padded_bidirectional_matches_packed_modules_and_reverses_by_length():
    assert reverse_index(torch.tensor([3, 1, 0]), 4).tolist() == [[2, 1, 0, 3], [0, 1, 2, 3], [0, 1, 2, 3]]
    torch.manual_seed(0)
    x, lengths = torch.randn(3, 5, 4, dtype=torch.float64), torch.tensor([2, 5, 1])
    for rnn in (torch.nn.GRU(4, 3, num_layers=2, batch_first=True, bidirectional=True),
                torch.nn.LSTM(4, 3, batch_first=True, bidirectional=True, bias=False)):
        rnn = rnn.double()
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        expected, _ = torch.nn.utils.rnn.pad_packed_sequence(rnn(packed)[0], batch_first=True, total_length=5)
        torch.testing.assert_close(padded_bidirectional(rnn, x, lengths), expected, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="bidirectional batch_first"):
        padded_bidirectional(torch.nn.GRU(4, 3, batch_first=True), x, lengths)


def one_buffer(rnn):
    """rnn with every weight a view of one flat storage, back to back: what nn.GRU/nn.LSTM's flatten_parameters makes
    of them on a GPU."""
    with torch.no_grad():
        flat = torch.cat([w.reshape(-1) for w in rnn._flat_weights])
        offset = 0
        for weight in rnn._flat_weights:
            weight.data = flat[offset:offset + weight.numel()].view_as(weight)
            offset += weight.numel()
    return rnn


def test_each_direction_is_laid_out_flat_once_and_keeps_its_parameters_and_values():
    """In one buffer only the first direction starts its storage, so cuDNN would copy the other three at every
    padded call; laid out per direction once, no call copies, and the padded path's result is unchanged."""
    torch.manual_seed(0)
    x, lengths = torch.randn(3, 5, 4, dtype=torch.float64), torch.tensor([2, 5, 1])
    rnn = one_buffer(torch.nn.GRU(4, 3, num_layers=2, batch_first=True, bidirectional=True).double())
    params, values = list(rnn.parameters()), [p.detach().clone() for p in rnn.parameters()]
    expected = padded_bidirectional(rnn, x, lengths)
    assert [_flat(_direction_weights(rnn, layer, reverse)) for layer in (0, 1) for reverse in (False, True)] == \
        [True, False, False, False]
    assert flatten_per_direction(rnn) == 3 and flatten_per_direction(rnn) == 0
    assert all(_flat(_direction_weights(rnn, layer, reverse)) for layer in (0, 1) for reverse in (False, True))
    assert list(rnn.parameters()) == params and all(torch.equal(p, v) for p, v in zip(params, values))
    torch.testing.assert_close(padded_bidirectional(rnn, x, lengths), expected, rtol=0, atol=0)
    padded_bidirectional(rnn, x, lengths).sum().backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in params)


class HostRead(AssertionError):
    pass


def forbid_host_reads(monkeypatch):
    """Every Python-level way to read a tensor's value on the host, and the packed sequences, raise HostRead."""
    def refuse(name):
        def raise_(*args, **kwargs):
            raise HostRead(name)
        return raise_
    for name in ("item", "tolist", "cpu", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
    for module in (nmt_module, pos_module, torch.nn.utils.rnn):
        monkeypatch.setattr(module, "pack_padded_sequence", refuse("pack_padded_sequence"))


class ValueReads(TorchDispatchMode):
    """The aten ops that read a tensor's values on the host (on a GPU: a sync)."""
    READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
             torch.ops.aten.masked_select.default, torch.ops.aten.is_nonzero.default}

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_padded_forward_and_backward_read_nothing_from_the_device(task, monkeypatch, make_nmt_batch, make_pos_batch):
    make, loss_fn, batch = nmt_case(make_nmt_batch) if task == "nmt" else pos_case(make_pos_batch)
    model = make(dropout=0.2)
    with monkeypatch.context() as patch:
        forbid_host_reads(patch)
        with pytest.raises(HostRead):  # the control: the packed path reads its lengths
            loss_fn(model, batch)
        with ValueReads() as log:
            loss, tokens = loss_fn(model, batch, padded=True)
            loss.backward()
    assert log.reads == [] and tokens == batch["tokens"]
    # On 'meta' tensors have no values: nothing can be read or copied to the host, nor decide a shape.
    model, meta = model.to("meta"), {k: v.to("meta") if torch.is_tensor(v) else v for k, v in batch.items()}
    loss, _ = loss_fn(model, meta, padded=True)
    loss.backward()
    assert loss.device.type == "meta" and all(p.grad is not None for p in model.parameters())
    with pytest.raises(NotImplementedError, match="meta"):
        loss_fn(model, meta)


class ShapeLog(TorchDispatchMode):
    """(op, output shapes) of every aten op: what a CUDA graph would replay."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = [tuple(t.shape) for t in (out if isinstance(out, (tuple, list)) else [out]) if torch.is_tensor(t)]
        self.ops.append((str(func), shapes))
        return out


def launches(model, loss_fn, batch, **kwargs):
    model.zero_grad(set_to_none=True)
    with ShapeLog() as log:
        loss, _ = loss_fn(model, batch, **kwargs)
        loss.backward()
    return log.ops


def one_bucket(task, make_nmt_batch, make_pos_batch):
    """(model maker, loss, batch a, batch b): a and b of one padded shape, other lengths, words and token counts."""
    if task == "nmt":  # both (3, 8) sources and (3, 9) targets once padded
        make, loss_fn, a = nmt_case(make_nmt_batch, seed=1, src=(3, 5, 1), tgt=(4, 1, 5))
        b = counted(make_nmt_batch([2, 5, 4], [5, 3, 3], extra_pad=2, seed=2))
    else:  # both (4, 8)
        make, loss_fn, a = pos_case(make_pos_batch, seed=1)
        b = counted(make_pos_batch([5, 4, 4, 1], extra_pad=3, seed=2))
    assert all(a[k].shape == b[k].shape for k in a if k != "tokens") and a["tokens"] != b["tokens"]
    return make, loss_fn, a, b


@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_batches_of_one_bucket_shape_launch_the_same_ops_and_shapes(task, make_nmt_batch, make_pos_batch):
    make, loss_fn, a, b = one_bucket(task, make_nmt_batch, make_pos_batch)
    model = make()
    padded_a, padded_b = launches(model, loss_fn, a, padded=True), launches(model, loss_fn, b, padded=True)
    assert len(padded_a) > 50 and padded_a == padded_b
    assert launches(model, loss_fn, a) != launches(model, loss_fn, b)  # the packed path follows the lengths


@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_padded_loss_needs_the_host_token_count(task, make_nmt_batch, make_pos_batch):
    make, loss_fn, batch = nmt_case(make_nmt_batch) if task == "nmt" else pos_case(make_pos_batch)
    model = make()
    with pytest.raises(ValueError, match="no host-side 'tokens' int"):
        loss_fn(model, {k: v for k, v in batch.items() if k != "tokens"}, padded=True)
    with pytest.raises(ValueError, match="no token to predict"):
        loss_fn(model, {**batch, "tokens": 0}, padded=True)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: syncs and graph capture need a GPU")


@CUDA
@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_the_padded_step_never_synchronises_a_gpu(task, make_nmt_batch, make_pos_batch):
    make, loss_fn, a, _ = one_bucket(task, make_nmt_batch, make_pos_batch)
    model, a = make().double().cuda(), to_device(a, torch.device("cuda"))
    loss_fn(model, a, padded=True)[0].backward()  # warm-up: cuDNN plans, the allocator
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss, _ = loss_fn(model, a, padded=True)
        loss.backward()
        with pytest.raises(RuntimeError, match="synchronizing"):  # the control: the packed path reads its lengths
            loss_fn(model, a)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@CUDA
@pytest.mark.parametrize("task", ["nmt", "pos"])
def test_the_padded_step_replays_as_a_cuda_graph_with_the_packed_paths_values(task, make_nmt_batch, make_pos_batch):
    """Captured on batch a, replayed on b copied into a's tensors: b's packed loss and gradients (float64)."""
    make, loss_fn, a, b = one_bucket(task, make_nmt_batch, make_pos_batch)
    cuda = torch.device("cuda")
    model, static, b = make().double().to(cuda), to_device(a, cuda), to_device(b, cuda)
    packed, _ = loss_fn(model, b)
    expected = torch.autograd.grad(packed, list(model.parameters()))
    side = torch.cuda.Stream()  # warm-up on a side stream, as torch's CUDA graph notes do
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            loss_fn(model, static, padded=True)[0].backward()
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss, _ = loss_fn(model, static, padded=True)
        loss.backward()
    for key, value in b.items():
        if torch.is_tensor(value):
            static[key].copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(loss, packed, rtol=0, atol=1e-10)
    for (name, param), grad in zip(model.named_parameters(), expected):
        torch.testing.assert_close(param.grad, grad, rtol=0, atol=1e-10, msg=lambda m: f"{name}: {m}")


@CUDA
def test_on_a_gpu_no_direction_is_copied_by_cudnn_at_a_call():
    """nn.GRU's flatten_parameters puts every direction in one buffer on a GPU; the first padded call lays them out
    per direction, after which cuDNN warns of no weights to compact (it would copy them at every call)."""
    import warnings
    torch.manual_seed(0)
    x, lengths = torch.randn(3, 5, 4, device="cuda"), torch.tensor([2, 5, 1], device="cuda")
    rnn = torch.nn.GRU(4, 3, num_layers=2, batch_first=True, bidirectional=True).cuda()
    expected = padded_bidirectional(rnn, x, lengths)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*contiguous chunk of memory.*")
        for _ in range(2):
            torch.testing.assert_close(padded_bidirectional(rnn, x, lengths), expected, rtol=0, atol=0)
    assert flatten_per_direction(rnn) == 0
