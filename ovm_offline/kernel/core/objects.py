"""Typed views of guest kernel memory: structs, pointers and arrays.

Reading a value gives a plain Python value for scalars (int for integers, enums,
chars and bit-fields; bool for _Bool; float) and an object for the rest:

* `Struct`: ``task.pid`` reads a member; ``task.member_("pid")`` does the same for
  names that clash with Python; ``address_`` / ``address_of_()``.
* `Pointer`: ``int(p)``, ``bool(p)``, ``p.deref()``, ``p[i]``, and ``p.member`` as a
  shorthand for C's ``p->member``.
* `Array`: ``len(a)``, ``a[i]``, iteration, ``a.string_()`` for char arrays.

Objects are views: nothing is read until a member is accessed, so a stale view of
a live guest reads current memory.  `Program` (memory.py) does the reading.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...errors import GuestDataError, SymbolError
from .invariants import NEVER_NULL, null_member
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
)

__all__ = ["Object", "Pointer", "Struct", "check_struct_address", "read_value"]


if TYPE_CHECKING:
    from .memory import Program

# An index into a flexible array member (count 0) beyond this is certainly
# garbage; real users (pid.numbers, per-level arrays) stay far below.
MAX_FLEX_INDEX = 1 << 16


def read_value(prog: Program, type: Type, address: int) -> Any:
    """The value of an object of `type` at kernel virtual `address` (see module doc)."""
    if isinstance(type, IntType):
        v = int.from_bytes(prog.read(address, type.size), "little", signed=type.signed)
        return bool(v) if type.is_bool else v
    if isinstance(type, PointerType):
        return Pointer(prog, type, int.from_bytes(prog.read(address, 8), "little"), address)
    if isinstance(type, StructType):
        return Struct(prog, type, address)
    if isinstance(type, ArrayType):
        return Array(prog, type, address)
    if isinstance(type, EnumType):
        return int.from_bytes(prog.read(address, type.size), "little", signed=type.signed)
    if isinstance(type, BitfieldType):
        storage = type.storage
        raw = int.from_bytes(prog.read(address, storage.size), "little")
        v = (raw >> type.bit_position) & ((1 << type.bit_length) - 1)
        signed = getattr(storage, "signed", False)
        if signed and type.bit_length and v >> (type.bit_length - 1):
            v -= 1 << type.bit_length
        return v
    if isinstance(type, FloatType):
        fmt = {4: "<f", 8: "<d"}.get(type.size)
        if fmt is None:
            raise SymbolError(f"cannot read {type.describe()} of size {type.size}")
        return struct.unpack(fmt, prog.read(address, type.size))[0]
    if isinstance(type, (VoidType, FunctionType)):
        raise SymbolError(f"cannot read a value of type {type.describe()} at 0x{address:x}")
    raise SymbolError(f"cannot read a value of type {type.describe()}")


def check_struct_address(type: StructType, address: int) -> None:
    """A pointer to a struct that is not aligned as the struct must be points at no such
    object: a corrupt or hostile pointer, refused before its garbage is read as fields."""
    if address % type.alignment:
        raise GuestDataError(f"misaligned {type.describe()} pointer 0x{address:x} (it is {type.alignment}-aligned)")


class Object:
    """An object in guest kernel memory: a type and an address."""

    __slots__ = ("prog_", "type_", "address_")

    def __init__(self, prog: Program, type: Type, address: int) -> None:
        self.prog_ = prog
        self.type_ = type
        self.address_ = address

    def address_of_(self) -> Pointer:
        """A pointer to this object (C's ``&obj``)."""
        return Pointer(self.prog_, PointerType(None, None, self.type_), self.address_, None)

    def read_(self) -> bytes:
        """The object's raw bytes."""
        return self.prog_.read(self.address_, self.type_.size)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Object)
            and type(other) is type(self)
            and other.address_ == self.address_
            and other.type_ is self.type_
        )

    def __hash__(self) -> int:
        return hash((type(self), self.address_))

    def __repr__(self) -> str:
        return f"<{self.type_.describe()} at 0x{self.address_:x}>"


class Struct(Object):
    """A struct or union in memory; attribute access reads members."""

    __slots__ = ()
    type_: StructType

    def member_(self, name: str) -> Any:
        """Read member `name` (members of anonymous unions/structs included)."""
        m = self.type_.member(name)
        value = read_value(self.prog_, m.type, self.address_ + m.offset)
        if type(value) is Pointer and not value._value and (self.type_.name, name) in NEVER_NULL:
            raise null_member(self.type_.name, name, self.address_)
        return value

    def member_address_(self, name: str) -> int:
        return self.address_ + self.type_.member(name).offset

    def has_member_(self, name: str) -> bool:
        return self.type_.has_member(name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # keep copy/pickle/hasattr probes away from guest memory
        return self.member_(name)


class Pointer(Object):
    """A pointer value.  `address_` is where the pointer itself is stored (None for a
    computed pointer); `value_()` / ``int(p)`` is the address it holds."""

    __slots__ = ("_value",)
    type_: PointerType

    def __init__(self, prog: Program, type: PointerType, value: int, address: int | None) -> None:
        super().__init__(prog, type, address if address is not None else -1)
        self._value = value

    def value_(self) -> int:
        return self._value

    def __int__(self) -> int:
        return self._value

    def __index__(self) -> int:
        return self._value

    def __bool__(self) -> bool:
        return self._value != 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pointer):
            return other._value == self._value
        if isinstance(other, int):
            return other == self._value
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._value)

    def deref(self) -> Any:
        """The object pointed to (C's ``*p``); GuestDataError for NULL."""
        return self[0]

    def __getitem__(self, i: int) -> Any:
        if not self._value:
            raise GuestDataError(f"NULL {self.type_.describe()} dereferenced")
        t = self.type_.target
        size = t.size if not isinstance(t, (VoidType, FunctionType)) else 0
        if size == 0 and i:
            raise SymbolError(f"cannot index {self.type_.describe()}")
        if isinstance(t, StructType):
            check_struct_address(t, self._value)
        return read_value(self.prog_, t, (self._value + i * size) & 0xFFFF_FFFF_FFFF_FFFF)

    def __getattr__(self, name: str) -> Any:
        # p.member == p->member, as in drgn.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        target = self.deref()
        if not isinstance(target, Struct):
            raise SymbolError(f"{self.type_.describe()} has no member {name!r}")
        return target.member_(name)

    def string_(self, max_len: int = 4096) -> bytes:
        """The NUL-terminated string this ``char *`` points to, at most `max_len` bytes."""
        if not self._value:
            raise GuestDataError(f"NULL {self.type_.describe()} read as a string")
        return self.prog_.read_cstring(self._value, max_len)

    def __repr__(self) -> str:
        return f"<({self.type_.describe()}) 0x{self._value:x}>"


class Array(Object):
    """An array in memory."""

    __slots__ = ()
    type_: ArrayType

    def __len__(self) -> int:
        return self.type_.count

    def __getitem__(self, i: int) -> Any:
        count = self.type_.count
        if i < 0 or (count and i >= count) or (not count and i >= MAX_FLEX_INDEX):
            raise IndexError(f"index {i} out of range for {self.type_.describe()}")
        el = self.type_.element
        return read_value(self.prog_, el, self.address_ + i * el.size)

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.type_.count):
            yield self[i]

    def trailing_(self, i: int) -> Any:
        """Element i of the array that ends a struct the kernel allocates longer than declared:
        ``numbers[1]`` in 5.10's struct pid, the flexible ``numbers[]`` later. The caller
        bounds i by what the struct itself says (pid->level)."""
        if not 0 <= i < MAX_FLEX_INDEX:
            raise GuestDataError(f"index {i} out of range for the trailing {self.type_.describe()}")
        el = self.type_.element
        return read_value(self.prog_, el, self.address_ + i * el.size)

    def string_(self, max_len: int = 4096) -> bytes:
        """A char array's contents up to its first NUL; an array of unknown length
        (``char linux_banner[]``) is read as a C string of at most `max_len` bytes."""
        if not self.type_.count:
            return self.prog_.read_cstring(self.address_, max_len)
        return self.read_().split(b"\0", 1)[0]
