"""Serial (one process, plain PyTorch loop) training of the POS tagger or the NMT model on the real corpora: the
single-process reference runs recorded in docs/results.md.

Usage:
    .venv/bin/python scripts/train_serial.py --task pos --preset small --out runs/pos-brown
    .venv/bin/python scripts/train_serial.py --task nmt --preset small --minutes 30 --out runs/nmt-europarl

The run folder gets config.json (all arguments), command.txt, metrics.jsonl (one JSON object per log/eval line),
results.json (final figures) and, for NMT, the test translations (test.hyp). Corpora come from --corpora (default
$HOGWILD_CORPORA, else ../shared/corpora beside the checkout).
"""
from __future__ import annotations

import argparse
import json
import math
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
from models import (AttentionNMT, POSTagger, evaluate_nmt, evaluate_pos, heldout_loss, nmt_loss,  # noqa: E402
                    nmt_preset, pos_loss, pos_preset)


def default_corpora() -> Path:
    return Path(os.environ.get("HOGWILD_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", choices=("pos", "nmt"), required=True, help="which model/corpus")
    p.add_argument("--corpora", type=Path, default=default_corpora(), help="folder holding brown/, europarl-fr-en/")
    p.add_argument("--preset", choices=("small", "paper"), default="small", help="model size preset")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="adam", help="torch.optim optimizer")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: adam 2e-3, sgd: pos 0.03 / nmt 0.1)")
    p.add_argument("--lr-decay", type=float, default=0.0, help="lr decrease per epoch (POS paper: 0.0135 with sgd 0.03)")
    p.add_argument("--clip", type=float, default=0.0, help="clip the gradient norm to this (0: off; NMT paper 1.0)")
    p.add_argument("--dropout", type=float, default=0.0, help="model dropout")
    p.add_argument("--batch-size", type=int, default=None, help="training batch (default: pos 16 sentences, nmt 64 pairs)")
    p.add_argument("--epochs", type=int, default=1, help="maximum number of epochs")
    p.add_argument("--max-updates", type=int, default=0, help="stop after this many updates (0: no limit)")
    p.add_argument("--minutes", type=float, default=0.0, help="stop training after this many minutes (0: no limit)")
    p.add_argument("--log-every", type=int, default=100, help="updates between training-loss log lines")
    p.add_argument("--eval-every", type=int, default=0, help="updates between dev evaluations (0: end of epoch only)")
    p.add_argument("--max-len", type=int, default=50, help="nmt: drop training pairs with more words on a side")
    p.add_argument("--vocab", type=int, default=15_000, help="nmt: words per side (paper 15,000)")
    p.add_argument("--beam", type=int, default=5, help="nmt: beam size for the test translations (1: greedy)")
    p.add_argument("--length-penalty", type=float, default=1.0, help="nmt: length normalisation exponent")
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
    evaluate: Callable[[], dict]  # quick dev evaluation during training
    finish: Callable[[Path], dict]  # final evaluation; may write files into the run folder
    info: dict


def pos_job(args: argparse.Namespace) -> Job:
    from data.pos_task import PosDataConfig, load_pos_task

    task = load_pos_task(PosDataConfig(train=str(args.corpora / "brown"), batch_size=args.batch_size, seed=args.seed))
    config = pos_preset(args.preset, n_words=len(task.words), n_chars=len(task.chars), n_tags=len(task.tags),
                        dropout=args.dropout)
    model = POSTagger(config)
    dev = lambda: evaluate_pos(model, task.dev.epoch(0))  # noqa: E731
    return Job(model, pos_loss, task.train.epoch, len(task.train), dev, lambda run_dir: dev(),
               dict(task.info, model=vars(config)))


def nmt_job(args: argparse.Namespace) -> Job:
    from data.nmt_task import NmtDataConfig, load_nmt_task

    task = load_nmt_task(NmtDataConfig(prefix=str(args.corpora / "europarl-fr-en"), src_lang="fr", tgt_lang="en",
                                       max_len=args.max_len, vocab_size=args.vocab, batch_size=args.batch_size,
                                       seed=args.seed))
    config = nmt_preset(args.preset, src_words=len(task.src_vocab), tgt_words=len(task.tgt_vocab),
                        dropout=args.dropout)
    model = AttentionNMT(config)

    def finish(run_dir: Path) -> dict:
        bleu = evaluate_nmt(model, task.test.epoch(0), task.test_references, task.decode, beam_size=args.beam,
                            length_penalty=args.length_penalty, out_path=run_dir / "test.hyp")
        return {"test_bleu": bleu.bleu, "bleu_signature": bleu.signature, "bleu_text": bleu.text,
                **{f"dev_{k}": v for k, v in heldout_loss(model, task.dev.epoch(0), nmt_loss).items()}}

    dev = lambda: {f"dev_{k}": v for k, v in heldout_loss(model, task.dev.epoch(0), nmt_loss).items()}  # noqa: E731
    return Job(model, nmt_loss, task.train.epoch, len(task.train), dev, finish, dict(task.info, model=vars(config)))


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
    out_of_time = lambda: (args.max_updates and step >= args.max_updates) or (args.minutes and minutes() >= args.minutes)  # noqa: E731,E501
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
                log({"step": step, "epoch": epoch, "minutes": round(minutes(), 2), **job.evaluate()})
            if out_of_time():
                break
        if out_of_time():
            break
        log({"step": step, "epoch": epoch + 1, "minutes": round(minutes(), 2), "end_of_epoch": True,
             **job.evaluate()})
    return {"updates": step, "train_minutes": round(minutes(), 2), "epochs_started": epoch + 1}


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
    summary = train(job, args, log)
    eval_start = time.monotonic()
    final = job.finish(args.out)
    results = {"task": args.task, "preset": args.preset, "parameters": n_params, **summary, **final,
               "eval_minutes": round((time.monotonic() - eval_start) / 60, 2)}
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    log({"final": True, **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
