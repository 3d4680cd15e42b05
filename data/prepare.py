"""Get corpora into a folder the tasks read: download from official URLs with sha256 checks, or take local files.

Usage:
    python -m hogwild.data.prepare europarl --src fr --tgt en --out corpora/europarl-fr-en [--source PATH|URL] [--sha256 HEX]
    python -m hogwild.data.prepare ud --treebank UD_German-GSD --out corpora/ud-german-gsd [--source DIR|URL] [--code de_gsd]

Without ``--source`` the official location is used (statmt.org Europarl v7; the UD GitHub repositories); offline, pass
``--source`` a local folder (e.g. ../shared/corpora/europarl-fr-en) or a ``file://`` URL. Europarl archives are
unpacked, empty pairs dropped, and the last ``2 * --held-out`` pairs become dev and test. Every output is checked with
the project's readers; ``manifest.json`` records each file's sha256 and line/sentence count. Bad input prints one
``error: file:line: ...`` line and exits with status 1, without a traceback, and leaves ``--out`` as it was (what the
failed command wrote there is removed; a folder it created, too). A value that cannot be right (``--sha256`` that is
not 64 hex digits, ``--held-out -5``, the same language twice, an unknown treebank without ``--code``, an option the
source would ignore, an ``--out`` that holds another prepared corpus) is refused naming its flag, with status 2; flags
are spelled out in full. A local UD folder must hold the treebank's own files
(``<code>-ud-<split>.conllu``): another treebank's files are refused, naming the file and the treebank they belong to.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm

from .compressed import strip_compression
from .errors import CorpusError
from .parallel import read_parallel_lines
from .readers import read_tagged

EUROPARL_URL = "https://www.statmt.org/europarl/v7/{pair}.tgz"
UD_URL = "https://raw.githubusercontent.com/UniversalDependencies/{treebank}/master/{code}-ud-{split}.conllu"
UD_CODES = {"UD_German-GSD": "de_gsd", "UD_German-HDT": "de_hdt", "UD_German-LIT": "de_lit", "UD_German-PUD": "de_pud",
            "UD_French-GSD": "fr_gsd", "UD_English-EWT": "en_ewt", "UD_English-PUD": "en_pud", "UD_French-PUD": "fr_pud"}
UD_CODE = r"[a-z]{2,3}(?:_[a-z0-9]+)?"  # a UD file prefix: language code, treebank name (de_gsd)
UD_FILE = re.compile(rf"(?P<code>{UD_CODE})-ud-(?P<split>train|dev|test)\.conllu")  # UD's file names
UD_TREEBANK = re.compile(r"UD_[A-Z][A-Za-z_]*-[A-Za-z0-9]+")  # UD's repository names: UD_<Language>-<Name>
# Europarl v7 pairs English with each of these (statmt's archives are named <xx>-en.tgz)
EUROPARL_LANGUAGES = ("bg", "cs", "da", "de", "el", "es", "et", "fi", "fr", "hu", "it", "lt", "lv", "nl", "pl", "pt",
                      "ro", "sk", "sl", "sv")
# sha256 of official files, checked when downloaded. Could not be filled in from this offline machine: pass --sha256,
# or read the value printed and stored in manifest.json by a first trusted download and add it here.
KNOWN_SHA256: dict[str, str] = {}


class BadOption(ValueError):
    """A value that cannot be right whatever the files hold; the command line shows it as a usage error (status 2)."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"{flag}: {message}")
        self.flag = flag


class DownloadError(CorpusError):
    """A download that failed; ``http_status`` is the server's answer (404: no such file), None when unreachable."""

    def __init__(self, message: str, url: str, http_status: int | None = None):
        super().__init__(message, path=url)
        self.http_status = http_status


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: str | Path, sha256: str | None = None, timeout: float = 60.0) -> Path:
    """Fetch ``url`` (http, https or file) to ``dest`` through ``dest.part``; check ``sha256`` when given (else the
    known checksum of the URL, if any). A failed download or checksum mismatch raises CorpusError and leaves no file."""
    dest, expected = Path(dest), sha256 or KNOWN_SHA256.get(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=None, file=sys.stderr) as bar:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
    except (urllib.error.URLError, OSError, ValueError) as error:
        part.unlink(missing_ok=True)
        status = error.code if isinstance(error, urllib.error.HTTPError) else None
        raise DownloadError(f"download failed ({getattr(error, 'reason', error)}); offline? pass --source with a "
                            "local path", url, status) from None
    if expected and digest.hexdigest() != expected.lower():
        part.unlink(missing_ok=True)
        raise CorpusError(f"sha256 mismatch: expected {expected.lower()}, got {digest.hexdigest()}", path=url)
    part.replace(dest)
    return dest


@contextmanager
def _output_folder(out: Path) -> Iterator[Path]:
    """`out`, created if needed; on a failure inside, what this command added there is removed again (the folder
    too when it created it), so that a failed prepare leaves no partial corpus that looks prepared."""
    if out.exists() and not out.is_dir():
        raise CorpusError(f"--out {out}: is a file, not a folder (give a folder to write the corpus into)")
    created = not out.exists()
    before = set() if created else {path.name for path in out.iterdir()}
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield out
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for path in out.iterdir():
                if path.name not in before:
                    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        raise


def _check_not_another_corpus(out: Path, corpus: str) -> None:
    """A folder that holds another prepared corpus (its manifest.json names it) is not written into: the two corpora's
    files would mix (a POS --train folder is read whole), and the manifest would list the second one's alone."""
    try:
        held = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["corpus"]
    except (OSError, ValueError, TypeError, KeyError):
        return  # no manifest there (a new or a plain folder), or none written by prepare
    if held != corpus:
        raise BadOption("--out", f"{out} holds the prepared corpus {held} (its manifest.json): its files and "
                                 f"{corpus}'s would mix; give {corpus} a folder of its own")


def _is_url(source: str) -> bool:
    return urllib.parse.urlparse(source).scheme in ("http", "https", "file", "ftp")


def _write_manifest(out: Path, corpus: str, source: str, counts: dict[str, int], extra: dict | None = None) -> dict:
    files = {name: {"sha256": sha256_of(out / name), "count": count} for name, count in sorted(counts.items())}
    manifest = {"corpus": corpus, "source": source, "files": files, **(extra or {})}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


def prepare_europarl(src: str, tgt: str, out: str | Path, source: str | None = None, sha256: str | None = None,
                     held_out: int | None = None) -> dict:
    """Make ``out/{train,dev,test}.{src,tgt}`` (local folder: copied as they are, compressed or not; an archive: the
    last ``2 * held_out`` pairs, 3000 each by default, become dev and test)."""
    folder = source is not None and not _is_url(source) and Path(source).is_dir()
    _check_europarl(src, tgt, source, sha256, held_out, folder)
    out = Path(out)
    _check_not_another_corpus(out, f"europarl-{src}-{tgt}")
    out.mkdir(parents=True, exist_ok=True)
    pair = "-".join(sorted((src, tgt), key=lambda lang: lang == "en"))  # statmt names pairs "<xx>-en"
    source = source or EUROPARL_URL.format(pair=pair)
    held_out = 3000 if held_out is None else held_out
    if folder:
        counts = {}
        for split in ("train", "dev", "test"):
            try:
                src_lines, _, src_path, tgt_path = read_parallel_lines(Path(source) / split, src, tgt)
            except CorpusError:
                if split == "train":
                    raise
                continue
            for path in (src_path, tgt_path):
                shutil.copyfile(path, out / path.name)
                counts[path.name] = len(src_lines)
        return _write_manifest(out, f"europarl-{src}-{tgt}", str(source), counts)
    archive = Path(source) if not _is_url(source) else download(source, out / "downloads" / Path(
        urllib.parse.urlparse(source).path).name, sha256)
    if not _is_url(source) and sha256 and sha256_of(archive) != sha256.lower():
        raise CorpusError(f"sha256 mismatch: expected {sha256.lower()}, got {sha256_of(archive)}", path=archive)
    lines = _europarl_from_archive(archive, pair, (src, tgt))
    pairs = [(s, t) for s, t in zip(lines[src], lines[tgt]) if s.strip() and t.strip()]
    if len(pairs) <= 2 * held_out:
        raise CorpusError(f"only {len(pairs)} non-empty pairs: too few for --held-out {held_out} dev + test",
                          path=archive)
    cut = len(pairs) - 2 * held_out
    splits = {"train": pairs[:cut], "dev": pairs[cut:cut + held_out], "test": pairs[cut + held_out:]}
    counts = {}
    for split, rows in splits.items():
        for side, lang in enumerate((src, tgt)):
            (out / f"{split}.{lang}").write_text("".join(row[side] + "\n" for row in rows), encoding="utf-8")
            counts[f"{split}.{lang}"] = len(rows)
    return _write_manifest(out, f"europarl-{src}-{tgt}", source, counts,
                           {"archive_sha256": sha256_of(archive), "dropped_empty": len(lines[src]) - len(pairs)})


def _check_europarl(src: str, tgt: str, source: str | None, sha256: str | None, held_out: int | None,
                    folder: bool) -> None:
    for flag, lang in (("--src", src), ("--tgt", tgt)):
        if not re.fullmatch(r"[a-z]{2,3}", lang):
            raise BadOption(flag, f"expected a language code such as fr, got {lang!r}")
    if src == tgt:
        raise BadOption("--tgt", f"is the source language too ({src}): give two languages")
    _check_sha256(sha256, source, folder)
    if folder:
        if held_out is not None:
            raise BadOption("--held-out", f"cuts dev and test from an archive; --source {source} is a folder, whose "
                                          "dev and test files are copied as they are")
        return
    if held_out is not None and held_out < 1:
        raise BadOption("--held-out", f"must be at least 1 (pairs each for dev and test), got {held_out}")
    other = tgt if src == "en" else src
    if "en" not in (src, tgt) or other not in EUROPARL_LANGUAGES:
        raise BadOption("--src/--tgt", f"Europarl v7 pairs English with one of {', '.join(EUROPARL_LANGUAGES)}; "
                                       f"got {src}-{tgt} (a local folder of parallel files takes any pair)")


def _check_sha256(sha256: str | None, source: str | None, folder: bool) -> None:
    if sha256 is None:
        return
    if not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise BadOption("--sha256", f"expected 64 hexadecimal digits, got {sha256!r}")
    if folder:
        raise BadOption("--sha256", f"checks a download or an archive; --source {source} is a folder, copied as it is")


def _europarl_from_archive(archive: Path, pair: str, langs: tuple[str, str]) -> dict[str, list[str]]:
    try:
        with tarfile.open(archive) as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            lines = {}
            for lang in langs:
                name = f"europarl-v7.{pair}.{lang}"
                if name not in members:
                    raise CorpusError(f"archive has no {name} (members: {sorted(members)[:6]})", path=archive)
                text = tar.extractfile(members[name]).read()
                try:
                    lines[lang] = text.decode("utf-8").split("\n")
                except UnicodeDecodeError as error:
                    line = text[:error.start].count(b"\n") + 1
                    raise CorpusError(f"{name}: undecodable bytes as utf-8", path=archive, line=line) from None
    except (tarfile.TarError, OSError) as error:
        raise CorpusError(f"cannot read archive ({error})", path=archive) from None
    for lang in langs:  # a trailing newline leaves one empty last element
        if lines[lang] and lines[lang][-1] == "":
            lines[lang].pop()
    if len(lines[langs[0]]) != len(lines[langs[1]]):
        raise CorpusError(f"{len(lines[langs[0]])} {langs[0]} lines but {len(lines[langs[1]])} {langs[1]} lines",
                          path=archive)
    return lines


def prepare_ud(treebank: str, out: str | Path, source: str | None = None, code: str | None = None,
               sha256: str | None = None) -> dict:
    """Make ``out/<code>-ud-{train,dev,test}.conllu`` from a local folder or the treebank's GitHub repository
    (splits the repository lacks, e.g. PUD's train, are skipped; at least one must exist). ``code`` (the files'
    prefix, e.g. de_gsd) is needed for a treebank not in UD_CODES; a local folder must hold that treebank's files."""
    local = bool(source) and not _is_url(source)
    code = _ud_code(treebank, code)
    _check_sha256(sha256, source, local and Path(source).is_dir())
    out = Path(out)
    _check_not_another_corpus(out, treebank)
    files = _ud_files(Path(source), treebank, code) if local else None
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    if files is not None:
        if not any("-train." in p.name for p in files):
            print(f"note: {source} has no training split (*-train.conllu): only "
                  f"{', '.join(p.name for p in files)} copied", file=sys.stderr)
        for path in files:
            counts[path.name] = len(read_tagged(path, format="conllu"))  # an error names the source file
            shutil.copyfile(path, out / path.name)
    else:
        for split in ("train", "dev", "test"):
            url = (source.rstrip("/") + f"/{code}-ud-{split}.conllu") if source else \
                UD_URL.format(treebank=treebank, code=code, split=split)
            try:
                path = download(url, out / f"{code}-ud-{split}.conllu", sha256 if split == "test" else None)
            except DownloadError as error:
                if error.http_status != 404 and not url.startswith("file:"):
                    raise
                print(f"note: {split} not in the treebank ({error})", file=sys.stderr)
                continue
            counts[path.name] = len(read_tagged(path, format="conllu"))
        if not counts:
            raise CorpusError("no split of the treebank could be fetched", path=source or treebank)
    return _write_manifest(out, treebank, source or UD_URL.format(treebank=treebank, code=code, split="*"), counts)


def _ud_code(treebank: str, code: str | None) -> str:
    """The file prefix of `treebank`: UD_CODES' or the `code` given (which must agree with UD_CODES' if both)."""
    if not UD_TREEBANK.fullmatch(treebank):
        raise BadOption("--treebank", f"expected a UD repository name such as UD_German-GSD, got {treebank!r}")
    if code is not None and not re.fullmatch(UD_CODE, code):
        raise BadOption("--code", f"expected a UD file prefix such as de_gsd, got {code!r}")
    known = UD_CODES.get(treebank)
    if code is None and known is None:
        raise BadOption("--treebank", f"unknown treebank {treebank!r} (known: {', '.join(UD_CODES)}): to prepare "
                                      "another one, pass --code with its files' prefix (de_gsd for "
                                      "de_gsd-ud-train.conllu)")
    if code is not None and known is not None and code != known:
        raise BadOption("--code", f"{treebank}'s files are {known}-ud-<split>.conllu, not {code}-ud-<split>.conllu")
    return code or known


def _ud_files(source: Path, treebank: str, code: str) -> list[Path]:
    """The .conllu files of a local folder, each one of the treebank's: <code>-ud-<split>.conllu (compressed or not);
    another treebank's file is named with the treebank it belongs to, when known."""
    if not source.is_dir():
        raise CorpusError("no such folder (give --source a folder of .conllu files, or a URL)", path=source)
    files = sorted(p for p in source.glob("*.conllu*") if strip_compression(p.name).endswith(".conllu"))
    if not files:
        raise CorpusError("no .conllu files in folder", path=source)
    for path in files:
        name = UD_FILE.fullmatch(strip_compression(path.name))
        if not name or name["code"] != code:
            owner = next((bank for bank, known in UD_CODES.items() if name and known == name["code"]), None)
            whose = f": {owner}'s; give --treebank {owner}" if owner else ""
            raise CorpusError(f"not a file of {treebank}, whose files are {code}-ud-{{train,dev,test}}.conllu{whose}",
                              path=path)
    return files


def main(argv: list[str] | None = None) -> int:
    # flags spelled out in full (allow_abbrev off), as run.py's: a prefix such as --tree is an error
    parser = argparse.ArgumentParser(prog="python -m hogwild.data.prepare", description=__doc__.split("\n")[0],
                                     allow_abbrev=False)
    commands = parser.add_subparsers(dest="corpus", required=True)
    europarl = commands.add_parser("europarl", help="Europarl v7 parallel text", allow_abbrev=False)
    europarl.add_argument("--src", default="fr", help="source language code (default: %(default)s)")
    europarl.add_argument("--tgt", default="en", help="target language code (default: %(default)s)")
    europarl.add_argument("--held-out", type=int, default=None,
                          help="dev and test pairs each, cut from the end of an archive (default: 3000)")
    ud = commands.add_parser("ud", help="a Universal Dependencies treebank (CoNLL-U)", allow_abbrev=False)
    ud.add_argument("--treebank", required=True,
                    help=f"repository name, e.g. UD_German-GSD (known: {', '.join(UD_CODES)}; another needs --code)")
    ud.add_argument("--code", default=None, help="the files' prefix, such as de_gsd (default: the known treebank's)")
    for sub in (europarl, ud):
        sub.add_argument("--out", required=True, help="output folder")
        sub.add_argument("--source", default=None,
                         help="local folder/archive or URL (default: the official URL)")
        sub.add_argument("--sha256", default=None,
                         help="expected sha256 (64 hex digits) of the downloaded or local archive (UD: of the "
                              "downloaded test file)")
    args = parser.parse_args(argv)
    try:
        with _output_folder(Path(args.out)) as out:
            if args.corpus == "europarl":
                manifest = prepare_europarl(args.src, args.tgt, out, args.source, args.sha256, args.held_out)
            else:
                manifest = prepare_ud(args.treebank, out, args.source, args.code, args.sha256)
    except BadOption as error:
        (europarl if args.corpus == "europarl" else ud).error(str(error))  # exits with status 2
    except (CorpusError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for name, entry in manifest["files"].items():
        print(f"{name}\t{entry['count']}\tsha256 {entry['sha256']}")
    print(f"wrote {Path(args.out) / 'manifest.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
