"""Guest memory without a guest: SparseSource (a PhysicalSource of sparse zeroed RAM) and
FakeKernelMemory (a Program over it, laid out by a real ISF, with an allocator and a member
writer). Tests subclass FakeKernelMemory with builders for the kernel objects they need."""

from __future__ import annotations

import struct
from typing import BinaryIO

from ovm_offline.errors import SourceError
from ovm_offline.kernel.core.ktypes import BitfieldType, StructType
from ovm_offline.sources.base import PhysicalRun, VcpuState

from .paths import ISF


class SparseSource:
    """An in-memory PhysicalSource: `size` bytes of zeros, pages written on demand."""

    format_name = "sparse test memory"

    def __init__(self, size: int = 1 << 40) -> None:
        self.size = size
        self.pages: dict[int, bytearray] = {}
        self.reads = 0

    def write(self, paddr: int, data: bytes) -> None:
        while data:
            page, off = paddr & ~0xFFF, paddr & 0xFFF
            n = min(len(data), 4096 - off)
            buf = self.pages.setdefault(page, bytearray(4096))
            buf[off : off + n] = data[:n]
            paddr += n
            data = data[n:]

    def write_u64(self, paddr: int, value: int) -> None:
        self.write(paddr, struct.pack("<Q", value & 0xFFFF_FFFF_FFFF_FFFF))

    def runs(self) -> list[PhysicalRun]:
        return [PhysicalRun(0, self.size)]

    def read(self, paddr: int, length: int) -> bytes:
        if paddr < 0 or paddr + length > self.size:
            raise SourceError(f"physical 0x{paddr:x} outside test memory")
        self.reads += 1
        out = bytearray()
        while length:
            page, off = paddr & ~0xFFF, paddr & 0xFFF
            n = min(length, 4096 - off)
            buf = self.pages.get(page)
            out += buf[off : off + n] if buf is not None else bytes(n)
            paddr += n
            length -= n
        return bytes(out)

    def copy_to(self, paddr: int, length: int, out: BinaryIO) -> None:
        out.write(self.read(paddr, length))

    def vcpus(self) -> list[VcpuState]:
        return []

    def vmcoreinfo(self) -> dict[str, str] | None:
        return None

    def close(self) -> None:
        pass


#: The direct map of the fake kernels (x86-64's default page_offset_base), and where in it
#: their objects are allocated: above the kernel image's variables in physical memory.
FAKE_POB = 0xFFFF_8880_0000_0000
FAKE_HEAP = 0x2000_0000


class FakeKernelMemory:
    """Kernel objects written member by member into SparseSource memory, laid out by the real
    ISF of `kernel`, reachable through the direct map (heap objects) and the kernel image
    (symbols): a Program over 2 GiB of fake RAM, an allocator and a member writer."""

    def __init__(self, kernel: str) -> None:
        from ovm_offline.kernel.core.memory import Program
        from ovm_offline.kernel.core.symbols import load_isf

        self.kernel = kernel
        self.symbols = load_isf(ISF[kernel])
        self.src = SparseSource(1 << 31)
        self.prog = Program(
            self.src,
            self.symbols,
            kaslr_offset=0,
            phys_base=0,
            pgtable_levels=4,
            kernel_root=0x1000,
            page_offset_base=FAKE_POB,
        )
        self.next = FAKE_HEAP

    def alloc(self, size: int | str, align: int = 4096, *, extra: int = 0) -> int:
        """A zeroed block of `size` bytes (or the size of struct `size`) plus `extra`, in the direct map."""
        if isinstance(size, str):
            size = self.symbols.struct_type(size).size
        size += extra
        addr = FAKE_POB + self.next
        self.next += (size + align - 1) & ~(align - 1)
        return addr

    def phys(self, vaddr: int) -> int:
        """The physical address of a direct-map or kernel-image address."""
        return self.prog.translate(vaddr)

    def write(self, vaddr: int, data: bytes) -> None:
        self.src.write(self.phys(vaddr), data)

    def write_u64(self, vaddr: int, value: int) -> None:
        self.src.write_u64(self.phys(vaddr), value)

    def string(self, s: bytes) -> int:
        """A NUL-terminated copy of `s`."""
        addr = self.alloc(len(s) + 1)
        self.write(addr, s + b"\0")
        return addr

    def set(self, addr: int, type_name: str, path: str, value: int | bytes) -> None:
        """Write `value` into member `path` (dotted, e.g. "ffd.fd") of the `type_name` at `addr`:
        an int sized by the member's type (bit-fields keep their neighbours), bytes as they are."""
        t = self.symbols.struct_type(type_name)
        offset = 0
        for part in path.split("."):
            assert isinstance(t, StructType), f"{type_name}.{path}: {t.describe()} has no members"
            m = t.member(part)
            offset += m.offset
            t = m.type
        paddr = self.phys(addr + offset)
        if isinstance(value, bytes):
            self.src.write(paddr, value)
            return
        if isinstance(t, BitfieldType):
            raw = int.from_bytes(self.src.read(paddr, t.size), "little")
            mask = ((1 << t.bit_length) - 1) << t.bit_position
            value = (raw & ~mask) | (value << t.bit_position & mask)
        size = t.size or 8  # a member of no size (void *, a flexible array) takes a word
        self.src.write(paddr, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))

    def set_symbol(self, name: str, type_name: str, path: str, value: int) -> None:
        """Write member `path` of the kernel variable `name` (a `type_name`)."""
        self.set(self.prog.symbol_address(name), type_name, path, value)
