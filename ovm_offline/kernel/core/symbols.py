"""Symbol tables (Volatility 3 ISF files) for guest kernels: finding, loading, caching.

An ISF is the JSON that ``dwarf2json linux --elf vmlinux`` writes from a vmlinux with
debug info (Debian: the ``linux-image-<release>-dbg`` package).  It may be plain
``.json`` or compressed ``.json.xz`` / ``.json.gz`` / ``.json.bz2``.  The right ISF
for a guest is the one whose ``linux_banner`` (kept as base64 ``constant_data`` in
``symbols``) equals the banner in guest memory, byte for byte.

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
  bucket table) and 4096 zlib-compressed marshal buckets of user types, enums and
  symbols, keyed by crc32 of the name.  Looking up a name decodes one bucket
  (about 7 KB), so a warm start decodes only what it uses.
* Invalidation: an index entry is trusted only while the ISF file's size and
  mtime_ns are unchanged; otherwise the file is hashed again.  A cache file is keyed
  by the ISF's sha256 and by the cache format version N (`CACHE_FORMAT`) in both its
  name and its header, so a changed ISF or a new format never reads a stale cache.
  A cache that fails to decode is rebuilt; the cache of an ISF file that changed,
  and files of other formats, are deleted.  Writes go to a temporary file and are
  renamed into place, so concurrent runs never see half a file.
* An unwritable cache directory only costs speed: the ISF is parsed in memory.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import hashlib
import json
import lzma
import marshal
import os
import re
import struct
import sys
import tempfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import SymbolError
from .ktypes import (
    ArrayType,
    BitfieldType,
    EnumType,
    FloatType,
    FunctionType,
    IntType,
    PointerType,
    StructType,
    Type,
    VoidType,
    unqualified,
)

CACHE_FORMAT = 2
_MAGIC = b"OVMISFC\x00"
_NBUCKETS = 4096
# Prefixes keep the three namespaces apart inside one set of buckets.
_P_TYPE, _P_ENUM, _P_SYM = "t:", "e:", "s:"

_ISF_SUFFIXES = (".json", ".json.xz", ".json.gz", ".json.bz2")
# No real directory of symbol tables has more; the bound keeps a mistaken
# `--symbols /` from scanning a whole file system.
_MAX_ISF_FILES_PER_DIR = 10_000

HOW_TO_MAKE_ISF = (
    "make one with `dwarf2json linux --elf vmlinux-with-debuginfo > FILE.json` "
    "(the vmlinux from the distro's -dbg package, e.g. linux-image-<release>-dbg) "
    "and pass its directory with --symbols DIR"
)


def repo_symbol_dir() -> Path:
    """The repository's own ``symbols/`` directory (ISFs for the pinned guest kernels)."""
    return Path(__file__).resolve().parents[3] / "symbols"


def cache_dir() -> Path:
    """Directory of the ISF cache (see the module docstring)."""
    root = os.environ.get("OVM_CACHE_DIR")
    if root:
        return Path(root) / "isf"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "ovm-offline" / "isf"


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
                except OSError:
                    continue
                p = Path(e.path).resolve()
                if p not in seen:
                    seen.add(p)
                    found.append(p)
    return found


def _open_isf_bytes(path: Path) -> bytes:
    """The decompressed JSON text of an ISF."""
    name = path.name
    try:
        if name.endswith(".xz"):
            with lzma.open(path) as f:
                return f.read()
        if name.endswith(".gz"):
            with gzip.open(path) as f:
                return f.read()
        if name.endswith(".bz2"):
            with bz2.open(path) as f:
                return f.read()
        return path.read_bytes()
    except (OSError, lzma.LZMAError, EOFError, zlib.error, ValueError) as e:
        raise SymbolError(f"cannot read ISF {path}: {e}") from None


def _json_loads(data: bytes) -> Any:
    try:
        import orjson  # optional; about 20% faster on 35 MB
    except ImportError:
        return json.loads(data)
    return orjson.loads(data)


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
    except ValueError:
        return None
    return _decode_constant(obj)


def _decode_constant(sym: Any) -> bytes | None:
    if not isinstance(sym, dict) or not isinstance(sym.get("constant_data"), str):
        return None
    try:
        return normalize_banner(base64.b64decode(sym["constant_data"]))
    except (ValueError, TypeError):
        return None


def _sha256_file(path: Path) -> str:
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
            except (OSError, ValueError):
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
        banner = _banner_from_json_text(_open_isf_bytes(path))
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
        _atomic_write(self.path, json.dumps(self.entries, indent=0, sort_keys=True).encode())
        self.dirty = False


def _atomic_write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass  # an unwritable cache only costs speed


# --------------------------------------------------------------------------- cache files


def cache_file_name(sha256: str) -> str:
    """Cache file of one ISF; marshal data is only guaranteed readable by the same
    Python, hence the implementation tag (e.g. cpython-311)."""
    return f"{sha256}-v{CACHE_FORMAT}-{sys.implementation.cache_tag}.isfc"


def _prune_old_formats(directory: Path) -> None:
    """Delete cache files of other formats (they would never be read again)."""
    try:
        for p in directory.glob("*.isfc"):
            if not p.name.endswith(f"-v{CACHE_FORMAT}-{sys.implementation.cache_tag}.isfc"):
                p.unlink()
        for p in directory.glob("index-v*.json"):
            if p.name != f"index-v{CACHE_FORMAT}.json":
                p.unlink()
    except OSError:
        pass


def _bucket_of(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogateescape")) % _NBUCKETS


def _build_cache_blob(isf: dict[str, Any], sha256: str, source_name: str) -> bytes:
    """Turn a parsed ISF into the bucketed cache format."""
    buckets: list[dict[str, Any]] = [{} for _ in range(_NBUCKETS)]

    def put(key: str, value: Any) -> None:
        buckets[_bucket_of(key)][key] = value

    for name, t in (isf.get("user_types") or {}).items():
        put(_P_TYPE + name, t)
    for name, t in (isf.get("enums") or {}).items():
        put(_P_ENUM + name, t)
    banner = None
    for name, s in (isf.get("symbols") or {}).items():
        if not isinstance(s, dict):
            continue
        put(_P_SYM + name, (s.get("address"), s.get("type")))
        if name == "linux_banner":
            banner = _decode_constant(s)
    blobs = [zlib.compress(marshal.dumps(b), 1) for b in buckets]
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


class _CacheReader:
    """Lazy access to one cache file held in memory (a few MB compressed)."""

    def __init__(self, blob: bytes, sha256: str) -> None:
        if blob[:8] != _MAGIC:
            raise ValueError("bad magic")
        (hlen,) = struct.unpack_from("<I", blob, 8)
        header = marshal.loads(blob[12 : 12 + hlen])
        if header.get("format") != CACHE_FORMAT or header.get("sha256") != sha256:
            raise ValueError("stale cache")
        offsets = header["buckets"]
        if len(offsets) != _NBUCKETS:
            raise ValueError("bad bucket table")
        self.header: dict[str, Any] = header
        self._blob = blob
        self._base = 12 + hlen
        self._offsets = offsets
        self._buckets: list[dict[str, Any] | None] = [None] * _NBUCKETS

    def get(self, key: str) -> Any:
        i = _bucket_of(key)
        b = self._buckets[i]
        if b is None:
            off, length = self._offsets[i]
            start = self._base + off
            b = marshal.loads(zlib.decompress(self._blob[start : start + length]))
            self._buckets[i] = b
        return b.get(key)


class _DictReader:
    """Same interface as _CacheReader over a parsed ISF (when there is no cache)."""

    def __init__(self, isf: dict[str, Any]) -> None:
        symbols = isf.get("symbols") or {}
        banner = _decode_constant(symbols.get("linux_banner"))
        self.header: dict[str, Any] = {
            "banner": banner,
            "metadata": isf.get("metadata"),
            "base_types": isf.get("base_types") or {},
        }
        self._isf = isf

    def get(self, key: str) -> Any:
        prefix, name = key[:2], key[2:]
        if prefix == _P_TYPE:
            return (self._isf.get("user_types") or {}).get(name)
        if prefix == _P_ENUM:
            return (self._isf.get("enums") or {}).get(name)
        s = (self._isf.get("symbols") or {}).get(name)
        return (s.get("address"), s.get("type")) if isinstance(s, dict) else None


# --------------------------------------------------------------------------- SymbolTable


class SymbolTable:
    """Types and symbols of one kernel build, from one ISF.

    Addresses are link-time (before KASLR); `ovm_offline.kernel.core.memory.Program`
    adds the KASLR offset.
    """

    def __init__(self, reader: _CacheReader | _DictReader, path: Path | None) -> None:
        self._r = reader
        self.path = path
        self.banner: bytes | None = reader.header.get("banner")
        self._base_defs: dict[str, Any] = reader.header.get("base_types") or {}
        self._named: dict[tuple[str, str], Type] = {}
        self._syms: dict[str, tuple[int, Type | None] | None] = {}

    def __repr__(self) -> str:
        return f"SymbolTable({self.path}, {banner_text(self.banner or b'?')!r})"

    @property
    def name(self) -> str:
        return self.path.name if self.path else "<ISF>"

    # ----- raw definitions (TypeSource protocol)
    def user_type_def(self, name: str) -> dict[str, Any] | None:
        d = self._r.get(_P_TYPE + name)
        return d if isinstance(d, dict) else None

    def enum_def(self, name: str) -> dict[str, Any] | None:
        d = self._r.get(_P_ENUM + name)
        return d if isinstance(d, dict) else None

    def base_type_def(self, name: str) -> dict[str, Any] | None:
        d = self._base_defs.get(name)
        return d if isinstance(d, dict) else None

    # ----- types
    def resolve(self, ref: dict[str, Any]) -> Type:
        """Turn an ISF type reference into a Type."""
        if not isinstance(ref, dict):
            raise SymbolError(f"{self.name}: malformed type reference {ref!r}")
        kind = ref.get("kind")
        if kind == "pointer":
            return PointerType(self, ref.get("subtype"))
        if kind == "array":
            sub = ref.get("subtype")
            return ArrayType(self.resolve(sub) if sub else VoidType(), int(ref.get("count") or 0))
        if kind == "bitfield":
            return BitfieldType(
                self.resolve(ref.get("type") or {}), int(ref.get("bit_position", 0)), int(ref.get("bit_length", 0))
            )
        if kind == "function":
            return FunctionType()
        name = ref.get("name")
        if not isinstance(name, str):
            raise SymbolError(f"{self.name}: type reference without a name: {ref!r}")
        if kind in ("struct", "union", "class"):
            return self.struct_type(name)
        if kind == "enum":
            return self.enum_type(name)
        if kind == "base":
            return self.base_type(name)
        raise SymbolError(f"{self.name}: unknown type kind {kind!r}")

    def struct_type(self, name: str) -> StructType:
        key = ("struct", name)
        t = self._named.get(key)
        if t is None:
            d = self.user_type_def(name)
            if d is None:
                raise SymbolError(f"{self.name} has no struct/union {name!r}")
            t = StructType(name, str(d.get("kind", "struct")), int(d.get("size", 0)), d.get("fields") or {}, self)
            self._named[key] = t
        assert isinstance(t, StructType)
        return t

    def enum_type(self, name: str) -> EnumType:
        key = ("enum", name)
        t = self._named.get(key)
        if t is None:
            d = self.enum_def(name)
            if d is None:
                raise SymbolError(f"{self.name} has no enum {name!r}")
            base = self.base_type_def(str(d.get("base", "int"))) or {}
            t = EnumType(
                name,
                int(d.get("size", 4)),
                bool(base.get("signed", True)),
                {k: int(v) for k, v in (d.get("constants") or {}).items()},
            )
            self._named[key] = t
        assert isinstance(t, EnumType)
        return t

    def base_type(self, name: str) -> Type:
        key = ("base", name)
        t = self._named.get(key)
        if t is None:
            d = self.base_type_def(name)
            if d is None:
                raise SymbolError(f"{self.name} has no base type {name!r}")
            kind = d.get("kind")
            size = int(d.get("size", 0))
            if kind == "void":
                t = VoidType()
            elif kind == "float":
                t = FloatType(name, size)
            else:  # int, char, bool
                t = IntType(name, size, bool(d.get("signed", False)), is_bool=(kind == "bool"))
            self._named[key] = t
        return t

    def type(self, name: str) -> Type:
        """A type by C-ish name: "struct task_struct", "task_struct", "unsigned int",
        "enum pid_type", or any of these followed by " *"."""
        name = name.strip()
        if name.endswith("*"):
            return PointerType(None, None, self.type(name[:-1]))
        bare, kw = unqualified(name)
        if kw == "enum":
            return self.enum_type(bare)
        if kw in ("struct", "union", "class"):
            return self.struct_type(bare)
        if bare in self._base_defs:
            return self.base_type(bare)
        if self.user_type_def(bare) is not None:
            return self.struct_type(bare)
        if self.enum_def(bare) is not None:
            return self.enum_type(bare)
        raise SymbolError(f"{self.name} has no type {name!r}")

    def has_type(self, name: str) -> bool:
        try:
            self.type(name)
            return True
        except SymbolError:
            return False

    def enum_value(self, enum: str, constant: str, default: int | None = None) -> int:
        """The value of an enum constant (e.g. pid_type, PIDTYPE_PGID)."""
        try:
            return self.enum_type(enum).constants[constant]
        except (SymbolError, KeyError):
            if default is not None:
                return default
            raise SymbolError(f"{self.name} has no constant {enum}.{constant}") from None

    # ----- symbols
    def _sym(self, name: str) -> tuple[int, Type | None] | None:
        if name in self._syms:
            return self._syms[name]
        v = self._r.get(_P_SYM + name)
        res: tuple[int, Type | None] | None = None
        if isinstance(v, (tuple, list)) and len(v) == 2 and isinstance(v[0], int):
            t = self.resolve(v[1]) if isinstance(v[1], dict) else None
            res = (v[0], t)
        self._syms[name] = res
        return res

    def has_symbol(self, name: str) -> bool:
        return self._sym(name) is not None

    def symbol_address(self, name: str) -> int:
        """Link-time address of a symbol."""
        s = self._sym(name)
        if s is None:
            raise SymbolError(f"{self.name} has no symbol {name!r}")
        return s[0]

    def symbol_type(self, name: str) -> Type | None:
        s = self._sym(name)
        if s is None:
            raise SymbolError(f"{self.name} has no symbol {name!r}")
        return s[1]


# --------------------------------------------------------------------------- loading


def load_isf(path: str | os.PathLike[str], *, use_cache: bool = True, index: IsfIndex | None = None) -> SymbolTable:
    """Load one ISF file, through the on-disk cache when possible."""
    path = Path(path).resolve()
    cdir = cache_dir() if use_cache else None
    own_index = index is None
    if index is None:
        index = IsfIndex(cdir)
    sha, _banner = index.info(path)
    if own_index:
        index.save()
    if cdir is not None:
        cpath = cdir / cache_file_name(sha)
        try:
            blob = cpath.read_bytes()
            return SymbolTable(_CacheReader(blob, sha), path)
        except (OSError, ValueError, EOFError, TypeError, KeyError, zlib.error, struct.error):
            pass  # missing or unusable: rebuild below
    isf = _parse_isf(path)
    if cdir is not None:
        blob = _build_cache_blob(isf, sha, path.name)
        _prune_old_formats(cdir)
        _atomic_write(cdir / cache_file_name(sha), blob)
        try:
            return SymbolTable(_CacheReader(blob, sha), path)
        except (ValueError, EOFError, TypeError, KeyError, zlib.error, struct.error):
            pass
    return SymbolTable(_DictReader(isf), path)


def _parse_isf(path: Path) -> dict[str, Any]:
    try:
        isf = _json_loads(_open_isf_bytes(path))
    except ValueError as e:
        raise SymbolError(f"ISF {path} is not valid JSON: {e}") from None
    if (
        not isinstance(isf, dict)
        or not isinstance(isf.get("symbols"), dict)
        or not isinstance(isf.get("user_types"), dict)
    ):
        raise SymbolError(f"ISF {path} lacks symbols/user_types: not a Volatility 3 ISF")
    return isf


def isf_banners(
    symbol_dirs: Iterable[str | os.PathLike[str]] = (), include_default: bool = True, *, use_cache: bool = True
) -> list[tuple[Path, bytes | None]]:
    """(path, banner) of every ISF found (see find_isf_files)."""
    files = find_isf_files(symbol_dirs, include_default)
    index = IsfIndex(cache_dir() if use_cache else None)
    out: list[tuple[Path, bytes | None]] = []
    for p in files:
        try:
            _sha, banner = index.info(p)
        except SymbolError:
            continue  # an unreadable file among many is not this guest's problem
        out.append((p, banner))
    index.save()
    return out


def missing_isf_error(guest_banner: bytes | str | None, searched: Iterable[Path] = ()) -> SymbolError:
    """The one-line error for "no ISF matches this guest"."""
    if isinstance(guest_banner, bytes):
        guest = banner_text(guest_banner)
    else:
        guest = guest_banner or "an unidentified Linux kernel"
    where = ", ".join(str(p) if p.exists() else f"{p} (missing)" for p in searched)
    where = f" (searched {where})" if where else ""
    return SymbolError(f"no symbol table (ISF) matches the guest kernel '{guest}'{where}: {HOW_TO_MAKE_ISF}")
