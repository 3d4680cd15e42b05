"""The engine's folders import one way, as docs/architecture.md says: read from the source (ast), every import of
every module counted, a function's lazy one and a TYPE_CHECKING one too. worker/ used to import the signal rules from
parent/supervisor.py, so that a worker process sat above the parent's code, and share/ held the feed too."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENGINE = ROOT / "hogwild"


def hogwild_imports(path: pathlib.Path) -> set[str]:
    """The absolute names of what the file imports from hogwild (relative imports resolved from its place)."""
    parts = path.relative_to(ROOT).with_suffix("").parts  # ('hogwild', 'worker', '__init__') for a package too
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(parts[:-node.level]) if node.level else ""
            module = ".".join(filter(None, (base, node.module)))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from . import x`: a module x
    return {name for name in names if name == "hogwild" or name.startswith("hogwild.")}


def imports_into(folder: str, targets: tuple[str, ...]) -> list[str]:
    """'file: name' for every import of a module under hogwild/<folder> from one of `targets` (hogwild.parent ...)."""
    return sorted(f"{path.relative_to(ROOT)}: {name}" for path in (ENGINE / folder).glob("*.py")
                  for name in hogwild_imports(path) if name in targets or name.startswith(tuple(f"{t}." for t in
                                                                                                  targets)))


def test_the_import_reader_sees_relative_absolute_and_lazy_imports():
    prelude = hogwild_imports(ENGINE / "worker" / "process_prelude.py")
    assert {"hogwild.process_signals", "hogwild.config", "hogwild.worker.gradients"} <= prelude
    engine = hogwild_imports(ENGINE / "engine.py")
    assert "hogwild.worker.sync" in engine  # imported inside _spawn, in sync mode only


def test_worker_imports_nothing_from_parent():
    """A worker process runs worker/ and what it imports; the parent's supervision, loop and metrics sit beside it."""
    assert imports_into("worker", ("hogwild.parent",)) == []
    assert imports_into("parent", ("hogwild.worker",)) == []


def test_the_shared_state_and_the_feed_import_neither_each_other_nor_the_processes():
    """share/ (the shared run state and its saved form) and feed/ (which batch a worker trains next) sit side by
    side under worker/ and parent/: the feed reads and writes the counters handed to it."""
    assert imports_into("share", ("hogwild.feed", "hogwild.parent", "hogwild.worker")) == []
    assert imports_into("feed", ("hogwild.share", "hogwild.parent", "hogwild.worker")) == []
    assert "hogwild.feed.tickets" in hogwild_imports(ENGINE / "worker" / "worker.py")


def test_the_signal_rules_are_a_leaf_every_process_can_import():
    """hogwild/process_signals.py: no module of the engine and no torch (a worker's prelude, run.py's own handlers)."""
    tree = ast.parse((ENGINE / "process_signals.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "." for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and not [name for name in imported if name == "." or name.startswith(("hogwild", "torch"))]
