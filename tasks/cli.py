"""The command line behind `run.py`: argument parsers for training and the `tag`, `translate` and `plot`
subcommands, and error handling (bad flags and bad input end with a one-line message and a non-zero exit, no
traceback; set HOGWILD_TRACEBACK=1 to see one).

Usage: `sys.exit(main(["--task", "pos", "--workers", "2"]))`; `main(["tag", "--checkpoint", "runs/pos"])`
"""
from __future__ import annotations

import argparse
import codecs
import os
import sys
import warnings
from typing import Callable

from hogwild.config import MODES
from hogwild.data.readers import FORMATS, TAGS
from hogwild.data.subwords import MODEL_TYPES as SUBWORDS
from hogwild.multihost.config import ALGORITHMS, DistConfig
from hogwild.shared_optim import OPTIMIZERS
from hogwild.tasks.devices import CPU_WORKERS
from hogwild.tasks.options import PRESETS, TASKS, RunOptions
from hogwild.tasks.recipes import RECIPES, default_optimizer, resolve_recipe

SUBCOMMANDS = ("tag", "translate", "plot")
EPILOG = """subcommands (run.py SUBCOMMAND --help for their flags):
  run.py tag --checkpoint RUN_DIR [FILE ...]                 tag sentences (stdin or files), one per line
  run.py translate --checkpoint RUN_DIR [--beam 5] [FILE ...] translate lines (stdin or files)
  run.py plot RUN_DIR [RUN_DIR ...] [--out curves.png]        loss and held-out metric vs time and updates

examples:
  run.py                                         built-in synthetic POS task, 2 CPU workers, about a minute
  run.py --task pos --train ../shared/corpora/brown --workers 2 --time-limit 600
  run.py --task nmt --train ../shared/corpora/europarl-fr-en/train --dev ../shared/corpora/europarl-fr-en/dev --gpus 4
  mpiexec -n 2 python run.py --task pos --workers 1 --distributed allreduce"""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _parser(prog: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, formatter_class=_Formatter)


def train_parser() -> argparse.ArgumentParser:
    p = _parser("run.py", "Train a POS tagger or an NMT model with lock-free Hogwild! workers (CPU cores or GPUs). "
                          "With no arguments: the built-in synthetic POS task on 2 CPU workers.", EPILOG)
    add = p.add_argument
    g = p.add_argument_group("task and workers")
    g.add_argument("--task", choices=TASKS, default="pos", help="pos: char-BiLSTM tagger; nmt: attention GRU")
    g.add_argument("--gpus", type=int, default=0, metavar="N", help="one worker per GPU (cuda:0..N-1); 0: CPU")
    g.add_argument("--workers", type=int, default=2, metavar="N", help="CPU worker processes (without --gpus)")
    g.add_argument("--workers-per-gpu", type=int, default=1, metavar="K",
                   help="with --gpus: K Hogwild (or sync) workers share each GPU")
    g.add_argument("--mode", choices=MODES, default="hogwild",
                   help="hogwild: lock-free async; sync: averaged gradients each step; single: one worker")
    g.add_argument("--preset", choices=PRESETS, default="small", help="model sizes (paper: the papers' sizes)")
    g.add_argument("--recipe", choices=RECIPES, default=None,
                   help="optimizer, lr rule, POS vocabulary (tasks/recipes.py); None: paper with --preset paper, "
                        "else default")
    g.add_argument("--threads-per-worker", type=int, default=1, metavar="N", help="torch threads per worker")
    g.add_argument("--amp", choices=("bf16",), default=None, help="bf16: forward under autocast (GPU workers); "
                   "parameters and optimizer state stay fp32")
    g.add_argument("--cpu-workers", choices=tuple(CPU_WORKERS), default=None,
                   help="CPU workers train in place on the shared parameters, or on a private replica refreshed "
                        "before every step (one consistent version per step); default: replica for nmt Hogwild "
                        "runs (Adam moves every weight at every update), in place otherwise")
    g.add_argument("--fused-step", action="store_true",
                   help="CPU workers step with torch's fused optimizer kernel too (GPU workers do by default): Adam "
                        "on the POS tagger makes ~1.2x the updates/s (docs/benchmarks.md); the last bits of rounding "
                        "may differ")
    g.add_argument("--data-assignment", choices=("queue", "partition"), default="queue",
                   help="queue: workers share one batch queue; partition: a fixed shard per worker")
    g = p.add_argument_group("data (no --train: the built-in synthetic task)")
    g.add_argument("--train", nargs="+", metavar="PATH", default=None,
                   help="pos: tagged files or folders; nmt: a file prefix (PREFIX.SRC_LANG, PREFIX.TGT_LANG)")
    g.add_argument("--dev", metavar="PATH", default=None, help="held-out set; None: a seeded 10%% split of --train")
    g.add_argument("--test", metavar="PATH", default=None, help="scored with the best checkpoint at the end")
    g.add_argument("--format", choices=FORMATS, default="auto", help="pos: corpus format")
    g.add_argument("--word-column", type=int, default=None, metavar="N", help="pos conll: 1-based word column")
    g.add_argument("--tag-column", type=int, default=None, metavar="N", help="pos conll: 1-based tag column")
    g.add_argument("--tag", choices=TAGS, default=None, help="pos: which tag; None: the format's main tag")
    g.add_argument("--separator", default="/", metavar="SEP",
                   help="pos slash format: word and tag split at the last SEP (e.g. _ for word_TAG corpora)")
    g.add_argument("--src-lang", default="fr", help="nmt: source language suffix")
    g.add_argument("--tgt-lang", default="en", help="nmt: target language suffix")
    g.add_argument("--encoding", default="utf-8", help="text encoding of the corpora")
    g.add_argument("--train-limit", type=int, default=None, metavar="N", help="nmt: first N training pairs only")
    g.add_argument("--dev-limit", type=int, default=None, metavar="N",
                   help="evaluate on the first N held-out sentences only")
    g.add_argument("--eval-sentences", type=int, default=None, metavar="N",
                   help="periodic evaluations score a seeded sample of N held-out sentences, the end of the run all "
                        "of them; unset: 500 for nmt, all for pos")
    g.add_argument("--max-len", type=int, default=50, metavar="N", help="nmt: drop longer training pairs")
    g.add_argument("--vocab-size", type=int, default=15000, metavar="N", help="nmt: words kept per side")
    g.add_argument("--subwords", choices=SUBWORDS, default=None,
                   help="nmt: sentencepiece subwords trained on the training side (saved in the run directory) "
                        "instead of Moses words; BLEU is scored on the decoded text")
    g.add_argument("--subword-vocab-size", type=int, default=8000, metavar="N",
                   help="nmt with --subwords: pieces per side (a soft limit: small corpora get fewer)")
    g.add_argument("--word-min-freq", type=int, default=None, metavar="N",
                   help="pos: words seen fewer times are unk; None: 2 (paper recipe 10, synthetic task 10)")
    g.add_argument("--synthetic-size", type=int, default=None, metavar="N",
                   help="sentences (pos, default 2000) or pairs (nmt, default 5000) of the synthetic task")
    g = p.add_argument_group("optimisation")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="shared, lock-free optimizer; None: the recipe's (pos sgd, nmt adam; paper recipe: sgd; "
                        "msgd with --distributed eamsgd, which needs momentum)")
    g.add_argument("--lr", type=float, default=None,
                   help="learning rate; None: sgd pos 0.1 (paper 0.03) / nmt 0.1, adam 0.001 (tasks/learning_rate.py)")
    g.add_argument("--lr-decay", type=float, default=None,
                   help="linear lr decrease per --decay-updates updates (paper recipe: per epoch); None: pos+sgd "
                        "0.0225 (paper 0.0135), else 0")
    g.add_argument("--decay-updates", type=int, default=None, metavar="N",
                   help="count --lr-decay per N updates; None: 40000 (paper recipe: per epoch)")
    g.add_argument("--warmup-steps", type=int, default=0, help="> 0: warm up from lr to lr x workers")
    g.add_argument("--min-lr", type=float, default=0.0, help="floor of the learning rate")
    g.add_argument("--momentum", type=float, default=None, help="msgd/nesterov momentum; None: 0.9")
    g.add_argument("--clip-norm", type=float, default=None,
                   help="gradient norm clipping; None: nmt 1.0 (the paper), pos off")
    g.add_argument("--batch-size", type=int, default=None,
                   help="sentences per update; None: pos 1, nmt 64, synthetic nmt 32")
    g.add_argument("--dropout", type=float, default=0.0, help="model dropout")
    g = p.add_argument_group("stopping, evaluation, run directory")
    g.add_argument("--epochs", type=int, default=None,
                   help="passes over the data; None: 2 (synthetic) or 1 when no other limit is given")
    g.add_argument("--steps", type=int, default=None, help="stop after this many shared updates")
    g.add_argument("--time-limit", type=float, default=None, metavar="SECONDS", help="stop after this long")
    g.add_argument("--eval-every", type=int, default=None, metavar="UPDATES",
                   help="evaluate every this many updates; None: 250 on the synthetic task, else every 60 s")
    g.add_argument("--eval-every-seconds", type=float, default=None, metavar="SECONDS", help="evaluate this often")
    g.add_argument("--eval-budget", type=float, default=0.1, metavar="SHARE",
                   help="periodic evaluations take at most this share of the wall time (0: no cap)")
    g.add_argument("--patience", type=int, default=None, help="stop after this many evaluations without a new best")
    g.add_argument("--beam", type=int, default=5, help="nmt: beam size of the final held-out translations")
    g.add_argument("--checkpoint-every", type=int, default=None, metavar="UPDATES", help="write last.pt this often")
    g.add_argument("--log-every", type=int, default=None, metavar="UPDATES",
                   help="training-loss record every this many updates; None: pos 50, nmt 10")
    g.add_argument("--out", default=None, metavar="DIR", help="run directory; None: runs/TASK-DATE-TIME")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its last.pt")
    g.add_argument("--seed", type=int, default=0, help="data split, batch order and initialisation")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    g = p.add_argument_group("multi-host (run under mpiexec; see docs/multihost.md)")
    g.add_argument("--distributed", choices=ALGORITHMS, default=None, metavar="ALGO",
                   help=f"exchange parameters between hosts with {', '.join(ALGORITHMS)}")
    g.add_argument("--servers", type=int, default=DistConfig.servers,
                   help="parameter-server ranks (downpour/easgd/eamsgd)")
    g.add_argument("--period", type=int, default=DistConfig.period, help="local updates between exchanges")
    g.add_argument("--n-push", type=int, default=DistConfig.n_push, help="downpour: push every n local updates")
    g.add_argument("--n-fetch", type=int, default=DistConfig.n_fetch, help="downpour: fetch every n local updates")
    g.add_argument("--alpha", type=float, default=DistConfig.alpha, help="easgd/eamsgd: elastic coefficient")
    g.add_argument("--tester", action="store_true", help="an extra last rank evaluates the central model")
    g.add_argument("--no-shard-data", dest="shard_data", action="store_false",
                   help="every host iterates over all batches (else host i trains on batches[i::hosts])")
    del add
    return p


def tag_parser() -> argparse.ArgumentParser:
    p = _parser("run.py tag", "Tag sentences with a trained POS run: one whitespace-tokenized sentence per line "
                              "in (stdin or FILEs), tagged sentences out.")
    p.add_argument("--checkpoint", required=True, metavar="RUN_DIR", help="run directory (best.pt, else last.pt)")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument("--format", choices=("slash", "conll"), default="slash",
                   help="slash: word/TAG per token on one line; conll: word<TAB>TAG lines")
    p.add_argument("--separator", default="/", metavar="SEP", help="slash format: between word and tag")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")
    p.add_argument("--encoding", default="utf-8", help="input encoding")
    return p


def translate_parser() -> argparse.ArgumentParser:
    p = _parser("run.py translate", "Translate text with a trained NMT run: one sentence per line in (stdin or "
                                    "FILEs), one translation per line out.")
    p.add_argument("--checkpoint", required=True, metavar="RUN_DIR", help="run directory (best.pt, else last.pt)")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    p.add_argument("--beam", type=int, default=5, help="beam size (1: greedy)")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per search batch")
    p.add_argument("--encoding", default="utf-8", help="input encoding")
    return p


def plot_parser() -> argparse.ArgumentParser:
    p = _parser("run.py plot", "Plot training loss and the held-out metric against wall time and updates, one line "
                               "per run.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    p.add_argument("--out", default="curves.png", help="PNG file to write")
    p.add_argument("--labels", nargs="+", default=None, help="legend label per run; None: directory names")
    p.add_argument("--title", default=None, help="figure title")
    return p


def _tag(args: argparse.Namespace) -> int:
    from hogwild.tasks.inference import load_tagger, read_input, tag_lines, write_output
    tagger = load_tagger(args.checkpoint)  # a wrong run directory is reported before reading any input
    lines = read_input(args.files, args.encoding)
    write_output(tag_lines(tagger, lines, args.format, args.batch_size, args.separator), args.output,
                 conll=args.format == "conll")
    return 0


def _translate(args: argparse.Namespace) -> int:
    from hogwild.tasks.inference import load_translator, read_input, write_output
    translator = load_translator(args.checkpoint)
    lines = read_input(args.files, args.encoding)
    write_output(translator.translate(lines, args.beam, args.batch_size), args.output)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from hogwild.tasks.plotting import plot_runs
    print(plot_runs(args.runs, args.out, args.labels, args.title))
    return 0


def _train(args: argparse.Namespace) -> int:
    from hogwild.tasks.training import run_training
    summary = run_training(RunOptions(**vars(args)), argv=_argv)
    return 130 if str(summary.get("stop_reason", "")).startswith("signal") else 0


_argv: list[str] | None = None
_COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable[[argparse.Namespace], int]]] = {
    "tag": (tag_parser, _tag), "translate": (translate_parser, _translate), "plot": (plot_parser, _plot)}


def _positive_ints(parser: argparse.ArgumentParser, args: argparse.Namespace, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(args, name, None) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


def _warning_line(prog: str) -> Callable:
    """Warnings for the user (e.g. more workers than cores) as one line naming the flag; others as Python shows."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        option = getattr(message, "option", None)
        if option is None:
            return shown(message, category, filename, lineno, file, line)
        print(f"{prog}: warning: --{option.replace('_', '-')}: {message}", file=sys.stderr)
    return show


def _check_encoding(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    encoding = getattr(args, "encoding", None)
    if encoding is None:
        return
    try:
        codecs.lookup(encoding)
    except LookupError:
        parser.error(f"--encoding: unknown text encoding {encoding!r} (e.g. utf-8, latin-1, cp1252)")


def main(argv: list[str] | None = None) -> int:
    """Parse, run, and turn expected failures into `run.py: error: ...` on stderr with exit status 1 or 2."""
    global _argv
    argv = list(sys.argv[1:] if argv is None else argv)
    _argv = ["run.py", *argv]
    if argv and argv[0] in _COMMANDS:
        make_parser, command = _COMMANDS[argv[0]]
        parser = make_parser()
        args = parser.parse_args(argv[1:])
        _positive_ints(parser, args, ("beam", "batch_size"))
    else:
        parser, command = train_parser(), _train
        args = parser.parse_args(argv)
        if args.optimizer is None:  # every MPI rank parses the same flags: all pick the same optimizer at once
            args.optimizer = default_optimizer(args.task, resolve_recipe(args.recipe, args.preset), args.distributed)
        try:
            RunOptions(**vars(args))  # flag values are checked before anything is loaded
        except ValueError as error:
            parser.error(str(error))
    _check_encoding(parser, args)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line(parser.prog)
            return command(args)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as error:  # bad input, missing files, failed workers
        if os.environ.get("HOGWILD_TRACEBACK"):
            raise
        option = getattr(error, "option", None)  # data.errors.CorpusError: the reading option at fault
        flag = f"--{option.replace('_', '-')}: " if option else ""
        print(f"{parser.prog}: error: {flag}{error}", file=sys.stderr)
        return 1
