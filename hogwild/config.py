"""Training configuration: one typed, validated dataclass shared by every part of the engine. Each field is declared
once, here, with its help, group, allowed values and check (hogwild/config_fields.py): `help(hogwild.Config)` lists
them, and run.py's flags are generated from them (tasks/options.py).

Usage: `config = Config(workers=2, optimizer="sgd", lr=0.1, epochs=2, checkpoint_dir="runs/pos")`
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from typing import Any

import torch

from .config_fields import describe, non_negative, positive, refusal, setting, zero_to_none
from .lr_schedule import SCHEDULES, LRSchedule, make_schedule
from .shared_optim import FUSED_OPTIMIZERS, FUSED_WHEN_SHARED, OPTIMIZERS, SharedOptimizer

MODES = ("hogwild", "sync", "single")
DATA_ASSIGNMENTS = ("queue", "partition")
BEST_MODES = ("max", "min")
AMP_DTYPES = ("bf16",)  # Config.amp: autocast dtypes of the forward (None: fp32)
# Config.compile: torch.compile modes of a worker's step; 'aot_eager' captures the same graphs without generating
# code (seconds instead of minutes to compile: tests, and checking that a model captures).
COMPILE_MODES = ("off", "default", "reduce-overhead", "aot_eager")
# Config.graphs: the graphed step of device workers (hogwild/worker/step_graph.py); 'auto' is on for 'cuda' workers.
GRAPH_MODES = ("auto", "on", "off")
# 'cpu' trains directly on the shared parameters; 'cpu-replica' runs the GPU pull/compute/push path on the CPU.
_DEVICE = re.compile(r"^(cpu|cpu-replica|cuda(:\d+)?)$")

# The groups of Config's fields (help(Config) and run.py --help list them under these titles)
WORKERS = "workers"
DEVICE_WORKERS = "device workers ('cuda:N', 'cpu-replica'; 'cpu' workers train in place and ignore these)"
OPTIMIZATION = "optimizer and learning rate"
STOPPING = "when to stop (the first limit reached wins)"
EVALUATION = "evaluation, best model, early stopping"
RUN_DIRECTORY = "run directory, checkpoints, logging"
DATA_ORDER = "seed and batch order"
FAILURES = "failure handling"


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


def _devices(devices: list[str]) -> str | None:
    if not devices:
        return f"must be a non-empty list like ['cpu', 'cpu'], got {devices!r}"
    unknown = [device for device in devices if not _DEVICE.match(device)]
    return f"unknown device {unknown[0]!r} (use 'cpu', 'cpu-replica' or 'cuda:N')" if unknown else None


def _eval_device(device: str) -> str | None:
    return None if device == "auto" or _DEVICE.match(device) else \
        f"must be 'auto', 'cpu' or 'cuda:N', got {device!r}"


def _optimizer_args(args: dict[str, Any]) -> str | None:
    if not all(isinstance(key, str) for key in args):
        return f"must be a dict of torch.optim keyword arguments, got {args!r}"
    return "must not contain 'lr' (use Config.lr)" if "lr" in args else None


def _share(value: float) -> str | None:
    return non_negative(value) or (None if value <= 1 else f"is a share of the wall time, in [0, 1]; got {value!r}")


@dataclass
class Config:
    """How to train. Every field has a default; an invalid value raises ConfigError (a ValueError) naming the field.
    The fields, by group, each with its default:"""

    # --- workers ---
    devices: list[str] | None = setting(
        None, "one entry per worker: 'cpu' (trains in place on the shared parameters), 'cpu-replica' (the GPU path "
              "on the CPU: pull, compute, push), 'cuda:N'", group=WORKERS, check=_devices, none="workers x 'cpu'")
    workers: int = setting(1, "shorthand for devices=['cpu'] * workers (ignored when devices is given)",
                           group=WORKERS, check=positive)
    mode: str = setting("hogwild", "hogwild: lock-free asynchronous updates; sync: gradients averaged over the "
                                   "workers every step; single: one worker", group=WORKERS, choices=MODES)
    threads_per_worker: int = setting(1, "torch intra-op threads in every worker process (the CPU update uses them "
                                         "too)", group=WORKERS, metavar="N", check=positive)
    data_assignment: str = setting("queue", "queue: each epoch's batches are dealt, in a seeded order, to the "
                                            "workers' own queues (each batch to one worker); partition: a "
                                            "fixed shard per worker", group=WORKERS,
                                   choices=DATA_ASSIGNMENTS)

    # --- device workers. Each step option's default is the exact, eager path, the reference of the tests; the
    # others trade exactness or start-up time for speed. With graphs or without, a device worker's step never waits
    # for the device: the gradients are gathered on the device into one buffer, clipped and checked for finiteness
    # there and copied to the host in one copy; whoever applies the update reads the result (a skipped step is
    # counted then); the next step's parameters are copied from the shared ones while the step computes. So the
    # step needs every trained parameter in one floating dtype, and a sparse table read only at ids of its batch's
    # integer tensors (hogwild/worker/step_graph.py) ---
    overlap_update: bool | None = setting(
        None, "apply update k on the CPU in a background thread while step k+1 computes and the pull of step k+2 "
              "reads the parameters, neither waiting for the other (one or two more steps of staleness, counted; "
              "that pull may read part of the update, as Hogwild workers read each other's)", group=DEVICE_WORKERS,
        none="on for 'cuda' workers")
    fused_step: bool | None = setting(
        None, f"torch's fused CPU optimizer kernel ({', '.join(FUSED_OPTIMIZERS)}): True: every worker (refused for "
              f"the other optimizers); False: none. The last bits of rounding may differ", group=DEVICE_WORKERS,
        none=f"on for 'cuda' workers, and for every worker when several share {' or '.join(FUSED_WHEN_SHARED)}'s "
             f"state (shared_optim.FUSED_WHEN_SHARED: unfused, concurrent steps tear each other's moments)")
    amp: str | None = setting(None, "bf16: the forward under torch.autocast(bfloat16) on GPU workers; parameters and "
                                    "optimizer state stay fp32 (the models run their multi-step GRU/LSTM layers in "
                                    "fp32 by design: models/padded_rnn.py)", group=DEVICE_WORKERS,
                              choices=AMP_DTYPES, none="fp32")
    update_threads: int | None = setting(
        None, "torch threads of the background update thread (overlap_update) that runs the shared CPU optimizer "
              "step; results are bit-identical for any count", group=DEVICE_WORKERS, metavar="N", check=positive,
        none="for 'cuda' workers each one's share of the cores, (cores - 1) // workers - 1 (the parent and the "
             "worker's own main thread keep one each), for others threads_per_worker")
    pin_shared: bool = setting(True, "'cuda' workers register the shared parameters page-locked (truly asynchronous "
                                     "pulls)", group=DEVICE_WORKERS)
    sparse_pull: bool = setting(False, "device workers pull only the rows of nn.Embedding(sparse=True) tables whose "
                                       "ids appear in the next batch's integer tensors (exact: a step reads no other "
                                       "row of such a table)", group=DEVICE_WORKERS)
    # compile: fewer, fused kernels per update (a launch-bound GPU step gains most); every shape compiles in
    # start-up, before the worker is ready, and workers after the first reuse the first one's kernels from the run's
    # inductor cache; the decoder loop of a sequence model compiles once per target length
    compile: str = setting("off", "torch.compile of each worker's loss function (forward, and backward through "
                                  "AOTAutograd): fewer, fused kernels per step, results equal to eager up to "
                                  "rounding, one compilation per batch shape in every worker's start-up (minutes "
                                  "with inductor: pad lengths to a few buckets); reduce-overhead also replays CUDA "
                                  "graphs; aot_eager captures the same graphs without generating code (seconds, not "
                                  "minutes: tests)", group=DEVICE_WORKERS, choices=COMPILE_MODES)
    tf32: bool = setting(False, "TF32 matrix products in every worker process (GPUs only): faster, with 10 mantissa "
                                "bits instead of 23 inside the products (fp32 accumulation)", group=DEVICE_WORKERS)
    pull_every: int = setting(1, "device workers pull the dense parameters every K-th update only (sparse_pull rows "
                                 "every update), saving K-1 of K copies of the model and letting the previous update "
                                 "start at once; the updates a copy misses, its own included, count as staleness "
                                 "(1: the paper's recipe)", group=DEVICE_WORKERS, metavar="K", check=positive)
    # graphs: a graph replays without calling the loss, so the loss must read no host value of the batch (the
    # models' padded losses, which run.py picks) and its count must be the batch's host-side `tokens` (else its
    # leading size); capture runs in start-up, outside the training clock and the hang watch
    graphs: str = setting("auto", "device workers run their step as one CUDA graph per batch shape, captured at "
                                  "start-up for the shapes graph_limit picks; other shapes run it eagerly, counted "
                                  "(TrainResult.eager_steps). auto: on for 'cuda' workers unless compile is set, off "
                                  "in mode sync; on: 'cpu-replica' workers run the same step uncaptured",
                          group=DEVICE_WORKERS, choices=GRAPH_MODES)
    graph_limit: int | None = setting(
        None, "graphs per graphed worker, one for each of its most frequent batch shapes (all of a worker's graphs "
              "share one memory pool)", group=DEVICE_WORKERS, metavar="N", check=positive,
        none="one for every shape the run uses at least 4 times over its epochs (a graph costs its warm-up and "
             "capture, about 4 eager steps)")

    # --- optimizer and learning rate ---
    optimizer: str = setting("sgd", "the shared optimizer: torch.optim's arithmetic on shared state, updated "
                                    "lock-free", group=OPTIMIZATION, choices=OPTIMIZERS)
    lr: float = setting(0.01, "learning rate: the schedule's starting value", group=OPTIMIZATION, check=positive)
    optimizer_args: dict[str, Any] = setting({}, "torch.optim keyword arguments: momentum, betas, eps, ... (not lr)",
                                             group=OPTIMIZATION, check=_optimizer_args)
    lr_schedule: str = setting("constant", "constant; linear_decay (decay_per_epoch, decay_updates); warmup_scaled "
                                           "(warmup_steps)", group=OPTIMIZATION, choices=SCHEDULES)
    decay_per_epoch: float = setting(0.0, "the linear decay (lr_schedule linear_decay): the rate falls by this "
                                          "much per epoch, or per decay_updates updates", group=OPTIMIZATION,
                                     check=non_negative, cli="lr_decay")
    decay_updates: int | None = setting(
        None, "count the linear decay per this many shared updates instead of per epoch, a pace that does not "
              "depend on the corpus size", group=OPTIMIZATION, metavar="N", check=positive,
        none="per completed epoch (the paper)")
    warmup_steps: int = setting(0, "the warm-up (lr_schedule warmup_scaled): the rate rises linearly from lr to lr x "
                                   "workers over this many updates", group=OPTIMIZATION, check=non_negative)
    min_lr: float = setting(0.0, "floor of every schedule", group=OPTIMIZATION, check=non_negative)
    clip_norm: float | None = setting(None, "clip each update's gradient to this global L2 norm", group=OPTIMIZATION,
                                      check=positive, none="no clipping")
    skip_nonfinite: bool = setting(True, "skip (and count) updates whose gradient holds NaN or inf; False saves "
                                         "summing each gradient per step when clip_norm is None (nothing then "
                                         "guards the model)", group=OPTIMIZATION)
    max_nonfinite_in_a_row: int | None = setting(
        1000, "a worker that skips this many updates in a row fails the run (the shared parameters have diverged; "
              "skipped updates never reach max_steps)", group=OPTIMIZATION, check=positive, none="never")

    # --- when to stop (none given -> 1 epoch) ---
    max_steps: int | None = setting(None, "stop after this many shared updates, all workers' together",
                                    group=STOPPING, check=positive, none="no limit", cli="steps")
    epochs: int | None = setting(None, "passes over the batches", group=STOPPING, check=positive,
                                 none="1 when no other limit is given")
    time_limit: float | None = setting(None, "stop after this many seconds of training (start-up excluded); a "
                                             "resumed run trains this long again", group=STOPPING,
                                       metavar="SECONDS", check=non_negative, none="no limit", zero_is_off=True)

    # --- evaluation, best model, early stopping. Evaluations run one at a time on a thread beside the parent's
    # loop, on a snapshot of the shared parameters ---
    eval_every: int | None = setting(None, "evaluate a snapshot once this many shared updates have passed since the "
                                           "last evaluation started: a spacing, not a schedule (a run that updates "
                                           "faster than it evaluates evaluates less often)", group=EVALUATION,
                                     metavar="UPDATES", check=positive, none="off")
    eval_every_seconds: float | None = setting(None, "evaluate a snapshot every this many seconds (as well as, or "
                                                     "instead of, eval_every)", group=EVALUATION, metavar="SECONDS",
                                               check=positive, none="off")
    eval_device: str = setting("auto", "where the parent evaluates: a GPU is fast but, if a worker trains on it, "
                                       "slows that worker and fails in exclusive-process mode; the CPU is slower and "
                                       "shares the cores. auto: a GPU no worker uses, else the CPU while training, "
                                       "the first worker's GPU after it", group=EVALUATION,
                               metavar="DEVICE", check=_eval_device)
    eval_budget: float | None = setting(0.1, "periodic evaluations take at most this share of the wall time since "
                                             "training started (the next one waits until the measured evaluation "
                                             "time allows it)", group=EVALUATION, metavar="SHARE", check=_share,
                                        none="no cap", zero_is_off=True)
    eval_at_start: bool = setting(False, "also evaluate the starting parameters, as the first periodic evaluation "
                                         "(while training begins, within time_limit and eval_budget)",
                                  group=EVALUATION)
    best_metric: str | None = setting(None, "the key of evaluate()'s dict that picks the best checkpoint",
                                      group=EVALUATION, none="its first key")
    best_mode: str = setting("max", "max (accuracy, BLEU) or min (loss, perplexity)", group=EVALUATION,
                             choices=BEST_MODES)
    patience: int | None = setting(None, "stop after this many evaluations without a new best", group=EVALUATION,
                                   check=positive, none="off")
    target: float | None = setting(None, "stop once best_metric reaches this value (>= with best_mode max, <= with "
                                         "min): time-to-accuracy runs (bench/bench_convergence.py)",
                                   group=EVALUATION, none="off")

    # --- run directory, checkpoints, logging ---
    checkpoint_dir: str | None = setting(None, "the run directory: config.json, metrics.jsonl, last.pt, best.pt",
                                         group=RUN_DIRECTORY, metavar="DIR", none="nothing written", cli="out")
    checkpoint_every: int | None = setting(None, "write last.pt every this many shared updates (and at the end)",
                                           group=RUN_DIRECTORY, metavar="UPDATES", check=positive,
                                           none="at the end only")
    checkpoint_minutes: float | None = setting(
        10.0, "also write last.pt every this many minutes of training, so that a hard stop (SIGKILL, the OOM killer, "
              "a power cut) loses at most that much", group=RUN_DIRECTORY, metavar="MINUTES", check=non_negative,
        none="none by time", zero_is_off=True)
    resume: bool = setting(False, "continue from the run directory's last.pt when it exists", group=RUN_DIRECTORY)
    log_every: int = setting(100, "write a metrics record every this many shared updates", group=RUN_DIRECTORY,
                             metavar="UPDATES", check=positive)
    progress: bool = setting(True, "a tqdm progress bar in the parent", group=RUN_DIRECTORY)
    tensorboard: bool = setting(True, "TensorBoard events in the run directory when tensorboard is installed",
                                group=RUN_DIRECTORY)

    # --- seed and batch order ---
    seed: int = setting(0, "the seed of the batch order, of each batch's RNG (dropout) and of the initial RNG "
                           "states", group=DATA_ORDER)
    shuffle: bool = setting(True, "a seeded shuffle of the batch order every epoch", group=DATA_ORDER)
    queue_depth: int = setting(16, "queue items between the feed and the workers in all (each worker's own queue "
                                   "holds at least 2)", group=DATA_ORDER, check=positive)

    # --- failure handling ---
    check_shm: bool = setting(True, "a check before spawning that /dev/shm can hold the parameters and the "
                                    "optimizer state", group=FAILURES)
    join_timeout: float = setting(10.0, "seconds to wait for the workers to finish their step when stopping",
                                  group=FAILURES, check=positive)
    hang_timeout: float | None = setting(
        60.0, "a worker whose counters do not move this long, or 20 of its median steps if longer, is hung "
              "(stopped, deadlocked, stuck in I/O): named, killed, the run checkpointed and failed "
              "(parent/progress_watch.py)", group=FAILURES, metavar="SECONDS", check=positive, none="never")
    max_restarts: int = setting(0, "replace a worker that dies (a signal, an exception) or hangs by a fresh process "
                                   "on its device, its unfinished batches dealt again (none lost, each counted once: "
                                   "max_steps stays exact), at most this many times in the run; past that the run "
                                   "fails as with 0. data_assignment queue, mode hogwild or single",
                                group=FAILURES, metavar="K", check=non_negative)

    def __post_init__(self) -> None:
        """Each field's own checks, as declared (its type, choices and check); then "0 means off" (zero_is_off
        fields: None); then the checks that involve several fields."""
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, str):
            self.checkpoint_dir = str(self.checkpoint_dir)  # accept pathlib.Path
        for name in (f.name for f in dataclasses.fields(self)):
            message = refusal(type(self), name, getattr(self, name))
            if message:
                _fail(name, message)
        zero_to_none(self)
        if self.devices is not None:
            if self.workers not in (1, len(self.devices)):
                _fail("workers", f"is {self.workers} but devices lists {len(self.devices)} workers; give one of them")
            self.devices = list(self.devices)
            self.workers = len(self.devices)
        else:
            self.devices = ["cpu"] * self.workers
        if self.mode == "single":
            self.devices, self.workers = self.devices[:1], 1
        try:  # the optimizer's own checks of names and values (betas, momentum, ...)
            SharedOptimizer.state_nbytes([], self.optimizer, **self.optimizer_args)
        except (ValueError, TypeError) as error:
            _fail("optimizer_args", str(error))
        if self.decay_updates is not None and self.lr_schedule != "linear_decay":
            _fail("decay_updates", f"sets the unit of a linear decay (lr_schedule='linear_decay'), not of "
                                   f"{self.lr_schedule!r}")
        if self.min_lr > self.lr:
            _fail("min_lr", f"must not exceed lr ({self.lr}), got {self.min_lr}")
        if self.max_steps is None and self.epochs is None and self.time_limit is None:
            self.epochs = 1
        if self.eval_device.startswith("cuda") and _gpu_index(self.eval_device) >= torch.cuda.device_count():
            _fail("eval_device", f"{self.eval_device} does not exist: {torch.cuda.device_count()} CUDA GPU(s) visible "
                                 f"(use 'auto', 'cpu' or 'cuda:N' with N below that)")
        if self.mode == "sync" and self.data_assignment != "queue":
            _fail("data_assignment", "mode='sync' deals batches in lockstep; use data_assignment='queue'")
        if self.max_restarts and (self.mode == "sync" or self.data_assignment != "queue"):
            _fail("max_restarts", "needs data_assignment='queue' in mode 'hogwild' or 'single' (a replacement takes "
                                  "its batches from the feed; sync ranks share a process group that a death ends)")
        for name in ("checkpoint_every", "resume"):
            if getattr(self, name) and self.checkpoint_dir is None:
                _fail(name, "needs checkpoint_dir (the run directory)")
        if "cuda" in " ".join(self.devices) and self.mode == "sync" and "cpu" in " ".join(self.devices):
            _fail("devices", "mode='sync' needs all-CPU or all-GPU devices (one torch.distributed backend)")
        self._check_device_options()
        try:  # the schedule's own rules: decay only for linear_decay, warmup only for warmup_scaled, min_lr <= lr
            self.schedule()
        except ValueError as error:
            _fail("lr_schedule", str(error))

    def _check_device_options(self) -> None:
        if self.overlap_update and (self.mode == "sync" or all(d == "cpu" for d in self.devices)):
            _fail("overlap_update", "needs device workers ('cuda:N' or 'cpu-replica') in mode 'hogwild' or "
                                    "'single'; 'cpu' workers update in place and sync mode averages first")
        if self.sparse_pull and self.mode == "sync":
            _fail("sparse_pull", "mode='sync' averages dense gradients; use it with mode 'hogwild' or 'single'")
        if self.fused_step and self.optimizer not in FUSED_OPTIMIZERS:
            _fail("fused_step", f"torch has a fused CPU kernel only for {', '.join(FUSED_OPTIMIZERS)}, "
                                f"not {self.optimizer!r}")
        overlapped = self.mode != "sync" and any(
            d.startswith("cuda") if self.overlap_update is None else d != "cpu" for d in self.devices)
        if self.update_threads is not None and not (overlapped and self.overlap_update is not False):
            _fail("update_threads", "sets the threads of the background update thread, which only device workers "
                                    "with overlap_update have ('cuda:N' by default, 'cpu-replica' with "
                                    "overlap_update=True; not in mode='sync')")
        if self.compile != "off" and self.mode == "sync":
            _fail("compile", "applies to Hogwild workers (mode 'hogwild' or 'single'), not to mode='sync'")
        if self.pull_every > 1 and (self.mode == "sync" or "cpu" in self.devices):
            _fail("pull_every", "needs device workers ('cuda:N' or 'cpu-replica') in mode 'hogwild' or 'single'; "
                                "'cpu' workers read the shared parameters in place and pull nothing")
        if self.graphs == "on" and (self.mode == "sync" or "cpu" in self.devices):
            _fail("graphs", "needs device workers ('cuda:N' or 'cpu-replica') in mode 'hogwild' or 'single'; 'cpu' "
                            "workers train in place and sync mode averages its gradients first")
        if self.graphs == "on" and self.compile != "off":
            _fail("graphs", f"captures the eager step; with compile={self.compile!r} use graphs='off' (or 'auto')")

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


Config.__doc__ = inspect.cleandoc(Config.__doc__) + "\n\n" + describe(Config)
