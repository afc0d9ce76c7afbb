"""The guest kernel's virtual memory: `Program` (source + symbols + KASLR layout).

Kernel virtual addresses are translated without page walks where the layout is
linear: the kernel image (``_text``..``_end``: v - __START_KERNEL_map + phys_base)
and the direct map (``page_offset_base``, itself KASLR'd and read from memory).
Everything else (vmalloc, modules, vmemmap) walks the kernel page tables, with a
bounded per-page translation cache. Which kernel it is and where KASLR put it is
found by `open_kernel` (identify.py).
"""

from __future__ import annotations

from typing import Any

from ...errors import GuestDataError, SymbolError
from ...sources.base import PhysicalSource
from .ktypes import PointerType, StructType, Type
from .objects import Object, Pointer, Struct, check_struct_address, read_value
from .paging import (
    PAGE_SIZE,
    PageTables,
    PhysicalRuns,
    Translation,
)
from .symbols import (
    SymbolTable,
    banner_text,
)

__all__ = ["FaultError", "KASLR_MAX", "Program", "START_KERNEL_MAP", "U64"]


START_KERNEL_MAP = 0xFFFF_FFFF_8000_0000
U64 = 0xFFFF_FFFF_FFFF_FFFF
DEFAULT_PAGE_OFFSET = {4: 0xFFFF_8880_0000_0000, 5: 0xFF11_0000_0000_0000}
MAX_PHYSMEM_BITS = {4: 46, 5: 52}
KASLR_MAX = 1 << 30  # KERNEL_IMAGE_SIZE with RANDOMIZE_BASE: the image stays in 1 GiB

# Bounds against hostile or corrupt data.
MAX_READ = 64 << 20  # one read of kernel memory (no kernel object is larger)
MAX_STRING = 1 << 20
_TRANSLATION_CACHE = 1 << 16


class FaultError(GuestDataError):
    """A kernel virtual address that does not translate to memory in the source."""


class Program:
    """A guest kernel: read its memory by virtual address and view it through its types.

    Build it with `open_kernel`.  ``prog["init_task"]`` reads a variable (a `Struct`
    for struct variables, an int for integers...); ``prog.object("task_struct", addr)``
    views memory as a type.
    """

    def __init__(
        self,
        source: PhysicalSource,
        symbols: SymbolTable,
        *,
        kaslr_offset: int,
        phys_base: int,
        pgtable_levels: int,
        kernel_root: int,
        page_offset_base: int | None = None,
        layout_from: str = "",
    ) -> None:
        self.source = source
        self.symbols = symbols
        self.kaslr_offset = kaslr_offset
        self.phys_base = phys_base & U64
        self.pgtable_levels = pgtable_levels
        self.kernel_root = kernel_root
        self.layout_from = layout_from  # "vmcoreinfo" or "banner scan": for messages and tests
        self.runs = PhysicalRuns.of(source)
        self.page_tables = PageTables(source, kernel_root, pgtable_levels, runs=self.runs)
        self._tcache: dict[int, int] = {}
        text = symbols.symbol_address("_text") if symbols.has_symbol("_text") else START_KERNEL_MAP
        end = symbols.symbol_address("_end") if symbols.has_symbol("_end") else text + KASLR_MAX
        self.image_start = (text + kaslr_offset) & U64
        self.image_end = (end + kaslr_offset) & U64
        # No direct-map shortcut until its base is known (reading it needs translate()).
        self.page_offset_base = 0
        self.direct_map_size = 0
        if page_offset_base is None:
            page_offset_base = self._read_page_offset_base()
        self.page_offset_base = page_offset_base
        self.direct_map_size = self._direct_map_size()

    def __repr__(self) -> str:
        return (
            f"Program({banner_text(self.symbols.banner or b'?')!r}, kaslr=0x{self.kaslr_offset:x}, "
            f"phys_base=0x{self.phys_base:x}, levels={self.pgtable_levels})"
        )

    # ----- layout
    def _read_page_offset_base(self) -> int:
        if not self.symbols.has_symbol("page_offset_base"):
            return DEFAULT_PAGE_OFFSET[self.pgtable_levels]  # no CONFIG_RANDOMIZE_MEMORY
        v = int.from_bytes(self.read(self.symbol_address("page_offset_base"), 8), "little")
        # The direct map starts in the kernel half on a 1 GiB (PUD) boundary.
        if v < 0xFF00_0000_0000_0000 or v & ((1 << 30) - 1):
            raise GuestDataError(f"page_offset_base 0x{v:x} is not a plausible direct-map base")
        return v

    def _direct_map_size(self) -> int:
        """How far from page_offset_base the linear shortcut is safe.  Not the whole
        2^MAX_PHYSMEM_BITS window: with CONFIG_RANDOMIZE_MEMORY the vmalloc area can
        start a few TiB above page_offset_base, well inside it.  The direct map covers
        at least all RAM, so the end of the highest physical run bounds it."""
        size = min(1 << MAX_PHYSMEM_BITS[self.pgtable_levels], self.runs.ends[-1] if self.runs.ends else 0)
        if self.symbols.has_symbol("vmalloc_base"):
            try:
                vb = self.read_u64(self.symbol_address("vmalloc_base"))
            except GuestDataError:
                vb = 0
            if vb > self.page_offset_base:
                size = min(size, vb - self.page_offset_base)
        return size

    def image_phys(self, vaddr: int) -> int:
        """Physical address of a kernel-image virtual address (no page walk)."""
        return (vaddr - START_KERNEL_MAP + self.phys_base) & U64

    # ----- symbols and types
    def symbol_address(self, name: str) -> int:
        """Run-time (KASLR-shifted) address of a symbol."""
        return (self.symbols.symbol_address(name) + self.kaslr_offset) & U64

    def has_symbol(self, name: str) -> bool:
        return self.symbols.has_symbol(name)

    def type(self, name: str | Type) -> Type:
        return name if isinstance(name, Type) else self.symbols.type(name)

    def struct_type(self, name: str | Type) -> StructType:
        t = self.type(name)
        if not isinstance(t, StructType):
            raise SymbolError(f"{t.describe()} is not a struct or union")
        return t

    def __getitem__(self, name: str) -> Any:
        """The value of kernel variable `name` (see objects.read_value)."""
        t = self.symbols.symbol_type(name)
        if t is None:
            raise SymbolError(f"{self.symbols.name}: symbol {name!r} has no type")
        return read_value(self, t, self.symbol_address(name))

    def object(self, type: str | Type, address: int) -> Any:
        """View memory at `address` as `type` (a value for scalars, else an Object)."""
        return read_value(self, self.type(type), address)

    def struct(self, type: str | Type, address: int) -> Struct:
        """View memory at `address` as struct `type`: GuestDataError if it is misaligned."""
        struct_type = self.struct_type(type)
        check_struct_address(struct_type, address)
        return Struct(self, struct_type, address)

    def pointer(self, type: str | Type, value: int) -> Pointer:
        """A computed pointer to `type` holding `value`."""
        return Pointer(self, PointerType(None, None, self.type(type)), value, None)

    def member_offset(self, type: str | Type, path: str) -> int:
        """offsetof(type, a.b.c)."""
        t: Type = self.type(type)
        off = 0
        for part in path.split("."):
            if not isinstance(t, StructType):
                raise SymbolError(f"{t.describe()} has no member {part!r}")
            m = t.member(part)
            off += m.offset
            t = m.type
        return off

    def container_of(self, ptr: int | Object, type: str | Type, member: str) -> Struct:
        """The `type` that contains `member` at address `ptr` (the kernel's container_of)."""
        addr = int(ptr) if not isinstance(ptr, Object) or isinstance(ptr, Pointer) else ptr.address_
        container = self.struct_type(type)
        start = (addr - self.member_offset(type, member)) & U64
        check_struct_address(container, start)
        return Struct(self, container, start)

    # ----- memory
    def translate(self, vaddr: int) -> int:
        """Physical address of kernel virtual `vaddr`; FaultError if unmapped."""
        off = (vaddr - self.page_offset_base) & U64
        if off < self.direct_map_size:
            return off
        if self.image_start <= vaddr < self.image_end:
            return self.image_phys(vaddr)
        page = vaddr & ~(PAGE_SIZE - 1)
        pp = self._tcache.get(page)
        if pp is None:
            r = self.page_tables.lookup(page)
            if not isinstance(r, Translation):
                raise FaultError(f"kernel address 0x{vaddr:x} is not mapped")
            pp = r.paddr
            if len(self._tcache) >= _TRANSLATION_CACHE:
                self._tcache.clear()
            self._tcache[page] = pp
        return pp | (vaddr & (PAGE_SIZE - 1))

    def read(self, vaddr: int, size: int) -> bytes:
        """`size` bytes of kernel virtual memory at `vaddr`."""
        if size <= 0:
            if size == 0:
                return b""
            raise GuestDataError(f"negative read size {size} at 0x{vaddr:x}")
        if size > MAX_READ:
            raise GuestDataError(f"refusing to read {size} bytes at 0x{vaddr:x}: larger than any kernel object")
        vaddr &= U64
        # Fast path: one physically contiguous piece (direct map, image, one page).
        pa = self.translate(vaddr)
        linear = ((vaddr - self.page_offset_base) & U64) < self.direct_map_size or (
            self.image_start <= vaddr and vaddr + size <= self.image_end
        )
        if linear or (vaddr & (PAGE_SIZE - 1)) + size <= PAGE_SIZE:
            end = self.runs.run_end(pa)
            if end is not None and pa + size <= end:
                return self.source.read(pa, size)
            if end is None:
                raise FaultError(f"kernel address 0x{vaddr:x} maps to physical 0x{pa:x}, outside guest memory")
        # Slow path: page by page.
        out = bytearray()
        v = vaddr
        remaining = size
        while remaining:
            n = min(remaining, PAGE_SIZE - (v & (PAGE_SIZE - 1)))
            p = self.translate(v)
            if not self.runs.contains(p, n):
                raise FaultError(f"kernel address 0x{v:x} maps to physical 0x{p:x}, outside guest memory")
            out += self.source.read(p, n)
            v = (v + n) & U64
            remaining -= n
        return bytes(out)

    def read_u8(self, vaddr: int) -> int:
        return self.read(vaddr, 1)[0]

    def read_u32(self, vaddr: int) -> int:
        return int.from_bytes(self.read(vaddr, 4), "little")

    def read_u64(self, vaddr: int) -> int:
        return int.from_bytes(self.read(vaddr, 8), "little")

    def read_cstring(self, vaddr: int, max_len: int = 4096) -> bytes:
        """The NUL-terminated string at `vaddr`, cut at `max_len` bytes."""
        max_len = min(max_len, MAX_STRING)
        out = bytearray()
        v = vaddr
        while len(out) < max_len:
            n = min(max_len - len(out), PAGE_SIZE - (v & (PAGE_SIZE - 1)))
            chunk = self.read(v, n)
            i = chunk.find(b"\0")
            if i >= 0:
                out += chunk[:i]
                return bytes(out)
            out += chunk
            v = (v + n) & U64
        return bytes(out)
