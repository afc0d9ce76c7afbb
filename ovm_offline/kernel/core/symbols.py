"""Symbol tables (Volatility 3 ISF files) for guest kernels: finding, loading, caching.

An ISF is the JSON that ``dwarf2json linux --elf vmlinux`` writes from a vmlinux with
debug info (Debian: the ``linux-image-<release>-dbg`` package).  It may be plain
``.json`` or compressed ``.json.xz`` / ``.json.gz`` / ``.json.bz2``.  The right ISF
for a guest is the one whose ``linux_banner`` (kept as base64 ``constant_data`` in
``symbols``) equals the banner in guest memory, byte for byte.

Finding ISF files and their on-disk cache are in isf_cache.py.
"""

from __future__ import annotations

import logging

__all__ = [
    "CACHE_FORMAT",
    "HOW_TO_MAKE_ISF",
    "SymbolTable",
    "banner_release",
    "banner_text",
    "find_isf_files",
    "isf_banners",
    "load_isf",
    "missing_isf_error",
    "normalize_banner",
    "repo_symbol_dir",
]

import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import SymbolError
from .isf_cache import (
    CACHE_FORMAT,
    P_CONST,
    P_ENUM,
    P_SYM,
    P_TYPE,
    CacheFile,
    CacheReader,
    DictReader,
    IsfIndex,
    atomic_write,
    banner_release,
    banner_text,
    build_cache_blob,
    cache_dir,
    cache_file_name,
    find_isf_files,
    json_loads,
    normalize_banner,
    open_isf_bytes,
    prune_old_formats,
    repo_symbol_dir,
)
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

log = logging.getLogger("ovm_offline")

HOW_TO_MAKE_ISF = (
    "make one with `dwarf2json linux --elf vmlinux-with-debuginfo > FILE.json` "
    "(the vmlinux from the distro's -dbg package, e.g. linux-image-<release>-dbg) "
    "and pass its directory with --symbols DIR"
)


# --------------------------------------------------------------------------- SymbolTable


class SymbolTable:
    """Types and symbols of one kernel build, from one ISF.

    Addresses are link-time (before KASLR); `ovm_offline.kernel.core.memory.Program`
    adds the KASLR offset.
    """

    def __init__(self, reader: CacheReader | DictReader, path: Path | None) -> None:
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
        d = self._r.get(P_TYPE + name)
        return d if isinstance(d, dict) else None

    def enum_def(self, name: str) -> dict[str, Any] | None:
        d = self._r.get(P_ENUM + name)
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

    def enumerator(self, constant: str) -> int | None:
        """The value of an enumerator by its name alone, whichever enum holds it (anonymous
        enums have no name to ask by); None where no enum has it, or enums disagree."""
        value = self._r.get(P_CONST + constant)
        return value if isinstance(value, int) else None

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
        v = self._r.get(P_SYM + name)
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
            return SymbolTable(CacheReader(CacheFile(cpath), sha), path)
        except (OSError, ValueError, EOFError, TypeError, KeyError, zlib.error, struct.error):
            pass  # missing or unusable: rebuild below
    isf = _parse_isf(path)
    if cdir is not None:
        blob = build_cache_blob(isf, sha, path.name)
        prune_old_formats(cdir)
        atomic_write(cdir / cache_file_name(sha), blob)
        try:
            return SymbolTable(CacheReader(blob, sha), path)
        except (ValueError, EOFError, TypeError, KeyError, zlib.error, struct.error):
            pass
    return SymbolTable(DictReader(isf), path)


def _parse_isf(path: Path) -> dict[str, Any]:
    try:
        isf = json_loads(open_isf_bytes(path))
    except ValueError as e:
        raise SymbolError(f"ISF {path} is not valid JSON: {e}") from None
    except RecursionError:  # the C parser stops at the interpreter's depth: bounded, and named
        raise SymbolError(f"ISF {path} nests JSON deeper than any ISF does: not a kernel's symbol table") from None
    if (
        not isinstance(isf, dict)
        or not isinstance(isf.get("symbols"), dict)
        or not isinstance(isf.get("user_types"), dict)
    ):
        raise SymbolError(f"ISF {path} lacks symbols/user_types: not a Volatility 3 ISF")
    _check_isf_types(isf, path)
    return isf


_SCALAR_KINDS = ("int", "char", "bool", "float")
_SCALAR_SIZES = (1, 2, 4, 8, 16)
#: the sizes x86-64's C gives its named types (LP64); an ISF that says otherwise is broken
_C_TYPE_SIZES = {
    "char": 1, "signed char": 1, "unsigned char": 1, "_Bool": 1,
    "short int": 2, "short unsigned int": 2,
    "int": 4, "unsigned int": 4,
    "long int": 8, "long unsigned int": 8, "long long int": 8, "long long unsigned int": 8,
}  # fmt: skip


def _is_scalar_field(field: Any) -> bool:
    kind = (
        field.get("type", {}).get("kind") if isinstance(field, dict) and isinstance(field.get("type"), dict) else None
    )
    return kind in ("base", "pointer", "enum")


def _check_isf_types(isf: dict[str, Any], path: Path) -> None:
    """The types every read trusts: scalar sizes a C compiler gives, x86-64 pointers of 8
    bytes, members inside their struct, and the kinds of the members the walkers read
    (member_kinds.py). Checked once per ISF (the cache keeps the result)."""
    for name, base in (isf.get("base_types") or {}).items():
        if not isinstance(base, dict):
            raise SymbolError(f"ISF {path}: base type {name!r} is not an object")
        size, kind = base.get("size"), base.get("kind")
        if (
            (kind in _SCALAR_KINDS and size not in _SCALAR_SIZES)
            or (name in _C_TYPE_SIZES and size != _C_TYPE_SIZES[name])
            or (name == "pointer" and size != 8)
        ):
            raise SymbolError(f"ISF {path}: base type {name!r} ({kind}) has size {size!r}")
    for name, user in isf["user_types"].items():
        size = user.get("size") if isinstance(user, dict) else None
        if not isinstance(size, int) or size < 0 or not isinstance(user.get("fields", {}), dict):
            raise SymbolError(f"ISF {path}: type {name!r} has no valid size or fields")
        if size == 0 and any(_is_scalar_field(f) for f in user.get("fields", {}).values()):
            # size 0 is for empty structs and flexible arrays; a scalar member takes room
            raise SymbolError(f"ISF {path}: type {name!r} has a scalar member but size 0")
        for member, field in user.get("fields", {}).items():
            offset = field.get("offset") if isinstance(field, dict) else None
            if not isinstance(offset, int) or not 0 <= offset <= size:
                raise SymbolError(f"ISF {path}: {name}.{member} is at offset {offset!r}, outside its {size} bytes")
    # only an ISF read afresh is checked (the cache keeps the verdict): a warm start skips
    # parsing the member table
    from .member_kinds import check_member_kinds

    check_member_kinds(isf, path)


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
        except SymbolError as e:
            # one bad file among many need not stop this guest's dump, but is said
            log.warning("%s; skipped", e)
            continue
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
