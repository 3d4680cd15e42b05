"""Optimizers whose whole state lives in shared memory and is updated lock-free by every worker.

Serves step 2 of `hogwild.train` (share: the state is allocated in shared memory) and step 3 (every worker
steps it).

Usage: `opt = SharedOptimizer(list(model.parameters()), "adam", betas=(0.9, 0.98))`; in each worker
`opt.attach(list(model.parameters()))`, then after `loss.backward()` call `opt.step(lr)` with the lr of the run's
schedule (`hogwild.Config.schedule()(step, epoch)`); the optimizer keeps no lr of its own.

The update arithmetic is torch.optim's own: each process builds the torch.optim optimizer over its own
parameter objects and plugs the pre-allocated shared state tensors (the tensor `step` counters included)
into `optimizer.state[p]`. torch.optim updates those tensors in place, so every process reads and writes
the same moments and counters, and one process with a fixed batch order reproduces serial torch.optim.
The torch.optim classes are built and stepped through `eager_class` (torch.optim's own code without its
torch.compile guards, which import torch._dynamo: 1-2 s of CPU in every process that builds or steps one). Plain SGD
(no momentum, weight decay or maximize) builds none and applies torch.optim.SGD's own arithmetic,
param.add_(grad, alpha=-lr), directly (bit-identical, tested).

Sparse gradients (nn.Embedding(sparse=True)) follow lazy, row-wise semantics for every optimizer: only the
rows present in the gradient move, in the parameter and in every per-element state tensor (momentum and
moment rows of untouched words stay frozen, as in torch.optim.SparseAdam); weight decay applies to the
touched rows only; the per-parameter step counter advances once per step. The touched rows are gathered,
updated by the same torch.optim class, and written back (the parameter by adding the row delta, so
concurrent Hogwild writers to the same row accumulate instead of overwriting). Plain SGD leaves sparse
gradients to torch, whose update is already row-wise.

Which of a model's tensors the engine trains (`trainable_parameters`), and which it only shares and saves.
Trained: the parameters that require grad, each once. A Parameter tied into two modules (lm_head.weight is
decoder.embed_tokens.weight) is one tensor: one gradient, one optimizer state, one update per step, as
`model.parameters()` lists it once. Shared only: frozen parameters (requires_grad=False: sinusoidal position
tables, frozen embeddings, everything outside a few fine-tuned layers) and buffers of any dtype (running statistics,
int64 counters, bool masks). These live in shared memory, reach every replica and are saved in checkpoints like the
trained ones, but never get a hook, a gradient, optimizer state or an update. The optimizer is built over the
trained ones (step 2), each worker attaches to them and hooks them (step 3), checkpoints keep a tied tensor once
(steps 4-5): `params = trainable_parameters(model)`; `state = private_copy(model.state_dict())`.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Sequence

import torch
from torch import Tensor, nn

OPTIMIZERS = ("sgd", "msgd", "nesterov", "adagrad", "adadelta", "rmsprop", "adam", "adamax")


@functools.cache
def eager_class(cls: type[torch.optim.Optimizer]) -> type[torch.optim.Optimizer]:
    """torch.optim class `cls` built and stepped in eager mode without importing torch._dynamo.

    torch.optim guards add_param_group (run by __init__) and step against tracing by torch.compile with decorators
    that import torch._dynamo on their first call: 1-2 s of CPU, more than the rest of a worker's start-up after
    torch's own import. Outside torch.compile they only call the function they wrap (functools.wraps: reachable
    through inspect.unwrap), step with grad disabled (differentiable, refused here, is the only other case). The
    subclass calls the wrapped functions; Optimizer.__init__ still wraps its step in the profiler label and the step
    hooks, as any torch.optim class's. A torch whose decorators keep no __wrapped__ gives the decorated functions
    back (correct, only slower to start)."""
    add_param_group = inspect.unwrap(torch.optim.Optimizer.add_param_group)
    step = inspect.unwrap(cls.step)

    def eager_step(self: torch.optim.Optimizer, closure: None = None) -> None:
        if closure is not None:
            raise ValueError("SharedOptimizer steps without a closure")
        with torch.no_grad():
            step(self)

    return type(f"Eager{cls.__name__}", (cls,), {"add_param_group": add_param_group, "step": eager_step,
                                                  "__module__": __name__})


# every optimizer's torch.optim class, built and stepped through eager_class
_CLASSES: dict[str, type[torch.optim.Optimizer]] = {name: eager_class(cls) for name, cls in {
    "sgd": torch.optim.SGD, "msgd": torch.optim.SGD, "nesterov": torch.optim.SGD,
    "adagrad": torch.optim.Adagrad, "adadelta": torch.optim.Adadelta, "rmsprop": torch.optim.RMSprop,
    "adam": torch.optim.Adam, "adamax": torch.optim.Adamax,
}.items()}
# torch has fused CPU kernels for these (Adam, Adagrad, SGD): one multi-threaded pass per tensor instead of
# foreach's several. Plain SGD gains nothing (its direct path is one add per tensor) and keeps that path. They
# arrived in torch 2.4 (pyproject.toml's floor); a torch without one steps unfused (fused_kernel_available).
FUSED_OPTIMIZERS = ("sgd", "msgd", "nesterov", "adagrad", "adam")
# Stepped fused whenever several workers share their state (worker.device_options). Unfused, torch.optim's Adam
# writes exp_avg, then exp_avg_sq, each in a pass over the whole tensor, then reads them again for the update: a
# worker stepping meanwhile can divide a first moment holding the other's gradient by a second moment without it.
# Early on (exp_avg_sq near 0) an element its own gradient barely touches then moves by thousands of lr: the
# workers' first steps start together, and a weight jumped by 100 now and then in test_frozen_tied.py's two-worker
# run. The fused kernel reads and writes each element's moments and parameter in one pass, leaving no such point
# between two writes (tests/hogwild/test_torn_moments.py forces the interleaving).
FUSED_WHEN_SHARED = ("adam",)
_FALLBACK_REPORTED: set[str] = set()  # optimizers whose missing fused kernel was reported in this process
_NAME_DEFAULTS: dict[str, dict[str, Any]] = {
    "msgd": {"momentum": 0.9}, "nesterov": {"momentum": 0.9, "nesterov": True},
}
# the optimizers with a momentum of their own (run.py's --momentum sets it)
MOMENTUM_OPTIMIZERS = tuple(name for name, hyper in _NAME_DEFAULTS.items() if "momentum" in hyper)
# Options that make no sense for shared CPU state updated outside autograd.
_REFUSED = ("params", "lr", "differentiable", "capturable")


def _hyperparameters(name: str, hyper: dict[str, Any]) -> dict[str, Any]:
    """Validated torch.optim keyword arguments (lr excluded) for optimizer `name`."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer name {name!r}; expected one of {', '.join(OPTIMIZERS)}")
    accepted = [k for k in inspect.signature(_CLASSES[name].__init__).parameters
                if k not in ("self",) + _REFUSED]
    unknown = sorted(set(hyper) - set(accepted))
    if unknown:
        raise ValueError(f"optimizer {name!r}: unknown hyperparameter(s) {', '.join(unknown)}; "
                         f"accepted: {', '.join(accepted)}")
    merged = {**_NAME_DEFAULTS.get(name, {}), **hyper}
    try:  # torch.optim's own checks (momentum, betas, eps, rho, ...) on a throwaway tensor
        _CLASSES[name]([torch.zeros(1)], lr=0.0, **merged)
    except (ValueError, RuntimeError) as error:
        raise ValueError(f"optimizer {name!r}: invalid hyperparameter: {error}") from None
    return merged


@functools.cache
def fused_kernel_available(name: str) -> bool:
    """Whether this torch steps optimizer `name` (one of FUSED_OPTIMIZERS) with its fused kernel on CPU tensors:
    one step of torch.optim's fused=True on a throwaway tensor, once per process."""
    param = torch.zeros(2, requires_grad=True)
    param.grad = torch.ones(2)
    try:
        _CLASSES[name]([param], lr=0.1, fused=True, **_NAME_DEFAULTS.get(name, {})).step()
    except (RuntimeError, TypeError, AttributeError, NotImplementedError):
        return False
    return True


def _state_layout(name: str, hyper: dict[str, Any]) -> dict[str, str]:
    """State key -> "scalar" (a 0-d step counter) or "param" (shaped like the parameter)."""
    if name in ("sgd", "msgd", "nesterov"):  # torch.optim.SGD keeps no counter; ours gives checkpoints a step
        return {"step": "scalar", **({"momentum_buffer": "param"} if hyper.get("momentum", 0) else {})}
    keys = {"adagrad": ["sum"], "adadelta": ["square_avg", "acc_delta"], "adamax": ["exp_avg", "exp_inf"],
            "adam": ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if hyper.get("amsgrad") else []),
            "rmsprop": ["square_avg"] + (["momentum_buffer"] if hyper.get("momentum", 0) > 0 else [])
            + (["grad_avg"] if hyper.get("centered") else [])}[name]
    return {"step": "scalar", **{key: "param" for key in keys}}


def _step_dtype(hyper: dict[str, Any]) -> torch.dtype:
    # torch.optim's rule (optimizer._get_scalar_dtype): float32 when fused, else follows the default dtype
    if hyper.get("fused") or torch.get_default_dtype() != torch.float64:
        return torch.float32
    return torch.float64


class SharedOptimizer:
    """One of OPTIMIZERS over shared CPU parameters, with all state allocated up front in shared memory."""

    def __init__(self, params: Sequence[Tensor], name: str, **hyper: Any) -> None:
        self.hyper = _hyperparameters(name, hyper)
        self.name = name
        params = list(params)
        if not params:
            raise ValueError(f"optimizer {name!r}: got no parameters")
        layout = _state_layout(name, self.hyper)
        fill = float(self.hyper.get("initial_accumulator_value", 0.0)) if name == "adagrad" else 0.0
        self.shapes = [(tuple(p.shape), p.dtype) for p in params]  # what attach() must be given again
        self.state: list[dict[str, Tensor]] = []  # per parameter, in params order
        # SGD's counters (torch.optim.SGD keeps none) are views of one (P,) tensor: one numpy add per step
        self.sgd_steps = torch.zeros(len(params), dtype=_step_dtype(self.hyper)).share_memory_() \
            if name in ("sgd", "msgd", "nesterov") else None
        for index, p in enumerate(params):
            _check_param(p, index)
            self.state.append({
                key: (self.sgd_steps[index] if self.sgd_steps is not None and key == "step"
                      else torch.zeros((), dtype=_step_dtype(self.hyper)).share_memory_() if kind == "scalar"
                      else torch.full_like(p, fill, memory_format=torch.preserve_format).share_memory_())
                for key, kind in layout.items()})
        self.attach(params)

    @staticmethod
    def state_nbytes(params: Sequence[Tensor], name: str, **hyper: Any) -> int:
        """Bytes of shared state SharedOptimizer(params, name, **hyper) allocates (without the parameters)."""
        return sum(SharedOptimizer.state_tensor_nbytes(params, name, **hyper))

    @staticmethod
    def state_tensor_nbytes(params: Sequence[Tensor], name: str, **hyper: Any) -> list[int]:
        """Bytes of each shared tensor SharedOptimizer(params, name, **hyper) allocates - each is a file of its own
        in /dev/shm, charged in whole pages: per parameter its parameter-shaped state, and the step counters (one
        scalar per parameter; SGD's are views of one tensor)."""
        layout = _state_layout(name, _hyperparameters(name, hyper))
        step_size = torch.zeros((), dtype=_step_dtype(hyper)).element_size()
        per_param = sum(1 for kind in layout.values() if kind == "param")
        sizes = [p.numel() * p.element_size() for p in params for _ in range(per_param)]
        steps = [len(params) * step_size] if name in ("sgd", "msgd", "nesterov") else [step_size] * len(params)
        return sizes + steps

    # --- binding to one process's parameter objects -------------------------------------------------
    def attach(self, params: Sequence[Tensor], fused: bool = False) -> None:
        """Bind to this process's parameter objects (the same shared storages, in the same order). fused: step
        with torch's fused CPU kernel (name in FUSED_OPTIMIZERS; same arithmetic as torch.optim's fused=True)."""
        if fused and self.name not in FUSED_OPTIMIZERS:
            raise ValueError(f"attach: optimizer {self.name!r} has no fused kernel (only {FUSED_OPTIMIZERS})")
        params = list(params)
        if len(params) != len(self.state):
            raise ValueError(f"attach: got {len(params)} parameters, the optimizer was built for {len(self.state)}")
        for index, (p, (shape, dtype)) in enumerate(zip(params, self.shapes)):
            _check_param(p, index)
            if (tuple(p.shape), p.dtype) != (shape, dtype):
                raise ValueError(f"attach: parameter {index} is {tuple(p.shape)} {p.dtype}, "
                                 f"the optimizer was built for {shape} {dtype}")
        self._params = params
        hyper = self.hyper
        plain = self.name == "sgd" and not any(self.hyper.get(k) for k in ("momentum", "weight_decay", "maximize"))
        if fused and not plain and not fused_kernel_available(self.name):
            if self.name not in _FALLBACK_REPORTED:
                _FALLBACK_REPORTED.add(self.name)
                warnings.warn(f"torch {torch.__version__} has no fused CPU kernel for optimizer {self.name!r} (torch "
                              f">= 2.4 has): stepping unfused, the same arithmetic up to the last bits of rounding",
                              RuntimeWarning, stacklevel=2)
            fused = False
        if fused and not plain and not self.hyper.get("fused"):  # plain SGD's direct path is already one add
            hyper = {**{k: v for k, v in self.hyper.items() if k != "foreach"}, "fused": True}
        self._is_sgd = self.sgd_steps is not None
        self._sgd_counts = self.sgd_steps.numpy() if self._is_sgd else None  # (P,) view of shared memory
        # torch.optim.SGD creates the momentum buffer as a copy of the first gradient; a zero buffer gives the
        # same result unless dampening != 0, so only then the first step goes through torch's own path.
        self._first_step_copies = self._is_sgd and bool(self.hyper.get("momentum", 0)) \
            and self.hyper.get("dampening", 0) != 0
        self._native_sparse = self._is_sgd and not self.hyper.get("momentum", 0) \
            and not self.hyper.get("weight_decay", 0) and not hyper.get("fused")
        # Plain SGD is param -= lr * grad: applied directly (torch.optim.SGD's own arithmetic, param.add_(grad,
        # alpha=-lr)), one foreach call for the dense gradients, it skips ~35 us of torch.optim's per-step
        # machinery (profiler hooks, grad-mode guards, group scans): ~1-2% of a small RNN's step.
        self._plain_sgd = self._native_sparse and not self.hyper.get("maximize")
        self._optimizer = None
        if not self._plain_sgd:
            self._optimizer = _CLASSES[self.name](params, lr=0.0, **hyper)  # step(lr) sets the lr
            self._optimizer.state.clear()  # Adagrad fills its state in __init__; ours replaces it
            for p, state in zip(params, self.state):
                self._optimizer.state[p] = {k: t for k, t in state.items() if not (self._is_sgd and k == "step")}

    def __getstate__(self) -> dict[str, Any]:
        # Shared tensors pickle as shared-memory handles through torch.multiprocessing; the parameter
        # objects and the torch.optim instance belong to one process and are rebuilt by attach().
        return {"name": self.name, "hyper": self.hyper, "shapes": self.shapes, "state": self.state,
                "sgd_steps": self.sgd_steps}

    def __setstate__(self, saved: dict[str, Any]) -> None:
        self.name, self.hyper = saved["name"], saved["hyper"]
        self.shapes, self.state, self.sgd_steps = saved["shapes"], saved["state"], saved["sgd_steps"]
        for tensor in [t for state in self.state for t in state.values()] + [self.sgd_steps]:
            if tensor is not None:  # a plain pickle gives private copies: keep the shared-memory invariant
                tensor.share_memory_()
        self._params = None

    # --- the update -----------------------------------------------------------------------------------
    def step(self, lr: float) -> None:
        """Apply one update with learning rate `lr` from the attached parameters' .grad, in place on the shared
        tensors. `lr` comes from the run's schedule (hogwild.Config.schedule(), where it was validated)."""
        if self._params is None:
            raise RuntimeError("SharedOptimizer.step() before attach(): call opt.attach(list(model.parameters())) "
                               "in this process first")
        if self._plain_sgd:
            self._plain_sgd_step(lr)
            return
        for group in self._optimizer.param_groups:
            group["lr"] = lr
        grads = [p.grad for p in self._params]
        lazy = [] if self._native_sparse else [i for i, g in enumerate(grads) if g is not None and g.is_sparse]
        for i in lazy:  # hidden from the dense step, updated row-wise below
            self._params[i].grad = None
        try:
            first = self._detach_first_momentum() if self._first_step_copies else []
            self._optimizer.step()
            for i in first:
                self.state[i]["momentum_buffer"].copy_(self._optimizer.state[self._params[i]]["momentum_buffer"])
                self._optimizer.state[self._params[i]]["momentum_buffer"] = self.state[i]["momentum_buffer"]
        finally:
            for i in lazy:
                self._params[i].grad = grads[i]
        with torch.no_grad():
            for i in lazy:
                self._sparse_step(i, lr)
        if self._is_sgd:
            self._count_sgd_steps(grads)

    def _count_sgd_steps(self, grads: list[Tensor | None]) -> None:
        """SGD's step counters (torch.optim.SGD keeps none): +1 for every parameter that had a gradient."""
        if all(g is not None for g in grads):
            self._sgd_counts += 1
        else:
            for i, g in enumerate(grads):
                self._sgd_counts[i] += g is not None

    @torch.no_grad()
    def _plain_sgd_step(self, lr: float) -> None:
        grads = [p.grad for p in self._params]
        dense = [(p, g) for p, g in zip(self._params, grads) if g is not None and not g.is_sparse]
        for p, g in zip(self._params, grads):
            if g is not None and g.is_sparse:
                p.add_(g, alpha=-lr)  # row-wise in torch
        if dense:
            torch._foreach_add_([p for p, _ in dense], [g for _, g in dense], alpha=-lr)
        self._count_sgd_steps(grads)

    def _detach_first_momentum(self) -> list[int]:
        """Parameters on their first step: torch.optim.SGD will create their momentum buffer (a copy of the grad)."""
        first = [i for i, (p, s) in enumerate(zip(self._params, self.state))
                 if p.grad is not None and s["step"].item() == 0]
        for i in first:
            del self._optimizer.state[self._params[i]]["momentum_buffer"]
        return first

    def _sparse_step(self, index: int, lr: float) -> None:
        """Lazy update of parameter `index` from its sparse gradient: only the rows present move."""
        param, state = self._params[index], self.state[index]
        grad = param.grad.coalesce()  # sums duplicate rows
        rows = grad.indices()[0]  # (R,)
        if rows.numel() == 0:
            return
        before = param.index_select(0, rows)  # (R, *row_shape)
        work = before.clone()
        work.grad = grad.values()  # (R, *row_shape)
        hyper = {k: v for k, v in self.hyper.items() if k not in ("foreach", "fused")}
        optimizer = _CLASSES[self.name]([work], lr=lr, **hyper)
        row_state: dict[str, Tensor] = {k: (t if k == "step" else t.index_select(0, rows)) for k, t in state.items()}
        if self._is_sgd:
            row_state = {k: t for k, t in row_state.items() if k != "step"}
            if self._first_step_copies and state["step"].item() == 0:
                row_state.pop("momentum_buffer")
        optimizer.state.clear()
        optimizer.state[work] = row_state
        optimizer.step()
        param.index_add_(0, rows, work.sub_(before))  # add the delta: concurrent writers accumulate
        for key, tensor in optimizer.state[work].items():
            if key != "step":
                state[key].index_copy_(0, rows, tensor)

    # --- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A snapshot (copies) of the shared state, plus name and hyperparameters."""
        return {"name": self.name, "hyper": dict(self.hyper),
                "state": [{k: t.clone() for k, t in s.items()} for s in self.state]}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Copy a state_dict() into the existing shared tensors (never replaces them)."""
        if saved.get("name") != self.name:
            raise ValueError(f"load_state_dict: checkpoint holds optimizer {saved.get('name')!r}, "
                             f"this one is {self.name!r}")
        states = saved.get("state", [])
        if len(states) != len(self.state):
            raise ValueError(f"load_state_dict: checkpoint has state for {len(states)} parameters, "
                             f"this optimizer has {len(self.state)}")
        for index, (mine, theirs) in enumerate(zip(self.state, states)):
            if set(mine) != set(theirs):
                raise ValueError(f"load_state_dict: parameter {index} has state {sorted(theirs)} in the checkpoint, "
                                 f"expected {sorted(mine)} (different hyperparameters?)")
            for key, tensor in mine.items():
                if tuple(theirs[key].shape) != tuple(tensor.shape):
                    raise ValueError(f"load_state_dict: parameter {index} state {key!r} has shape "
                                     f"{tuple(theirs[key].shape)} in the checkpoint, expected {tuple(tensor.shape)}")
        for mine, theirs in zip(self.state, states):
            for key, tensor in mine.items():
                tensor.copy_(theirs[key])


def _check_param(p: Tensor, index: int) -> None:
    if not isinstance(p, Tensor):
        raise ValueError(f"parameter {index} is a {type(p).__name__}, not a tensor")
    if p.device.type != "cpu":
        raise ValueError(f"parameter {index} lives on {p.device}; shared parameters must be CPU tensors")
    if not p.is_shared():
        raise ValueError(f"parameter {index} {tuple(p.shape)} is not in shared memory; "
                         "call model.share_memory() before building the SharedOptimizer")


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the workers train: requires_grad, each tied Parameter once, in `model.parameters()` order."""
    return [param for param in model.parameters() if param.requires_grad]


def _storage_key(tensor: Tensor) -> tuple:
    """Equal for two views of the same memory with the same layout (the names of one tied weight)."""
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()),
            tensor.dtype, tensor.device)


def private_copy(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A detached copy of a state_dict in private memory. Names of one tensor (a tied weight appears under every
    module that holds it) share one copy, so a checkpoint stores it once and loads back tied."""
    copies: dict[tuple, Tensor] = {}
    result = {}
    for name, tensor in state.items():
        key = _storage_key(tensor)
        if key not in copies:
            copies[key] = tensor.detach().clone()
        result[name] = copies[key]
    return result


def unique_nbytes(state: dict[str, Tensor]) -> int:
    """Bytes of a state_dict's tensors, a tied tensor counted once."""
    unique = {_storage_key(tensor): tensor for tensor in state.values()}
    return sum(tensor.numel() * tensor.element_size() for tensor in unique.values())
