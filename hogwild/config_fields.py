"""How a setting is declared once, on its dataclass field: its default, help, group, allowed values and the check of
its value (`setting`), the checks of a value against that declaration (`refusal`), "0 means off" (`zero_to_none`) and
the field list that `help(hogwild.Config)` shows (`describe`). `hogwild.Config` declares every engine option this way;
run.py's flags, with their defaults, choices, checks and help, are generated from those declarations
(tasks/options.py), and run.py's own options are declared and checked the same way.

Usage: `lr: float = setting(0.01, "learning rate", group="optimizer", check=positive)`;
`refusal(Config, "lr", -1.0)  # -> 'must be > 0, got -1.0'`
"""
from __future__ import annotations

import dataclasses
import math
import textwrap
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable

Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Setting:
    """The declaration of one setting, beside its name, type and default (the dataclass field)."""

    help: str  # what it does: help(Config) and run.py --help show it
    group: str  # the section it is listed under
    choices: tuple | None = None  # the values allowed (and None, where the type allows it)
    check: Check | None = None  # why a value of the right type is refused, else None (never called on None)
    metavar: str | None = None  # how --help names its value
    none: str | None = None  # what None means, where the type allows it ("no limit")
    zero_is_off: bool = False  # 0 is None: how a command line, which cannot say None, turns it off
    cli: str | None = None  # its name among run.py's options, where that is not the field's (max_steps: steps)


def setting(default: Any, help: str, *, group: str, **declaration: Any) -> Any:
    """A dataclass field with its declaration (a dict default is copied for each instance)."""
    metadata = {"setting": Setting(help, group, **declaration)}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@cache
def declarations(cls: type) -> dict[str, Setting]:
    """name -> declaration of every declared field of a dataclass, in field order."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


@cache
def value_types(cls: type) -> dict[str, tuple[type, bool]]:
    """name -> (int, float, str, bool, list or dict; whether None is allowed), from the annotations."""
    kinds = {}
    for name, hint in typing.get_type_hints(cls).items():
        args = typing.get_args(hint)
        optional = type(None) in args
        if optional:
            hint = next(arg for arg in args if arg is not type(None))
        kinds[name] = (typing.get_origin(hint) or hint, optional)
    return kinds


_KIND_NAMES = {bool: "True or False", int: "an integer", float: "a number", str: "a string",
               list: "a list of strings", dict: "a mapping"}


def _type_refusal(kind: type, value: Any) -> str | None:
    if kind is bool:
        fits = isinstance(value, bool)
    elif kind is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is list:
        fits = isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
    else:
        fits = isinstance(value, kind)
    if not fits:
        return f"must be {_KIND_NAMES[kind]}, got {value!r}"
    if kind is float and not math.isfinite(value):  # nan passes the type and every comparison
        return f"must be a finite number, got {value!r}"
    return None


def refusal(cls: type, name: str, value: Any) -> str | None:
    """Why `value` is refused for field `name` of dataclass `cls` on its own - its type, choices and declared check
    - or None. (What depends on other fields is the class's own __post_init__'s.)"""
    kind, optional = value_types(cls)[name]
    if value is None:
        return None if optional else f"must be {_KIND_NAMES[kind]}, got None"
    message = _type_refusal(kind, value)
    declared = declarations(cls).get(name)
    if message or declared is None:
        return message
    if declared.choices is not None and value not in declared.choices:
        return f"must be one of {', '.join(map(str, declared.choices))}; got {value!r}"
    return declared.check(value) if declared.check else None


def zero_to_none(instance: Any) -> None:
    """Every field declared zero_is_off that holds 0 is set to None: the one place where "0 means off"."""
    for name, declared in declarations(type(instance)).items():
        value = getattr(instance, name)
        if declared.zero_is_off and value == 0 and not isinstance(value, bool):
            setattr(instance, name, None)


def positive(value: float) -> str | None:
    return None if value > 0 else f"must be > 0, got {value!r}"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else f"must be >= 0, got {value!r}"


def shown(value: Any) -> str:
    """A default as the docs write it: strings quoted, the rest as Python writes them."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def describe(cls: type, width: int = 116) -> str:
    """The fields by group, one `- name = default: help` each (with its choices and what None means), for the
    class's docstring. A field declared without `setting` is refused, naming it."""
    groups: dict[str, list[str]] = {}
    for f in dataclasses.fields(cls):
        declared = f.metadata.get("setting")
        if declared is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared: give it setting(default, help, group=...)")
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        text = f"- {f.name} = {shown(default)}: {declared.help}"
        if declared.choices is not None and not all(str(choice) in declared.help for choice in declared.choices):
            text += f"; one of {', '.join(map(str, declared.choices))}"
        if declared.none is not None:
            text += f"; {'None or 0' if declared.zero_is_off else 'None'}: {declared.none}"
        groups.setdefault(declared.group, []).append(textwrap.fill(text, width, subsequent_indent="  "))
    return "\n\n".join(f"{title[0].upper()}{title[1:]}:\n" + "\n".join(lines) for title, lines in groups.items())
