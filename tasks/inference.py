"""`run.py tag` and `run.py translate`: use a trained run directory on new text, from stdin or from files.

Input: one sentence per line (tag: whitespace-separated tokens; translate: raw text, Moses-tokenized like the
training data), streamed in bounded chunks (tasks/text_stream.py). Output, in input order: tag -> `word/TAG
word/TAG ...` per line (or `--format conll`: one `word<TAB>TAG` per line, blank line between sentences, empty input
lines skipped); translate -> one detokenized translation per line. Otherwise empty lines stay empty lines, so the
output lines up with the input.

Usage: `tag_lines(load_tagger(run_dir), ["The dog barks ."])` -> `["The/at dog/nn barks/vbz ./."]`;
`load_translator(run_dir).translate(["Bonjour ."], beam=5)`
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hogwild.tasks.rundir import RunDirError, load_trained, run_dir_of
from hogwild.tasks.runlock import describe_holder, live_holder


def _load_trained_as(run_dir: str | Path, task: str, command: str, loader):
    """`loader(run_dir, spec, state)` on the trained model of a run directory, refused unless it is a `task` run."""
    run_dir, chosen = run_dir_of(run_dir)
    spec, state, path = load_trained(run_dir, chosen or "best")
    if spec.get("task") != task:
        raise RunDirError(f"--checkpoint {run_dir}: this is a {spec.get('task')!r} run; `run.py {command}` needs a "
                          f"{task!r} run")
    trained = loader(run_dir, spec, state)
    trained.checkpoint = path
    return trained


def load_tagger(run_dir: str | Path):
    """The trained POS tagger of a run directory (tasks.pos_task.PosTagging)."""
    from hogwild.tasks.pos_task import PosTagging

    return _load_trained_as(run_dir, "pos", "tag", PosTagging.load)


def load_translator(run_dir: str | Path):
    """The trained translator of a run directory (tasks.nmt_task.Translator)."""
    from hogwild.tasks.nmt_task import Translator

    return _load_trained_as(run_dir, "nmt", "translate", Translator.load)


def checkpoint_note(run_dir: str | Path, path: Path) -> tuple[str, str | None]:
    """(which checkpoint and the update it holds, a warning when a run still trains in run_dir, else None): a
    best.pt read while training goes on is only the best so far, possibly the untrained update-0 model."""
    from hogwild.share.checkpoint import read_checkpoint

    state = read_checkpoint(str(path))
    update = state.get("best_step", state.get("global_step"))
    note = f"using {path} (update {update})"
    run_dir = run_dir_of(run_dir)[0]
    holder = live_holder(run_dir)
    if holder is None:
        return note, None
    return note, (f"{run_dir} is still training ({describe_holder(holder)}): {path.name} is the checkpoint of update "
                  f"{update}, not of the finished run")


def tag_lines(tagger, lines: Sequence[str], output_format: str = "slash", batch_size: int = 32,
              separator: str = "/") -> list[str]:
    """Whitespace-tokenized lines -> `word/TAG ...` lines (or CoNLL blocks); empty lines stay empty."""
    sentences = [line.split() for line in lines]
    real = [s for s in sentences if s]
    tagged = iter(tagger.tag(real, batch_size) if real else [])
    out = []
    for sentence in sentences:
        tags = next(tagged) if sentence else []
        if output_format == "conll":
            if sentence:  # CoNLL has no empty sentences: blocks follow the non-empty input lines
                out.append("".join(f"{w}\t{t}\n" for w, t in zip(sentence, tags)))
        else:
            out.append(" ".join(f"{w}{separator}{t}" for w, t in zip(sentence, tags)))
    return out
