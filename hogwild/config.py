"""Training configuration: one typed, validated dataclass shared by every part of the engine.

Usage: `config = Config(workers=2, optimizer="sgd", lr=0.1, epochs=2, checkpoint_dir="runs/pos")`
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from .lr_schedule import SCHEDULES, LRSchedule, make_schedule
from .shared_optim import FUSED_OPTIMIZERS, OPTIMIZERS, SharedOptimizer

MODES = ("hogwild", "sync", "single")
DATA_ASSIGNMENTS = ("queue", "partition")
BEST_MODES = ("max", "min")
AMP_DTYPES = (None, "bf16")  # Config.amp: autocast dtypes of the forward
# Config.compile: torch.compile modes of a worker's step; 'aot_eager' captures the same graphs without generating
# code (seconds instead of minutes to compile: tests, and checking that a model captures).
COMPILE_MODES = ("off", "default", "reduce-overhead", "aot_eager")
# Config.graphs: the graphed step of device workers (hogwild/worker/step_graph.py); 'auto' is on for 'cuda' workers.
GRAPH_MODES = ("auto", "on", "off")
# 'cpu' trains directly on the shared parameters; 'cpu-replica' runs the GPU pull/compute/push path on the CPU.
_DEVICE = re.compile(r"^(cpu|cpu-replica|cuda(:\d+)?)$")


def _gpu_index(device: str) -> int:
    """'cuda:N' -> N; 'cuda' is cuda:0 in a fresh process (a worker's, the parent's)."""
    return int(device.partition(":")[2] or 0)


class ConfigError(ValueError):
    """A Config value is refused: `field` names the field and `reason` says why (run.py names its flag instead)."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"Config.{field}: {reason}")
        self.field, self.reason = field, reason


def _fail(name: str, message: str) -> None:
    raise ConfigError(name, message)


def _positive(name: str, value: float | int | None, *, allow_zero: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(name, f"must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        _fail(name, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _integer(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        _fail(name, f"must be an integer, got {value!r}")


@dataclass
class Config:
    """How to train. Every field has a default; invalid values raise ConfigError (a ValueError) naming the field.
    The fields, by group (each with its default):

    Workers:
    - devices = None: one entry per worker: 'cpu', 'cpu-replica', 'cuda:0', ...; None -> workers x 'cpu'
    - workers = 1: shorthand for devices=['cpu'] * workers (ignored when devices is given)
    - mode = "hogwild": 'hogwild' (lock-free async), 'sync' (averaged gradients every step), 'single' (1 worker)
    - threads_per_worker = 1: torch intra-op threads in every worker process (the CPU update uses them too)

    Device workers ('cuda:N', 'cpu-replica'; 'cpu' workers train in place and ignore these):
    - overlap_update = None: apply update k on the CPU in a background thread while step k+1 computes and the pull of
      step k+2 reads the parameters, neither waiting for the other (one or two more steps of staleness, counted;
      that pull may read part of the update, as Hogwild workers read each other's); None: on for 'cuda' workers
    - fused_step = None: torch's fused CPU optimizer kernel (sgd, msgd, nesterov, adagrad, adam:
      shared_optim.FUSED_OPTIMIZERS): None: on for 'cuda' workers; True: every worker (refused for optimizers
      without one)
    - amp = None: 'bf16': forward under torch.autocast(bfloat16); parameters and state stay fp32 (the models run their
      multi-step GRU/LSTM layers in fp32 by design, never fp16: models/padded_rnn.py)
    - update_threads = None: torch threads of the background update thread (overlap_update) that runs the shared CPU
      optimizer step; None: for 'cuda' workers each one's share of the cores, (cores - 1) // workers - 1 (the parent
      and the worker's own main thread keep one each), for others threads_per_worker. Bit-identical results either way
    - pin_shared = True: 'cuda' workers register the shared parameters page-locked (true async pulls)
    - sparse_pull = False: device workers pull only the rows of nn.Embedding(sparse=True) tables whose ids appear in
      the next batch's integer tensors (exact: a device worker's step reads no other row of such a table)
    - compile = "off": one of COMPILE_MODES: torch.compile of the worker's loss function (see the step options below)
    - tf32 = False: TF32 matrix products in every worker process (GPUs only; see the step options below)
    - pull_every = 1: device workers pull the dense parameters every this many updates (see the step options below)
    - graphs = "auto": one of GRAPH_MODES: the graphed step of device workers (see the step options below); 'auto':
      on for 'cuda' workers in mode 'hogwild' or 'single' unless compile is set, off otherwise
    - graph_limit = None: graphs per graphed worker, one for each of the most frequent batch shapes; None: one for
      every shape the run uses at least 4 times over its epochs (a graph costs its warm-up and capture, about 4
      eager steps; all of a worker's graphs share one memory pool)

    Optimizer and learning rate:
    - optimizer = "sgd": one of OPTIMIZERS (shared optimizer state, updated lock-free)
    - lr = 0.01: learning rate: the schedule's starting value
    - optimizer_args = {}: torch.optim kwargs: momentum, betas, eps, ...
    - lr_schedule = "constant": 'constant' | 'linear_decay' | 'warmup_scaled'
    - decay_per_epoch = 0.0: linear_decay: lr - decay_per_epoch * epoch
    - decay_updates = None: linear_decay: count the decay per this many shared updates instead of per epoch (lr -
      decay_per_epoch * step / decay_updates): a pace that does not depend on the corpus size; None: per completed
      epoch (the paper)
    - warmup_steps = 0: warmup_scaled: linear warm-up from lr to lr * workers over these updates
    - min_lr = 0.0: floor of every schedule
    - clip_norm = None: clip each update's gradient to this global L2 norm
    - skip_nonfinite = True: skip (and count) updates whose gradient holds NaN/inf; False saves summing each gradient
      per step when clip_norm is None (then nothing guards the model)
    - max_nonfinite_in_a_row = 1000: a worker that skips this many updates in a row fails the run (the shared
      parameters have diverged; skipped updates never reach max_steps); None: never

    When to stop (the first one reached wins; none given -> 1 epoch):
    - max_steps = None: total shared updates across all workers
    - epochs = None: passes over the batches
    - time_limit = None: wall-clock seconds of training

    Evaluation, best model, early stopping:
    - eval_every = None: evaluate a snapshot once this many shared updates have passed since the last evaluation
      started: a spacing, not a schedule (evaluations run one at a time beside training and within eval_budget, so a
      run that updates faster than it evaluates evaluates less often than every eval_every updates)
    - eval_every_seconds = None: ... and/or every this many seconds
    - eval_device = "auto": where the parent evaluates its snapshot: 'cpu', 'cuda:N' or 'auto'. A GPU evaluates much
      faster than the CPU, but one that hosts a worker lends it memory and compute (that worker alone slows down) and
      refuses a second process in exclusive-process mode; the CPU never fails that way but is slower and shares the
      cores with the workers' update threads. eval_budget keeps either within its share of the wall time. 'auto'
      (evaluation_device): a GPU no worker uses, else the CPU while training; the first worker's GPU for the final
      evaluation, after training
    - eval_budget = 0.1: periodic evaluations may take at most this share of the wall time since training started (the
      next one waits until the measured evaluation time allows it); None or 0: no cap. Evaluations run on a thread
      beside the parent's loop, one at a time
    - eval_at_start = False: also evaluate the starting parameters, as the first periodic evaluation (on the thread
      while training begins, within time_limit and eval_budget)
    - best_metric = None: key of evaluate()'s dict deciding the best checkpoint; None -> first key
    - best_mode = "max": 'max' (accuracy, BLEU) or 'min' (loss, perplexity)
    - patience = None: stop after this many evaluations without improvement
    - target = None: stop once best_metric reaches this value (>= with best_mode 'max', <= with 'min'): time-to-
      accuracy runs (bench/bench_convergence.py)

    Run directory, checkpoints, logging:
    - checkpoint_dir = None: the run directory: config.json, metrics.jsonl, last.pt, best.pt
    - checkpoint_every = None: write last.pt every this many shared updates (also always at the end)
    - checkpoint_minutes = 10.0: also write last.pt every this many minutes of training, so that a hard stop (SIGKILL,
      the OOM killer, a power cut) loses at most that much; None: off (only with checkpoint_dir)
    - resume = False: continue from checkpoint_dir/last.pt when it exists
    - log_every = 100: write a metrics record every this many shared updates
    - progress = True: tqdm progress bar in the parent
    - tensorboard = True: TensorBoard events in the run directory when tensorboard is installed

    Data:
    - seed = 0: batch order, per-batch RNG (dropout) and initial RNG states derive from it
    - shuffle = True: seeded shuffle of the batch order every epoch
    - queue_depth = 16: queue items between the feed and the workers in all (each worker has a queue of its own, at
      least 2 items deep)
    - data_assignment = "queue": 'queue': the parent deals each epoch's batches, in a seeded order, to the workers'
      own queues (each batch to one worker: share/feed.py); 'partition': each worker has a fixed shard

    Failure handling:
    - check_shm = True: before spawning, check /dev/shm can hold parameters and optimizer state
    - join_timeout = 10.0: seconds to wait for workers to finish their step when stopping
    - hang_timeout = 60.0: a worker whose counters do not move for this long, or 20 of its median steps if longer, is
      hung (stopped, deadlocked, stuck in I/O): named, killed, the run checkpointed and failed (progress_watch.py);
      None: never
    - max_restarts = 0: replace a worker that dies (a signal, an exception) or is found hung by a fresh process on its
      device, its unfinished batches dealt to the workers again (none lost, each counted once: max_steps stays
      exact), at most this many times in the run; past that the run fails as with 0. 'queue' data assignment, mode
      'hogwild' or 'single'

    The step options of device workers trade exactness or start-up time for speed; each default is the exact,
    eager path (the reference of the tests):
    - compile: torch.compile of the loss function (forward, and backward through AOTAutograd). Fewer, fused kernels
      per update (a launch-bound GPU step gains most; 'reduce-overhead' replays CUDA graphs), at the cost of a
      compilation per distinct batch shape (minutes with inductor; every shape compiles in start-up, before the
      worker is ready, and workers after the first reuse the first one's kernels from the run's inductor cache;
      the decoder loop of a sequence model compiles once per target length, so pad lengths to buckets: run.py's
      --length-bucket)
      and of results equal to eager only up to rounding (fused kernels sum in another order).
    - tf32: TF32 matrix products on GPUs (10 mantissa bits instead of 23 inside the products, fp32 accumulation):
      faster matmuls, slightly different arithmetic; no effect on CPU workers.
    - pull_every: a device worker pulls the dense parameters every K-th update only (sparse rows under sparse_pull
      every update). Saves K-1 of K host->device copies of the whole model and lets the previous update start at
      once; the price is staleness: the skipped pulls' missed updates, its own included, count in the staleness of
      every update computed on the old copy. K=1 is the paper's recipe exactly.
    - graphs: the step of a device worker runs as one CUDA graph per batch shape, captured at start-up (before the
      worker is ready: outside the training clock and the hang watch) for the shapes graph_limit picks; other shapes
      run the same step eagerly, counted (TrainResult.eager_steps and eager_share, metrics.jsonl's eager_share).
      With graphs or without, a device worker's step never waits for the device: the gradients are gathered on the
      device into one buffer, clipped and checked for finiteness there and copied to the host in one copy; whoever
      applies the update reads the result (a skipped step is counted then); the next step's parameters are copied
      from the shared ones while the step computes. So the step needs every trained parameter in one floating
      dtype, and a sparse table read only at ids of its batch's integer tensors. A graph replays without calling the
      loss, so the loss must read no host value of the batch (the models' padded losses, run.py picks them) and its
      count must be the batch's host-side `tokens` (else its leading size). On a 'cpu-replica' worker, 'on' runs the
      same step on static inputs without capture (what the tests exercise).
    """

    # each field is described, with its default, in the docstring above (help(hogwild.Config))
    # --- workers ---
    devices: list[str] | None = None
    workers: int = 1
    mode: str = "hogwild"
    threads_per_worker: int = 1

    # --- device workers ('cuda:N', 'cpu-replica'; 'cpu' workers train in place and ignore these) ---
    overlap_update: bool | None = None
    fused_step: bool | None = None
    amp: str | None = None
    update_threads: int | None = None
    pin_shared: bool = True
    sparse_pull: bool = False
    compile: str = "off"
    tf32: bool = False
    pull_every: int = 1
    graphs: str = "auto"
    graph_limit: int | None = None

    # --- optimizer and learning rate ---
    optimizer: str = "sgd"
    lr: float = 0.01
    optimizer_args: dict[str, Any] = field(default_factory=dict)
    lr_schedule: str = "constant"
    decay_per_epoch: float = 0.0
    decay_updates: int | None = None
    warmup_steps: int = 0
    min_lr: float = 0.0
    clip_norm: float | None = None
    skip_nonfinite: bool = True
    max_nonfinite_in_a_row: int | None = 1000

    # --- when to stop (the first one reached wins; none given -> 1 epoch) ---
    max_steps: int | None = None
    epochs: int | None = None
    time_limit: float | None = None

    # --- evaluation, best model, early stopping ---
    eval_every: int | None = None
    eval_every_seconds: float | None = None
    eval_device: str = "auto"
    eval_budget: float | None = 0.1
    eval_at_start: bool = False
    best_metric: str | None = None
    best_mode: str = "max"
    patience: int | None = None
    target: float | None = None

    # --- run directory, checkpoints, logging ---
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = 10.0
    resume: bool = False
    log_every: int = 100
    progress: bool = True
    tensorboard: bool = True

    # --- data ---
    seed: int = 0
    shuffle: bool = True
    queue_depth: int = 16
    data_assignment: str = "queue"

    # --- failure handling ---
    check_shm: bool = True
    join_timeout: float = 10.0
    hang_timeout: float | None = 60.0
    max_restarts: int = 0

    def __post_init__(self) -> None:
        _integer("workers", self.workers)
        if self.workers < 1:
            _fail("workers", f"must be >= 1, got {self.workers}")
        if self.devices is not None:
            if isinstance(self.devices, str) or not isinstance(self.devices, (list, tuple)) or not self.devices:
                _fail("devices", f"must be a non-empty list like ['cpu', 'cpu'], got {self.devices!r}")
            for device in self.devices:
                if not isinstance(device, str) or not _DEVICE.match(device):
                    _fail("devices", f"unknown device {device!r} (use 'cpu', 'cpu-replica' or 'cuda:N')")
            if self.workers not in (1, len(self.devices)):
                _fail("workers", f"is {self.workers} but devices lists {len(self.devices)} workers; give one of them")
            self.devices = list(self.devices)
            self.workers = len(self.devices)
        else:
            self.devices = ["cpu"] * self.workers
        if self.mode not in MODES:
            _fail("mode", f"must be one of {MODES}, got {self.mode!r}")
        if self.mode == "single":
            self.devices, self.workers = self.devices[:1], 1
        _integer("threads_per_worker", self.threads_per_worker)
        _positive("threads_per_worker", self.threads_per_worker)
        if self.optimizer not in OPTIMIZERS:
            _fail("optimizer", f"must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        _positive("lr", self.lr)
        if not isinstance(self.optimizer_args, dict) or not all(isinstance(k, str) for k in self.optimizer_args):
            _fail("optimizer_args", f"must be a dict of torch.optim keyword arguments, got {self.optimizer_args!r}")
        if "lr" in self.optimizer_args:
            _fail("optimizer_args", "must not contain 'lr' (use Config.lr)")
        try:  # the optimizer's own checks of names and values (betas, momentum, ...)
            SharedOptimizer.state_nbytes([], self.optimizer, **self.optimizer_args)
        except (ValueError, TypeError) as error:
            _fail("optimizer_args", str(error))
        if self.lr_schedule not in SCHEDULES:
            _fail("lr_schedule", f"must be one of {SCHEDULES}, got {self.lr_schedule!r}")
        _positive("decay_per_epoch", self.decay_per_epoch, allow_zero=True)
        _integer("decay_updates", self.decay_updates)
        _positive("decay_updates", self.decay_updates)
        if self.decay_updates is not None and self.lr_schedule != "linear_decay":
            _fail("decay_updates", f"sets the unit of a linear decay (lr_schedule='linear_decay'), not of "
                                   f"{self.lr_schedule!r}")
        _integer("warmup_steps", self.warmup_steps)
        _positive("warmup_steps", self.warmup_steps, allow_zero=True)
        _positive("min_lr", self.min_lr, allow_zero=True)
        if self.min_lr > self.lr:
            _fail("min_lr", f"must not exceed lr ({self.lr}), got {self.min_lr}")
        _positive("clip_norm", self.clip_norm)
        for name in ("max_steps", "epochs", "eval_every", "checkpoint_every", "log_every", "patience", "queue_depth"):
            _integer(name, getattr(self, name))
            _positive(name, getattr(self, name))
        _integer("seed", self.seed)
        _integer("max_nonfinite_in_a_row", self.max_nonfinite_in_a_row)
        _positive("max_nonfinite_in_a_row", self.max_nonfinite_in_a_row)
        _positive("time_limit", self.time_limit)
        _positive("eval_every_seconds", self.eval_every_seconds)
        _positive("checkpoint_minutes", self.checkpoint_minutes)
        _positive("join_timeout", self.join_timeout)
        _positive("hang_timeout", self.hang_timeout)
        _integer("max_restarts", self.max_restarts)
        _positive("max_restarts", self.max_restarts, allow_zero=True)
        if self.max_steps is None and self.epochs is None and self.time_limit is None:
            self.epochs = 1
        if not isinstance(self.eval_device, str) or not (self.eval_device == "auto" or _DEVICE.match(self.eval_device)):
            _fail("eval_device", f"unknown device {self.eval_device!r} (use 'auto', 'cpu' or 'cuda:N')")
        if self.eval_device.startswith("cuda") and _gpu_index(self.eval_device) >= torch.cuda.device_count():
            _fail("eval_device", f"{self.eval_device} does not exist: {torch.cuda.device_count()} CUDA GPU(s) visible "
                                 f"(use 'auto', 'cpu' or 'cuda:N' with N below that)")
        _positive("eval_budget", self.eval_budget, allow_zero=True)
        if self.eval_budget is not None and self.eval_budget > 1:
            _fail("eval_budget", f"is a share of the wall time, in [0, 1]; got {self.eval_budget!r}")
        if self.best_mode not in BEST_MODES:
            _fail("best_mode", f"must be 'max' or 'min', got {self.best_mode!r}")
        if self.target is not None and (isinstance(self.target, bool) or not isinstance(self.target, (int, float))
                                        or not math.isfinite(self.target)):
            _fail("target", f"must be a finite number, got {self.target!r}")
        if self.best_metric is not None and not isinstance(self.best_metric, str):
            _fail("best_metric", f"must be a metric name, got {self.best_metric!r}")
        if self.data_assignment not in DATA_ASSIGNMENTS:
            _fail("data_assignment", f"must be one of {DATA_ASSIGNMENTS}, got {self.data_assignment!r}")
        if self.mode == "sync" and self.data_assignment != "queue":
            _fail("data_assignment", "mode='sync' deals batches in lockstep; use data_assignment='queue'")
        if self.max_restarts and (self.mode == "sync" or self.data_assignment != "queue"):
            _fail("max_restarts", "needs data_assignment='queue' in mode 'hogwild' or 'single' (a replacement takes "
                                  "its batches from the feed; sync ranks share a process group that a death ends)")
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, str):
            self.checkpoint_dir = str(self.checkpoint_dir)  # accept pathlib.Path
        for name in ("checkpoint_every", "resume"):
            if getattr(self, name) and self.checkpoint_dir is None:
                _fail(name, "needs checkpoint_dir (the run directory)")
        for name in ("resume", "progress", "tensorboard", "shuffle", "check_shm", "skip_nonfinite", "eval_at_start"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, f"must be True or False, got {getattr(self, name)!r}")
        if "cuda" in " ".join(self.devices) and self.mode == "sync" and "cpu" in " ".join(self.devices):
            _fail("devices", "mode='sync' needs all-CPU or all-GPU devices (one torch.distributed backend)")
        self._check_device_options()
        try:  # the schedule's own rules: decay only for linear_decay, warmup only for warmup_scaled, min_lr <= lr
            self.schedule()
        except ValueError as error:
            _fail("lr_schedule", str(error))

    def _check_device_options(self) -> None:
        for name in ("overlap_update", "fused_step"):
            if getattr(self, name) not in (None, True, False):
                _fail(name, f"must be None (automatic), True or False, got {getattr(self, name)!r}")
        for name in ("pin_shared", "sparse_pull"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, f"must be True or False, got {getattr(self, name)!r}")
        if self.overlap_update and (self.mode == "sync" or all(d == "cpu" for d in self.devices)):
            _fail("overlap_update", "needs device workers ('cuda:N' or 'cpu-replica') in mode 'hogwild' or "
                                    "'single'; 'cpu' workers update in place and sync mode averages first")
        if self.sparse_pull and self.mode == "sync":
            _fail("sparse_pull", "mode='sync' averages dense gradients; use it with mode 'hogwild' or 'single'")
        if self.fused_step and self.optimizer not in FUSED_OPTIMIZERS:
            _fail("fused_step", f"torch has a fused CPU kernel only for {', '.join(FUSED_OPTIMIZERS)}, "
                                f"not {self.optimizer!r}")
        _integer("update_threads", self.update_threads)
        _positive("update_threads", self.update_threads)
        overlapped = self.mode != "sync" and any(
            d.startswith("cuda") if self.overlap_update is None else d != "cpu" for d in self.devices)
        if self.update_threads is not None and not (overlapped and self.overlap_update is not False):
            _fail("update_threads", "sets the threads of the background update thread, which only device workers "
                                    "with overlap_update have ('cuda:N' by default, 'cpu-replica' with "
                                    "overlap_update=True; not in mode='sync')")
        if self.compile not in COMPILE_MODES:
            _fail("compile", f"must be one of {COMPILE_MODES}, got {self.compile!r}")
        if self.compile != "off" and self.mode == "sync":
            _fail("compile", "applies to Hogwild workers (mode 'hogwild' or 'single'), not to mode='sync'")
        if not isinstance(self.tf32, bool):
            _fail("tf32", f"must be True or False, got {self.tf32!r}")
        _integer("pull_every", self.pull_every)
        _positive("pull_every", self.pull_every)
        if self.pull_every > 1 and (self.mode == "sync" or "cpu" in self.devices):
            _fail("pull_every", "needs device workers ('cuda:N' or 'cpu-replica') in mode 'hogwild' or 'single'; "
                                "'cpu' workers read the shared parameters in place and pull nothing")
        if self.graphs not in GRAPH_MODES:
            _fail("graphs", f"must be one of {GRAPH_MODES}, got {self.graphs!r}")
        if self.graphs == "on" and (self.mode == "sync" or "cpu" in self.devices):
            _fail("graphs", "needs device workers ('cuda:N' or 'cpu-replica') in mode 'hogwild' or 'single'; 'cpu' "
                            "workers train in place and sync mode averages its gradients first")
        _integer("graph_limit", self.graph_limit)
        _positive("graph_limit", self.graph_limit)
        if self.graphs == "on" and self.compile != "off":
            _fail("graphs", f"captures the eager step; with compile={self.compile!r} use graphs='off' (or 'auto')")
        if self.amp not in AMP_DTYPES:
            _fail("amp", f"must be None or one of {tuple(a for a in AMP_DTYPES if a)}, got {self.amp!r}")

    def graphed(self, device: str) -> bool:
        """Whether a worker on `device` runs the graphed step (hogwild/worker/step_graph.py)."""
        if self.graphs == "auto":
            return device.startswith("cuda") and self.mode != "sync" and self.compile == "off"
        return self.graphs == "on"

    def schedule(self) -> LRSchedule:
        """This run's learning rate as a function of (global step, epoch): Config.lr validated here flows through
        it to the workers, which pass schedule(step, epoch) to the optimizer step."""
        return make_schedule(self.lr_schedule, self.lr, decay_per_epoch=self.decay_per_epoch,
                             warmup_steps=self.warmup_steps, workers=self.workers, min_lr=self.min_lr,
                             decay_updates=self.decay_updates or 0)

    def evaluation_device(self, after_training: bool = False, visible_gpus: int | None = None) -> str:
        """The torch device the parent evaluates on: eval_device ('cpu-replica' is 'cpu'), or for 'auto':
        - no worker on a GPU: 'cpu';
        - while training: a visible GPU that hosts no worker if there is one (fast, and nobody's GPU is shared),
          else 'cpu': a worker's GPU would slow that worker alone and fails in exclusive-process mode;
        - after training (the final evaluation and decoding; the workers have exited): that free GPU, else the
          first worker's.
        visible_gpus: torch.cuda.device_count() (which opens no CUDA context)."""
        if self.eval_device != "auto":
            return "cpu" if self.eval_device == "cpu-replica" else self.eval_device
        used = [_gpu_index(device) for device in self.devices if device.startswith("cuda")]
        if not used:
            return "cpu"
        visible = torch.cuda.device_count() if visible_gpus is None else visible_gpus
        free = [index for index in range(visible) if index not in used]
        if free:
            return f"cuda:{free[0]}"
        return f"cuda:{used[0]}" if after_training else "cpu"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (for config.json and checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        """Inverse of to_dict; unknown keys are rejected naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"Config: unknown field(s) {unknown}")
        return cls(**values)
