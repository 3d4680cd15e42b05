"""Serial (one process, plain PyTorch loop) training of the POS tagger or the NMT model on the real corpora: the
single-process reference runs recorded in docs/results/README.md.

Usage (from the repository root):
    python -m scripts.train_serial --task pos --preset small --out runs/pos-brown
    python -m scripts.train_serial --task nmt --preset small --time-limit 1800 --out runs/nmt-europarl
    python -m scripts.train_serial --task nmt --synthetic --steps 20 --out /tmp/nmt-check  # seconds

The run takes run.py's options of data, model, optimizer, schedule and stopping (the same flags, defaults and checks;
`--help` lists them), with one epoch and a log line every 100 updates by default. The run folder gets config.json
(the options, resolved, and this script's own values), command.txt, metrics.jsonl (one JSON object per log/eval line),
results.json (final figures) and, for NMT, the test translations (test.greedy.hyp, test.beam5.hyp). Corpora come
from --corpora (default: hogwild.data.corpora.corpora_dir(), i.e. $HOGWILD_CORPORA, else ../shared/corpora beside the
checkout). The data and the model come from run.py's job builders (tasks.pos_task, tasks.nmt_task) and the
learning-rate schedule from its rule (tasks.defaults). --loop engine (default) trains through hogwild.train with
one worker (mode 'single'); --loop plain uses the loop in this file, which trains on exactly the engine's sequence:
the same fixed batches, in the engine's seeded order each epoch (hogwild.feed.tickets.epoch_order), each batch under the
engine's RNG seed (hogwild.worker.gradients.batch_seed), so both loops end with the same parameters
(tests/models/test_train_serial.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import shlex
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from hogwild.data.corpora import corpora_dir
from hogwild.lr_schedule import make_schedule
from hogwild.models import evaluate_nmt, heldout_loss, nmt_loss
from hogwild.feed.tickets import epoch_order
from hogwild.tasks import nmt_task
from hogwild.tasks import pos_task
from hogwild.tasks.defaults import schedule_fields
from hogwild.tasks.options import RunOptions
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options
from hogwild.tasks.training import default_out
from hogwild.worker.gradients import batch_seed

# the run options a serial run honours: data, model, optimizer and schedule, stopping, logging (no devices, modes,
# evaluation periods in seconds, checkpoints or hosts: one process, evaluated by updates and at each epoch's end)
HONOURED = ("task", "preset", "recipe", "threads_per_worker", "format", "word_column", "tag_column", "tag",
            "separator", "encoding", "train_limit", "dev_limit", "eval_sentences", "max_len", "vocab_size",
            "length_bucket", "subwords", "subword_vocab_size", "word_min_freq", "synthetic_size", "optimizer", "lr",
            "lr_decay", "decay_updates", "warmup_steps", "min_lr", "momentum", "clip_norm", "batch_size", "dropout",
            "epochs", "steps", "time_limit", "eval_every", "beam", "log_every", "out", "seed")
SERIAL = {"epochs": 1, "log_every": 100}  # this script's defaults of run.py's options (--help shows run.py's too)
PLAIN_OPTIMIZERS = ("sgd", "adam")  # what the plain loop steps with (torch.optim); the engine takes every one


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + "\n\n" + textwrap.fill(
        "The run takes run.py's options below (--config FILE reads them as run.py does), those of data, model, "
        "optimizer, schedule and stopping; the corpora come from --corpora (or --synthetic).", width=116),
        formatter_class=HelpFormatter)
    add_run_options(p, only=HONOURED, defaults=SERIAL)
    own = p.add_argument_group("the serial run (this script's own)")
    own.add_argument("--corpora", type=Path, default=corpora_dir(), help="folder holding brown/, europarl-fr-en/")
    own.add_argument("--synthetic", action="store_true", help="train on the data package's synthetic task instead")
    own.add_argument("--test-limit", type=int, default=None, help="nmt: translate only the first N test pairs")
    own.add_argument("--length-penalty", type=float, default=1.0, help="nmt: length normalisation exponent")
    own.add_argument("--dev-batches", type=int, default=None, help="nmt: dev batches for the loss during training")
    own.add_argument("--loop", choices=("engine", "plain"), default="engine",
                     help="engine: hogwild.train(mode='single', 1 worker); plain: the loop in this script")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The script's own values; in `args.options` the run's options, resolved (every default filled in), in
    `args.schedule` its learning-rate schedule (hogwild.Config's fields) and in `args.out` its run folder."""
    p = build_parser()
    options, args = parse_run_options(p, argv)
    try:
        options = dataclasses.replace(options, **corpus_options(args, options.task), progress=False,
                                      out=options.out or default_out(options.task)).resolved()
        args.schedule = schedule_fields(options.task, options.optimizer, options.lr, options.lr_decay,
                                        options.warmup_steps, options.min_lr, options.recipe, options.decay_updates)
    except ValueError as error:  # a bad --lr-decay, or a missing corpus: one line naming the flag or path
        p.error(str(error))
    if args.loop == "plain" and options.optimizer not in PLAIN_OPTIMIZERS:
        p.error(f"--optimizer: the plain loop steps with {' or '.join(PLAIN_OPTIMIZERS)} (torch.optim), got "
                f"{options.optimizer!r}; --loop engine takes every optimizer")
    args.options, args.out = options, Path(options.out)
    return args


def corpus_options(args: argparse.Namespace, task: str) -> dict:
    """The corpora of a serial run: the synthetic task, Brown (pos) or Europarl fr-en (nmt) under --corpora."""
    if args.synthetic:
        return {}
    if task == "pos":
        return {"train": [str(args.corpora / "brown")]}
    europarl = args.corpora / "europarl-fr-en"
    return {"train": [str(europarl / "train")], "dev": str(europarl / "dev"), "src_lang": "fr", "tgt_lang": "en"}


@dataclass
class Job:
    """A task made ready for the loop: the model, its loss, train batches per epoch, dev and final evaluation."""

    model: torch.nn.Module
    loss_fn: Callable
    batches: list[dict]  # the training batches; both loops take them in hogwild.feed.tickets.epoch_order each epoch
    evaluate: Callable[[torch.nn.Module], dict[str, float]]  # quick dev evaluation of a model during training
    finish: Callable[[torch.nn.Module, Path], dict]  # final evaluation; may write files into the run folder
    info: dict


def pos_job(args: argparse.Namespace) -> Job:
    """run.py's POS job (data, tagger, held-out accuracy); the final figures are the dev accuracies."""
    dataset = pos_task.load_data(args.options)
    job = pos_task.pos_job(args.options, dataset, sparse_embeddings=False)  # torch.optim.Adam takes dense gradients
    return Job(job.model, job.loss_fn, job.batches, job.evaluate,
               lambda model, run_dir: job.evaluate(model), dict(dataset.info, model=job.model_spec["config"]))


def nmt_job(args: argparse.Namespace) -> Job:
    """run.py's NMT data and model; held-out loss during training (cheap), greedy and beam BLEU on the test set."""
    dataset = nmt_task.load_data(args.options)
    job = nmt_task.nmt_job(args.options, dataset)  # its BLEU evaluation is not used: dev loss here (cheaper)
    if args.synthetic:  # no test set: the synthetic dev set plays its part
        test_batches, test_references = dataset.dev, dataset.dev_references
        test_counts = {"kept": len(dataset.dev_references)}
    else:
        # The test set: every non-empty pair, whatever its length, encoded exactly like the training data.
        test = dataset.eval_set(args.corpora / "europarl-fr-en" / "test", limit=args.test_limit, batch_size=64)
        test_batches, test_references, test_counts = test.batcher, test.references, test.counts

    def dev(model: torch.nn.Module, batches: int | None = args.dev_batches) -> dict[str, float]:
        metrics = heldout_loss(model, itertools.islice(dataset.dev, batches), nmt_loss)
        return {f"dev_{k}": v for k, v in metrics.items()}

    def finish(model: torch.nn.Module, run_dir: Path) -> dict:
        results = dict(dev(model), test_counts=test_counts)
        for name, beam in (("greedy", 1), (f"beam{args.options.beam}", args.options.beam)):
            start = time.monotonic()
            bleu = evaluate_nmt(model, test_batches, test_references, dataset.decode, beam_size=beam,
                                length_penalty=args.length_penalty, out_path=run_dir / f"test.{name}.hyp")
            results.update({f"test_bleu_{name}": bleu.bleu, f"bleu_text_{name}": bleu.text,
                            f"decode_minutes_{name}": round((time.monotonic() - start) / 60, 2)})
        results["bleu_signature"] = bleu.signature
        return results

    return Job(job.model, job.loss_fn, job.batches, dev, finish,
               dict(dataset.info, model=job.model_spec["config"]))


def train(job: Job, args: argparse.Namespace, log: Callable[[dict], None]) -> dict:
    """The plain serial loop: one batch, one backward, one optimizer step; stops at the epoch/update/time limits.
    Batches come in the engine's order and under its per-batch RNG seed, as one engine worker trains them."""
    o = args.options
    params = [p for p in job.model.parameters() if p.requires_grad]
    optimizer = (torch.optim.Adam(params, lr=o.lr) if o.optimizer == "adam" else torch.optim.SGD(params, lr=o.lr))
    fields = args.schedule  # tasks.defaults's rule, as the engine path gets it
    schedule = make_schedule(fields["lr_schedule"], o.lr, decay_per_epoch=fields["decay_per_epoch"],
                             warmup_steps=fields["warmup_steps"], min_lr=fields["min_lr"],
                             decay_updates=fields["decay_updates"] or 0)
    start, step, window_loss, window_tokens = time.monotonic(), 0, 0.0, 0
    window_start = start
    minutes = lambda: (time.monotonic() - start) / 60  # noqa: E731

    def out_of_time() -> bool:
        return bool((o.steps and step >= o.steps) or (o.time_limit and minutes() * 60 >= o.time_limit))
    job.model.train()
    for epoch in range(o.epochs) if o.epochs else itertools.count():  # no --epochs: until --steps or --time-limit
        for index in epoch_order(len(job.batches), o.seed, epoch, shuffle=True):
            batch = job.batches[int(index)]
            torch.manual_seed(batch_seed(o.seed, epoch, int(index)))  # dropout masks, as the engine's worker
            for group in optimizer.param_groups:
                group["lr"] = schedule(step, epoch)
            optimizer.zero_grad(set_to_none=True)
            loss, tokens = job.loss_fn(job.model, batch)
            loss.backward()
            if o.clip_norm:
                torch.nn.utils.clip_grad_norm_(params, o.clip_norm)
            optimizer.step()
            step += 1
            window_loss, window_tokens = window_loss + loss.item() * tokens, window_tokens + tokens
            if step % o.log_every == 0:
                log({"step": step, "epoch": epoch, "minutes": round(minutes(), 2), "lr": schedule(step, epoch),
                     "train_loss": window_loss / window_tokens,
                     "tokens_per_s": round(window_tokens / (time.monotonic() - window_start), 1)})
                window_loss, window_tokens, window_start = 0.0, 0, time.monotonic()
            if o.eval_every and step % o.eval_every == 0:
                log({"step": step, "epoch": epoch, "minutes": round(minutes(), 2), **job.evaluate(job.model)})
            if out_of_time():
                break
        if out_of_time():
            break
        log({"step": step, "epoch": epoch + 1, "minutes": round(minutes(), 2), "end_of_epoch": True,
             **job.evaluate(job.model)})
    return {"loop": "plain", "updates": step, "train_minutes": round(minutes(), 2), "epochs_started": epoch + 1}


def train_with_engine(job: Job, args: argparse.Namespace, log: Callable[[dict], None]) -> dict:
    """The same run through the project's engine: hogwild.train with one worker (mode 'single'), shared optimizer,
    the same batches in the same order as train(); logs to <out>/engine/metrics.jsonl."""
    import hogwild

    o = args.options
    config = hogwild.Config(
        mode="single", threads_per_worker=o.threads_per_worker, optimizer=o.optimizer,
        optimizer_args=o.optimizer_args(), lr=o.lr, **args.schedule, clip_norm=o.clip_norm, epochs=o.epochs,
        max_steps=o.steps, time_limit=o.time_limit, eval_every=o.eval_every, checkpoint_dir=str(args.out / "engine"),
        log_every=o.log_every, progress=False, tensorboard=False, seed=o.seed)
    result = hogwild.train(job.model, job.loss_fn, job.batches, config, evaluate=job.evaluate)
    for record in result.history:
        log({"engine_eval": True, **record})
    return {"loop": "engine", "updates": result.updates, "train_minutes": round(result.wall_seconds / 60, 2),
            "stop_reason": result.stop_reason, "final_train_loss": result.final_loss,
            "examples": result.examples}


def recorded(args: argparse.Namespace) -> dict:
    """config.json: the run's options (resolved), the script's own values and the schedule."""
    fields = {field.name for field in dataclasses.fields(RunOptions)}
    own = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
           if k not in fields and k not in ("options", "out")}
    return {**args.options.to_dict(), **own}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    o = args.options
    torch.set_num_threads(o.threads_per_worker)
    torch.manual_seed(o.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    script = ["-m", __spec__.name] if __spec__ is not None else [sys.argv[0]]  # as it was run: module or file
    (args.out / "command.txt").write_text(shlex.join(["python", *script, *sys.argv[1:]]) + "\n")
    (args.out / "config.json").write_text(json.dumps(recorded(args), indent=2) + "\n")
    metrics = (args.out / "metrics.jsonl").open("a", encoding="utf-8")

    def log(record: dict) -> None:
        record = {k: v for k, v in record.items() if v is not None}
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
        print(json.dumps(record), flush=True)

    load_start = time.monotonic()
    job = pos_job(args) if o.task == "pos" else nmt_job(args)
    n_params = sum(p.numel() for p in job.model.parameters())
    log({"loaded_minutes": round((time.monotonic() - load_start) / 60, 2), "parameters": n_params,
         "updates_per_epoch": len(job.batches), **{k: v for k, v in job.info.items() if k != "model"}})
    summary = train(job, args, log) if args.loop == "plain" else train_with_engine(job, args, log)
    eval_start = time.monotonic()
    final = job.finish(job.model, args.out)
    results = {"task": o.task, "preset": o.preset, "parameters": n_params, **summary, **final,
               "eval_minutes": round((time.monotonic() - eval_start) / 60, 2)}
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    log({"final": True, **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
