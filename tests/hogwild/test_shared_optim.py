"""hogwild.shared_optim: SharedOptimizer against serial torch.optim, shared memory, pickling, sparse rows."""
import pathlib
import pickle
import subprocess
import sys
import warnings

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

import hogwild

from hogwild.shared_optim import OPTIMIZERS, SharedOptimizer

REPO = pathlib.Path(__file__).resolve().parents[2]

# (name, SharedOptimizer hyperparameters, the serial torch.optim class and its keyword arguments)
CASES = [
    ("sgd", {}, torch.optim.SGD, {}),
    ("sgd", {"weight_decay": 0.01, "maximize": False}, torch.optim.SGD, {"weight_decay": 0.01}),
    ("msgd", {}, torch.optim.SGD, {"momentum": 0.9}),
    ("msgd", {"dampening": 0.3, "weight_decay": 0.01}, torch.optim.SGD,
     {"momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}),
    ("nesterov", {"weight_decay": 0.01}, torch.optim.SGD, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("adagrad", {}, torch.optim.Adagrad, {}),
    ("adagrad", {"lr_decay": 0.01, "weight_decay": 0.01, "initial_accumulator_value": 0.1}, torch.optim.Adagrad,
     {"lr_decay": 0.01, "weight_decay": 0.01, "initial_accumulator_value": 0.1}),
    ("adadelta", {"weight_decay": 0.01}, torch.optim.Adadelta, {"weight_decay": 0.01}),
    ("rmsprop", {}, torch.optim.RMSprop, {}),
    ("rmsprop", {"momentum": 0.5, "centered": True, "weight_decay": 0.01}, torch.optim.RMSprop,
     {"momentum": 0.5, "centered": True, "weight_decay": 0.01}),
    ("adam", {}, torch.optim.Adam, {}),
    ("adam", {"amsgrad": True, "weight_decay": 0.01}, torch.optim.Adam, {"amsgrad": True, "weight_decay": 0.01}),
    ("adamax", {"weight_decay": 0.01}, torch.optim.Adamax, {"weight_decay": 0.01}),
]
CASE_IDS = [f"{name}-{'-'.join(sorted(hyper)) or 'default'}" for name, hyper, _, _ in CASES]
IMPLS = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
FUSED = {"sgd", "msgd", "nesterov", "adagrad", "adam"}
LRS = [0.05, 0.05, 0.02, 0.05, 0.1]  # per step: the lr changes at steps 2 and 4
STEPS = len(LRS)


def shared_params(seed=0):
    generator = torch.Generator().manual_seed(seed)
    weight, bias = torch.randn(3, 4, generator=generator), torch.randn(3, generator=generator)  # (3, 4), (3,)
    return [weight.share_memory_(), bias.share_memory_()]


def batches(seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 4, generator=generator), torch.randn(5, 3, generator=generator)) for _ in range(STEPS)]


def backward(params, x, y):
    for p in params:
        p.grad = None
    weight, bias = params
    loss = ((x @ weight.T + bias - y) ** 2).mean()  # x (5, 4) -> (5, 3)
    loss.backward()


def train_shared(name, hyper, ):
    params = [p.requires_grad_() for p in shared_params()]
    opt = SharedOptimizer(params, name, **hyper)
    for lr, (x, y) in zip(LRS, batches()):
        backward(params, x, y)
        opt.step(lr)
    return params, opt


def train_serial(cls, kwargs):
    params = [p.clone().requires_grad_() for p in shared_params()]
    opt = cls(params, lr=LRS[0], **kwargs)
    for lr, (x, y) in zip(LRS, batches()):
        backward(params, x, y)
        opt.param_groups[0]["lr"] = lr
        opt.step()
    return params, opt


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name, hyper, cls, kwargs", CASES, ids=CASE_IDS)
def test_matches_serial_torch_optim_and_updates_shared_state_in_place(name, hyper, cls, kwargs, impl):
    if impl == "fused" and name not in FUSED:
        pytest.skip(f"torch.optim has no fused {name}")
    params, opt = train_shared(name, {**hyper, **IMPLS[impl]})
    plain = name == "sgd" and not hyper and impl != "fused"
    assert (opt._optimizer is None) == plain  # plain SGD steps directly: it builds no torch.optim optimizer
    pointers = [{k: t.data_ptr() for k, t in s.items()} for s in opt.state]
    ref_params, ref_opt = train_serial(cls, {**kwargs, **IMPLS[impl]})
    for p, ref in zip(params, ref_params):
        torch.testing.assert_close(p.detach(), ref.detach(), rtol=1e-6, atol=1e-7)
    for index, (p, ref) in enumerate(zip(params, ref_params)):
        mine, theirs = opt.state[index], ref_opt.state[ref]
        assert set(mine) == set(theirs) | {"step"}  # torch.optim.SGD has no step; ours counts for checkpoints
        assert mine["step"].item() == STEPS
        for key, tensor in mine.items():
            assert tensor.is_shared(), key
            if not plain:  # torch works on our tensors, not copies
                assert opt._optimizer.state[p].get(key, tensor) is tensor
            assert tensor.data_ptr() == pointers[index][key]
            if key in theirs:
                assert tensor.dtype == theirs[key].dtype and tensor.shape == theirs[key].shape, key
                torch.testing.assert_close(tensor, theirs[key], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("hyper", [{}, {"maximize": True}], ids=["plain", "maximize"])
def test_plain_sgd_is_bit_identical_to_torch_sgd_and_counts_only_parameters_with_a_gradient(hyper):
    # Plain SGD takes a direct path (no torch.optim machinery); its arithmetic must stay torch.optim.SGD's exactly.
    mine = [p.requires_grad_() for p in shared_params()] + [torch.zeros(2).share_memory_().requires_grad_()]
    theirs = [p.detach().clone().requires_grad_() for p in mine]
    opt, ref_opt = SharedOptimizer(mine, "sgd", **hyper), torch.optim.SGD(theirs, lr=0.05, **hyper)
    for lr, (x, y) in zip(LRS, batches()):
        for params in (mine, theirs):
            backward(params[:2], x, y)  # the third parameter never gets a gradient
            params[2].grad = None
        opt.step(lr=lr)
        ref_opt.param_groups[0]["lr"] = lr
        ref_opt.step()
    for p, ref in zip(mine, theirs):
        assert torch.equal(p.detach(), ref.detach())
    assert [s["step"].item() for s in opt.state] == [STEPS, STEPS, 0]


def test_no_optimizer_imports_torch_dynamo_in_a_fresh_process():
    """Building or stepping a torch.optim optimizer the usual way imports torch._dynamo: 1-2 s of CPU in every
    worker's start-up. A process that validates its Config, builds, attaches (fused and not) and steps the shared
    optimizer of every name, with hyperparameters, on dense and sparse (row-wise) gradients, never imports it; the
    steps still move the parameters (every case's values: the serial-reference tests above)."""
    code = ("import sys, torch, hogwild; from hogwild.shared_optim import FUSED_OPTIMIZERS, OPTIMIZERS, "
            "SharedOptimizer\n"
            "hogwild.Config(workers=2, optimizer='adam', optimizer_args={'betas': (0.9, 0.98)})\n"
            "for name in OPTIMIZERS:\n"
            "    for fused in {False, name in FUSED_OPTIMIZERS}:\n"
            "        p = [torch.zeros(4, 3).share_memory_().requires_grad_(), torch.zeros(3).share_memory_()"
            ".requires_grad_()]\n"
            "        opt = SharedOptimizer(p, name, weight_decay=0.01); opt.attach(p, fused=fused)\n"
            "        p[0].grad = torch.ones(4, 3).to_sparse(1); p[1].grad = torch.ones(3); opt.step(0.5)\n"
            "        assert (p[0] != 0).all() and (p[1] != 0).all(), (name, fused, p)\n"
            "p = [torch.zeros(3).share_memory_().requires_grad_()]; opt = SharedOptimizer(p, 'sgd')\n"
            "p[0].grad = torch.ones(3); opt.step(0.5)\n"
            "print('torch._dynamo' in sys.modules, p[0].tolist())")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "False [-0.5, -0.5, -0.5]"


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_all_state_is_allocated_up_front_in_shared_memory(name):
    params = shared_params()
    opt = SharedOptimizer(params, name)
    for p, state in zip(params, opt.state):
        assert state["step"].shape == () and state["step"].item() == 0 and state["step"].dtype == torch.float32
        for key, tensor in state.items():
            assert tensor.is_shared(), key
            assert tensor.shape in ((), p.shape)
    nbytes = sum(t.numel() * t.element_size() for state in opt.state for t in state.values())
    assert SharedOptimizer.state_nbytes(params, name) == nbytes


@pytest.mark.parametrize("name, hyper, per_element", [
    ("sgd", {}, 0), ("msgd", {}, 1), ("adam", {}, 2), ("adam", {"amsgrad": True}, 3),
    ("rmsprop", {"momentum": 0.9, "centered": True}, 3), ("adagrad", {}, 1),
])
def test_state_nbytes_counts_hyperparameter_dependent_state(name, hyper, per_element):
    params = shared_params()
    expected = per_element * (12 + 3) * 4 + 2 * 4  # two float32 parameters of 12 and 3 elements + two step counters
    assert SharedOptimizer.state_nbytes(params, name, **hyper) == expected
    assert sum(t.numel() * t.element_size() for s in SharedOptimizer(params, name, **hyper).state
               for t in s.values()) == expected


def _child_steps(jobs, batch):
    """Spawned worker: attach to this process's parameter objects and apply one update with each optimizer."""
    torch.set_num_threads(1)
    for params, opt in jobs:
        params = [p.requires_grad_() for p in params]
        opt.attach(params)
        backward(params, *batch)
        opt.step(0.05)


def test_spawned_child_step_is_visible_in_parent():
    jobs = [(shared_params(), None) for _ in OPTIMIZERS]
    jobs = [(params, SharedOptimizer(params, name)) for (params, _), name in zip(jobs, OPTIMIZERS)]
    batch = batches()[0]
    child = mp.get_context("spawn").Process(target=_child_steps, args=(jobs, batch))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    defaults = {"nesterov": (torch.optim.SGD, {"momentum": 0.9, "nesterov": True}),
                "adadelta": (torch.optim.Adadelta, {}), "adamax": (torch.optim.Adamax, {})}
    defaults |= {name: (cls, kwargs) for name, hyper, cls, kwargs in CASES if not hyper}
    for (params, opt), name in zip(jobs, OPTIMIZERS):
        cls, kwargs = defaults[name]
        ref = [p.clone().requires_grad_() for p in shared_params()]
        ref_opt = cls(ref, lr=0.05, **kwargs)
        backward(ref, *batch)
        ref_opt.step()
        for p, r in zip(params, ref):
            torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-6, atol=1e-7)
        for state, r in zip(opt.state, ref):
            assert state["step"].item() == 1, name
            for key, tensor in ref_opt.state[r].items():
                torch.testing.assert_close(state[key], tensor, rtol=1e-6, atol=1e-7)


def test_pickle_round_trip_keeps_state_and_needs_attach():
    params, opt = train_shared("adam", {"amsgrad": True})
    copy = pickle.loads(pickle.dumps(opt))
    assert (copy.name, copy.hyper) == ("adam", {"amsgrad": True})
    for mine, theirs in zip(opt.state, copy.state):
        assert set(mine) == set(theirs)
        for key in mine:
            assert theirs[key].is_shared() and torch.equal(mine[key], theirs[key])
    with pytest.raises(RuntimeError, match="attach"):
        copy.step(0.05)
    new_params = [p.detach().clone().share_memory_().requires_grad_() for p in params]
    copy.attach(new_params)
    backward(new_params, *batches()[0])
    copy.step(0.05)
    assert copy.state[0]["step"].item() == STEPS + 1 and opt.state[0]["step"].item() == STEPS


def test_load_state_dict_copies_into_the_existing_shared_tensors():
    _, trained = train_shared("rmsprop", {"momentum": 0.5, "centered": True})
    saved = trained.state_dict()
    assert saved["state"][0]["square_avg"].data_ptr() != trained.state[0]["square_avg"].data_ptr()  # a snapshot
    params = shared_params()
    fresh = SharedOptimizer(params, "rmsprop", momentum=0.5, centered=True)
    before = [{k: t.data_ptr() for k, t in s.items()} for s in fresh.state]
    fresh.load_state_dict(saved)
    for mine, theirs, pointers in zip(fresh.state, trained.state, before):
        for key, tensor in mine.items():
            assert tensor.data_ptr() == pointers[key] and tensor.is_shared()
            assert torch.equal(tensor, theirs[key])


@pytest.mark.parametrize("change, message", [
    (lambda sd: {**sd, "name": "adam"}, "adam"),
    (lambda sd: {**sd, "state": sd["state"][:1]}, "1 parameters"),
    (lambda sd: {**sd, "state": [{"step": s["step"]} for s in sd["state"]]}, "hyperparameters"),
    (lambda sd: {**sd, "state": [{k: t[:1] if t.dim() else t for k, t in s.items()} for s in sd["state"]]}, "shape"),
])
def test_load_state_dict_rejects_mismatches(change, message):
    opt = SharedOptimizer(shared_params(), "msgd")
    with pytest.raises(ValueError, match=message):
        opt.load_state_dict(change(opt.state_dict()))


@pytest.mark.parametrize("name, lr, hyper, message", [
    ("adamw", 0.1, {}, "adamw"),
    ("adam", -0.1, {}, "lr"),
    ("adam", float("nan"), {}, "lr"),
    ("adam", 0.1, {"momentum": 0.9}, "momentum"),
    ("adam", 0.1, {"betas": (1.5, 0.999)}, "beta"),
    ("adam", 0.1, {"eps": -1.0}, "epsilon"),
    ("msgd", 0.1, {"momentum": -0.5}, "momentum"),
    ("nesterov", 0.1, {"momentum": 0.0}, "Nesterov"),
    ("rmsprop", 0.1, {"alpha": -1.0}, "alpha"),
    ("adadelta", 0.1, {"rho": 2.0}, "rho"),
    ("adagrad", 0.1, {"lr_decay": -1.0}, "lr_decay"),
    ("sgd", 0.1, {"weight_decay": -1.0}, "weight_decay"),
    ("sgd", 0.1, {"differentiable": True}, "differentiable"),
])
def test_invalid_name_or_hyperparameters_raise_value_error_naming_them(name, lr, hyper, message):
    with pytest.raises(ValueError, match=message):  # where the values enter: the Config
        hogwild.Config(optimizer=name, lr=lr, optimizer_args=hyper, progress=False)
    if lr > 0:  # the lr is validated only there; the optimizer checks its own name and hyperparameters
        with pytest.raises(ValueError, match=message):
            SharedOptimizer(shared_params(), name, **hyper)


def test_invalid_parameters_and_step_lr_are_rejected():
    with pytest.raises(ValueError, match="shared memory"):
        SharedOptimizer([torch.zeros(3)], "sgd")
    opt = SharedOptimizer(shared_params(), "sgd")
    with pytest.raises(ValueError, match="built for 2"):
        opt.attach(shared_params()[:1])
    with pytest.raises(ValueError, match="parameter 0"):
        opt.attach([torch.zeros(4, 3).share_memory_(), torch.zeros(3).share_memory_()])
    with pytest.raises(TypeError, match="lr"):  # the optimizer keeps no lr: the schedule's must be passed
        opt.step()


# --- sparse gradients -------------------------------------------------------------------------------------

ROWS = [torch.tensor([[1, 4], [4, 7]]), torch.tensor([[2, 2], [5, 1]]), torch.tensor([[7, 8], [0, 4]])]


def sparse_params(seed=2):
    generator = torch.Generator().manual_seed(seed)
    table, weight = torch.randn(10, 3, generator=generator), torch.randn(3, 2, generator=generator)  # (V, E), (E, 2)
    return [table.share_memory_().requires_grad_(), weight.share_memory_().requires_grad_()]


def sparse_backward(params, rows, sparse):
    for p in params:
        p.grad = None
    table, weight = params
    hidden = F.embedding(rows, table, sparse=sparse)  # rows (2, 2) -> (2, 2, E)
    (hidden @ weight).tanh().pow(2).sum().backward()  # (2, 2, 2)


def sparse_run(name, hyper, row_batches, lr=0.05):
    params = sparse_params()
    opt = SharedOptimizer(params, name, **hyper)
    for rows in row_batches:
        sparse_backward(params, rows, sparse=True)
        assert params[0].grad.is_sparse
        opt.step(lr)
    return params, opt


@pytest.mark.parametrize("name, hyper, cls, kwargs", [c for c in CASES if "weight_decay" not in c[1]],
                         ids=[i for i, c in zip(CASE_IDS, CASES) if "weight_decay" not in c[1]])
def test_sparse_rows_match_dense_torch_optim_when_the_same_rows_are_touched(name, hyper, cls, kwargs):
    # With the same rows every step and no weight decay, lazy row-wise updates equal the dense algorithm.
    row_batches = [ROWS[0]] * 4
    params, opt = sparse_run(name, hyper, row_batches)
    ref = [p.detach().clone().requires_grad_() for p in sparse_params()]
    ref_opt = cls(ref, lr=0.05, **kwargs)
    for rows in row_batches:
        sparse_backward(ref, rows, sparse=False)
        ref_opt.step()
    touched = torch.tensor([1, 4, 7])
    for p, r in zip(params, ref):
        torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-6, atol=1e-7)
    for index, (state, r) in enumerate(zip(opt.state, ref)):
        assert state["step"].item() == 4
        for key, tensor in ref_opt.state[r].items():
            mine = state[key].index_select(0, touched) if index == 0 and tensor.dim() else state[key]
            theirs = tensor.index_select(0, touched) if index == 0 and tensor.dim() else tensor
            torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name, hyper, cls, kwargs", [
    ("sgd", {}, torch.optim.SGD, {}),
    ("sgd", {"foreach": True}, torch.optim.SGD, {"foreach": True}),
    ("adagrad", {"lr_decay": 0.01}, torch.optim.Adagrad, {"lr_decay": 0.01}),
    ("adam", {"eps": 1e-12}, torch.optim.SparseAdam, {"eps": 1e-12}),  # SparseAdam = Adam when eps -> 0
])
def test_sparse_updates_match_torch_sparse_optimizers_on_changing_rows(name, hyper, cls, kwargs):
    params, opt = sparse_run(name, hyper, ROWS)
    ref = [p.detach().clone().requires_grad_() for p in sparse_params()]
    ref_opts = [cls(ref[:1], lr=0.05, **kwargs),
                (torch.optim.Adam if cls is torch.optim.SparseAdam else cls)(ref[1:], lr=0.05, **kwargs)]
    for rows in ROWS:
        sparse_backward(ref, rows, sparse=True)
        for ref_opt in ref_opts:
            ref_opt.step()
    for p, r in zip(params, ref):
        torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_sparse_gradients_leave_untouched_rows_and_their_state_bit_identical(name):
    hyper = {"weight_decay": 0.1} | ({"momentum": 0.5, "centered": True} if name == "rmsprop" else {})
    params = sparse_params()
    opt = SharedOptimizer(params, name, **hyper)
    sparse_backward(params, ROWS[0], sparse=True)  # touches rows 1, 4, 7
    opt.step(0.05)
    table_before = params[0].detach().clone()
    state_before = {k: t.clone() for k, t in opt.state[0].items()}
    sparse_backward(params, torch.tensor([[2, 2], [5, 2]]), sparse=True)  # touches rows 2 and 5 only
    opt.step(0.05)
    untouched, touched = torch.tensor([0, 1, 3, 4, 6, 7, 8, 9]), torch.tensor([2, 5])
    assert torch.equal(params[0].detach()[untouched], table_before[untouched])
    assert not torch.equal(params[0].detach()[touched], table_before[touched])
    assert opt.state[0]["step"].item() == 2
    for key, tensor in opt.state[0].items():
        if tensor.dim():
            assert torch.equal(tensor[untouched], state_before[key][untouched]), key
            assert tensor.is_shared()


def _child_sparse_steps(params, opt, rows, steps):
    """Spawned Hogwild worker: `steps` lazy updates touching only `rows` of the shared table."""
    torch.set_num_threads(1)
    params = [p.requires_grad_() for p in params]
    opt.attach(params)
    for _ in range(steps):
        sparse_backward(params, rows, sparse=True)
        params[1].grad = None  # only the table: the workers' rows are disjoint, so no write can collide
        opt.step(0.05)


def test_concurrent_workers_on_disjoint_rows_match_a_serial_run():
    hyper = {"momentum": 0.5, "weight_decay": 0.1}  # lazy path: momentum rows and decay on touched rows only
    worker_rows = [torch.tensor([[0, 1], [2, 1]]), torch.tensor([[5, 6], [9, 5]])]
    params = sparse_params()
    opt = SharedOptimizer(params, "msgd", **hyper)
    context = mp.get_context("spawn")
    children = [context.Process(target=_child_sparse_steps, args=(params, opt, rows, 6)) for rows in worker_rows]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    ref = sparse_params()
    ref_opt = SharedOptimizer(ref, "msgd", **hyper)
    for rows in worker_rows:  # lazy updates of disjoint rows commute: any interleaving gives this result
        _child_sparse_steps(ref, ref_opt, rows, 6)
    torch.testing.assert_close(params[0].detach(), ref[0].detach(), rtol=0, atol=0)
    torch.testing.assert_close(opt.state[0]["momentum_buffer"], ref_opt.state[0]["momentum_buffer"], rtol=0, atol=0)
    assert torch.equal(params[0].detach()[[3, 4, 7, 8]], sparse_params()[0].detach()[[3, 4, 7, 8]])


@pytest.mark.parametrize("name, hyper, cls, kwargs", [case for case in CASES if case[0] in FUSED],
                         ids=[i for i, case in zip(CASE_IDS, CASES) if case[0] in FUSED])
def test_attach_fused_steps_exactly_like_torchs_fused_optimizer(name, hyper, cls, kwargs):
    params = [p.requires_grad_() for p in shared_params()]
    opt = SharedOptimizer(params, name, **hyper)
    opt.attach(params, fused=True)  # as a worker with Config.fused_step does
    for lr, (x, y) in zip(LRS, batches()):
        backward(params, x, y)
        opt.step(lr)
    ref_params, _ = train_serial(cls, {**kwargs, "fused": True})
    for p, ref in zip(params, ref_params):
        torch.testing.assert_close(p.detach(), ref.detach(), rtol=0, atol=0)


def test_attach_fused_is_refused_without_a_fused_kernel():
    params = [p.requires_grad_() for p in shared_params()]
    with pytest.raises(ValueError, match="no fused kernel"):
        SharedOptimizer(params, "rmsprop").attach(params, fused=True)


@pytest.mark.parametrize("name, kernel", [("adam", "_fused_adam_"), ("msgd", "_fused_sgd_"),
                                          ("adagrad", "_fused_adagrad_")])
def test_a_missing_fused_kernel_falls_back_unfused_with_one_message(monkeypatch, name, kernel):
    from hogwild import shared_optim

    assert shared_optim.fused_kernel_available(name)  # this torch (>= 2.4, pyproject.toml) has every kernel
    monkeypatch.delattr(torch, kernel)  # as a torch without the CPU kernel
    monkeypatch.setattr(shared_optim, "_FALLBACK_REPORTED", set())
    shared_optim.fused_kernel_available.cache_clear()
    try:
        assert not shared_optim.fused_kernel_available(name)
        runs = []
        for fused in (True, True, False):
            params = [p.requires_grad_() for p in shared_params()]
            opt = SharedOptimizer(params, name)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                opt.attach(params, fused=fused)
            runs.append([str(w.message) for w in caught])
            for lr, (x, y) in zip(LRS, batches()):
                backward(params, x, y)
                opt.step(lr)
            runs[-1] = (runs[-1], [p.detach().clone() for p in params])
    finally:
        shared_optim.fused_kernel_available.cache_clear()
    (first, fused_params), (second, _), (unfused_messages, unfused_params) = runs
    assert len(first) == 1 and f"no fused CPU kernel for optimizer {name!r}" in first[0]
    assert second == [] and unfused_messages == []  # one message per process
    for got, expected in zip(fused_params, unfused_params):
        assert torch.equal(got, expected)  # the unfused step, exactly
