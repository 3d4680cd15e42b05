"""prepare: downloads checked by sha256 (against file:// URLs), local sources, the options it refuses and the command
line's errors."""
import hashlib
import io
import json
import pathlib
import subprocess
import sys
import tarfile

import pytest

from hogwild.data.errors import CorpusError
from hogwild.data.prepare import BadOption, DownloadError, download, main, prepare_europarl, prepare_ud

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "data"
REPO = pathlib.Path(__file__).resolve().parents[2]


def make_archive(path, fr_lines, en_lines):
    with tarfile.open(path, "w:gz") as tar:
        for lang, lines in (("fr", fr_lines), ("en", en_lines)):
            body = ("\n".join(lines) + "\n").encode("utf-8")
            info = tarfile.TarInfo(f"training/europarl-v7.fr-en.{lang}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_download_file_url_with_checksum(tmp_path):
    source = tmp_path / "blob.bin"
    source.write_bytes(b"hogwild" * 1000)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    dest = download(source.as_uri(), tmp_path / "out" / "blob.bin", sha256=digest.upper())
    assert dest.read_bytes() == source.read_bytes()
    with pytest.raises(CorpusError, match=f"sha256 mismatch: expected {'0' * 64}, got {digest}"):
        download(source.as_uri(), tmp_path / "bad" / "blob.bin", sha256="0" * 64)
    assert list((tmp_path / "bad").iterdir()) == []  # neither the file nor its .part stays
    with pytest.raises(DownloadError, match="download failed") as error:
        download((tmp_path / "absent").as_uri(), tmp_path / "x")
    assert error.value.http_status is None


def test_europarl_from_archive_url(tmp_path):
    fr = [f"phrase {i}" for i in range(10)] + [""] + ["dernière"]
    en = [f"sentence {i}" for i in range(10)] + ["orphan"] + ["last"]
    digest = make_archive(tmp_path / "fr-en.tgz", fr, en)
    manifest = prepare_europarl("fr", "en", tmp_path / "out", (tmp_path / "fr-en.tgz").as_uri(), digest, held_out=2)
    out = tmp_path / "out"
    assert (out / "train.fr").read_text(encoding="utf-8").splitlines() == fr[:7]
    assert (out / "dev.en").read_text(encoding="utf-8").splitlines() == ["sentence 7", "sentence 8"]
    assert (out / "test.fr").read_text(encoding="utf-8").splitlines() == ["phrase 9", "dernière"]
    assert manifest["dropped_empty"] == 1 and manifest["archive_sha256"] == digest
    assert manifest["files"]["train.en"]["count"] == 7
    assert json.loads((out / "manifest.json").read_text())["files"]["test.en"]["sha256"] == \
        hashlib.sha256((out / "test.en").read_bytes()).hexdigest()
    with pytest.raises(CorpusError, match="sha256 mismatch"):
        prepare_europarl("fr", "en", tmp_path / "out2", (tmp_path / "fr-en.tgz").as_uri(), "f" * 64, held_out=2)
    with pytest.raises(CorpusError, match="too few for --held-out 6"):
        prepare_europarl("fr", "en", tmp_path / "out3", str(tmp_path / "fr-en.tgz"), held_out=6)


def test_europarl_archive_with_mismatched_sides(tmp_path):
    make_archive(tmp_path / "fr-en.tgz", ["a", "b", "c"], ["A", "B"])
    with pytest.raises(CorpusError, match="3 fr lines but 2 en lines"):
        prepare_europarl("fr", "en", tmp_path / "out", str(tmp_path / "fr-en.tgz"), held_out=1)


def test_europarl_local_folder(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for lang in ("fr", "en"):
        (source / f"train.{lang}").write_bytes((FIXTURES / f"tiny.{lang}").read_bytes())
    manifest = prepare_europarl("fr", "en", tmp_path / "out", str(source))
    assert sorted(manifest["files"]) == ["train.en", "train.fr"] and manifest["files"]["train.fr"]["count"] == 5
    assert (tmp_path / "out" / "train.fr").read_bytes() == (FIXTURES / "tiny.fr").read_bytes()


def test_ud_local_folder_and_file_url(tmp_path, capsys):
    source = tmp_path / "ud"
    source.mkdir()
    for split in ("dev", "test"):
        (source / f"xx_tiny-ud-{split}.conllu").write_bytes((FIXTURES / "tiny.conllu").read_bytes())
    manifest = prepare_ud("UD_Xx-Tiny", tmp_path / "out", str(source), code="xx_tiny")
    assert {name: entry["count"] for name, entry in manifest["files"].items()} == {
        "xx_tiny-ud-dev.conllu": 2, "xx_tiny-ud-test.conllu": 2}
    assert capsys.readouterr().err == (f"note: {source} has no training split (*-train.conllu): only "
                                       "xx_tiny-ud-dev.conllu, xx_tiny-ud-test.conllu copied\n")
    with pytest.raises(CorpusError, match=r"missing: no such folder \(give --source a folder of \.conllu files"):
        prepare_ud("UD_Xx-Tiny", tmp_path / "out4", str(tmp_path / "missing"), code="xx_tiny")
    by_url = prepare_ud("UD_Xx-Tiny", tmp_path / "out2", source.as_uri(), code="xx_tiny")  # no train file: skipped
    assert sorted(by_url["files"]) == ["xx_tiny-ud-dev.conllu", "xx_tiny-ud-test.conllu"]
    with pytest.raises(BadOption, match=r"--treebank: unknown treebank 'UD_Xx-Tiny' \(known: UD_German-GSD, .*\): to "
                                         r"prepare another one, pass --code with its files' prefix"):
        prepare_ud("UD_Xx-Tiny", tmp_path / "out3")


def test_ud_bad_file_names_file_and_line(tmp_path):
    source = tmp_path / "ud"
    source.mkdir()
    (source / "xx-ud-test.conllu").write_text("1\tDas\tder\tDET\n\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"xx-ud-test\.conllu:1: expected 10 tab-separated"):
        prepare_ud("UD_Xx-Tiny", tmp_path / "out", str(source), code="xx")


def test_main_returns_nonzero_with_one_line_message(tmp_path, capsys):
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.fr").write_text("a\nb\n", encoding="utf-8")
    (source / "train.en").write_text("A\n", encoding="utf-8")
    assert main(["europarl", "--out", str(tmp_path / "o"), "--source", str(source)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {source / 'train.en'}:2: train.fr has 2 lines but train.en has 1: the files are not " \
                  "line-aligned (train.en ends first)\n"


def test_command_line_as_documented(tmp_path):
    make_archive(tmp_path / "fr-en.tgz", [f"p {i}" for i in range(6)], [f"s {i}" for i in range(6)])
    command = [sys.executable, "-m", "hogwild.data.prepare", "europarl", "--src", "fr", "--tgt", "en", "--out",
               str(tmp_path / "out"), "--source", (tmp_path / "fr-en.tgz").as_uri(), "--held-out", "1"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "train.fr\t4\tsha256 " in done.stdout and (tmp_path / "out" / "manifest.json").is_file()
    bad = subprocess.run(command[:-4] + ["--source", str(tmp_path / "missing.tgz"), "--held-out", "1"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: ") and "missing.tgz" in bad.stderr


def test_a_failed_prepare_leaves_out_as_it_was(tmp_path):
    """A bad corpus after good files were written: a new --out folder is removed, an existing one keeps only what it
    held; --out naming a file is one line (it was a FileExistsError traceback)."""
    source = tmp_path / "ud"
    source.mkdir()
    (source / "aa-ud-dev.conllu").write_bytes((FIXTURES / "tiny.conllu").read_bytes())  # copied before the bad one
    (source / "aa-ud-train.conllu").write_text("1\tDas\tder\tDET\n\n", encoding="utf-8")
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine\n")
    (tmp_path / "a-file").write_text("x\n")
    for out, message in [
            (tmp_path / "new", f"{source / 'aa-ud-train.conllu'}:1: expected 10 tab-separated CoNLL-U columns, "
                               f"found 4"),
            (existing, f"{source / 'aa-ud-train.conllu'}:1: expected 10 tab-separated CoNLL-U columns, found 4"),
            (tmp_path / "a-file", f"--out {tmp_path / 'a-file'}: is a file, not a folder (give a folder to write the "
                                  f"corpus into)")]:
        done = subprocess.run([sys.executable, "-m", "hogwild.data.prepare", "ud", "--treebank", "UD_Aa-Tiny", "--code",
                               "aa", "--source", str(source), "--out", str(out)], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert (done.returncode, done.stderr) == (1, f"error: {message}\n")
    assert not (tmp_path / "new").exists()
    assert [path.name for path in existing.iterdir()] == ["notes.txt"]
    assert (tmp_path / "a-file").read_text() == "x\n"


def test_ud_refuses_another_treebanks_files(tmp_path, corpus):
    """The real German GSD files given as French GSD: refused naming the first file and the treebank it belongs to
    (UD names its files <code>-ud-<split>.conllu), nothing written; as German GSD they are prepared."""
    german = corpus("ud-german-gsd")
    with pytest.raises(CorpusError) as error:
        prepare_ud("UD_French-GSD", tmp_path / "fr", str(german))
    assert str(error.value) == (f"{german / 'de_gsd-ud-dev.conllu'}: not a file of UD_French-GSD, whose files are "
                                "fr_gsd-ud-{train,dev,test}.conllu: UD_German-GSD's; give --treebank UD_German-GSD")
    assert not (tmp_path / "fr").exists()
    manifest = prepare_ud("UD_German-GSD", tmp_path / "de", str(german))
    assert {name: entry["count"] for name, entry in manifest["files"].items()} == {
        "de_gsd-ud-dev.conllu": 799, "de_gsd-ud-test.conllu": 977}
    stray = tmp_path / "stray"  # a file of an unknown treebank among the right ones
    stray.mkdir()
    (stray / "de_gsd-ud-test.conllu").write_bytes((german / "de_gsd-ud-test.conllu").read_bytes())
    (stray / "notes.conllu").write_bytes((FIXTURES / "tiny.conllu").read_bytes())
    with pytest.raises(CorpusError, match=r"stray/notes\.conllu: not a file of UD_German-GSD, whose files are "
                                          r"de_gsd-ud-\{train,dev,test\}\.conllu$"):
        prepare_ud("UD_German-GSD", tmp_path / "de2", str(stray))


@pytest.mark.parametrize("flags, message", [
    (["ud", "--treebank", "UD_Klingon-X"], "--treebank: unknown treebank 'UD_Klingon-X' (known: UD_German-GSD, "),
    (["ud", "--treebank", "Klingon"], "--treebank: expected a UD repository name such as UD_German-GSD, got "
                                      "'Klingon'"),
    (["ud", "--treebank", "UD_German-GSD", "--code", "fr_gsd"], "--code: UD_German-GSD's files are "
                                                                 "de_gsd-ud-<split>.conllu, not fr_gsd-ud-<split>.conllu"),
    (["ud", "--treebank", "UD_German-GSD", "--sha256", "zz"], "--sha256: expected 64 hexadecimal digits, got 'zz'"),
    (["ud", "--treebank", "UD_German-GSD", "--sha256", "0" * 64, "--source", "{folder}"],
     "--sha256: checks a download or an archive; --source {folder} is a folder, copied as it is"),
    (["europarl", "--sha256", "zz"], "--sha256: expected 64 hexadecimal digits, got 'zz'"),
    (["europarl", "--held-out", "-5"], "--held-out: must be at least 1 (pairs each for dev and test), got -5"),
    (["europarl", "--held-out", "5", "--source", "{folder}"], "--held-out: cuts dev and test from an archive; "
                                                              "--source {folder} is a folder"),
    (["europarl", "--src", "fr", "--tgt", "fr"], "--tgt: is the source language too (fr): give two languages"),
    (["europarl", "--src", "fr", "--tgt", "de"], "--src/--tgt: Europarl v7 pairs English with one of bg, cs, "),
    (["europarl", "--src", "FR"], "--src: expected a language code such as fr, got 'FR'"),
])
def test_options_that_cannot_be_right_are_refused_naming_the_flag(tmp_path, capsys, flags, message):
    """Each: a usage error (status 2) on one line naming the flag, before any download, and no --out left behind."""
    folder = tmp_path / "folder"
    folder.mkdir()
    argv = [flag.replace("{folder}", str(folder)) for flag in flags] + ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"python -m hogwild.data.prepare {flags[0]}: error: {message.replace('{folder}', str(folder))}")
    assert not (tmp_path / "out").exists()


def test_out_holding_another_prepared_corpus_is_refused_and_the_same_one_is_prepared_again(tmp_path, capsys):
    """UD French GSD prepared into the folder of German GSD mixed the two treebanks' files there (a POS --train folder
    is read whole) and left a manifest of the French files alone."""
    for code in ("aa", "bb"):
        (tmp_path / code).mkdir()
        (tmp_path / code / f"{code}-ud-dev.conllu").write_bytes((FIXTURES / "tiny.conllu").read_bytes())
    out = tmp_path / "out"
    aa = ["ud", "--treebank", "UD_Aa-Tiny", "--code", "aa", "--source", str(tmp_path / "aa"), "--out", str(out)]
    assert main(aa) == 0
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    assert main(aa) == 0
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before  # the same corpus, again
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main(["ud", "--treebank", "UD_Bb-Tiny", "--code", "bb", "--source", str(tmp_path / "bb"), "--out", str(out)])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"python -m hogwild.data.prepare ud: error: --out: {out} holds the prepared corpus UD_Aa-Tiny (its "
        f"manifest.json): its files and UD_Bb-Tiny's would mix; give UD_Bb-Tiny a folder of its own")
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


@pytest.mark.parametrize("argv", [["ud", "--tree", "UD_German-GSD", "--out", "{out}"],
                                  ["europarl", "--held", "5", "--out", "{out}"]])
def test_flags_are_spelled_out_in_full(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as exit:
        main([arg.replace("{out}", str(tmp_path / "out")) for arg in argv])
    assert exit.value.code == 2
    assert argv[1] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
