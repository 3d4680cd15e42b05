"""What the docs and help texts claim, checked against the code: every test docs/reliability.md names exists, the
TrainResult fields docs/library.md lists are the dataclass's, and Config's and --help's words for the fused step, the
batch queues and where the graphed step is on match what the engine does; the figures the README quotes are those of
docs/benchmarks.md's tables; every test file the code and docs name exists; engine.py's steps list the worker's
modules."""
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


def table_rows(text: str, marker: str) -> list[list[str]]:
    """The cells of the first markdown table from the line holding `marker` on, without its header and rule."""
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if marker in line)
    start = next(i for i in range(at, len(lines)) if lines[i].startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines[start + 2:end]]


def number(cell: str) -> float:
    """The first number in a table cell: bold, thousands separators and signs read through."""
    return float(re.search(r"\d[\d,]*(\.\d+)?", cell).group().replace(",", ""))


def rounds_to(quoted: str, value: float) -> bool:
    """Whether `quoted` (as the README writes it) is `value` rounded to its digits."""
    digits = len(quoted.split(".")[1]) if "." in quoted else 0
    return abs(float(quoted) - value) <= 0.5 * 10 ** -digits + 1e-9


def test_the_figures_the_readme_quotes_are_those_of_benchmarks_md():
    """The README's results, speed-ups, data-pipeline and GPU figures, each recomputed from docs/benchmarks.md's
    tables (the README said 2 workers made '1.85-1.96x' the updates/s where the tables hold 1.85-1.89x and about
    1.90x)."""
    raw = (ROOT / "README.md").read_text(encoding="utf-8")
    readme = " ".join(raw.split())
    bench = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    pos = table_rows(bench, "**POS on Brown with the current default recipe")
    nmt = {row[0]: row for row in table_rows(bench, "**NMT on Europarl fr-en, to a held-out perplexity")}
    single, hogwild2 = nmt["1 worker"], nmt["2 Hogwild workers on replicas (run.py's default for NMT)"]
    results = {row[0].split(",")[0]: row[2:] for row in table_rows(raw, "| job | target |")}
    for column, quoted in zip((1, 2, 3), results["POS"]):  # minutes of 1 and 2 workers, time ratio: over 3 seeds
        low, high = re.fullmatch(r"([\d.]+)-([\d.]+)( min)?", quoted).groups()[:2]
        values = [number(row[column]) for row in pos]
        assert rounds_to(low, min(values)) and rounds_to(high, max(values)), (quoted, values)
    for quoted, cell in zip(results["NMT"], (single[1], hogwild2[1], hogwild2[3])):
        assert rounds_to(quoted.removesuffix(" min"), number(cell)), (quoted, cell)
    low, high, nmt_ratio = re.search(r"make ([\d.]+)-([\d.]+)x the updates per second \(POS; NMT about ([\d.]+)x\)",
                                     readme).groups()
    ratios = [float(re.search(r"\(([\d.]+)x\)", row[5]).group(1)) for row in pos]
    assert (float(low), float(high)) == (min(ratios), max(ratios))
    per_minute = [number(row[2]) / number(row[1]) for row in (single, hogwild2)]  # updates to the target / minutes
    assert rounds_to(nmt_ratio, per_minute[1] / per_minute[0])
    cold = table_rows(bench, "Cold starts, new pipeline")
    parent, pss, line, cache, cpu = re.search(
        r"parent stays at ([\d.]+-[\d.]+) GiB and all its processes under ([\d.]+) GiB \(([\d.]+ and [\d.]+) GiB at "
        r"40M pairs.*? with (\d+) MiB of cache and about (\d+) CPU seconds", readme).groups()
    sizes = [row for row in cold if row[0].endswith(("k", "M"))]
    peaks = [float(x) for row in sizes for x in re.findall(r"\d+\.\d+", row[3])]
    assert parent == f"{min(peaks):.2f}-{max(peaks):.2f}"
    assert max(float(x) for row in sizes for x in re.findall(r"\d+\.\d+", row[4])) < float(pss)
    at_40m, per_million = cold[-1], cold[-2]
    assert [rounds_to(q, number(c)) for q, c in zip(line.split(" and "), at_40m[3:5])] == [True, True]
    assert rounds_to(cache, number(per_million[5])) and rounds_to(cpu, number(per_million[2]))
    gpu = {row[1]: row for row in table_rows(bench, "### `bench/gpu_check.sh` on one H100")
           if row[0].startswith("engine")}
    rate, hours, paper, plain, two, four = re.search(
        r"at ([\d.]+) updates/s with one GPU worker \(([\d.]+) h per 90k updates; the paper: ([\d.]+) h\), ([\d.]+)x a "
        r"plain PyTorch loop; two and four workers sharing the GPU made ([\d.]+)x and ([\d.]+)x", readme).groups()
    assert rounds_to(rate, number(gpu["1"][2])) and rounds_to(hours, 90_000 / number(gpu["1"][2]) / 3600)
    assert f"the paper: {paper} /" in " ".join(bench.split())
    assert [rounds_to(q, number(gpu[w][3])) for q, w in ((plain, "1"), (two, "2"), (four, "4"))] == [True] * 3


def test_every_test_file_the_code_and_docs_name_exists():
    """data/streamed_nmt.py named tests/data/test_streamed_nmt.py, which never existed."""
    named = set()
    for path in [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *(p for folder in ("hogwild", "data", "models",
                 "tasks", "bench", "scripts") for p in (ROOT / folder).rglob("*.py"))]:
        named.update(re.findall(r"tests/[\w/]+\.py", path.read_text(encoding="utf-8")))
    assert len(named) > 40 and sorted(name for name in named if not (ROOT / name).exists()) == []


def test_the_engine_lists_every_worker_module_under_the_step_it_serves():
    """hogwild/engine.py's step 3 omitted the device step's files (in_place.py, step_graph.py, pull.py, ...)."""
    step3 = " ".join(hogwild.engine.__doc__.split("3. spawn", 1)[1].split("4. supervise", 1)[0].split())
    modules = {path.name for path in (ROOT / "hogwild" / "worker").glob("*.py") if path.name != "__init__.py"}
    assert modules and sorted(name for name in modules if name not in step3) == []
