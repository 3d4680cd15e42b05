"""`run.py --config FILE`: run options read from a file - a run directory (its config.json), a config.json, or a
YAML, TOML or JSON file of options - which the flags on the command line then override.

A run directory's config.json records every option as the run used it (`RunOptions.resolved()`), so replaying it
trains the same run again; its `out` and `resume` are left behind (they say where that run went, not what it did):
the replay writes a new run directory unless --out says otherwise (with --resume: the replayed directory itself).
`--resume --out DIR` without --config replays DIR's own options, so a stopped run continues from its directory
alone. The values are the resolved ones, so a flag given on top replaces that value alone (replaying an SGD run
with --optimizer adam keeps its --lr unless --lr is given too). An options file holds option names as keys
(`time_limit` or `time-limit`), with the values their flags take (`train` a list of paths, or one path).

Usage: `values = read_options_file("runs/pos-20250101-120000")  # -> {"task": "pos", "lr": 0.1, ...}`
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import yaml

from hogwild.tasks.options import OptionError, RunOptions, check_value

_NOT_REPLAYED = ("out", "resume")  # a run directory's own place, not part of what it did


class OptionsFileError(ValueError):
    """A --config file that cannot be read, or holds something that is not a run option."""


def read_options_file(path: str | Path) -> dict[str, Any]:
    """The options a file holds, by field name, each type-checked; raises OptionsFileError naming the file (and the
    key) at fault."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    loaded = _load(path)
    replay = "run" in loaded  # a run directory's config.json
    if replay:
        _check_run_section(path, loaded)
    values = {key: value for key, value in loaded["run"].items() if key not in _NOT_REPLAYED} if replay else loaded
    return _checked(path, values)


def _check_run_section(path: Path, loaded: dict[str, Any]) -> None:
    if "run" not in loaded:
        raise OptionsFileError(f"{path}: has no 'run' section (the options run.py recorded, which --resume "
                               f"continues); restore it, or give the run's options with --config FILE")
    if not isinstance(loaded["run"], dict):
        kind = type(loaded["run"]).__name__
        kind = "null" if loaded["run"] is None else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"  # not "a int"
        raise OptionsFileError(f"{path}: its 'run' section is {kind}, not a mapping of "
                               f"option names to values (the options run.py recorded); restore it, or give the run's "
                               f"options with --config FILE")


def run_directory_options(run_dir: str | Path) -> dict[str, Any] | None:
    """The options a run directory's config.json records (as read_options_file gives them): what --resume continues.
    None when there is no config.json yet (a new run directory). A config.json that does not parse (a hand-edit's
    typo, a truncated file) or has no `run` section raises OptionsFileError naming the file and the fault: training
    on default options instead would rewrite the file with them."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        return None
    _check_run_section(path, _load(path))
    return read_options_file(path)


def _load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise OptionsFileError(f"{path}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
    try:
        loaded = _parse(path, text)
    except json.JSONDecodeError as error:  # file:line:col, as an editor jumps to it
        raise OptionsFileError(f"{path}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from None
    except (ValueError, yaml.YAMLError) as error:
        raise OptionsFileError(f"{path}: not valid {_kind(path)}: {' '.join(str(error).split())}") from None
    if not isinstance(loaded, dict):
        raise OptionsFileError(f"{path}: expected a mapping of option names to values, got {type(loaded).__name__}")
    return loaded


def _kind(path: Path) -> str:
    return {".toml": "TOML", ".json": "JSON"}.get(path.suffix.lower(), "YAML")


def _parse(path: Path, text: str) -> Any:
    kind = _kind(path)
    if kind == "TOML":
        return tomllib.loads(text)
    if kind == "JSON":
        return json.loads(text)
    return yaml.safe_load(text)


def _checked(path: Path, values: dict[str, Any]) -> dict[str, Any]:
    known = {name for name in RunOptions.__dataclass_fields__}
    checked = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise OptionsFileError(f"{path}: unknown option {key!r}")
        if name == "train" and isinstance(value, str):
            value = [value]
        try:
            check_value(name, value)
        except OptionError as error:
            raise OptionsFileError(f"{path}: {error}") from None
        checked[name] = value
    return checked
