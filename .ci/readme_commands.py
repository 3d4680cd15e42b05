"""Print one of the README quick-start commands: `main` (sets up and runs the default job) or `test`.

The quick start is the first ```bash block under the "## Quick start" heading; its two lines are, in order,
the main-job command and the test command. CI and tests read them from here so they cannot drift from the README.
"""
import pathlib
import sys


def quick_start_commands(readme: pathlib.Path) -> dict[str, str]:
    text = readme.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    lines = [line.strip() for line in block.strip().splitlines() if line.strip() and not line.startswith("#")]
    if len(lines) != 2:
        raise SystemExit(f"{readme}: the quick start must hold exactly two commands, found {len(lines)}")
    return {"main": lines[0], "test": lines[1]}


if __name__ == "__main__":
    root = pathlib.Path(__file__).resolve().parent.parent
    print(quick_start_commands(root / "README.md")[sys.argv[1]])
