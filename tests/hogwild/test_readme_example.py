"""The README's "## Library API" example runs exactly as written and trains its model."""
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def library_example() -> str:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Library API", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


def test_readme_library_example_runs_as_written(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(library_example())
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    match = re.search(r"accuracy (\d\.\d+), best (\d\.\d+), 240 updates in", done.stdout)
    assert match, done.stdout
    assert float(match.group(1)) > 0.85 and float(match.group(2)) >= float(match.group(1))
    run = tmp_path / "runs" / "readme-example"
    assert {"config.json", "metrics.jsonl", "last.pt", "best.pt"} <= {p.name for p in run.iterdir()}
