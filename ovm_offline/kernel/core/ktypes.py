"""C types of the guest kernel, as described by a Volatility 3 ISF.

An ISF (dwarf2json output) names four kinds of things: base types (``int``,
``long unsigned int``), user types (structs and unions with member offsets),
enums, and symbols.  References between them are small dicts such as
``{"kind": "pointer", "subtype": {"kind": "struct", "name": "list_head"}}``.
This module turns those dicts into `Type` objects on demand; the `TypeSource`
(a `SymbolTable` in practice) supplies the named definitions.

Typedefs do not exist in an ISF (dwarf2json resolves them), so ``pid_t`` is
simply ``int`` and ``atomic_t`` is ``struct atomic_t``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ...errors import SymbolError

__all__ = [
    "ArrayType",
    "BitfieldType",
    "EnumType",
    "FloatType",
    "FunctionType",
    "IntType",
    "PointerType",
    "StructType",
    "Type",
    "VoidType",
    "unqualified",
]


# Anonymous structs/unions nest only a few levels in real kernels; the bound
# keeps a malformed ISF from recursing forever.
_MAX_ANON_DEPTH = 16


class TypeSource(Protocol):
    def user_type_def(self, name: str) -> dict[str, Any] | None: ...
    def enum_def(self, name: str) -> dict[str, Any] | None: ...
    def base_type_def(self, name: str) -> dict[str, Any] | None: ...
    def resolve(self, ref: dict[str, Any]) -> Type: ...


class Type:
    """Base of every type; `size` in bytes (0 for void, functions, unknown arrays)."""

    __slots__ = ("size",)
    kind: str = "?"

    def __init__(self, size: int) -> None:
        self.size = size

    def describe(self) -> str:
        return self.kind


class VoidType(Type):
    __slots__ = ()
    kind = "void"

    def __init__(self) -> None:
        super().__init__(0)

    def describe(self) -> str:
        return "void"


class IntType(Type):
    """An integer, char or _Bool base type."""

    __slots__ = ("name", "signed", "is_bool")
    kind = "int"

    def __init__(self, name: str, size: int, signed: bool, is_bool: bool = False) -> None:
        super().__init__(size)
        self.name = name
        self.signed = signed
        self.is_bool = is_bool

    def describe(self) -> str:
        return self.name


class FloatType(Type):
    __slots__ = ("name",)
    kind = "float"

    def __init__(self, name: str, size: int) -> None:
        super().__init__(size)
        self.name = name

    def describe(self) -> str:
        return self.name


class FunctionType(Type):
    __slots__ = ()
    kind = "function"

    def __init__(self) -> None:
        super().__init__(0)

    def describe(self) -> str:
        return "function"


class PointerType(Type):
    """A pointer; the target type is resolved only when first needed (deref)."""

    __slots__ = ("_types", "_target_ref", "_target")
    kind = "pointer"

    def __init__(self, types: TypeSource | None, target_ref: dict[str, Any] | None, target: Type | None = None) -> None:
        super().__init__(8)
        self._types = types
        self._target_ref = target_ref
        self._target = target

    @property
    def target(self) -> Type:
        if self._target is None:
            if self._types is None or self._target_ref is None:
                self._target = VoidType()
            else:
                self._target = self._types.resolve(self._target_ref)
        return self._target

    def describe(self) -> str:
        ref = self._target_ref
        if self._target is not None:
            return self._target.describe() + " *"
        if ref and ref.get("name"):
            prefix = ref["kind"] + " " if ref["kind"] in ("struct", "union", "enum") else ""
            return f"{prefix}{ref['name']} *"
        return f"{ref.get('kind', 'void') if ref else 'void'} *"


class ArrayType(Type):
    """``element[count]``; count 0 means unknown length (flexible array member)."""

    __slots__ = ("element", "count")
    kind = "array"

    def __init__(self, element: Type, count: int) -> None:
        super().__init__(element.size * count)
        self.element = element
        self.count = count

    def describe(self) -> str:
        return f"{self.element.describe()}[{self.count or ''}]"


class EnumType(Type):
    __slots__ = ("name", "signed", "constants")
    kind = "enum"

    def __init__(self, name: str, size: int, signed: bool, constants: dict[str, int]) -> None:
        super().__init__(size)
        self.name = name
        self.signed = signed
        self.constants = constants

    def describe(self) -> str:
        return f"enum {self.name}"


class BitfieldType(Type):
    """A bit-field member: `storage` (an int or enum type) read at the member offset,
    then shifted right by `bit_position` and masked to `bit_length` bits."""

    __slots__ = ("storage", "bit_position", "bit_length")
    kind = "bitfield"

    def __init__(self, storage: Type, bit_position: int, bit_length: int) -> None:
        super().__init__(storage.size)
        self.storage = storage
        self.bit_position = bit_position
        self.bit_length = bit_length

    def describe(self) -> str:
        return f"{self.storage.describe()} :{self.bit_length}"


class Member:
    """One member of a struct/union, with its offset from the start of the outermost
    struct it was looked up in (members of anonymous unions are flattened)."""

    __slots__ = ("name", "offset", "type")

    def __init__(self, name: str, offset: int, type: Type) -> None:
        self.name = name
        self.offset = offset
        self.type = type

    def __repr__(self) -> str:
        return f"Member({self.name!r}, offset={self.offset}, type={self.type.describe()!r})"


class StructType(Type):
    """A struct or union.  Members are resolved lazily and memoized, because a
    struct such as task_struct has hundreds of members and we read a dozen."""

    __slots__ = ("name", "struct_kind", "_types", "_fields", "_members", "_alignment")
    kind = "struct"

    def __init__(self, name: str, struct_kind: str, size: int, fields: dict[str, Any], types: TypeSource) -> None:
        super().__init__(size)
        self.name = name
        self.struct_kind = struct_kind  # "struct", "union" or "class"
        self._types = types
        self._fields = fields
        self._members: dict[str, Member | None] = {}
        self._alignment: int | None = None

    def describe(self) -> str:
        return f"{self.struct_kind} {self.name}"

    @property
    def alignment(self) -> int:
        """A lower bound of this struct's x86-64 ABI alignment: that of its widest direct
        scalar member (at most 8), or 1 if its size shows it is packed. An instance at an
        address it does not divide is no kernel object. Only direct members are looked at
        (their raw ISF entries, no types built): task_struct has hundreds."""
        if self._alignment is None:
            widest = max((self._raw_alignment(f.get("type")) for f in self._fields.values()), default=1)
            self._alignment = widest if self.size % widest == 0 else 1
        return self._alignment

    def _raw_alignment(self, ref: Any) -> int:
        if not isinstance(ref, dict):
            return 1
        kind = ref.get("kind")
        if kind == "pointer":
            return 8
        if kind == "array":
            return self._raw_alignment(ref.get("subtype"))
        if kind in ("base", "enum"):
            name = ref.get("name")
            d = (
                (self._types.base_type_def if kind == "base" else self._types.enum_def)(name)
                if isinstance(name, str)
                else None
            )
            size = d.get("size") if d else None
            return max(1, min(size, 8)) if isinstance(size, int) and size > 0 else 1
        return 1  # embedded structs, bit-fields: a lower bound need not look inside

    def member_names(self) -> list[str]:
        """Names of direct members (anonymous ones appear under their generated names)."""
        return list(self._fields)

    def has_member(self, name: str) -> bool:
        return self._lookup(name, 0) is not None

    def member(self, name: str) -> Member:
        """The member `name`, searching through anonymous structs/unions like C does."""
        m = self._lookup(name, 0)
        if m is None:
            raise SymbolError(f"{self.describe()} has no member {name!r} in this ISF")
        return m

    def _lookup(self, name: str, depth: int) -> Member | None:
        try:
            return self._members[name]
        except KeyError:
            pass
        found: Member | None = None
        field = self._fields.get(name)
        if field is not None:
            found = Member(name, int(field.get("offset", 0)), self._types.resolve(field["type"]))
        elif depth < _MAX_ANON_DEPTH:
            for f in self._fields.values():
                if not f.get("anonymous"):
                    continue
                inner = self._types.resolve(f["type"])
                if not isinstance(inner, StructType):
                    continue
                m = inner._lookup(name, depth + 1)
                if m is not None:
                    found = Member(name, int(f.get("offset", 0)) + m.offset, m.type)
                    break
        self._members[name] = found
        return found

    def members(self) -> Iterator[Member]:
        """Direct members in offset order (anonymous ones not flattened)."""
        for fname in sorted(self._fields, key=lambda n: int(self._fields[n].get("offset", 0))):
            f = self._fields[fname]
            yield Member(fname, int(f.get("offset", 0)), self._types.resolve(f["type"]))


def alignment_of(type: Type) -> int:
    """How a value of `type` is aligned in a (not packed) kernel struct, at most 8 (for a
    struct, the lower bound `StructType.alignment` gives)."""
    if isinstance(type, StructType):
        return type.alignment
    if isinstance(type, ArrayType):
        return alignment_of(type.element)
    if isinstance(type, BitfieldType):
        return alignment_of(type.storage)
    if isinstance(type, (IntType, EnumType, FloatType, PointerType)):
        return max(1, min(type.size, 8))
    return 1


def unqualified(type_name: str) -> tuple[str, str | None]:
    """Split "struct task_struct" into ("task_struct", "struct"); "int" into ("int", None)."""
    type_name = type_name.strip()
    for kw in ("struct ", "union ", "enum ", "class "):
        if type_name.startswith(kw):
            return type_name[len(kw) :].strip(), kw.strip()
    return type_name, None
