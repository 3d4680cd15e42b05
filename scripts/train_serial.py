"""Serial (one process, plain PyTorch loop) training of the POS tagger or the NMT model on the real corpora: the
single-process reference runs recorded in docs/results.md.

Usage:
    .venv/bin/python scripts/train_serial.py --task pos --preset small --out runs/pos-brown
    .venv/bin/python scripts/train_serial.py --task nmt --preset small --minutes 30 --out runs/nmt-europarl
    .venv/bin/python scripts/train_serial.py --task nmt --synthetic --max-updates 20 --out /tmp/nmt-check  # seconds

The run folder gets config.json (all arguments), command.txt, metrics.jsonl (one JSON object per log/eval line),
results.json (final figures) and, for NMT, the test translations (test.greedy.hyp, test.beam5.hyp). Corpora come
from --corpora (default $HOGWILD_CORPORA, else ../shared/corpora beside the checkout). --loop engine (default) trains
through hogwild.train with one worker (mode 'single'); --loop plain uses the loop in this file.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from hogwild.schedules import make_schedule  # noqa: E402
from hogwild.models import (AttentionNMT, POSTagger, evaluate_nmt, evaluate_pos, heldout_loss, nmt_loss,  # noqa: E402
                    nmt_preset, pos_loss, pos_preset)


def default_corpora() -> Path:
    return Path(os.environ.get("HOGWILD_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", choices=("pos", "nmt"), required=True, help="which model/corpus")
    p.add_argument("--corpora", type=Path, default=default_corpora(), help="folder holding brown/, europarl-fr-en/")
    p.add_argument("--synthetic", action="store_true", help="train on the data package's synthetic task instead")
    p.add_argument("--preset", choices=("small", "paper"), default="small", help="model size preset")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="adam",
                   help="optimizer (torch.optim in the plain loop, hogwild's SharedOptimizer in the engine)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: adam 2e-3, sgd: pos 0.03 / nmt 0.1)")
    p.add_argument("--lr-decay", type=float, default=0.0,
                   help="lr decrease per epoch (POS paper: 0.0135 with sgd 0.03)")
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
    if args.lr is None:
        args.lr = 2e-3 if args.optimizer == "adam" else (0.03 if args.task == "pos" else 0.1)
    if args.batch_size is None:
        args.batch_size = 16 if args.task == "pos" else 64
    for name in ("batch_size", "epochs", "log_every", "threads", "beam", "max_len", "vocab"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


@dataclass
class Job:
    """A task made ready for the loop: the model, its loss, train batches per epoch, dev and final evaluation."""

    model: torch.nn.Module
    loss_fn: Callable
    epoch_batches: Callable[[int], Iterator[dict]]
    updates_per_epoch: int
    evaluate: Callable[[torch.nn.Module], dict[str, float]]  # quick dev evaluation of a model during training
    finish: Callable[[torch.nn.Module, Path], dict]  # final evaluation; may write files into the run folder
    info: dict


def pos_job(args: argparse.Namespace) -> Job:
    from hogwild.data.pos_dataset import PosDataConfig, load_pos_dataset, synthetic_pos_dataset

    task = (synthetic_pos_dataset(batch_size=args.batch_size, seed=args.seed) if args.synthetic else
            load_pos_dataset(PosDataConfig(train=str(args.corpora / "brown"), batch_size=args.batch_size, seed=args.seed)))
    config = pos_preset(args.preset, n_words=len(task.words), n_chars=len(task.chars), n_tags=len(task.tags),
                        dropout=args.dropout)
    dev = lambda model: evaluate_pos(model, task.dev.epoch(0))  # noqa: E731
    return Job(POSTagger(config), pos_loss, task.train.epoch, len(task.train), dev,
               lambda model, run_dir: dev(model), dict(task.info, model=vars(config)))


def nmt_job(args: argparse.Namespace) -> Job:
    from hogwild.data.batching import NmtBatcher, ParallelData
    from hogwild.data.nmt_dataset import NmtDataConfig, load_nmt_dataset, synthetic_nmt_dataset
    from hogwild.data.parallel import read_parallel
    from hogwild.data.text import tokenize_lines

    if args.synthetic:  # no test set: the synthetic dev set plays its part
        task = synthetic_nmt_dataset(batch_size=args.batch_size, seed=args.seed)
        test_batches, test_references, test_counts = task.dev, task.dev_references, {"kept": len(task.dev_references)}
    else:
        corpus = args.corpora / "europarl-fr-en"
        task = load_nmt_dataset(NmtDataConfig(train=str(corpus / "train"), dev=str(corpus / "dev"), src_lang="fr",
                                           tgt_lang="en", max_len=args.max_len, vocab_size=args.vocab,
                                           batch_size=args.batch_size, seed=args.seed))
        # The test set: every non-empty pair, whatever its length, encoded with the training vocabularies.
        test = read_parallel(corpus / "test", "fr", "en", None, lambda lines, lang: tokenize_lines(lines, lang),
                             limit=args.test_limit)
        test_batches = NmtBatcher(ParallelData.tensorize(list(zip(test.src, test.tgt)), task.src_vocab,
                                                         task.tgt_vocab), batch_size=64, shuffle=False)
        test_references, test_counts = test.tgt_lines, test.counts()
    config = nmt_preset(args.preset, src_words=len(task.src_vocab), tgt_words=len(task.tgt_vocab),
                        dropout=args.dropout)

    def dev(model: torch.nn.Module, batches: int | None = args.dev_batches) -> dict[str, float]:
        metrics = heldout_loss(model, itertools.islice(task.dev.epoch(0), batches), nmt_loss)
        return {f"dev_{k}": v for k, v in metrics.items()}

    def finish(model: torch.nn.Module, run_dir: Path) -> dict:
        results = dict(dev(model), test_counts=test_counts)
        for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
            start = time.monotonic()
            bleu = evaluate_nmt(model, test_batches.epoch(0), test_references, task.decode, beam_size=beam,
                                length_penalty=args.length_penalty, out_path=run_dir / f"test.{name}.hyp")
            results.update({f"test_bleu_{name}": bleu.bleu, f"bleu_text_{name}": bleu.text,
                            f"decode_minutes_{name}": round((time.monotonic() - start) / 60, 2)})
        results["bleu_signature"] = bleu.signature
        return results

    return Job(AttentionNMT(config), nmt_loss, task.train.epoch, len(task.train), dev, finish,
               dict(task.info, model=vars(config)))


def train(job: Job, args: argparse.Namespace, log: Callable[[dict], None]) -> dict:
    """The plain serial loop: one batch, one backward, one optimizer step; stops at the epoch/update/time limits."""
    params = [p for p in job.model.parameters() if p.requires_grad]
    optimizer = (torch.optim.Adam(params, lr=args.lr) if args.optimizer == "adam"
                 else torch.optim.SGD(params, lr=args.lr))
    schedule = make_schedule("linear_decay" if args.lr_decay else "constant", args.lr,
                             decay_per_epoch=args.lr_decay, min_lr=min(args.lr, 1e-4))
    start, step, window_loss, window_tokens = time.monotonic(), 0, 0.0, 0
    window_start = start
    minutes = lambda: (time.monotonic() - start) / 60  # noqa: E731

    def out_of_time() -> bool:
        return bool((args.max_updates and step >= args.max_updates) or (args.minutes and minutes() >= args.minutes))
    job.model.train()
    for epoch in range(args.epochs):
        for batch in job.epoch_batches(epoch):
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
    """The same run through the project's engine: hogwild.train with one worker (mode 'single'), shared optimizer.
    The engine reshuffles the order of the data's epoch-0 batches every epoch, logs to <out>/engine/metrics.jsonl."""
    import hogwild

    config = hogwild.Config(
        mode="single", threads_per_worker=args.threads, optimizer=args.optimizer, lr=args.lr,
        lr_schedule="linear_decay" if args.lr_decay else "constant", decay_per_epoch=args.lr_decay,
        min_lr=min(args.lr, 1e-4) if args.lr_decay else 0.0, clip_norm=args.clip or None, epochs=args.epochs,
        max_steps=args.max_updates or None, time_limit=args.minutes * 60 or None, eval_every=args.eval_every or None,
        checkpoint_dir=str(args.out / "engine"), log_every=args.log_every, progress=False, tensorboard=False,
        seed=args.seed)
    result = hogwild.train(job.model, job.loss_fn, list(job.epoch_batches(0)), config, evaluate=job.evaluate)
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
    (args.out / "command.txt").write_text(shlex.join([sys.executable.split("/")[-1], *sys.argv]) + "\n")
    (args.out / "config.json").write_text(json.dumps({k: str(v) if isinstance(v, Path) else v
                                                      for k, v in vars(args).items()}, indent=2) + "\n")
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
         "updates_per_epoch": job.updates_per_epoch, **{k: v for k, v in job.info.items() if k != "model"}})
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
