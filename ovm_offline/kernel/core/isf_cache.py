"""ISF files on disk: finding them, reading them (plain or compressed), and the cache.

Where ISFs are looked for: the repository's ``symbols/linux/`` (and ``symbols/``),
plus every directory the user passes (``--symbols DIR``); in each directory the
files ``*.json*`` in it and in its ``linux/`` subdirectory.

Parsing a raw ISF takes seconds (35 MB of JSON), so each one is turned once into a
compact cache file that loads lazily:

* Location: ``$OVM_CACHE_DIR/isf/`` if ``OVM_CACHE_DIR`` is set, else
  ``$XDG_CACHE_HOME/ovm-offline/isf/`` (``~/.cache/ovm-offline/isf/``).
* ``index-v{N}.json`` maps an ISF's absolute path to its size, mtime_ns, sha256 and
  banner, so choosing an ISF on a warm start costs one ``stat`` per candidate file.
* ``<sha256>-v{N}-<python tag>.isfc`` holds one ISF: a marshal header (banner, base types, the
  bucket table) and 4096 marshal buckets of user types, enums and symbols, keyed by crc32
  of the name.  A bucket maps each of its names to that definition's own marshal bytes, so
  looking up a name decodes one bucket's names (about 4 KB) and then only the definition
  asked for: a dump uses ~300 of the ~5000 definitions in the buckets it touches, and
  decoding all of them was 12 ms of its start.  Buckets are read by pread, not mapped, and
  left uncompressed (inflating them was 5 ms more).
* Invalidation: an index entry is trusted only while the ISF file's size and
  mtime_ns are unchanged; otherwise the file is hashed again.  A cache file is keyed
  by the ISF's sha256 and by the cache format version N (`CACHE_FORMAT`) in both its
  name and its header, so a changed ISF or a new format never reads a stale cache.
  A cache that fails to decode is rebuilt; the cache of an ISF file that changed is
  deleted, and files of other formats once no run has written them for a week (another
  version sharing the directory keeps its own).  Writes go to a temporary file and are
  renamed into place, so concurrent runs never see half a file.
* An unwritable cache directory only costs speed: the ISF is parsed in memory.
"""

from __future__ import annotations

import importlib
import json
import logging
import marshal
import os
import re
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...errors import SymbolError
from ...user_cache import atomic_write, cache_root

log = logging.getLogger("ovm_offline")

__all__ = [
    "CACHE_FORMAT",
    "CacheFile",
    "CacheReader",
    "DictReader",
    "IsfIndex",
    "atomic_write",
    "banner_release",
    "banner_text",
    "build_cache_blob",
    "cache_dir",
    "cache_file_name",
    "find_isf_files",
    "json_loads",
    "normalize_banner",
    "open_isf_bytes",
    "prune_old_formats",
    "repo_symbol_dir",
]


CACHE_FORMAT = 30  # 3: base type sizes and scalar members of size-0 structs checked; 4: member kinds; 5: inet members; 6: UTS and user namespace members; 7: iov_iter members; 8: members of untagged structs; 9: hrtimer clock bases; 10: dentry children and child mounts; 11: mounts of a mount namespace and their file systems' options; 12: tmpfs files, cgroup namespace roots; 13: a user namespace's parent; 14: runqueue's task, FPU's last CPU; 15: buckets of per-name marshal bytes, uncompressed; 16: locks, seccomp filters, tty queues, posix timers, nsfs; 17: enumerators by name, 5.10 members; 18: 7.x members; 19: PREEMPT_RT rw_semaphore, IP options; 20: inode access and modification times; 21: cgroup v2 files, network devices; 22: procfs roots and PID namespaces; 23: files in flight (scm_fp_list); 24: N_TTY read and echo rings; 25: task_struct.cpu (5.10); 26: ns_common.ns_type (6.18+); 27: inotify groups and marks; 28: fanotify groups and marks; 29: the timekeeper's sequence counter; 30: run queues, pid idrs, tasklist_lock (cross views)
_MAGIC = b"OVMISFC\x00"
_NBUCKETS = 4096
# Prefixes keep the three namespaces apart inside one set of buckets.
P_TYPE, P_ENUM, P_SYM, P_CONST = "t:", "e:", "s:", "c:"

_ISF_SUFFIXES = (".json", ".json.xz", ".json.gz", ".json.bz2")
# No real directory of symbol tables has more; the bound keeps a mistaken
# `--symbols /` from scanning a whole file system.
_MAX_ISF_FILES_PER_DIR = 10_000


def repo_symbol_dir() -> Path:
    """The repository's own ``symbols/`` directory (ISFs for the pinned guest kernels)."""
    return Path(__file__).resolve().parents[3] / "symbols"


def cache_dir() -> Path:
    """Directory of the ISF cache (see the module docstring)."""
    return Path(cache_root()) / "isf"


def banner_text(banner: bytes) -> str:
    """A banner as one printable line (for messages)."""
    return banner.split(b"\0", 1)[0].decode("latin-1").strip()


def banner_release(banner: bytes) -> str | None:
    """``uname -r`` from a banner: "Linux version 6.1.0-56-cloud-amd64 (...)" -> "6.1.0-56-cloud-amd64"."""
    m = re.match(rb"Linux version (\S+)", banner)
    return m.group(1).decode("latin-1") if m else None


def normalize_banner(banner: bytes) -> bytes:
    """The banner up to (not including) its terminating NUL."""
    return banner.split(b"\0", 1)[0]


# --------------------------------------------------------------------------- ISF files


def find_isf_files(symbol_dirs: Iterable[str | os.PathLike[str]] = (), include_default: bool = True) -> list[Path]:
    """ISF files in `symbol_dirs` (and the repository's symbols/ when include_default),
    each directory searched itself and in its ``linux/`` subdirectory; absolute, deduplicated."""
    dirs: list[Path] = [Path(d) for d in symbol_dirs]
    if include_default:
        dirs.append(repo_symbol_dir())
    seen: set[Path] = set()
    found: list[Path] = []
    for d in dirs:
        for sub in (d, d / "linux"):
            try:
                entries = sorted(os.scandir(sub), key=lambda e: e.name)
            except OSError:
                continue
            for n, e in enumerate(entries):
                if n >= _MAX_ISF_FILES_PER_DIR:
                    break
                if not e.name.endswith(_ISF_SUFFIXES):
                    continue
                try:
                    if not e.is_file():
                        continue
                    if e.stat().st_size > MAX_ISF_BYTES:
                        # sparse or not, never read: hashing it alone would take minutes
                        log.warning("%s is larger than %d MiB: not an ISF; ignored", e.path, MAX_ISF_BYTES >> 20)
                        continue
                except OSError:
                    continue
                p = Path(e.path).resolve()
                if p not in seen:
                    seen.add(p)
                    found.append(p)
    return found


#: the largest ISF text read (a distribution kernel's is 35-60 MB): a compressed file that
#: inflates beyond it is refused rather than inflated whole into memory
MAX_ISF_BYTES = 512 << 20
#: the decompressors of ISF files by suffix, imported only when a raw ISF is read: a run
#: with a warm cache reads none (start-up time, issue 12)
_OPENER_MODULES = {".xz": "lzma", ".gz": "gzip", ".bz2": "bz2"}


def open_isf_bytes(path: Path) -> bytes:
    """The decompressed JSON text of an ISF, at most MAX_ISF_BYTES of it."""
    import lzma

    module = _OPENER_MODULES.get(path.suffix)
    opener: Callable[..., Any] = importlib.import_module(module).open if module else open
    try:
        with opener(path, "rb") as f:
            data = f.read(MAX_ISF_BYTES + 1)
    except (OSError, lzma.LZMAError, EOFError, zlib.error, ValueError) as e:
        raise SymbolError(f"cannot read ISF {path}: {e}") from None
    if len(data) > MAX_ISF_BYTES:
        raise SymbolError(f"ISF {path} is larger than {MAX_ISF_BYTES >> 20} MiB of JSON: not a kernel's symbol table")
    return data


#: the keys of an ISF type reference ({"kind": "pointer", "subtype": {...}}, ...)
_TYPE_REF_KEYS = frozenset(("kind", "name", "count", "subtype", "bit_length", "bit_position", "type"))


def json_loads(data: bytes) -> Any:
    """A parsed ISF in which equal type references are one object: 15,000 distinct ones
    stand for millions, so the first parse of the 6.12 ISF peaks at about 250 MiB rather
    than 340 MiB, and is faster. Nothing edits a type reference in place."""
    shared: dict[tuple[Any, ...], dict[str, Any]] = {}

    def share_type_refs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if not (isinstance(obj.get("kind"), str) and obj.keys() <= _TYPE_REF_KEYS):
            return obj
        # nested references were shared first, so their identity stands for their value
        key = tuple((k, id(v) if isinstance(v, dict) else v) for k, v in pairs)
        try:
            return shared.setdefault(key, obj)
        except TypeError:  # an unhashable value (a list): not a reference dwarf2json writes
            return obj

    return json.loads(data, object_pairs_hook=share_type_refs)


def _banner_from_json_text(data: bytes) -> bytes | None:
    """linux_banner's constant_data, found without parsing the whole ISF: decode only
    the JSON object that follows the key."""
    m = re.search(rb'"linux_banner"\s*:\s*\{', data)
    if m is None:
        return None
    start = m.end() - 1
    # The object is small; a bounded slice keeps raw_decode from scanning 35 MB.
    chunk = data[start : start + 65536].decode("utf-8", "replace")
    try:
        obj, _ = json.JSONDecoder().raw_decode(chunk)
    except (ValueError, RecursionError):
        return None
    return _decode_constant(obj)


def _decode_constant(sym: Any) -> bytes | None:
    if not isinstance(sym, dict) or not isinstance(sym.get("constant_data"), str):
        return None
    try:
        import base64

        return normalize_banner(base64.b64decode(sym["constant_data"]))
    except (ValueError, TypeError):
        return None


def _sha256_file(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- the index


class IsfIndex:
    """path -> (size, mtime_ns, sha256, banner) for ISF files seen before."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.path = directory / f"index-v{CACHE_FORMAT}.json" if directory else None
        self.entries: dict[str, dict[str, Any]] = {}
        self.dirty = False
        if self.path is not None:
            try:
                data = json.loads(self.path.read_bytes())
                if isinstance(data, dict):
                    self.entries = {k: v for k, v in data.items() if isinstance(v, dict)}
            except (OSError, ValueError, RecursionError):
                pass

    def info(self, path: Path) -> tuple[str, bytes | None]:
        """(sha256, banner or None) of an ISF file, from the index when its stat matches."""
        try:
            st = path.stat()
        except OSError as exc:
            raise SymbolError(f"cannot read ISF {path}: {exc.strerror}") from None
        key = str(path)
        entry = self.entries.get(key)
        if (
            entry
            and entry.get("size") == st.st_size
            and entry.get("mtime_ns") == st.st_mtime_ns
            and isinstance(entry.get("sha256"), str)
        ):
            b = entry.get("banner")
            return entry["sha256"], (b.encode("latin-1") if isinstance(b, str) else None)
        sha = _sha256_file(path)
        banner = _banner_from_json_text(open_isf_bytes(path))
        old = entry.get("sha256") if entry else None
        if (
            old
            and old != sha
            and self.directory is not None
            and not any(v.get("sha256") == old for k, v in self.entries.items() if k != key)
        ):
            try:  # the file changed: its old cache is garbage now
                (self.directory / cache_file_name(old)).unlink()
            except OSError:
                pass
        self.entries[key] = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "sha256": sha,
            "banner": banner.decode("latin-1") if banner is not None else None,
        }
        self.dirty = True
        return sha, banner

    def save(self) -> None:
        if not self.dirty or self.path is None:
            return
        # Forget files that vanished so the index does not grow without bound.
        self.entries = {k: v for k, v in self.entries.items() if os.path.exists(k)}
        atomic_write(self.path, json.dumps(self.entries, indent=0, sort_keys=True).encode())
        self.dirty = False


# --------------------------------------------------------------------------- cache files


def cache_file_name(sha256: str) -> str:
    """Cache file of one ISF; marshal data is only guaranteed readable by the same
    Python, hence the implementation tag (e.g. cpython-311)."""
    return f"{sha256}-v{CACHE_FORMAT}-{sys.implementation.cache_tag}.isfc"


#: cache files of another format are deleted once unwritten this long: another ovm-offline
#: version that shares the directory and still runs keeps its own (deleting them at once made
#: two versions rebuild each other's caches on every run, parsing the ISF each time)
PRUNE_AFTER_SECONDS = 7 * 24 * 3600


def prune_old_formats(directory: Path) -> None:
    """Delete cache files of other formats that no run has written for PRUNE_AFTER_SECONDS."""
    ours = (f"-v{CACHE_FORMAT}-{sys.implementation.cache_tag}.isfc", f"index-v{CACHE_FORMAT}.json")
    now = time.time()
    for p in [*directory.glob("*.isfc"), *directory.glob("index-v*.json")]:
        if p.name.endswith(ours[0]) or p.name == ours[1]:
            continue
        try:
            if now - p.stat().st_mtime > PRUNE_AFTER_SECONDS:
                p.unlink()
        except OSError:
            pass


def _bucket_of(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogateescape")) % _NBUCKETS


def enumerators(isf: dict[str, Any]) -> dict[str, int | None]:
    """Every enumerator of the ISF's enums by its name alone: the way to the constants of
    anonymous enums (dwarf2json names them unnamed_<hash>). A name two enums give different
    values maps to None: it is ambiguous."""
    values: dict[str, int | None] = {}
    for enum in (isf.get("enums") or {}).values():
        for constant, value in ((enum or {}).get("constants") or {}).items():
            values[constant] = value if values.get(constant, value) == value else None
    return values


def build_cache_blob(isf: dict[str, Any], sha256: str, source_name: str) -> bytes:
    """Turn a parsed ISF into the bucketed cache format."""
    buckets: list[dict[str, Any]] = [{} for _ in range(_NBUCKETS)]

    def put(key: str, value: Any) -> None:
        buckets[_bucket_of(key)][key] = value

    for name, t in (isf.get("user_types") or {}).items():
        put(P_TYPE + name, t)
    for name, t in (isf.get("enums") or {}).items():
        put(P_ENUM + name, t)
    for constant, value in enumerators(isf).items():
        put(P_CONST + constant, value)
    banner = None
    for name, s in (isf.get("symbols") or {}).items():
        if not isinstance(s, dict):
            continue
        put(P_SYM + name, (s.get("address"), s.get("type")))
        if name == "linux_banner":
            banner = _decode_constant(s)
    blobs = [marshal.dumps({key: marshal.dumps(value) for key, value in b.items()}) for b in buckets]
    offsets = []
    pos = 0
    for b in blobs:
        offsets.append((pos, len(b)))
        pos += len(b)
    header = marshal.dumps(
        {
            "format": CACHE_FORMAT,
            "sha256": sha256,
            "source": source_name,
            "banner": banner,
            "metadata": isf.get("metadata"),
            "base_types": isf.get("base_types") or {},
            "buckets": offsets,
        }
    )
    return b"".join([_MAGIC, struct.pack("<I", len(header)), header, *blobs])


class CacheFile:
    """A cache file read a bucket at a time with pread: a dump reads ~140 of its 4096 buckets.
    Reading all of it took 5 ms; mapping it cost 8 MiB of RSS, each page fault bringing in the
    64 KiB around a bucket. Cache files are replaced by rename, never rewritten in place."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.size = os.fstat(self._fd).st_size

    def read(self, offset: int, length: int) -> bytes:
        # bounded first: a damaged length must not make pread allocate gigabytes
        if not 0 <= offset <= self.size - length:
            raise ValueError("cache file shorter than its bucket table says")
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise ValueError("truncated cache file")
        return data

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


class CacheReader:
    """Lazy access to one cache file, on disk or just built in memory."""

    def __init__(self, source: bytes | CacheFile, sha256: str) -> None:
        if isinstance(source, bytes):
            blob = source
            self._read: Callable[[int, int], bytes] = lambda offset, length: blob[offset : offset + length]
            size = len(blob)
        else:
            self._read, size = source.read, source.size
        if self._read(0, 8) != _MAGIC:
            raise ValueError("bad magic")
        (hlen,) = struct.unpack("<I", self._read(8, 4))
        header = marshal.loads(self._read(12, hlen))
        if header.get("format") != CACHE_FORMAT or header.get("sha256") != sha256:
            raise ValueError("stale cache")
        offsets = header["buckets"]
        if len(offsets) != _NBUCKETS or 12 + hlen + sum(offsets[-1]) != size:
            raise ValueError("bad bucket table")  # or a file cut short
        self.header: dict[str, Any] = header
        self._base = 12 + hlen
        self._offsets = offsets
        self._buckets: list[dict[str, bytes] | None] = [None] * _NBUCKETS
        self._values: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        if key in self._values:
            return self._values[key]
        i = _bucket_of(key)
        b = self._buckets[i]
        if b is None:
            off, length = self._offsets[i]
            b = marshal.loads(self._read(self._base + off, length))
            self._buckets[i] = b
        raw = b.get(key)
        value = self._values[key] = None if raw is None else marshal.loads(raw)
        return value


class DictReader:
    """Same interface as CacheReader over a parsed ISF (when there is no cache)."""

    def __init__(self, isf: dict[str, Any]) -> None:
        symbols = isf.get("symbols") or {}
        banner = _decode_constant(symbols.get("linux_banner"))
        self.header: dict[str, Any] = {
            "banner": banner,
            "metadata": isf.get("metadata"),
            "base_types": isf.get("base_types") or {},
        }
        self._isf = isf
        self._enumerators: dict[str, int | None] | None = None

    def get(self, key: str) -> Any:
        prefix, name = key[:2], key[2:]
        if prefix == P_TYPE:
            return (self._isf.get("user_types") or {}).get(name)
        if prefix == P_ENUM:
            return (self._isf.get("enums") or {}).get(name)
        if prefix == P_CONST:
            if self._enumerators is None:
                self._enumerators = enumerators(self._isf)
            return self._enumerators.get(name)
        s = (self._isf.get("symbols") or {}).get(name)
        return (s.get("address"), s.get("type")) if isinstance(s, dict) else None
