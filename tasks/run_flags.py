"""run.py's training flags on any parser: `add_run_options` adds `--config FILE` and the flags generated from
`RunOptions`' declarations (each with its type, allowed values and help ending in the default that applies), and
`parse_run_options` resolves a command line into `RunOptions` exactly as run.py does: --config FILE's options (a run
directory replays its config.json; `--resume --out RUN` continues RUN's own), overridden by the flags given, every
value checked by RunOptions, a bad one ending with `PROG: error: --FLAG: ...` and exit status 2. Flags are spelled
out in full, on every parser it reads: a prefix (`--step`) is refused naming the flags it begins.

run.py adds every flag. A script or benchmark adds them too (its own flags beside them), less the options it sets
itself per run (`leave_out`, e.g. `mode` in a sweep over modes) or, for a benchmark that honours a few, `only` those;
a default it changes on purpose (a reproduction's recipe) is given in `defaults`, and --help shows both
(`(default: 6000 here; run.py: 15000)`). A --config file's values for options a script leaves out reach RunOptions
too; the script's own choices replace them.

Usage:
    parser = argparse.ArgumentParser(prog="python -m scripts.reproduce_nmt")
    add_run_options(parser, leave_out=("mode", "out"), defaults={"vocab_size": 6000})
    parser.add_argument("--seeds", default=None)               # the script's own flags
    options, args = parse_run_options(parser, argv)           # RunOptions, and the namespace (args.seeds)
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from hogwild.config_fields import value_types
from hogwild.tasks.options import Option, OptionError, RunOptions, check_value, declared, flag
from hogwild.tasks.options_file import OptionsFileError, read_options_file, run_directory_options

CONFIG_HELP = ("start from the options in FILE: a run directory (replays its config.json) or a YAML, TOML or JSON "
               "file of options; the flags given here override it (default: none)")
_MARK = "run_option"  # the attribute that marks an argparse action as a generated run-option flag
_FIXED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # parser -> its `fixed` values


def add_run_options(parser: argparse.ArgumentParser, *, only: Iterable[str] | None = None,
                    leave_out: Iterable[str] = (), defaults: Mapping[str, Any] | None = None,
                    fixed: Mapping[str, Any] | None = None) -> None:
    """Add `--config FILE` and the run options' flags (every one, or `only` these, less `leave_out` and `fixed`) to
    parser, in RunOptions' groups and order. `defaults`: this parser's own default of an option; `fixed`: an
    option's value whatever the command line or --config says (no flag: a script for one task fixes `task`). Each
    value is type-checked as its flag's would be; a name that is not a run option, or a bad value, is a ValueError."""
    names = list(declared())
    defaults, fixed = dict(defaults or {}), dict(fixed or {})
    chosen = set(names if only is None else _known(only, "only"))
    chosen -= set(_known(leave_out, "leave_out")) | set(_known(fixed, "fixed"))
    stray = sorted(set(_known(defaults, "defaults")) - chosen)
    if stray:
        raise ValueError(f"defaults: {', '.join(stray)} not among the flags added")
    for name, value in {**defaults, **fixed}.items():
        try:
            check_value(name, value)  # the type its flag gives (RunOptions checks the rest when the flags are parsed)
        except OptionError as error:
            raise ValueError(f"defaults: {error}") from None
    _FIXED[parser] = fixed
    parser.add_argument("--config", metavar="FILE", default=None, help=CONFIG_HELP)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for name in names:
        if name not in chosen:
            continue
        option = declared()[name]
        if option.group not in groups:
            groups[option.group] = parser.add_argument_group(option.group)
        _add_flag(groups[option.group], name, option, defaults)


def parse_run_options(parser: argparse.ArgumentParser,
                      argv: Sequence[str] | None) -> tuple[RunOptions, argparse.Namespace]:
    """(RunOptions, the parsed namespace) of a command line, for a parser given `add_run_options`: --config FILE's
    options under the flags given, as run.py resolves them; bad values end with `parser.error` (exit status 2)."""
    _refuse_copies(parser)
    parser.allow_abbrev = False  # a prefix (--step) is an error, as in run.py: a recorded command keeps its meaning
    refuse_prefixes(parser, sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    resume, out = getattr(args, "resume", False), getattr(args, "out", None)
    replayed, flag_read, source = {}, "--config" if args.config is not None else "--resume", None
    try:
        if args.config is not None:
            source = Path(args.config) / "config.json" if Path(args.config).is_dir() else Path(args.config)
            replayed = read_options_file(args.config)  # the file's values, under the flags given
            if resume and out is None and Path(args.config).is_dir():
                replayed["out"] = args.config  # --config RUN --resume continues RUN itself
        elif resume and out is not None:
            source = Path(out) / "config.json"
            replayed = run_directory_options(out) or {}  # --resume --out RUN: RUN's own options (a broken one: error)
    except OptionsFileError as error:
        parser.error(f"{flag_read} {error}")
    given = given_options(parser, argv) if replayed else set()
    if replayed:
        task = getattr(args, "task", None)
        if resume and "task" in given and replayed.get("task", task) != task:
            parser.error(f"--task {task}: {source} records a --task {replayed['task']} run, and a resumed run "
                         f"keeps its task; drop --task, or start a new run in another --out")
        parser.set_defaults(**replayed)  # a replayed option the parser has no flag for arrives in args all the same
        args = parser.parse_args(argv)
    values = {field.name: getattr(args, field.name) for field in dataclasses.fields(RunOptions)
              if hasattr(args, field.name)}
    values.update(_FIXED.get(parser, {}))
    try:
        return RunOptions(**values), args  # flag values are checked before anything is loaded
    except OptionError as error:
        if error.name in replayed and error.name not in given:  # the file's value, not the user's flag
            parser.error(f"{flag_read} {source}: {error}")
        parser.error(str(error))


def refuse_prefixes(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A flag prefix (the parser's allow_abbrev off) is named with the flags it begins, instead of argparse's
    "unrecognized arguments"."""
    known = {name for action in parser._actions for name in action.option_strings}
    for token in argv:
        if token == "--":
            return
        name = token.split("=", 1)[0]
        prefix = name.startswith("--") and name not in known
        matches = sorted(known_flag for known_flag in known if known_flag.startswith(name)) if prefix else []
        if matches:
            parser.error(f"{name}: not a flag; flags are spelled out in full (did you mean {' or '.join(matches)}?)")


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The options given on the command line (not taken from a default or a --config file)."""
    unset = object()
    saved = {action.dest: action.default for action in parser._actions if action.default is not argparse.SUPPRESS}
    parser.set_defaults(**{dest: unset for dest in saved})
    try:
        return {dest for dest, value in vars(parser.parse_args(argv)).items() if value is not unset}
    finally:
        parser.set_defaults(**saved)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """A script's --help: its own flags with their defaults appended (argparse's), the run options' as generated
    (their help already ends with the default that applies)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if getattr(action, _MARK, None) or action.dest == "config":
            return action.help
        return super()._get_help_string(action)


def run_option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's generated run-option flags: option name -> its argparse action."""
    return {getattr(action, _MARK): action for action in parser._actions if getattr(action, _MARK, None)}


def _known(names: Iterable[str], argument: str) -> list[str]:
    names = list(names)
    unknown = sorted(set(names) - set(declared()))
    if unknown:
        raise ValueError(f"{argument}: {', '.join(unknown)} is not a run option (tasks/options.py)")
    return names


def _refuse_copies(parser: argparse.ArgumentParser) -> None:
    """A flag of the script's own that writes a run option's field would be a second declaration of it (another
    default, other checks): refused, naming the flag."""
    fields = {field.name for field in dataclasses.fields(RunOptions)}
    for action in parser._actions:
        if action.dest in fields and getattr(action, _MARK, None) != action.dest:
            raise ValueError(f"{parser.prog}: {'/'.join(action.option_strings) or action.dest} declares the run "
                             f"option {action.dest!r} again; add it with tasks.run_flags.add_run_options")


def _add_flag(group: argparse._ArgumentGroup, name: str, option: Option, defaults: Mapping[str, Any]) -> None:
    """One option's flag: its type, allowed values and help, which ends with the default that applies (and run.py's,
    where this parser has its own)."""
    kind, _ = value_types(RunOptions)[name]
    declared_default = RunOptions.__dataclass_fields__[name].default
    default = defaults.get(name, declared_default)
    shown = option.default_text or (option.none if declared_default is None else None) or _shown(declared_default)
    if name in defaults:
        shown = f"{_shown(default)} here; run.py: {shown}"
    off = f"; 0 or off: {option.none}" if option.zero_is_off else ""
    text = f"{option.help}{off} (default: {shown})".replace("%", "%%")
    if kind is bool:  # a switch: --tf32 turns a False default on, --no-progress a True default off
        action = group.add_argument(option.negative_flag or flag(name), dest=name, default=default, help=text,
                                    action="store_false" if option.negative_flag else "store_true")
    else:
        parse = _or_off(kind) if option.zero_is_off else kind
        action = group.add_argument(flag(name), dest=name, default=default, choices=option.choices,
                                    metavar=option.metavar, help=text,
                                    **({"nargs": "+"} if kind is list else {"type": parse}))
    setattr(action, _MARK, name)


def _shown(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else " ".join(value) if isinstance(value, list) \
        else str(value)


def _or_off(kind: type) -> Callable[[str], Any]:
    """The parser of an option whose 0 means off: a number, or `off` (0)."""
    def parse(text: str) -> Any:
        if text.strip().lower() == "off":
            return kind(0)
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, 0 or off; got {text!r}") from None
    return parse
