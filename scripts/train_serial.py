"""Serial (one process, plain PyTorch loop) training of the POS tagger or the NMT model on the real corpora: the
single-process reference runs recorded in docs/results/README.md.

Usage (from the repository root):
    python -m scripts.train_serial --task pos --preset small --out runs/pos-brown
    python -m scripts.train_serial --task nmt --preset small --minutes 30 --out runs/nmt-europarl
    python -m scripts.train_serial --task nmt --synthetic --max-updates 20 --out /tmp/nmt-check  # seconds

The run folder gets config.json (all arguments), command.txt, metrics.jsonl (one JSON object per log/eval line),
results.json (final figures) and, for NMT, the test translations (test.greedy.hyp, test.beam5.hyp). Corpora come
from --corpora (default: hogwild.data.corpora.corpora_dir(), i.e. $HOGWILD_CORPORA, else ../shared/corpora beside the
checkout). The data and the model come from run.py's job builders (tasks.pos_task, tasks.nmt_task) and the
learning-rate schedule from its rule (tasks.defaults). --loop engine (default) trains through hogwild.train with
one worker (mode 'single'); --loop plain uses the loop in this file, which trains on exactly the engine's sequence:
the same fixed batches, in the engine's seeded order each epoch (hogwild.share.feed.epoch_order), each batch under the
engine's RNG seed (hogwild.worker.gradients.batch_seed), so both loops end with the same parameters
(tests/models/test_train_serial.py).
"""
from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from hogwild.data.corpora import corpora_dir
from hogwild.lr_schedule import make_schedule
from hogwild.models import evaluate_nmt, heldout_loss, nmt_loss
from hogwild.share.feed import epoch_order
from hogwild.tasks import nmt_task
from hogwild.tasks import pos_task
from hogwild.tasks.defaults import RECIPES, default_lr, resolve_recipe, schedule_fields
from hogwild.tasks.options import RunOptions
from hogwild.worker.gradients import batch_seed

SERIAL_ADAM_LR = 2e-3  # the serial reference runs' Adam rate (docs/results/README.md); other optimizers: the task's rule


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", choices=("pos", "nmt"), required=True, help="which model/corpus")
    p.add_argument("--corpora", type=Path, default=corpora_dir(), help="folder holding brown/, europarl-fr-en/")
    p.add_argument("--synthetic", action="store_true", help="train on the data package's synthetic task instead")
    p.add_argument("--synthetic-size", type=int, default=None,
                   help="sentences (pos) or pairs (nmt) of the synthetic task; default: run.py's (2000 / 5000)")
    p.add_argument("--preset", choices=("small", "paper"), default="small", help="model size preset")
    p.add_argument("--recipe", choices=RECIPES, default=None,
                   help="lr rule and POS vocabulary (tasks.defaults); default: paper with --preset paper, else default")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="adam",
                   help="optimizer (torch.optim in the plain loop, hogwild's SharedOptimizer in the engine)")
    p.add_argument("--lr", type=float, default=None,
                   help=f"learning rate (default: adam {SERIAL_ADAM_LR:g}, sgd: the recipe's, pos 0.1 (paper 0.03) "
                        "/ nmt 0.1)")
    p.add_argument("--lr-decay", type=float, default=None,
                   help="linear lr decrease per 40,000 updates (paper recipe: per epoch), floored at 1%% of --lr "
                        "(default: the task's rule, tasks.defaults: pos with sgd 0.0225, paper 0.0135, else 0)")
    p.add_argument("--clip", type=float, default=0.0, help="clip the gradient norm to this (0: off; NMT paper 1.0)")
    p.add_argument("--dropout", type=float, default=0.0, help="model dropout")
    p.add_argument("--batch-size", type=int, default=None,
                   help="training batch (default: pos 16 sentences, nmt 64 pairs)")
    p.add_argument("--epochs", type=int, default=1, help="maximum number of epochs")
    p.add_argument("--max-updates", type=int, default=0, help="stop after this many updates (0: no limit)")
    p.add_argument("--minutes", type=float, default=0.0, help="stop training after this many minutes (0: no limit)")
    p.add_argument("--log-every", type=int, default=100, help="updates between training-loss log lines")
    p.add_argument("--eval-every", type=int, default=0, help="updates between dev evaluations (0: end of epoch only)")
    p.add_argument("--max-len", type=int, default=50, help="nmt: drop training pairs with more words on a side")
    p.add_argument("--vocab", type=int, default=15_000, help="nmt: words per side (paper 15,000)")
    p.add_argument("--beam", type=int, default=5, help="nmt: beam size for the test translations (1: greedy)")
    p.add_argument("--test-limit", type=int, default=None, help="nmt: translate only the first N test pairs")
    p.add_argument("--length-penalty", type=float, default=1.0, help="nmt: length normalisation exponent")
    p.add_argument("--dev-batches", type=int, default=None, help="nmt: dev batches for the loss during training")
    p.add_argument("--loop", choices=("engine", "plain"), default="engine",
                   help="engine: hogwild.train(mode='single', 1 worker); plain: the loop in this script")
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation, split and batch order")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--out", type=Path, required=True, help="run folder (created)")
    args = p.parse_args(argv)
    args.recipe = resolve_recipe(args.recipe, args.preset)
    if args.lr is None:
        args.lr = SERIAL_ADAM_LR if args.optimizer == "adam" else default_lr(args.task, args.optimizer, args.recipe)
    if args.batch_size is None:
        args.batch_size = 16 if args.task == "pos" else 64
    for name in ("batch_size", "epochs", "log_every", "threads", "beam", "max_len", "vocab", "synthetic_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    try:
        args.schedule = schedule_fields(args.task, args.optimizer, args.lr, args.lr_decay, recipe=args.recipe)
        args.options = run_options(args)
    except ValueError as error:  # a bad --lr/--lr-decay, or a missing corpus: one line naming the flag or path
        p.error(str(error))
    args.lr_decay = args.schedule["decay_per_epoch"]  # config.json records the decay the rule chose
    return args


def run_options(args: argparse.Namespace) -> RunOptions:
    """run.py's options for this run's data and model (the job builders read them; training stays in this file)."""
    if args.synthetic:
        data = {"synthetic_size": args.synthetic_size}
    elif args.task == "pos":
        data = {"train": [str(args.corpora / "brown")]}
    else:
        europarl = args.corpora / "europarl-fr-en"
        data = {"train": [str(europarl / "train")], "dev": str(europarl / "dev"), "src_lang": "fr", "tgt_lang": "en"}
    return RunOptions(task=args.task, preset=args.preset, recipe=args.recipe, optimizer=args.optimizer, lr=args.lr,
                      lr_decay=args.lr_decay, dropout=args.dropout, batch_size=args.batch_size, max_len=args.max_len,
                      vocab_size=args.vocab, beam=args.beam, seed=args.seed, progress=False, **data).resolved()


@dataclass
class Job:
    """A task made ready for the loop: the model, its loss, train batches per epoch, dev and final evaluation."""

    model: torch.nn.Module
    loss_fn: Callable
    batches: list[dict]  # the training batches; both loops take them in hogwild.share.feed.epoch_order each epoch
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
        for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
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
    params = [p for p in job.model.parameters() if p.requires_grad]
    optimizer = (torch.optim.Adam(params, lr=args.lr) if args.optimizer == "adam"
                 else torch.optim.SGD(params, lr=args.lr))
    fields = args.schedule  # tasks.defaults's rule, as the engine path gets it
    schedule = make_schedule(fields["lr_schedule"], args.lr, decay_per_epoch=fields["decay_per_epoch"],
                             warmup_steps=fields["warmup_steps"], min_lr=fields["min_lr"],
                             decay_updates=fields["decay_updates"] or 0)
    start, step, window_loss, window_tokens = time.monotonic(), 0, 0.0, 0
    window_start = start
    minutes = lambda: (time.monotonic() - start) / 60  # noqa: E731

    def out_of_time() -> bool:
        return bool((args.max_updates and step >= args.max_updates) or (args.minutes and minutes() >= args.minutes))
    job.model.train()
    for epoch in range(args.epochs):
        for index in epoch_order(len(job.batches), args.seed, epoch, shuffle=True):
            batch = job.batches[int(index)]
            torch.manual_seed(batch_seed(args.seed, epoch, int(index)))  # dropout masks, as the engine's worker
            for group in optimizer.param_groups:
                group["lr"] = schedule(step, epoch)
            optimizer.zero_grad(set_to_none=True)
            loss, tokens = job.loss_fn(job.model, batch)
            loss.backward()
            if args.clip:
                torch.nn.utils.clip_grad_norm_(params, args.clip)
            optimizer.step()
            step += 1
            window_loss, window_tokens = window_loss + loss.item() * tokens, window_tokens + tokens
            if step % args.log_every == 0:
                log({"step": step, "epoch": epoch, "minutes": round(minutes(), 2), "lr": schedule(step, epoch),
                     "train_loss": window_loss / window_tokens,
                     "tokens_per_s": round(window_tokens / (time.monotonic() - window_start), 1)})
                window_loss, window_tokens, window_start = 0.0, 0, time.monotonic()
            if args.eval_every and step % args.eval_every == 0:
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

    config = hogwild.Config(
        mode="single", threads_per_worker=args.threads, optimizer=args.optimizer, lr=args.lr, **args.schedule,
        clip_norm=args.clip or None, epochs=args.epochs,
        max_steps=args.max_updates or None, time_limit=args.minutes * 60 or None, eval_every=args.eval_every or None,
        checkpoint_dir=str(args.out / "engine"), log_every=args.log_every, progress=False, tensorboard=False,
        seed=args.seed)
    result = hogwild.train(job.model, job.loss_fn, job.batches, config, evaluate=job.evaluate)
    for record in result.history:
        log({"engine_eval": True, **record})
    return {"loop": "engine", "updates": result.updates, "train_minutes": round(result.wall_seconds / 60, 2),
            "stop_reason": result.stop_reason, "final_train_loss": result.final_loss,
            "examples": result.examples}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    script = ["-m", __spec__.name] if __spec__ is not None else [sys.argv[0]]  # as it was run: module or file
    (args.out / "command.txt").write_text(shlex.join(["python", *script, *sys.argv[1:]]) + "\n")
    recorded = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "options"}
    (args.out / "config.json").write_text(json.dumps(recorded, indent=2) + "\n")
    metrics = (args.out / "metrics.jsonl").open("a", encoding="utf-8")

    def log(record: dict) -> None:
        record = {k: v for k, v in record.items() if v is not None}
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
        print(json.dumps(record), flush=True)

    load_start = time.monotonic()
    job = pos_job(args) if args.task == "pos" else nmt_job(args)
    n_params = sum(p.numel() for p in job.model.parameters())
    log({"loaded_minutes": round((time.monotonic() - load_start) / 60, 2), "parameters": n_params,
         "updates_per_epoch": len(job.batches), **{k: v for k, v in job.info.items() if k != "model"}})
    summary = train(job, args, log) if args.loop == "plain" else train_with_engine(job, args, log)
    eval_start = time.monotonic()
    final = job.finish(job.model, args.out)
    results = {"task": args.task, "preset": args.preset, "parameters": n_params, **summary, **final,
               "eval_minutes": round((time.monotonic() - eval_start) / 60, 2)}
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    log({"final": True, **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
