"""A hostile but fair user (issue #14): a table of bad inputs and bad flags run through `run.py` in real processes.
Each must exit non-zero with one line naming the flag or the file (and line), print no traceback, leave no process
or /dev/shm entry behind, and leave an existing run directory byte for byte as it was. Each case is a process of its
own, forked from one interpreter that imported run.py's modules once (misuse_helpers.RunPyForker)."""
import json
import re
import shutil

import pytest

from hogwild.tasks import cli
from tests.tasks.helpers import write_parallel, write_tagged
from tests.tasks.misuse_helpers import RunPyForker, fingerprint, run_py_session

pytestmark = pytest.mark.slow

SMALL = ["--task", "pos", "--synthetic-size", "200", "--no-progress"]
FINGERPRINTED = ("run", "truncated", "momentum", "typo", "cut", "no-run", "others", "no-last")  # run directories no case may change


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A finished run directory (and one trained with momentum on a corpus file), a copy of it with a truncated
    last.pt, one without last.pt, and bad corpora."""
    root = tmp_path_factory.mktemp("misuse")
    run = root / "run"
    done = run_py_session(*SMALL, "--steps", "20", "--eval-every", "10", "--out", str(run))
    assert done.returncode == 0, done.stdout + done.stderr
    tagged = write_tagged(root / "tagged.txt", 30, 0)
    (root / "renamed.txt").write_text(re.sub(r"(?<!\S)ta/", "tu/", tagged.read_text()))  # as many words, one other
    momentum = run_py_session("--task", "pos", "--train", str(tagged), "--no-progress", "--steps", "5", "--optimizer",
                              "msgd", "--out", str(root / "momentum"))
    assert momentum.returncode == 0, momentum.stdout + momentum.stderr
    truncated = root / "truncated"
    shutil.copytree(run, truncated)
    data = (truncated / "last.pt").read_bytes()
    (truncated / "last.pt").write_bytes(data[: len(data) // 3])
    shutil.copytree(run, root / "no-last")
    (root / "no-last" / "last.pt").unlink()
    config = (run / "config.json").read_text()
    for name, text in [("typo", config.replace('"lr": 0.1,', '"lr": 0.1,,', 1)), ("cut", config[:500]),
                       ("no-run", json.dumps({k: v for k, v in json.loads(config).items() if k != "run"}))]:
        shutil.copytree(run, root / name)  # a run whose config.json was damaged by hand or by a crash
        (root / name / "config.json").write_text(text)
    (root / "long.txt").write_text("the dog\n" + " ".join(["dog"] * 201) + "\n")  # one word over tag's bound
    metrics = (run / "metrics.jsonl").read_text()
    for name, data in [("soon", re.sub(r'"elapsed": [\d.]+', '"elapsed": "soon"', metrics, count=1).encode()),
                       ("no-records", b""), ("binary", (run / "last.pt").read_bytes()[:300])]:
        (root / name).mkdir()  # metrics.jsonl files `run.py plot` cannot draw
        (root / name / "metrics.jsonl").write_bytes(data)
    (root / "a-file").write_text("not a folder\n")
    (root / "others").mkdir()
    (root / "others" / "notes.md").write_text("a folder of someone else's files, not a run\n")
    (root / "mixed.txt").write_text("The/DT dog/NN barks/VBZ\nA/DT cat/NN\nsleeps\tVBZ\tx\n")
    (root / "bad.conllu").write_text(
        "# sent_id = 1\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\tNN\t_\tzero\troot\t_\t_\n\n")
    write_parallel(root / "nine", 9, 0)  # too few pairs for a held-out split
    (root / "good.conllu").write_text(
        "# sent_id = 1\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n\n")
    return root


@pytest.fixture(scope="module")
def forker():
    with RunPyForker() as forker:
        yield forker


CASES = [  # (name, argv with {root} for the fixture folder, exit status, the last stderr line as a regex)
    ("resume with another --preset", [*SMALL, "--preset", "paper", "--resume", "--out", "{root}/run"], 1,
     r"run\.py: error: {root}/run/last\.pt was written for a different model: 'word_embedding\.weight' has shape "
     r"\(9, 128\) in the checkpoint but \(9, 800\) in this model"),
    ("resume on other data", ["--task", "pos", "--synthetic-size", "300", "--no-progress", "--resume", "--out",
                              "{root}/run"], 1,
     r"run\.py: error: cannot resume {root}/run/last\.pt: it was trained on 200 batches, now there are 300 .*"),
    ("resume with another batch size", [*SMALL, "--batch-size", "2", "--resume", "--out", "{root}/run"], 1,
     r"run\.py: error: cannot resume {root}/run/last\.pt: it was trained on 200 batches, now there are 100 \(same "
     r"data, batch size and seed are needed\)"),
    ("resume with another vocabulary", ["--steps", "40", "--train", "{root}/renamed.txt", "--resume", "--out",
                                        "{root}/momentum"], 1,
     r"run\.py: error: --resume: {root}/momentum/vocab\.chars\.json differs from the one built from this command's "
     r"data and flags \(another --train, --format, --tag, --vocab-size or --seed\?\); the run is left as it was"),
    ("resume a run that has no last.pt", [*SMALL, "--steps", "40", "--resume", "--out", "{root}/no-last"], 1,
     r"run\.py: error: --resume {root}/no-last: holds a run \(model\.json, config\.json, metrics\.jsonl, best\.pt, "
     r"summary\.json\) but no last\.pt to continue it from \(killed before its first checkpoint, or last\.pt was "
     r"removed\), and starting it afresh would replace those files; choose another --out, or move them away to start "
     r"over here"),
    ("a new run on top of an old one", [*SMALL, "--steps", "5", "--out", "{root}/run"], 1,
     r"run\.py: error: --out {root}/run: already holds a run \(model\.json, config\.json, metrics\.jsonl, "
     r"last\.pt, best\.pt, summary\.json\); add --resume to continue it, or choose another --out"),
    ("--out names a file", [*SMALL, "--out", "{root}/a-file"], 1,
     r"run\.py: error: --out {root}/a-file: is a file, not a directory"),
    ("--out where no folder can be made", [*SMALL, "--steps", "5", "--out", "/proc/hogwild-run"], 1,
     r"run\.py: error: --out /proc/hogwild-run: cannot create it \(no such file or directory: /proc/hogwild-run\)"),
    ("--out a folder of other files", [*SMALL, "--steps", "5", "--out", "{root}/others"], 1,
     r"run\.py: error: --out {root}/others: holds other files \(notes\.md\) and no run; choose a new or empty --out"),
    ("--resume --out a folder of other files", [*SMALL, "--steps", "5", "--resume", "--out", "{root}/others"], 1,
     r"run\.py: error: --out {root}/others: holds other files \(notes\.md\) and no run; choose a new or empty --out"),
    ("truncated last.pt on --resume", [*SMALL, "--resume", "--out", "{root}/truncated"], 1,
     r"run\.py: error: {root}/truncated/last\.pt: cannot read the checkpoint \(truncated or not a checkpoint: .*\)"),
    ("a typo in config.json on --resume", [*SMALL, "--steps", "40", "--resume", "--out", "{root}/typo"], 2,
     r"run\.py: error: --resume {root}/typo/config\.json:\d+:15: not valid JSON: Expecting property name enclosed in "
     r"double quotes"),
    ("a truncated config.json on --resume", ["--steps", "40", "--resume", "--out", "{root}/cut"], 2,
     r"run\.py: error: --resume {root}/cut/config\.json:\d+:\d+: not valid JSON: \w.*"),
    ("config.json without its run section", ["--steps", "40", "--resume", "--out", "{root}/no-run"], 2,
     r"run\.py: error: --resume {root}/no-run/config\.json: has no 'run' section \(the options run\.py recorded, "
     r"which --resume continues\); restore it, or give the run's options with --config FILE"),
    ("plot: a record with a value that is not a number", ["plot", "{root}/soon", "--out", "{root}/p.png"], 1,
     r"run\.py plot: error: {root}/soon/metrics\.jsonl:1: 'elapsed' is 'soon', not a number"),
    ("plot: an empty metrics.jsonl", ["plot", "{root}/no-records", "--out", "{root}/p.png"], 1,
     r"run\.py plot: error: {root}/no-records/metrics\.jsonl: no training or evaluation record to plot \(the run "
     r"logged none yet\)"),
    ("plot: a binary metrics.jsonl", ["plot", "{root}/binary", "--out", "{root}/p.png"], 1,
     r"run\.py plot: error: {root}/binary/metrics\.jsonl: not a metrics file \(not UTF-8 text: byte \d+ is "
     r"0x[0-9a-f]{{2}}\)"),
    ("tag: a line over 200 words", ["tag", "--checkpoint", "{root}/run", "{root}/long.txt"], 1,
     r"run\.py tag: error: {root}/long\.txt:2: 201 words, more than the 200 a line may have; split long lines into "
     r"sentences"),
    ("unknown --encoding (train)", [*SMALL, "--encoding", "foo"], 2,
     r"run\.py: error: --encoding: unknown text encoding 'foo' \(e\.g\. utf-8, latin-1, cp1252\)"),
    ("unknown --encoding (tag)", ["tag", "--checkpoint", "{root}/run", "--encoding", "foo"], 2,
     r"run\.py tag: error: --encoding: unknown text encoding 'foo' .*"),
    ("unknown --encoding (translate)", ["translate", "--checkpoint", "{root}/run", "--encoding", "foo"], 2,
     r"run\.py translate: error: --encoding: unknown text encoding 'foo' .*"),
    ("--word-column on CoNLL-U", ["--task", "pos", "--train", "{root}/good.conllu", "--word-column", "3"], 1,
     r"run\.py: error: --word-column: {root}/good\.conllu: is CoNLL-U, whose columns are fixed: .*"),
    ("--tag-column on CoNLL-U", ["--task", "pos", "--train", "{root}/good.conllu", "--tag-column", "5"], 1,
     r"run\.py: error: --tag-column: {root}/good\.conllu: is CoNLL-U, whose columns are fixed: .*"),
    ("format not detected", ["--task", "pos", "--train", "{root}/mixed.txt"], 1,
     r"run\.py: error: --format: {root}/mixed\.txt:3: cannot detect the format: token 'sleeps' has no '/' as in "
     r"word/TAG .*give the format: conllu, conll or slash"),
    ("CoNLL-U parse error", ["--task", "pos", "--train", "{root}/bad.conllu"], 1,
     r"run\.py: error: {root}/bad\.conllu:3: CoNLL-U parse error: Failed parsing field 'head': .*"),
    ("eamsgd with plain sgd", [*SMALL, "--distributed", "eamsgd", "--optimizer", "sgd"], 2,
     r"run\.py: error: --optimizer: --distributed eamsgd needs a momentum optimizer \(msgd or nesterov\), got "
     r"'sgd'; use --distributed easgd for plain SGD"),
    ("more workers than memory", [*SMALL, "--workers", "4000", "--steps", "40", "--out", "{root}/run", "--resume"], 1,
     r"run\.py: error: --workers: 4000 workers need about \d+\.\d GiB of memory \(300 MiB per process .*\), but "
     r"\d+\.\d GiB is available \((MemAvailable|the memory cgroup limit of .*)\); about \d+ workers fit"),
    ("empty --separator", [*SMALL, "--separator", ""], 2,
     r"run\.py: error: --separator: must be a non-empty string without spaces, got ''"),
    ("negative --seed", [*SMALL, "--seed", "-1"], 2, r"run\.py: error: --seed: must be in \[0, 4294967295\], got -1"),
    ("--dev equal to --train", ["--task", "pos", "--train", "{root}/tagged.txt", "--dev", "{root}/./tagged.txt"], 2,
     r"run\.py: error: --dev: {root}/\./tagged\.txt is the same corpus as --train {root}/tagged\.txt: a held-out "
     r"set must not be trained on; give another --dev, or none for a seeded split of --train"),
    ("an NMT corpus too small to split", ["--task", "nmt", "--train", "{root}/nine", "--no-progress"], 1,
     r"run\.py: error: --dev: {root}/nine\.fr: 9 pairs: too few to hold out a 10% split \(at least 10 are "
     r"needed\); give a held-out corpus with --dev, or a larger --train"),
    ("resume a finished run", [*SMALL, "--steps", "20", "--resume", "--out", "{root}/run"], 1,
     r"run\.py: error: --steps 20: {root}/run/last\.pt is already at update 20, where --steps 20 stops the run: "
     r"nothing to train \(the run is left as it was\); give a larger --steps than 20 to continue it"),
    ("resume past a smaller --steps", [*SMALL, "--steps", "10", "--resume", "--out", "{root}/run"], 1,
     r"run\.py: error: --steps 10: {root}/run/last\.pt is already at update 20, where --steps 10 stops the run: "
     r"nothing to train \(the run is left as it was\); give a larger --steps than 20 to continue it"),
    ("resume with another --optimizer", [*SMALL, "--steps", "40", "--optimizer", "adam", "--lr", "0.5", "--resume",
                                         "--out", "{root}/run"], 1,
     r"run\.py: error: --optimizer adam: {root}/run/last\.pt holds the state of --optimizer sgd; resume with "
     r"--optimizer sgd \(a run keeps its optimizer\), or start a new run in another --out"),
    ("resume with momentum turned off", ["--steps", "40", "--optimizer", "msgd", "--momentum", "0", "--resume",
                                         "--out", "{root}/momentum"], 1,
     r"run\.py: error: --momentum 0\.0: {root}/momentum/last\.pt holds optimizer state \['momentum_buffer', "
     r"'step'\] per parameter, --optimizer msgd with these flags keeps \['step'\]; resume with the run's "
     r"--momentum \(0\.9\)"),
]


@pytest.mark.parametrize("name, argv, status, last_line", CASES, ids=[case[0] for case in CASES])
def test_bad_input_fails_cleanly_and_touches_nothing(world, forker, name, argv, status, last_line):
    before = {folder: fingerprint(world / folder) for folder in FINGERPRINTED}
    done = forker.run(*[arg.format(root=world) for arg in argv], timeout=240)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status, done.stdout + done.stderr
    assert lines and re.fullmatch(last_line.format(root=re.escape(str(world))), lines[-1]), done.stderr
    assert sum(1 for line in lines if "error:" in line) == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert done.leftover_processes == [] and done.leftover_shm == []
    assert {folder: fingerprint(world / folder) for folder in before} == before


def test_eamsgd_gets_the_momentum_optimizer_by_default(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "_train", lambda options: seen.setdefault("optimizer", options.resolved().optimizer) and 0)
    assert cli.main(["--distributed", "eamsgd"]) == 0 and seen["optimizer"] == "msgd"
    seen.clear()
    assert cli.main(["--distributed", "easgd"]) == 0 and seen["optimizer"] == "sgd"
