"""tasks.run_flags: run.py's flags on a script's parser (left out, the script's own defaults shown beside run.py's,
fixed values, --config resolved as run.py does), and no script or benchmark declaring a run.py flag of its own -
checked on each one's parser and on the add_argument calls in its source."""
import argparse
import ast
import importlib
import json
from pathlib import Path

import pytest

from hogwild.tasks.cli import train_parser
from hogwild.tasks.options import RunOptions
from hogwild.tasks.run_flags import HelpFormatter, add_run_options, parse_run_options, run_option_actions

REPO = Path(__file__).resolve().parents[2]
RUN_PY_FLAGS = {flag for action in train_parser()._actions for flag in action.option_strings} - {"-h", "--help"}
# every file of scripts/ and bench/ that builds a parser
PARSERS = sorted(path.relative_to(REPO) for folder in ("scripts", "bench") for path in (REPO / folder).glob("*.py")
                 if "ArgumentParser(" in path.read_text(encoding="utf-8"))


def _script_parser(**arguments) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="series", formatter_class=HelpFormatter)
    add_run_options(parser, **arguments)
    parser.add_argument("--seeds", default="0", help="the script's own")
    return parser


def test_a_script_takes_run_options_with_its_own_defaults_shown_beside_run_pys(capsys):
    parser = _script_parser(leave_out=("mode", "out"), defaults={"vocab_size": 6000, "epochs": 2},
                            fixed={"task": "nmt"})
    text = " ".join(parser.format_help().split())
    assert "--vocab-size N nmt: words kept per side (default: 6000 here; run.py: 15000)" in text
    assert ("--epochs EPOCHS passes over the batches (default: 2 here; run.py: on the synthetic task pos 1, nmt 2"
            in text)
    assert "--seeds SEEDS the script's own (default: 0)" in text  # its own flags: argparse's default text
    assert not {"--mode", "--out", "--task"} & set(parser._option_string_actions)
    options, args = parse_run_options(parser, ["--lr", "0.5", "--seeds", "3"])
    assert options == RunOptions(task="nmt", vocab_size=6000, epochs=2, lr=0.5) and args.seeds == "3"
    with pytest.raises(SystemExit) as exit_:  # a flag left out is no flag of this script
        parse_run_options(parser, ["--mode", "sync"])
    assert exit_.value.code == 2 and "unrecognized arguments: --mode sync" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # run.py's checks, run.py's message
        parse_run_options(parser, ["--vocab-size", "0"])
    assert exit_.value.code == 2 and "series: error: --vocab-size: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("argv, prefix, meant", [(["--step", "5"], "--step", "--steps"),
                                                  (["--see", "3"], "--see", "--seed or --seeds"),
                                                  (["--lr", "0.5", "--vocab=9"], "--vocab", "--vocab-size")])
def test_a_scripts_flags_are_spelled_out_in_full_as_run_pys(capsys, argv, prefix, meant):
    """A prefix is refused, naming the flag it begins (a reproduction script took `--step 5` as --steps 5, and a
    later flag --step-something would change what a recorded command meant)."""
    with pytest.raises(SystemExit) as exit_:
        parse_run_options(_script_parser(), argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (f"series: error: {prefix}: not a flag; flags are spelled out "
                                                        f"in full (did you mean {meant}?)")


def test_config_is_read_as_run_py_reads_it_and_fixed_values_win(tmp_path):
    (tmp_path / "options.json").write_text(json.dumps({"task": "pos", "lr": 0.2, "vocab_size": 900, "mode": "sync"}))
    parser = _script_parser(leave_out=("mode",), defaults={"vocab_size": 6000}, fixed={"task": "nmt"})
    options, _ = parse_run_options(parser, ["--config", str(tmp_path / "options.json"), "--lr", "0.3"])
    # the file over the script's default, the flag given over the file; the fixed task over both; a left-out
    # option's value arrives (the script replaces it per run)
    assert (options.task, options.lr, options.vocab_size, options.mode) == ("nmt", 0.3, 900, "sync")
    assert parse_run_options(train_parser(), ["--time-limit", "0", "--dev-limit", "0"])[0] == RunOptions()


def test_only_some_options_and_bad_declarations():
    parser = _script_parser(only=("lr", "seed"), defaults={"lr": 0.1})
    assert set(run_option_actions(parser)) == {"lr", "seed"}
    assert parse_run_options(parser, [])[0] == RunOptions(lr=0.1)
    with pytest.raises(ValueError, match="defaults: vocab_size not among the flags added"):
        _script_parser(only=("lr",), defaults={"vocab_size": 10})
    with pytest.raises(ValueError, match="leave_out: speed is not a run option"):
        _script_parser(leave_out=("speed",))
    with pytest.raises(ValueError, match="defaults: --lr: must be a number, got 'fast'"):
        _script_parser(defaults={"lr": "fast"})
    copied = _script_parser(only=("seed",))
    copied.add_argument("--lr", type=float, default=0.05)  # a second declaration of a run option
    with pytest.raises(ValueError, match=r"series: --lr declares the run option 'lr' again"):
        parse_run_options(copied, [])


def _declared_in_source(path: Path) -> set[str]:
    """The flags of every add_argument call in the file, and the flags of its (flag, ...) tuples (a settings table
    whose entries reach add_argument in a loop)."""
    found = set()
    for node in ast.walk(ast.parse((REPO / path).read_text(encoding="utf-8"))):
        strings = []
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            strings = node.args
        elif isinstance(node, ast.Tuple) and node.elts:
            strings = node.elts[:1]
        found |= {s.value for s in strings if isinstance(s, ast.Constant) and isinstance(s.value, str)
                  and s.value.startswith("--")}
    return found


def _copies_in_parser(path: Path) -> list[str]:
    """Flags of run.py that the script's parser has other than through add_run_options (--config included)."""
    module = importlib.import_module(".".join(path.with_suffix("").parts))
    parser = module.build_parser()
    generated = set(run_option_actions(parser).values())
    copies = [flag for action in parser._actions if action not in generated for flag in action.option_strings
              if flag in RUN_PY_FLAGS and not (flag == "--config" and action.dest == "config")]
    passes_through = any(action.nargs == argparse.REMAINDER for action in parser._actions)  # run.py's own, untouched
    assert passes_through or "--config" in parser._option_string_actions, f"{path}: no --config FILE"
    return copies


@pytest.mark.parametrize("path", PARSERS, ids=str)
def test_no_script_or_benchmark_declares_a_run_py_flag(path):
    assert {"scripts/reproduce_pos.py", "scripts/train_serial.py", "bench/bench_engine.py",
            "bench/bench_gpu.py"} <= set(map(str, PARSERS))
    assert sorted(_declared_in_source(path) & RUN_PY_FLAGS) == [], f"{path} declares run.py's flags"
    assert _copies_in_parser(path) == [], f"{path}'s parser has run.py's flags of its own"
