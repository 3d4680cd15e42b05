"""run.py's engine flags are hogwild.Config's fields, each declared once: every field is a flag whose help, default
and allowed values come from its declaration, or is named in tasks.options.SET_BY_RUN; nothing in tasks/ types an
engine default or choice list again; a new Config field is a flag with nothing else changed."""
import ast
import dataclasses
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hogwild.config import Config
from hogwild.tasks.cli import train_parser
from hogwild.tasks.defaults import RUN_DEFAULTS
from hogwild.tasks.options import SET_BY_RUN, RunOptions, declared, flag

REPO = Path(__file__).resolve().parents[2]
FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def _words(text: str) -> str:
    return " ".join(text.split())


def _help_pattern(help_text: str) -> str:
    """A field's help as a pattern: the fields it names may read as their flags (eval_budget: --eval-budget)."""
    pieces = re.split(r"\b[a-z]+(?:_[a-z0-9]+)+\b", _words(help_text))
    return r"\S+".join(re.escape(piece) for piece in pieces)


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_every_config_field_is_a_flag_from_its_declaration_or_set_by_run_py(name):
    declared_field = FIELDS[name].metadata["setting"]
    option = declared_field.cli or name
    actions = {action.dest: action for action in train_parser()._actions}
    if name in SET_BY_RUN:
        assert SET_BY_RUN[name] is None or SET_BY_RUN[name] in actions, name  # the flag its refusals name
        assert declared().get(option) is None or declared()[option].engine is None, name  # not generated
        return
    action = actions[option]
    assert action.option_strings == [flag(option)] and declared()[option].engine == name
    default = None if option in RUN_DEFAULTS else FIELDS[name].default
    assert action.default == default and RunOptions.__dataclass_fields__[option].default == default
    assert action.choices == declared_field.choices
    help_text = _words(action.help.replace("%%", "%"))
    assert re.match(_help_pattern(declared_field.help), help_text), (name, help_text)
    if option in RUN_DEFAULTS:  # run.py's default, filled per task and recipe, in words
        shown = RUN_DEFAULTS[option]
    elif default is None:
        shown = declared_field.none
    else:
        shown = ("on" if default else "off") if isinstance(default, bool) else str(default)
    assert shown and re.search(_help_pattern(f"(default: {shown})") + "$", help_text), (name, help_text)


def test_run_options_record_every_engine_flag_under_its_name():
    """config.json's `run` section keeps the names it had: an old run directory still replays and resumes."""
    engine = {declared_field.cli or name for name, f in FIELDS.items() if name not in SET_BY_RUN
              for declared_field in [f.metadata["setting"]]}
    recorded = set(RunOptions().to_dict())
    assert engine <= recorded and {"steps", "out", "lr_decay", "time_limit", "checkpoint_minutes"} <= engine
    assert {"max_steps", "checkpoint_dir", "decay_per_epoch"}.isdisjoint(recorded)


def _literals(path: Path) -> list[tuple[int, tuple]]:
    """Every tuple, list or set literal of two or more strings in a file, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts):
            found.append((node.lineno, tuple(item.value for item in node.elts)))
    return found


def test_no_engine_default_or_choice_list_is_typed_again_in_tasks():
    choice_lists = [set(f.metadata["setting"].choices) for f in FIELDS.values() if f.metadata["setting"].choices]
    again = [f"{path.name}:{line} {values}" for path in sorted((REPO / "tasks").glob("*.py"))
             for line, values in _literals(path) if any(set(values) <= choices for choices in choice_lists)]
    assert again == []
    # run.py's own options (the class body of RunOptions) declare no engine option; those of the same name as a
    # Config field are the ones run.py sets itself (--workers is CPU workers, --fused-step on for CPU workers too)
    source = (REPO / "tasks" / "options.py").read_text(encoding="utf-8")
    body = next(node for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ClassDef) and node.name == "RunOptions").body
    own = {node.target.id for node in body if isinstance(node, ast.AnnAssign)}
    engine_names = set(FIELDS) | {f.metadata["setting"].cli for f in FIELDS.values()} - {None}
    assert own & engine_names == {"workers", "fused_step"} and {"workers", "fused_step"} <= set(SET_BY_RUN)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_a_new_config_field_is_a_run_py_flag_with_nothing_else_changed():
    """The field, declared on Config alone (here a subclass standing in for an edit of hogwild/config.py), is a
    run.py flag with its help, default and check, is recorded with the run's options and reaches Config."""
    done = _python("""
        import dataclasses, json
        import hogwild.config as config
        from hogwild.config_fields import positive, setting

        @dataclasses.dataclass
        class Edited(config.Config):
            prefetch_depth: int = setting(2, "batches a worker prefetches", group=config.WORKERS, metavar="N",
                                          check=positive)

        config.Config = Edited  # before tasks/ is imported: as if hogwild/config.py had the field
        from hogwild.tasks.cli import run_options, train_parser
        parser = train_parser()
        help_text = " ".join(parser.format_help().split())
        options = run_options(parser, ["--prefetch-depth", "5"])
        engine = options.resolved().engine_config(["cpu"])
        print(json.dumps({"help": "--prefetch-depth N batches a worker prefetches (default: 2)" in help_text,
                          "option": options.prefetch_depth, "engine": engine.prefetch_depth,
                          "recorded": options.to_dict()["prefetch_depth"]}))
        run_options(train_parser(), ["--prefetch-depth", "0"])
    """)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout.strip() == '{"help": true, "option": 5, "engine": 5, "recorded": 5}'
    assert done.stderr.strip().splitlines()[-1] == "run.py: error: --prefetch-depth: must be > 0, got 0"
