"""The reproduction and reference scripts, run from the repository root as modules:

    python -m scripts.reproduce_pos | scripts.reproduce_nmt | scripts.compare_optimizers   (tables and figures)
    python -m scripts.train_serial --task pos|nmt --out DIR                                  (serial reference runs)

They import the project as the installed package (`hogwild`, `hogwild.tasks`, ...) and what they share from
`scripts.series`; with the project installed (`pip install -e .`), `python scripts/NAME.py` runs them too.
"""
