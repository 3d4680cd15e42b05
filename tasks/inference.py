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

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from hogwild.tasks.rundir import RUN_FILES, RunDirError, load_trained, run_dir_of
from hogwild.tasks.runlock import LOCK_FILE, describe_holder, live_holder
from hogwild.tasks.task_job import MODEL_FILE


def _load_trained_as(run_dir: str | Path, task: str, command: str, loader):
    """`loader(run_dir, spec, state)` on the trained model of a run directory, refused unless it is a `task` run."""
    run_dir, chosen = run_dir_of(run_dir)
    spec, state, path = load_trained(run_dir, chosen or "best")
    if spec.get("task") != task:
        raise RunDirError(f"--checkpoint {run_dir}: this is a {spec.get('task')!r} run; `run.py {command}` needs a "
                          f"{task!r} run")
    try:
        trained = loader(run_dir, spec, state)
    except (KeyError, TypeError, RuntimeError) as error:  # model.json and the checkpoint do not fit together
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]  # torch's: a title, then each
        raise RunDirError(f"{run_dir / MODEL_FILE} and {path} do not make one model ({type(error).__name__}: "
                          f"{' '.join(lines[:2])}); is one of them from another run?") from None
    trained.checkpoint = path
    return trained


def output_clash(output: str | None, checkpoint: str, inputs: Sequence[str]) -> str | None:
    """Why `--output` would replace what the command reads, or None. Refused: a file of the --checkpoint run (by
    any path: a symbolic link, a hard link, /dev/stdout redirected to it; files are compared by device and inode),
    a name the run writes inside its folder, and an input file (stdin's, for '-' or no FILE). A stream (a FIFO, a
    device) is written in place and compared with nothing: `--output /dev/null < /dev/null` is fine."""
    if output is None:
        return None
    run_dir = run_dir_of(checkpoint)[0]
    try:
        target = os.stat(output)
    except OSError:
        target = None  # a new file, or one run.py will name when it fails to write it
    if target is not None and not stat.S_ISREG(target.st_mode):
        return None
    place = Path(os.path.realpath(output))
    identity = (target.st_dev, target.st_ino) if target is not None else None
    run_files = _files_of(run_dir)
    if identity in run_files or (target is None and place.name in RUN_WRITES and _same_folder(place.parent, run_dir)):
        name = run_files.get(identity, place)
        other = f"is {name}, " if os.path.abspath(output) != str(name) else ""  # a link, /dev/stdout ...
        return (f"--output {output}: {other}a file of the --checkpoint run {run_dir}: the answers would replace it; "
                f"write them outside the run directory")
    for path in inputs or ["-"]:
        try:
            source = os.fstat(0) if path == "-" else os.stat(path)
        except OSError:
            continue  # named when it is read
        if identity == (source.st_dev, source.st_ino):
            name = "stdin" if path == "-" else path
            return f"--output {output}: is the input {name}: the answers would replace it; write them to another file"
    return None


# what a run writes in its folder, perhaps later than now (a run still training, an NMT run's final translations)
RUN_WRITES = (*RUN_FILES, LOCK_FILE, "command.txt", "data.json", "dev.src", "dev.ref", "dev.hyp", "test.hyp")


def _files_of(run_dir: Path) -> dict[tuple[int, int], Path]:
    """(device, inode) -> path of every file in a run directory and its host folders."""
    files = {}
    for folder in [run_dir, *sorted(run_dir.glob("host*"))] if run_dir.is_dir() else []:
        for path in folder.iterdir() if folder.is_dir() else []:
            try:
                info = path.stat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                files[(info.st_dev, info.st_ino)] = path
    return files


def _same_folder(folder: Path, run_dir: Path) -> bool:
    """Whether folder is the run directory or one of its host folders, by any path."""
    try:
        return any(os.path.samefile(folder, own) for own in [run_dir, *run_dir.glob("host*")])
    except OSError:
        return False


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
    return note, (f"{run_dir} is still training, by {describe_holder(holder)}: {path.name} is the checkpoint of "
                  f"update {update}, not of the finished run")  # not "(pid N (started ...))"


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
