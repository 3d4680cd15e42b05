"""The training recipes a run can follow, by name: 'default', what an experienced user picks for an unknown corpus
(it converges on a 2k-sentence treebank as on Brown), and 'paper', the Hogwild papers' settings exactly. A recipe
decides the optimizer, the learning rate and its decay (`tasks.learning_rate`, the one rule for those) and the POS word
vocabulary; every flag given on the command line overrides it. config.json and summary.json record the recipe.

Usage: `recipe = resolve_recipe(None, "small")  # -> "default"`; `default_optimizer("nmt", recipe)  # -> "adam"`
"""
from __future__ import annotations

from hogwild.data.pos_dataset import PAPER_WORD_MIN_FREQ, SYNTHETIC_WORD_MIN_FREQ, WORD_MIN_FREQ

RECIPES = ("default", "paper")

# NMT, 29k short sentence pairs, 2 CPU workers, 10 minutes (issue #11): the paper's SGD 0.1 with clipping at 1
# reaches greedy dev BLEU 3.5, Adam at its usual rate 19.2 (beam-5 20.1) in the same time with fewer updates.
# POS keeps plain SGD (Hogwild's cheapest update: 117 updates/s against Adam's 47 on Brown, 1 worker).
_DEFAULT_OPTIMIZER = {("default", "pos"): "sgd", ("default", "nmt"): "adam", ("paper", "pos"): "sgd",
                      ("paper", "nmt"): "sgd"}


def resolve_recipe(recipe: str | None, preset: str) -> str:
    """The recipe of a run: as given, else 'paper' with the paper's model sizes (--preset paper is the paper's
    setting, whole) and 'default' otherwise."""
    if recipe is None:
        return "paper" if preset == "paper" else "default"
    if recipe not in RECIPES:
        raise ValueError(f"--recipe: must be one of {', '.join(RECIPES)}; got {recipe!r}")
    return recipe


def default_optimizer(task: str, recipe: str, distributed: str | None = None) -> str:
    """The recipe's optimizer; EAMSGD (--distributed eamsgd) needs momentum: msgd. Every MPI rank resolves the same
    flags to the same optimizer."""
    return "msgd" if distributed == "eamsgd" else _DEFAULT_OPTIMIZER[recipe, task]


def default_word_min_freq(recipe: str, synthetic: bool = False) -> int:
    """POS: words seen fewer times become unk (default 2; the paper's 10 was sized for 40k training sentences). The
    synthetic task keeps its own threshold: its words are drawn to be tagged from their characters."""
    if synthetic:
        return SYNTHETIC_WORD_MIN_FREQ
    return PAPER_WORD_MIN_FREQ if recipe == "paper" else WORD_MIN_FREQ
