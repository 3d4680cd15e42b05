"""The command line behind `run.py` and the installed `hogwild` command (the same `main`, named by `prog`):
argument parsers for training and the `tag`, `translate` and `plot` subcommands, and error handling (bad flags and
bad input end with a one-line message and a non-zero exit, no traceback; set HOGWILD_TRACEBACK=1 to see one).

Usage: `sys.exit(main(["--task", "pos", "--workers", "2"]))`; `main(["tag", "--checkpoint", "runs/pos"])`
"""
from __future__ import annotations

import argparse
import codecs
import os
import signal
import sys
import warnings
from typing import Callable

from hogwild.shared_optim import MOMENTUM_OPTIMIZERS
from hogwild.tasks.heldout import DECODE_MAX_LEN, EVAL_MAX_LEN
from hogwild.tasks.options import OptionError, RunOptions, declared, flag
from hogwild.tasks.run_flags import add_run_options, given_options, parse_run_options, refuse_prefixes
from hogwild.tasks.text_stream import MAX_LINE_BYTES, ReaderGone

SUBCOMMANDS = ("tag", "translate", "plot")
EPILOG = """subcommands ({prog} SUBCOMMAND --help for their flags):
  {prog} tag --checkpoint RUN_DIR [FILE ...]                 tag sentences (stdin or files), one per line
  {prog} translate --checkpoint RUN_DIR [--beam 5] [FILE ...] translate lines (stdin or files)
  {prog} plot RUN_DIR [RUN_DIR ...] [--out curves.png]        loss and held-out metric vs time and updates

examples:
  {prog}                                         built-in synthetic POS task, 2 CPU workers, about half a minute
  {prog} --task pos --train ../shared/corpora/brown --workers 2 --time-limit 600
  {prog} --task nmt --train ../shared/corpora/europarl-fr-en/train --dev ../shared/corpora/europarl-fr-en/dev --gpus 4
  mpiexec -n 2 {command} --task pos --workers 1 --distributed allreduce

flags are spelled out in full: a prefix (--step for --steps) is an error, so that a recorded command keeps its
meaning when a later version adds flags"""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _parser(prog: str, description: str, epilog: str | None = None,
            formatter_class: type = _Formatter) -> argparse.ArgumentParser:
    # no flag prefixes (--step for --steps): a prefix that a later flag makes ambiguous would change what a command
    # recorded in a run's command.txt, a script or a shell history means (EPILOG says so)
    return argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, formatter_class=formatter_class,
                                   allow_abbrev=False)


def train_parser(prog: str = "run.py") -> argparse.ArgumentParser:
    """The training flags, generated from the declarations of `RunOptions` (each help ends with its default)."""
    command = "python run.py" if prog == "run.py" else prog
    p = _parser(prog, "Train a POS tagger or an NMT model with lock-free Hogwild! workers (CPU cores or GPUs). "
                      "With no arguments: the built-in synthetic POS task on 2 CPU workers.",
                EPILOG.format(prog=prog, command=command), argparse.RawDescriptionHelpFormatter)
    add_run_options(p)
    return p


_STREAMED = (f"Lines are answered as they arrive, a few hundred at a time, each batch written before more is read: "
             f"a pipe of any length runs in bounded memory (a line may have at most {MAX_LINE_BYTES // 2**20} MiB); "
             f"a line that cannot be read stops it, naming FILE:LINE, after the answers to the lines before it "
             f"(--output is then left as it was).")


def tag_parser(prog: str = "run.py") -> argparse.ArgumentParser:
    p = _parser(f"{prog} tag", "Tag sentences with a trained POS run: one whitespace-tokenized sentence per line "
                              f"in (stdin or FILEs), tagged sentences out. A line may have at most {DECODE_MAX_LEN} "
                              f"words (as a translation). {_STREAMED}")
    p.add_argument("--checkpoint", required=True, metavar="RUN_DIR", help="run directory (best.pt, else last.pt)")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument("--format", choices=("slash", "conll"), default="slash",
                   help="slash: word/TAG per token on one line; conll: word<TAB>TAG lines")
    p.add_argument("--separator", default="/", metavar="SEP", help="slash format: between word and tag")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")
    p.add_argument("--encoding", default="utf-8", help="input encoding")
    return p


def translate_parser(prog: str = "run.py") -> argparse.ArgumentParser:
    p = _parser(f"{prog} translate", "Translate text with a trained NMT run: one sentence per line in (stdin or "
                                    "FILEs), one translation per line out. Bounded as the held-out evaluation: a "
                                    f"line longer than {EVAL_MAX_LEN} words (units of the run's vocabulary) is "
                                    f"translated from its first {EVAL_MAX_LEN} (with a warning), and a translation "
                                    f"has at most 2 x its source length + 10 words, never over {DECODE_MAX_LEN}. "
                                    f"{_STREAMED}")
    p.add_argument("--checkpoint", required=True, metavar="RUN_DIR", help="run directory (best.pt, else last.pt)")
    p.add_argument("files", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    p.add_argument("--beam", type=int, default=5, help="beam size (1: greedy)")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per search batch")
    p.add_argument("--encoding", default="utf-8", help="input encoding")
    return p


def plot_parser(prog: str = "run.py") -> argparse.ArgumentParser:
    p = _parser(f"{prog} plot", "Plot training loss and the held-out metric against wall time and updates, one line "
                               "per run.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    p.add_argument("--out", default="curves.png", help="figure file to write, in the format its suffix names (.png, "
                                                       ".pdf, .svg ...), or a folder (its curves.png)")
    p.add_argument("--labels", nargs="+", default=None, help="legend label per run; None: directory names")
    p.add_argument("--title", default=None, help="figure title")
    return p


def _tag(args: argparse.Namespace) -> int:
    from hogwild.tasks.final_signals import stops_as_interrupt  # SIGTERM too leaves --output as it was
    from hogwild.tasks.inference import load_tagger, tag_lines
    from hogwild.tasks.text_stream import TextOutput, read_chunks
    tagger = load_tagger(args.checkpoint)  # a wrong run directory is reported before reading any input
    _say_checkpoint(f"{_prog} tag", args.checkpoint, tagger.checkpoint)
    with stops_as_interrupt(), TextOutput(args.output, conll=args.format == "conll") as output:
        for lines in read_chunks(args.files, args.encoding, max_words=DECODE_MAX_LEN):
            output.write(tag_lines(tagger, lines, args.format, args.batch_size, args.separator))
    return 0


def _translate(args: argparse.Namespace) -> int:
    from hogwild.tasks.final_signals import stops_as_interrupt
    from hogwild.tasks.inference import load_translator
    from hogwild.tasks.text_stream import TextOutput, read_chunks
    translator = load_translator(args.checkpoint)
    _say_checkpoint(f"{_prog} translate", args.checkpoint, translator.checkpoint)
    cut = 0
    try:
        with stops_as_interrupt(), TextOutput(args.output) as output:
            for lines in read_chunks(args.files, args.encoding):
                output.write(translator.translate(lines, args.beam, args.batch_size))
                cut += translator.cut
    finally:
        if cut:
            print(f"{_prog} translate: warning: {cut} line(s) longer than {EVAL_MAX_LEN} words were translated from "
                  f"their first {EVAL_MAX_LEN} only (split long lines into sentences)", file=sys.stderr)
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
    from hogwild.process_signals import start_resource_tracker
    from hogwild.tasks.final_signals import stops_as_interrupt
    from hogwild.tasks.training import run_training
    start_resource_tracker()  # before any data-loading pool starts it: a closed terminal must not end it
    with stops_as_interrupt():  # a signal while the data loads ends the run as Ctrl-C does: exit 130
        summary = run_training(options, argv=_argv)
    return 130 if str(summary.get("stop_reason", "")).startswith("signal") else 0


def run_options(parser: argparse.ArgumentParser, argv: list[str]) -> RunOptions:
    """The options of a training command line: --config FILE's options, overridden by the flags given. Bad values
    (in the file or on the command line) end with `run.py: error: ...` and exit status 2; a value from the file that
    clashes with a flag given is named with the file it came from; a flag given that this run would ignore is
    refused."""
    options, _ = parse_run_options(parser, argv)
    _refuse_ignored(parser, options, given_options(parser, argv))
    return options


_GPU_ONLY = ("amp", "tf32", "workers_per_gpu")  # flags that change GPU workers only


def _refuse_ignored(parser: argparse.ArgumentParser, options: RunOptions, given: set[str]) -> None:
    """Flags given on the command line that this run would ignore are refused, naming them (exit 2): whoever gave
    one expects it to act. (Values replayed from a run's config.json are not flags given.)"""
    if "workers" in given and options.mode == "single" and options.workers != 1:
        parser.error(f"--workers {options.workers}: --mode single trains with one worker; drop --workers, or use "
                     f"--mode hogwild (or sync) for {options.workers}")
    if options.distributed is None:
        for name in sorted(given & declared().keys()):
            if name != "distributed" and declared()[name].group == declared()["distributed"].group:
                parser.error(f"{flag(name)}: applies to multi-host runs only (--distributed ALGO, under mpiexec); "
                             f"this run is on one host")
    for name in sorted(given & declared().keys()):
        option = declared()[name]
        if option.task not in (None, options.task):
            parser.error(f"{flag(name)}: applies to --task {option.task} only; this run is --task {options.task}")
        if option.source == "corpus" and options.synthetic:
            parser.error(f"{flag(name)}: applies to a --train corpus only; this run trains on the synthetic task")
        if option.source == "synthetic" and not options.synthetic:
            parser.error(f"{flag(name)}: applies to the synthetic task only (no --train); this run trains on --train")
    optimizer = options.optimizer or options.resolved().optimizer
    if "momentum" in given and optimizer not in MOMENTUM_OPTIMIZERS:
        parser.error(f"--momentum: applies to --optimizer {' or '.join(MOMENTUM_OPTIMIZERS)} only; this run's "
                     f"optimizer is {optimizer}")
    if "subword_vocab_size" in given and options.subwords is None:
        parser.error("--subword-vocab-size: applies with --subwords only; this run trains on Moses words")
    if options.gpus == 0:
        for name in _GPU_ONLY:
            if name in given:
                parser.error(f"{flag(name)}: applies to GPU workers only (--gpus N); this run trains on CPU workers")


_argv: list[str] | None = None
_prog = "run.py"
_COMMANDS: dict[str, tuple[Callable[[str], argparse.ArgumentParser], Callable[[argparse.Namespace], int]]] = {
    "tag": (tag_parser, _tag), "translate": (translate_parser, _translate), "plot": (plot_parser, _plot)}


def _closed_streams() -> set[str]:
    """The standard streams this process was started without (`<&-`, `>&-`)."""
    closed = set()
    for fd, name in ((0, "stdin"), (1, "stdout")):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(name)
    return closed


def _refuse_closed_streams(parser: argparse.ArgumentParser, args: argparse.Namespace, closed: set[str]) -> None:
    """tag and translate read and write text: a closed stdout they would write to (a training run needs none) or
    a closed stdin they would read is a usage error, not an empty answer with exit 0."""
    if "stdout" in closed and args.output is None:
        parser.error("stdout is closed: the answers would go nowhere; give --output FILE")
    if "stdin" in closed and (not args.files or "-" in args.files):
        parser.error("stdin is closed: there is nothing to read; give the input FILEs")


def _positive_ints(parser: argparse.ArgumentParser, args: argparse.Namespace, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(args, name, None) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


def _warning_line(prog: str) -> Callable:
    """Every warning as one line: `PROG: warning: --FLAG: message` for one about a flag (e.g. more workers than cores),
    `PROG: warning: message` for the project's own (a damaged cache entry), and a library's with its category and
    place; never Python's second line quoting the source that warned."""
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        option = getattr(message, "option", None)
        if option is not None:
            text = f"{flag(option)}: {message}"
        elif _own(filename):
            text = str(message)
        else:
            text = f"{category.__name__}: {message} ({filename}:{lineno})"
        print(f"{prog}: warning: {' '.join(text.split())}", file=sys.stderr if file is None else file)
    return show


def _own(filename: str) -> bool:
    """Whether a source file is the project's (the hogwild package and the folders it maps: data, models, tasks)."""
    folders = [os.path.dirname(module.__file__) for name in ("hogwild", "hogwild.data", "hogwild.models",
                                                             "hogwild.tasks")
               if (module := sys.modules.get(name)) is not None and getattr(module, "__file__", None)]
    path = os.path.abspath(filename)
    return any(os.path.commonpath([path, folder]) == folder for folder in folders)


def _check_encoding(parser: argparse.ArgumentParser, encoding: str | None) -> None:
    if encoding is None:
        return
    try:
        codecs.lookup(encoding)
    except LookupError:
        parser.error(f"--encoding: unknown text encoding {encoding!r} (e.g. utf-8, latin-1, cp1252)")


def main(argv: list[str] | None = None, prog: str = "run.py") -> int:
    """Parse, run, and turn expected failures into `PROG: error: ...` on stderr with exit status 1 or 2. prog: the
    command's name in messages, --help and a run's command.txt (`run.py`, or `hogwild` installed)."""
    global _argv, _prog
    from hogwild.process_signals import outlive_closed_output
    argv = list(sys.argv[1:] if argv is None else argv)
    closed = _closed_streams()  # before they are reopened on /dev/null
    # `run.py ... | head`, `>&-`, `>/dev/full`: a run needs no terminal to go on (tag and translate write their own
    # output: tasks/text_stream.py)
    outlive_closed_output(prog, stdout_is_data=bool(argv) and argv[0] in ("tag", "translate"))
    _argv, _prog = [prog, *argv], prog
    if argv and argv[0] in _COMMANDS:
        make_parser, command = _COMMANDS[argv[0]]
        parser = make_parser(prog)
        refuse_prefixes(parser, argv[1:])
        args = parser.parse_args(argv[1:])
        _positive_ints(parser, args, ("beam", "batch_size"))
        if argv[0] in ("tag", "translate"):
            _refuse_closed_streams(parser, args, closed)
            from hogwild.tasks.inference import output_clash
            if clash := output_clash(args.output, args.checkpoint, args.files):  # nothing read or written yet
                parser.error(clash)
    else:
        parser, command = train_parser(prog), _train
        if argv and not argv[0].startswith("-"):  # `run.py prepare ...` was blamed on its first flag (--src)
            prepare = "; corpora are prepared with `python -m hogwild.data.prepare`" if argv[0] == "prepare" else ""
            parser.error(f"{argv[0]!r} is not a command: {prog}'s commands are {', '.join(SUBCOMMANDS)}, and "
                         f"training takes flags only{prepare}")
        args = run_options(parser, argv)  # refuses flag prefixes too (run_flags.parse_run_options)
    _check_encoding(parser, getattr(args, "encoding", None))
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a Ctrl-C that run.py held is raised here
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line(parser.prog)
            return command(args)
    except OptionError as error:  # a value hogwild.Config refuses, named by its flag (before anything is loaded)
        parser.error(str(error))
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except ReaderGone:  # `run.py tag ... | head`: the reader has what it wanted
        return 0
    except (ValueError, OSError, RuntimeError) as error:  # bad input, missing files, failed workers
        if os.environ.get("HOGWILD_TRACEBACK"):
            raise
        option = getattr(error, "option", None)  # data.errors.CorpusError: the reading option at fault
        prefix = f"{flag(option)}: " if option else ""
        print(f"{parser.prog}: error: {prefix}{error}", file=sys.stderr)
        written = getattr(error, "checkpoint", None)  # hogwild.WorkerFailed / EvaluationFailed after last.pt
        if written and getattr(args, "out", None):
            print(f"{parser.prog}: the run is in {written}: continue with the same command plus --resume "
                  f"--out {args.out}", file=sys.stderr)
        return 1


def console(prog: str = "hogwild") -> int:
    """A command's whole process: main(), then Ctrl-C ignored through the interpreter's teardown, which it would only
    interrupt into a traceback (process_signals.ended). The installed `hogwild` command (pyproject's
    [project.scripts]); run.py is console("run.py")."""
    from hogwild.process_signals import ended
    status = main(prog=prog)
    ended()
    return status
