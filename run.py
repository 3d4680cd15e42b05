"""Command line of the hogwild project: train (default), `tag`, `translate`, `plot`. All logic lives in `tasks/`.

Usage: `python run.py` (built-in synthetic task, 2 CPU workers); `python run.py --help` for every flag.
"""
import sys

from hogwild.tasks.cli import main

if __name__ == "__main__":
    sys.exit(main())
