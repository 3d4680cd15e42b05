"""What the docs and help texts claim, checked against the code: every test docs/reliability.md names exists, the
TrainResult fields docs/library.md lists are the dataclass's, and Config's and --help's words for the fused step, the
batch queues and where the graphed step is on match what the engine does."""
import dataclasses
import pathlib
import re

import hogwild
from hogwild.shared_optim import FUSED_OPTIMIZERS
from hogwild.tasks.cli import train_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_test_reliability_md_names_exists():
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    missing, named = [], 0
    for cell in re.findall(r"\| ([^|]*`tests/[^|]*) \|\s*$", text, flags=re.M) + re.findall(r"`tests/[^`]+`", text):
        current = None
        for reference in re.findall(r"`(tests/[\w/]+\.py)?(::\w+)?`", cell):
            path, test = reference
            if path:
                current = ROOT / path
                if not current.exists():
                    missing.append(path)
            if test and current is not None and current.exists():
                named += 1
                if not re.search(rf"^(async )?def {test[2:]}\(", current.read_text(encoding="utf-8"), flags=re.M):
                    missing.append(f"{current.relative_to(ROOT)}{test}")
    assert named > 50 and sorted(set(missing)) == []


def test_library_md_lists_every_train_result_field():
    text = " ".join((ROOT / "docs" / "library.md").read_text(encoding="utf-8").split())
    listed = text.split("**The result** (`hogwild.TrainResult`):", 1)[1].split("- **", 1)[0]
    while re.search(r"\([^()]*\)", listed):  # what a field is, in parentheses, may name other things
        listed = re.sub(r"\([^()]*\)", "", listed)
    assert {field.name for field in dataclasses.fields(hogwild.TrainResult)} == set(re.findall(r"`(\w+)`", listed))


def test_config_and_help_describe_the_fused_step_and_the_queues_as_they_are():
    doc = " ".join(hogwild.Config.__doc__.split())
    fused = doc.split("- fused_step = None:", 1)[1].split(" - ", 1)[0]
    assert all(name in re.findall(r"\w+", fused) for name in FUSED_OPTIMIZERS), fused
    queues = doc.split('- data_assignment = "queue":', 1)[1].split(" - ", 1)[0]
    assert "workers' own queues" in queues and "share one" not in queues
    help_text = " ".join(train_parser().format_help().split())
    assert "dealt, in a seeded order, to the workers' own queues (each batch to one worker)" in help_text


def test_the_graphs_help_says_where_auto_is_on_as_config_decides_it():
    """--graphs' help said 'auto: on with --gpus unless --compile is set' and omitted that sync mode has none."""
    entry = " ".join(train_parser().format_help().split("\n  --graphs {auto,on,off}\n", 1)[1].split("\n  --")[0].split())
    assert "auto: on for 'cuda' workers unless compile is set, off in mode sync" in entry
    gpus = ["cuda:0", "cuda:1"]
    assert hogwild.Config(devices=gpus).graphed("cuda:0") and not hogwild.Config(devices=gpus, mode="sync").graphed(
        "cuda:0") and not hogwild.Config(devices=gpus, compile="default").graphed("cuda:0")
    assert not hogwild.Config(devices=["cpu-replica"]).graphed("cpu-replica")
