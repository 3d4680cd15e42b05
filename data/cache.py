"""On-disk cache of tensorized corpora: numpy arrays + JSON metadata keyed by a hash of the inputs and settings.

Usage: ``cache = ArrayCache(); key = cache.key("nmt", files, settings); hit = cache.load(key)`` ... ``cache.store(key,
arrays, meta)``, or ``folder, meta, stored = cache.build(key, write)`` for an entry written file by file (streamed).
Location: ``$HOGWILD_CACHE``, default ``~/.cache/hogwild``.

The key hashes each input file's resolved path, device, inode, size, modification and change times (not its content:
hashing 65 MB would cost what the cache saves; a file edited in place and given its old size and mtime back, `sed -i`
then `touch -r`, has a new ctime) plus the settings dict (tokenizer, vocabulary and split options) and CACHE_VERSION.
An entry is a folder of ``<name>.npy`` files, ``meta.json`` (with each array's CRC-32) and optional extra files (e.g.
sentencepiece models), written to a temporary folder ``.<key>.*`` and renamed into place, so concurrent writers and
interrupted runs never leave half an entry; the writer holds a lock in that folder while it writes, and every load
removes the folders of writers that are gone (a preparation killed with kill -9). Its arrays load as read-only memory
maps (data/mapped.py), shared by every process that maps them, and are checked before they are trusted
(`check_entry`: each file read once, with plain reads: its CRC-32 against the one written, offsets that start at 0,
never decrease and end at the ids' length, ids below their vocabulary's size). An entry damaged anyway (a disk error,
a hand edit, a 0-byte or truncated array, zeros written over one, a plain file where its folder belongs, another
format's meta.json) is named in a warning, removed and rebuilt. Entries of an older CACHE_VERSION have other keys:
they are never read, and a build names them in one warning (delete them to reclaim their space). The cache is an
optimisation: a cache that cannot be written (a full disk, a read-only ``$HOGWILD_CACHE``) is named in one warning and
the run goes on from the corpus (a streamed build writes its arrays to a temporary folder instead).
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import numpy as np

from hogwild.share.scratch import make_scratch, release, remove_abandoned

from .mapped import open_array, scan_array

CACHE_VERSION = 3  # 3: each array's CRC-32 in meta.json; 2: arrays of the smallest id dtype, memory-mapped; 1: int64
T = TypeVar("T")


class CacheWarning(UserWarning):
    """A damaged cache entry was found (and is rebuilt), or the cache cannot be written (and is done without)."""


class DamagedArray(ValueError):
    """An entry's array whose content is not what was written, or not what its meaning allows; `path` names it."""

    def __init__(self, path: Path, message: str):
        super().__init__(message)
        self.path = path


def cache_root() -> Path:
    """``$HOGWILD_CACHE`` or ``~/.cache/hogwild``."""
    return Path(os.environ.get("HOGWILD_CACHE") or Path.home() / ".cache" / "hogwild")


def file_fingerprint(path: str | os.PathLike) -> list:
    """``[resolved path, device, inode, size, mtime_ns, ctime_ns]`` of a file: what the cache key depends on. The
    change time moves with every write and no tool can set it back, so an edit that restores size and mtime counts."""
    path = Path(path).resolve()
    stat = path.stat()
    return [str(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


class ArrayCache:
    """A folder of cache entries; ``enabled=False`` turns every load into a miss and every store into a no-op."""

    def __init__(self, root: str | os.PathLike | None = None, enabled: bool = True):
        self.root = Path(root) if root is not None else cache_root()
        self.enabled = enabled

    def key(self, kind: str, files: Sequence[str | os.PathLike], settings: dict) -> str:
        """``<kind>-<sha256 prefix>`` of the files' fingerprints and the JSON-serialisable settings."""
        payload = json.dumps({"version": CACHE_VERSION, "files": [file_fingerprint(f) for f in files],
                              "settings": settings}, sort_keys=True, default=str)
        return f"{kind}-{hashlib.sha256(payload.encode()).hexdigest()[:24]}"

    def path(self, key: str) -> Path:
        return self.root / key

    def load(self, key: str, build: Callable[[dict[str, np.ndarray], dict, Path], T] | None = None,
             bounds: Callable[[dict], tuple[dict[str, int], dict[str, str]]] | None = None) \
            -> tuple[dict[str, np.ndarray], dict, Path] | T | None:
        """``(arrays, meta, folder)`` of a complete entry (the arrays memory-mapped), or what ``build(arrays, meta,
        folder)`` makes of it; None for a miss. The arrays are checked first (`check_entry`; ``bounds(meta)`` gives
        its ``ids`` and ``offsets``, else their CRC-32 alone). A damaged entry (a file that cannot be read or fails
        the check, an array or a meta.json key that ``build`` cannot use) is warned about once, naming it, and
        removed: a miss, which the caller rebuilds and stores again."""
        folder = self.path(key)
        if not self.enabled:
            return None
        remove_abandoned(self.root, ".")  # the temporary folders of preparations killed half-way
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            warnings.warn(f"damaged cache entry {folder} (not a folder): rebuilding it", CacheWarning)
            self._discard(folder)
            return None
        if not (folder / "meta.json").is_file():
            return None
        reading = [folder / "meta.json"]
        try:
            arrays, meta = read_entry(folder, reading)
            reading = [folder]
            check_entry(folder, arrays, meta, *(bounds(meta) if bounds is not None else ({}, {})))
            return (arrays, meta, folder) if build is None else build(arrays, meta, folder)
        except DamagedArray as error:  # check_entry: a content that is not what was written, or cannot be right
            warnings.warn(f"damaged cache entry {error.path} ({error}): rebuilding it", CacheWarning)
            self._discard(folder)
            return None
        except (OSError, EOFError, ValueError, KeyError, IndexError, TypeError) as error:  # EOFError: a 0-byte .npy
            warnings.warn(f"damaged cache entry {reading[-1]} ({type(error).__name__}: {error}): rebuilding it",
                          CacheWarning)
            self._discard(folder)
            return None

    def _discard(self, folder: Path) -> None:
        """Move a damaged entry out of the way (one rename, so that no reader sees half of it), then delete it."""
        trash = folder.with_name(f".{folder.name}.damaged-{os.getpid()}")
        try:
            os.rename(folder, trash)
        except OSError:  # another process replaced or removed it first
            return
        if trash.is_dir() and not trash.is_symlink():
            shutil.rmtree(trash, ignore_errors=True)
        else:
            trash.unlink(missing_ok=True)

    def store(self, key: str, arrays: dict[str, np.ndarray], meta: dict,
              files: dict[str, str | os.PathLike] | None = None) -> Path | None:
        """Write an entry (arrays, meta and extra files copied under the given names); returns its folder, or None
        when the cache is off or cannot be written (a full disk, a read-only folder: warned about, naming it)."""
        if not self.enabled:
            return None

        def write(tmp: Path) -> dict:
            for name, array in arrays.items():
                np.save(tmp / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
            for name, source in (files or {}).items():
                shutil.copyfile(source, tmp / name)
            return meta
        try:
            return self._write(self.path(key), write)
        except OSError as error:
            self._unwritable(self.path(key), error)
            return None

    def build(self, key: str, write: Callable[[Path], dict], need: int = 0) -> tuple[Path, bool]:
        """A new entry written in place: ``write(folder)`` fills an empty folder with ``<name>.npy`` arrays and other
        files, then returns the meta; the folder is renamed into place (its .npy files are the entry's arrays; read
        them with ``read_entry(folder)``). Returns ``(folder, stored)``. A cache that is off gets a temporary folder
        instead, removed when this process exits (stored False); so does one that cannot be written, after one
        warning naming the entry, with ``write`` run again there. An OSError there (no room anywhere) is raised.
        need: bytes ``write`` takes at least; a cache with less room free is not tried (a full disk ran a whole
        preparation twice: until the disk filled, then again outside the cache)."""
        if self.enabled:
            self._note_older_entries()
            free = _free_bytes(self.root)
            try:
                if free is not None and free < need:
                    raise OSError(errno.ENOSPC, f"No space left on device for the about {need:,} bytes it needs")
                return self._write(self.path(key), write), True
            except OSError as error:
                self._unwritable(self.path(key), error)
        folder = Path(tempfile.mkdtemp(prefix=f"hogwild-{key}-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _fill(folder, write)
        return folder, False

    def _note_older_entries(self) -> None:
        """One warning naming the entries an older hogwild wrote (the __version__ that closes their meta.json is
        below CACHE_VERSION, or absent: format 1): they are never read, so their space is wasted until they are
        deleted."""
        older = []
        for meta in self.root.glob("*/meta.json"):
            try:
                with open(meta, "rb") as file:
                    file.seek(max(0, meta.stat().st_size - 64))
                    version = re.search(rb'"__version__": (\d+)}$', file.read())
                    if version is None or int(version.group(1)) < CACHE_VERSION:
                        older.append(meta.parent)
            except OSError:
                continue
        if older:
            size = sum(path.stat().st_size for folder in older for path in folder.iterdir() if path.is_file())
            names = ", ".join(folder.name for folder in sorted(older)[:3]) + (", ..." if len(older) > 3 else "")
            warnings.warn(f"{len(older)} cache entries under {self.root} are of an older format ({size / 2**20:,.0f} "
                          f"MiB), which this version never reads: delete them to free the space ({names})",
                          CacheWarning)

    def _unwritable(self, folder: Path, error: OSError) -> None:
        reason = error.strerror or str(error)
        if error.errno in (None, errno.ENOSPC):  # numpy's short write ("N requested and M written") has none
            try:
                reason += f"; {shutil.disk_usage(self.root).free:,} bytes free there"
            except OSError:
                pass
        warnings.warn(f"cannot write the cache entry {folder} ({reason}): training from the corpus without "
                      f"caching it (set HOGWILD_CACHE to a writable folder to cache it)", CacheWarning)

    def _write(self, folder: Path, write: Callable[[Path], dict]) -> Path:
        if self.root.exists() and not self.root.is_dir():  # mkdir would say "File exists"
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(self.root))
        self.root.mkdir(parents=True, exist_ok=True)
        key = folder.name
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            self._discard(folder)  # a plain file where the entry belongs: a broken entry, rebuilt
        tmp = Path(make_scratch(f".{key}.", self.root))  # locked: a later load removes it if this process dies
        try:
            _fill(tmp, write)
            release(str(tmp))
            try:
                os.rename(tmp, folder)
            except OSError:  # another process stored the same entry first: keep theirs
                if not (folder / "meta.json").is_file():
                    shutil.rmtree(folder, ignore_errors=True)
                    os.rename(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            release(str(tmp))
        return folder


def _free_bytes(root: Path) -> int | None:
    """Bytes free on the disk of root (or of its nearest folder that exists); None when that cannot be told."""
    for folder in (root, *root.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def _fill(folder: Path, write: Callable[[Path], dict]) -> None:
    """Run ``write(folder)`` and add meta.json: its meta, the .npy arrays it wrote, their CRC-32 and CACHE_VERSION."""
    meta = write(folder)
    arrays = sorted(path.name[:-len(".npy")] for path in folder.glob("*.npy"))
    crc32 = {name: scan_array(open_array(folder / f"{name}.npy")).crc32 for name in arrays}
    meta = dict(meta, __arrays__=arrays, __crc32__=crc32, __version__=CACHE_VERSION)
    (folder / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")


def read_entry(folder: Path, reading: list[Path] | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """``(arrays, meta)`` of an entry's folder, the arrays memory-mapped (nothing read but meta.json and the
    headers). An entry of another CACHE_VERSION is a ValueError. ``reading`` gets each file as it is opened (to
    name the one that failed)."""
    reading = [] if reading is None else reading
    reading.append(folder / "meta.json")
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    if meta.get("__version__") != CACHE_VERSION:
        raise ValueError(f"cache format {meta.get('__version__', 1)}, not {CACHE_VERSION}")
    arrays = {}
    for name in meta["__arrays__"]:
        reading.append(folder / f"{name}.npy")
        arrays[name] = open_array(reading[-1])
    return arrays, meta


def check_entry(folder: Path, arrays: dict[str, np.ndarray], meta: dict, ids: dict[str, int],
                offsets: dict[str, str]) -> None:
    """Whether an entry's arrays can be trusted, each file read once (data/mapped.py's scan_array): its CRC-32 is the
    one written when it was prepared; ``ids[name]``: every id of that array is below that vocabulary size;
    ``offsets[name]``: that offsets array starts at 0, never decreases and ends at the length of the ids array it
    names. Raises DamagedArray naming the file (ArrayCache.load then warns and rebuilds the entry)."""
    written = meta.get("__crc32__", {})
    scans = {name: scan_array(array) for name, array in arrays.items()}
    for name, scan in scans.items():  # what cannot be right first: it says more than a checksum
        if name in ids and scan.high is not None and (scan.high >= ids[name] or scan.low < 0):
            bad = scan.high if scan.high >= ids[name] else scan.low
            raise DamagedArray(folder / f"{name}.npy", f"id {bad} where the vocabulary has {ids[name]:,} ids")
        if name in offsets:
            end = len(arrays[offsets[name]])
            if not len(arrays[name]) or scan.first != 0 or scan.last != end or not scan.ordered:
                raise DamagedArray(folder / f"{name}.npy", f"offsets that do not run from 0 up to {end:,} (the length "
                                                           f"of {offsets[name]}.npy) without decreasing")
    for name, scan in scans.items():
        if scan.crc32 != written.get(name):
            raise DamagedArray(folder / f"{name}.npy", f"its CRC-32 is {scan.crc32:#010x}, not the "
                                                       f"{written.get(name, 0):#010x} written when it was prepared: "
                                                       f"the file changed since")
