"""The struct members the walkers read, and the kind of type each must have.

The walkers trust an ISF's layout: an ISF that makes ``task_struct.mm`` an int, or
``file.f_pos`` a 1 TiB char array, would fail deep inside a walker, or read garbage as
something else. `check_member_kinds` refuses such an ISF when it is loaded (once: the symbol
cache keeps the verdict), naming the member, what the ISF says and what the walkers read. It
also checks that each of these members lies inside its struct, so a struct shrunk below its
members (``k_sigaction`` of 1 byte) is refused rather than read with the wrong stride.

A kind is coarse on purpose, so that kernels that widen an integer or rename a struct's tag
keep passing: "integer" (any int, char, bool, enum or bit-field), "pointer to struct NAME",
"array of integer", "struct NAME"... ; members whose kind differs between the kernels we
read are listed under every kind seen. Members an ISF lacks are not checked here: the walkers
test for them (``has_member_``) or refuse by name.

A struct or union the kernel declares without a tag (``tty_struct.ctrl``, ``tk_core``'s type)
gets a name from dwarf2json that differs between builds, so its members are named by the path
that reaches them from a tagged struct or from a symbol (``@`` then the symbol's name):
``tty_struct.ctrl.pgrp``, ``@tk_core.timekeeper``.

tests/test_member_kinds.py keeps the table (member_table.py) complete: it runs ``ps`` and ``dump`` over the
corpus of both kernels and fails, naming the members to add and their kinds, when a walker
reads a member that is not listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import LayoutError, SymbolError
from .member_table import MEMBER_PATHS_BY_KIND, MEMBERS_BY_KIND

__all__ = ["MEMBER_KINDS", "check_member_kinds", "raw_kind", "raw_member"]

# nested anonymous structs/unions are searched this deep, as ktypes does
_MAX_ANON_DEPTH = 8


def _shallow_kind(isf: dict[str, Any], ref: Any) -> str:
    if not isinstance(ref, dict):
        return "invalid"
    kind = ref.get("kind")
    if kind in ("base", "enum", "bitfield"):
        if kind == "base":
            base = (isf.get("base_types") or {}).get(ref.get("name"))
            base_kind = base.get("kind") if isinstance(base, dict) else None
            if base_kind == "void":
                return "void"
            if base_kind == "float":
                return "float"
            if base_kind not in ("int", "char", "bool"):
                return f"missing base type {ref.get('name')!r}"
        return "integer"
    if kind in ("struct", "union", "class"):
        name = ref.get("name")
        if name not in isf["user_types"]:
            return f"missing {kind} {name}"
        return f"{kind} (unnamed)" if str(name).startswith("unnamed_") else f"{kind} {name}"
    if kind in ("pointer", "array", "function"):
        return str(kind)
    return f"unknown kind {kind!r}"


def raw_kind(isf: dict[str, Any], ref: Any) -> str:
    """The coarse kind of a raw ISF type reference: "integer", "pointer to struct file",
    "array of integer", "struct list_head", "function"... (see the module doc)."""
    if isinstance(ref, dict) and ref.get("kind") == "pointer":
        return f"pointer to {_shallow_kind(isf, ref.get('subtype'))}"
    if isinstance(ref, dict) and ref.get("kind") == "array":
        return f"array of {_shallow_kind(isf, ref.get('subtype'))}"
    return _shallow_kind(isf, ref)


def raw_member(isf: dict[str, Any], struct: str, member: str, depth: int = 0) -> tuple[int, Any, int] | None:
    """(offset, raw type reference, size of the outermost struct) of `member` of `struct` in a
    parsed ISF, looked up through anonymous structs and unions as C does; None if absent."""
    user = isf["user_types"].get(struct)
    if not isinstance(user, dict):
        return None
    fields = user.get("fields") or {}
    field = fields.get(member)
    if isinstance(field, dict):
        return int(field.get("offset", 0)), field.get("type"), int(user.get("size", 0))
    if depth >= _MAX_ANON_DEPTH:
        return None
    for f in fields.values():
        ref = f.get("type") if isinstance(f, dict) else None
        if not (isinstance(f, dict) and f.get("anonymous") and isinstance(ref, dict)):
            continue
        if ref.get("kind") not in ("struct", "union", "class"):
            continue
        inner = raw_member(isf, str(ref.get("name")), member, depth + 1)
        if inner is not None:
            return int(f.get("offset", 0)) + inner[0], inner[1], int(user.get("size", 0))
    return None


def _raw_size(isf: dict[str, Any], ref: Any, depth: int = 0) -> int | None:
    """Bytes a raw type reference takes (a bit-field: the bytes its bits reach), None if
    it cannot be told (a missing type; the kind check names those)."""
    if not isinstance(ref, dict) or depth > 16:
        return None
    kind = ref.get("kind")
    table = {
        "base": "base_types",
        "enum": "enums",
        "struct": "user_types",
        "union": "user_types",
        "class": "user_types",
    }
    if kind in table:
        entry = (isf.get(table[kind]) or {}).get(ref.get("name"))
        size = entry.get("size") if isinstance(entry, dict) else None
        return size if isinstance(size, int) else None
    if kind == "pointer":
        return 8
    if kind == "array":
        element = _raw_size(isf, ref.get("subtype"), depth + 1)
        count = ref.get("count")
        return element * count if element is not None and isinstance(count, int) else None
    if kind == "bitfield":
        position, length = ref.get("bit_position"), ref.get("bit_length")
        if isinstance(position, int) and isinstance(length, int):
            return (position + length + 7) // 8
    return None


def _anchor_type(isf: dict[str, Any], anchor: str) -> str | None:
    """The type name a member path starts from: `anchor` itself, or the struct or union type of
    the symbol ``@NAME`` names (None if the ISF lacks the symbol)."""
    if not anchor.startswith("@"):
        return anchor
    symbol = (isf.get("symbols") or {}).get(anchor[1:])
    ref = symbol.get("type") if isinstance(symbol, dict) else None
    if ref is None:
        return None
    if not (isinstance(ref, dict) and ref.get("kind") in ("struct", "union", "class")):
        raise SymbolError(f"symbol {anchor[1:]} is {raw_kind(isf, ref)}, where the walkers read a struct")
    return str(ref.get("name"))


def raw_member_path(isf: dict[str, Any], name: str) -> tuple[str, tuple[int, Any, int] | None]:
    """The struct holding the last member of a member path of `MEMBER_KINDS` and what
    `raw_member` says of it there (None if the ISF lacks a step). A step before the last
    that is no struct or union is a SymbolError."""
    anchor, *steps = name.split(".")
    struct = _anchor_type(isf, anchor)
    found = None
    for index, member in enumerate(steps):
        found = raw_member(isf, struct, member) if struct is not None else None
        if found is None:
            return name, None
        if index + 1 < len(steps):
            ref = found[1]
            if not (isinstance(ref, dict) and ref.get("kind") in ("struct", "union", "class")):
                step = ".".join([anchor, *steps[: index + 1]])
                raise SymbolError(f"{step} is {raw_kind(isf, ref)}, where the walkers read a struct")
            struct = str(ref.get("name"))
    return str(struct), found


def check_member_kinds(isf: dict[str, Any], path: Path) -> None:
    """Refuse a parsed ISF in which a member the walkers read has another kind of type than
    `MEMBER_KINDS` says (LayoutError: a kernel laid out as the walkers do not know), or does
    not fit inside its struct (SymbolError: a broken ISF)."""
    for name, expected in MEMBER_KINDS.items():
        try:
            struct, found = raw_member_path(isf, name)
        except SymbolError as error:
            raise LayoutError(_unsupported(path, str(error))) from None
        if found is None:
            continue
        offset, ref, struct_size = found
        kind = raw_kind(isf, ref)
        if kind not in expected:
            raise LayoutError(_unsupported(path, f"{name} is {kind}, where the walkers read {' or '.join(expected)}"))
        size = _raw_size(isf, ref)
        if size is not None and offset + size > struct_size:
            raise SymbolError(
                f"ISF {path}: {name} takes bytes {offset}..{offset + size} of a {struct_size}-byte struct {struct}"
            )


def _unsupported(path: Path, what: str) -> str:
    return (
        f"the ISF {path} loaded, but the kernel it describes has a layout not supported: {what}"
        " (README: Supported kernels)"
    )


def _is_member_path(name: str) -> bool:
    return name.count(".") >= 2 or (name.startswith("@") and name.count(".") == 1)


#: "struct.member" (or a member path) -> the kinds the walkers read it as
MEMBER_KINDS: dict[str, tuple[str, ...]] = {}
for _table, _well_formed in (
    (MEMBERS_BY_KIND, lambda name: name.count(".") == 1),
    (MEMBER_PATHS_BY_KIND, _is_member_path),
):
    for _kind, _names in _table.items():
        for _name in _names.split():
            # two adjacent string literals missing a space glue two names into one
            assert _well_formed(_name), f"member_kinds.py: {_name!r} is not one struct.member or member path"
            MEMBER_KINDS[_name] = (*MEMBER_KINDS.get(_name, ()), _kind)
