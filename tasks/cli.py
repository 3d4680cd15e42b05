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
from pathlib import Path
from typing import Callable

from hogwild.tasks.heldout import DECODE_MAX_LEN, EVAL_MAX_LEN
from hogwild.tasks.options import Option, OptionError, RunOptions, declared, flag, option_types
from hogwild.tasks.options_file import OptionsFileError, read_options_file, run_directory_options

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


def _parser(prog: str, description: str, epilog: str | None = None,
            formatter_class: type = _Formatter) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, formatter_class=formatter_class)


def train_parser() -> argparse.ArgumentParser:
    """The training flags, generated from the declarations of `RunOptions` (each help ends with its default)."""
    p = _parser("run.py", "Train a POS tagger or an NMT model with lock-free Hogwild! workers (CPU cores or GPUs). "
                          "With no arguments: the built-in synthetic POS task on 2 CPU workers.", EPILOG,
                argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", default=None,
                   help="start from the options in FILE: a run directory (replays its config.json) or a YAML, TOML "
                        "or JSON file of options; the flags given here override it (default: none)")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for name, option in declared().items():
        if option.group not in groups:
            groups[option.group] = p.add_argument_group(option.group)
        _add_flag(groups[option.group], name, option)
    return p


def _add_flag(group: argparse._ArgumentGroup, name: str, option: Option) -> None:
    """One option's flag: its type, allowed values and help, which ends with the default that applies."""
    kind, _ = option_types()[name]
    default = RunOptions.__dataclass_fields__[name].default
    shown = option.default_text or ("off" if kind is bool else default)
    text = f"{option.help} (default: {shown})".replace("%", "%%")
    if kind is bool:  # a switch: --fused-step turns a False default on, --no-progress a True default off
        group.add_argument(option.negative_flag or flag(name), dest=name, default=default, help=text,
                           action="store_false" if option.negative_flag else "store_true")
    else:
        group.add_argument(flag(name), dest=name, default=default, choices=option.choices, metavar=option.metavar,
                           help=text, **({"nargs": "+"} if kind is list else {"type": option.parse or kind}))


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
                                    "FILEs), one translation per line out. Bounded as the held-out evaluation: a "
                                    f"line longer than {EVAL_MAX_LEN} words (units of the run's vocabulary) is "
                                    f"translated from its first {EVAL_MAX_LEN} (with a warning), and a translation "
                                    f"has at most 2 x its source length + 10 words, never over {DECODE_MAX_LEN}.")
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
    _say_checkpoint("run.py tag", args.checkpoint, tagger.checkpoint)
    lines = read_input(args.files, args.encoding)
    write_output(tag_lines(tagger, lines, args.format, args.batch_size, args.separator), args.output,
                 conll=args.format == "conll")
    return 0


def _translate(args: argparse.Namespace) -> int:
    from hogwild.tasks.inference import load_translator, read_input, write_output
    translator = load_translator(args.checkpoint)
    _say_checkpoint("run.py translate", args.checkpoint, translator.checkpoint)
    lines = read_input(args.files, args.encoding)
    translations = translator.translate(lines, args.beam, args.batch_size)
    if translator.cut:
        print(f"run.py translate: warning: {translator.cut} line(s) longer than {EVAL_MAX_LEN} words were "
              f"translated from their first {EVAL_MAX_LEN} only (split long lines into sentences)", file=sys.stderr)
    write_output(translations, args.output)
    return 0


def _say_checkpoint(prog: str, run_dir: str, path) -> None:
    """On stderr (stdout is the output): the checkpoint used and its update, and a warning for a run still training."""
    from hogwild.tasks.inference import checkpoint_note
    note, warning = checkpoint_note(run_dir, path)
    print(f"{prog}: {note}", file=sys.stderr)
    if warning:
        print(f"{prog}: warning: {warning}", file=sys.stderr)


def _plot(args: argparse.Namespace) -> int:
    from hogwild.tasks.plotting import plot_runs
    print(plot_runs(args.runs, args.out, args.labels, args.title))
    return 0


def _train(options: RunOptions) -> int:
    from hogwild.parent.supervisor import start_resource_tracker
    from hogwild.tasks.final_signals import stops_as_interrupt
    from hogwild.tasks.training import run_training
    start_resource_tracker()  # before any data-loading pool starts it: a closed terminal must not end it
    with stops_as_interrupt():  # a signal while the data loads ends the run as Ctrl-C does: exit 130
        summary = run_training(options, argv=_argv)
    return 130 if str(summary.get("stop_reason", "")).startswith("signal") else 0


def run_options(parser: argparse.ArgumentParser, argv: list[str]) -> RunOptions:
    """The options of a training command line: --config FILE's options, overridden by the flags given. Bad values
    (in the file or on the command line) end with `run.py: error: ...` and exit status 2."""
    args = parser.parse_args(argv)
    replayed, flag_read = {}, "--config" if args.config is not None else "--resume"
    try:
        if args.config is not None:
            replayed = read_options_file(args.config)  # the file's values, under the flags given
            if args.resume and args.out is None and Path(args.config).is_dir():
                replayed["out"] = args.config  # --config RUN --resume continues RUN itself
        elif args.resume and args.out is not None:
            replayed = run_directory_options(args.out) or {}  # --resume --out RUN: RUN's own options
    except OptionsFileError as error:
        parser.error(f"{flag_read} {error}")
    if replayed:
        parser.set_defaults(**replayed)
        args = parser.parse_args(argv)
    values = vars(args)
    del values["config"]
    try:
        return RunOptions(**values)  # flag values are checked before anything is loaded
    except OptionError as error:
        parser.error(str(error))


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
        print(f"{prog}: warning: {flag(option)}: {message}", file=sys.stderr)
    return show


def _check_encoding(parser: argparse.ArgumentParser, encoding: str | None) -> None:
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
        args = run_options(parser, argv)
    _check_encoding(parser, getattr(args, "encoding", None))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line(parser.prog)
            return command(args)
    except OptionError as error:  # a value hogwild.Config refuses, named by its flag (before anything is loaded)
        parser.error(str(error))
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as error:  # bad input, missing files, failed workers
        if os.environ.get("HOGWILD_TRACEBACK"):
            raise
        option = getattr(error, "option", None)  # data.errors.CorpusError: the reading option at fault
        prefix = f"{flag(option)}: " if option else ""
        print(f"{parser.prog}: error: {prefix}{error}", file=sys.stderr)
        return 1
