"""The guest kernel's virtual memory: `Program` (source + symbols + KASLR layout).

`open_kernel(source, symbol_dirs)` finds the layout of the running kernel:

* With VMCOREINFO (QEMU ``-device vmcoreinfo`` and the guest's ``qemu_fw_cfg``):
  KERNELOFFSET is the virtual KASLR shift, NUMBER(phys_base) the physical one,
  OSRELEASE narrows the ISF candidates and SYMBOL(swapper_pg_dir) cross-checks the
  choice; the banner at linux_banner must equal the ISF's.
* Without it: physical memory is scanned for ``Linux version `` and every hit is
  compared with the banners of the known ISFs.  A hit at physical P of a symbol
  linked at L gives D = P - L + __START_KERNEL_map = KERNELOFFSET + phys_base, so
  every kernel-image symbol's physical address is known; the page tables
  (init_top_pgt, then each vCPU's CR3) then tell which 2 MiB-aligned KERNELOFFSET
  maps L to P.

Kernel virtual addresses are translated without page walks where the layout is
linear: the kernel image (``_text``..``_end``: v - __START_KERNEL_map + phys_base)
and the direct map (``page_offset_base``, itself KASLR'd and read from memory).
Everything else (vmalloc, modules, vmemmap) walks the kernel page tables, with a
bounded per-page translation cache.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ...errors import GuestDataError, SymbolError
from ...sources.base import PhysicalSource
from .ktypes import PointerType, StructType, Type
from .objects import Object, Pointer, Struct, read_value
from .paging import (
    ADDR_MASK,
    CR4_LA57,
    KPTI_USER_BIT,
    PAGE_SIZE,
    PageTables,
    PhysicalRuns,
    Translation,
)
from .symbols import (
    SymbolTable,
    banner_release,
    banner_text,
    isf_banners,
    load_isf,
    missing_isf_error,
    normalize_banner,
)

START_KERNEL_MAP = 0xFFFF_FFFF_8000_0000
U64 = 0xFFFF_FFFF_FFFF_FFFF
KASLR_ALIGN = 0x20_0000  # CONFIG_PHYSICAL_ALIGN: KERNELOFFSET is a multiple of 2 MiB
KASLR_MAX = 1 << 30  # KERNEL_IMAGE_SIZE with RANDOMIZE_BASE: the image stays in 1 GiB
DEFAULT_PAGE_OFFSET = {4: 0xFFFF_8880_0000_0000, 5: 0xFF11_0000_0000_0000}
MAX_PHYSMEM_BITS = {4: 46, 5: 52}

# Bounds against hostile or corrupt data.
MAX_READ = 64 << 20  # one read of kernel memory (no kernel object is larger)
MAX_STRING = 1 << 20
BANNER_SCAN_CHUNK = 64 << 20
MAX_BANNER_HITS = 4096
MAX_BANNER_LEN = 1024
_TRANSLATION_CACHE = 1 << 16
BANNER_PREFIX = b"Linux version "


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
        return Struct(self, self.struct_type(type), address)

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
        return Struct(self, self.struct_type(type), (addr - self.member_offset(type, member)) & U64)

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


# --------------------------------------------------------------------------- open_kernel


def _vmcoreinfo_int(vmci: dict[str, str], key: str, base: int = 10) -> int | None:
    v = vmci.get(key)
    if v is None:
        return None
    v = v.strip()
    try:
        if v.lower().startswith(("0x", "-0x")):
            return int(v, 16)
        return int(v, base)
    except ValueError:
        return None


def _read_phys(source: PhysicalSource, runs: PhysicalRuns, paddr: int, size: int) -> bytes | None:
    if not runs.contains(paddr, size):
        return None
    return source.read(paddr, size)


def scan_banners(source: PhysicalSource, *, limit: int = MAX_BANNER_HITS) -> Iterator[tuple[int, bytes]]:
    """(physical address, text up to NUL) of each "Linux version " string in memory, in
    address order; bulk reads of 64 MiB, at most `limit` hits."""
    hits = 0
    plen = len(BANNER_PREFIX)
    for run in source.runs():
        pos, end = run.start, run.start + run.length
        while pos < end:
            n = min(BANNER_SCAN_CHUNK, end - pos)
            data = source.read(pos, n)
            i = data.find(BANNER_PREFIX)
            while i >= 0:
                pa = pos + i
                text = data[i : i + MAX_BANNER_LEN]
                if len(text) < MAX_BANNER_LEN and pa + len(text) < end:
                    text = source.read(pa, min(MAX_BANNER_LEN, end - pa))
                yield pa, normalize_banner(text)
                hits += 1
                if hits >= limit:
                    return
                i = data.find(BANNER_PREFIX, i + 1)
            if pos + n >= end:
                break
            pos += n - (plen - 1)  # overlap so a prefix split across chunks is found


def _looks_like_linux_banner(text: bytes) -> bool:
    # linux_banner is "Linux version REL (BUILDER) (COMPILER) #N ...\n"; printk copies lack the \n.
    return re.match(rb"Linux version \S+ \(.*\) .*#\d+.*\n$", text, re.S) is not None


def _guest_banner_for_message(source: PhysicalSource, release: str | None) -> bytes | str | None:
    best: bytes | None = None
    for _pa, text in scan_banners(source, limit=256):
        if release is not None and banner_release(text) != release:
            continue
        if _looks_like_linux_banner(text):
            return text
        if best is None and re.match(rb"Linux version \S+ ", text):
            best = text
    if best is not None:
        return best
    return f"Linux version {release}" if release else None


def _levels_options(
    source: PhysicalSource, runs: PhysicalRuns, symbols: SymbolTable, vmci: dict[str, str] | None, d: int
) -> list[int]:
    """Paging levels in order of belief: VMCOREINFO, the kernel's own flag, vCPU CR4."""
    if vmci is not None:
        v = _vmcoreinfo_int(vmci, "NUMBER(pgtable_l5_enabled)")
        if v is not None:
            return [5 if v else 4]
    if symbols.has_symbol("__pgtable_l5_enabled"):
        pa = (symbols.symbol_address("__pgtable_l5_enabled") - START_KERNEL_MAP + d) & U64
        raw = _read_phys(source, runs, pa, 4)
        if raw is not None:
            return [5, 4] if int.from_bytes(raw, "little") else [4, 5]
    for cpu in source.vcpus():
        if cpu.cr4 is not None:
            return [5, 4] if cpu.cr4 & CR4_LA57 else [4, 5]
    return [4, 5]


class _Layout(NamedTuple):
    kaslr_offset: int
    phys_base: int
    levels: int
    root: int
    by_vcpu: bool  # verified through a vCPU's live CR3, not only the image's own tables


def _layouts_from_banner(
    source: PhysicalSource, runs: PhysicalRuns, symbols: SymbolTable, banner_pa: int
) -> Iterator[_Layout]:
    """Layouts that put linux_banner at physical `banner_pa`, each verified through
    page tables: first through the vCPUs' CR3s (the live kernel), then through the
    image's own init_top_pgt (swapper_pg_dir)."""
    link = symbols.symbol_address("linux_banner")
    d = (banner_pa - link + START_KERNEL_MAP) & U64  # = KERNELOFFSET + phys_base
    roots: list[tuple[int, bool]] = []
    for cpu in source.vcpus():
        if cpu.cr3:
            # Under KPTI a vCPU in user mode holds the user root; the kernel's is below.
            r = cpu.cr3 & ADDR_MASK & ~KPTI_USER_BIT
            if (r, True) not in roots:
                roots.append((r, True))
    for name in ("init_top_pgt", "swapper_pg_dir"):
        if symbols.has_symbol(name):
            roots.append(((symbols.symbol_address(name) - START_KERNEL_MAP + d) & U64 & ADDR_MASK, False))
            break
    # The image's own phys_base variable must agree: an image left by an earlier boot
    # (RAM survives a reset) has a banner and self-consistent page tables too, but a
    # different layout; only the vCPUs' CR3 or this check tell them apart.
    pb_link = symbols.symbol_address("phys_base") if symbols.has_symbol("phys_base") else None
    for levels in _levels_options(source, runs, symbols, None, d):
        for root, by_vcpu in roots:
            if not runs.contains(root, PAGE_SIZE):
                continue
            pt = PageTables(source, root, levels, runs=runs)
            for koff in range(0, KASLR_MAX, KASLR_ALIGN):
                if pt.translate((link + koff) & U64) != banner_pa:
                    continue
                phys_base = (d - koff) & U64
                if pb_link is not None:
                    raw = _read_phys(source, runs, (pb_link - START_KERNEL_MAP + d) & U64, 8)
                    if raw is None or int.from_bytes(raw, "little") != phys_base:
                        break  # koff is unique for a root: try the next root
                yield _Layout(koff, phys_base, levels, root, by_vcpu)
                break


def _kernel_root(symbols: SymbolTable, koff: int, phys_base: int) -> int | None:
    for name in ("init_top_pgt", "swapper_pg_dir"):
        if symbols.has_symbol(name):
            return (symbols.symbol_address(name) + koff - START_KERNEL_MAP + phys_base) & U64 & ADDR_MASK
    return None


def _task_list_walks(prog: Program, limit: int = 256) -> bool:
    """Does init_task.tasks walk back to its head?  (A stale kernel's lists are
    overwritten by the live kernel's allocations.)"""
    try:
        head = prog.symbol_address("init_task") + prog.member_offset("task_struct", "tasks")
        node = prog.read_u64(head)
        for _ in range(limit):
            if node == head:
                return True
            node = prog.read_u64(node)
    except (GuestDataError, SymbolError):
        return False
    return False


def _verify_vmcoreinfo_layout(
    source: PhysicalSource, runs: PhysicalRuns, symbols: SymbolTable, vmci: dict[str, str], koff: int, phys_base: int
) -> bool:
    """Does this ISF fit the guest under the VMCOREINFO layout (banner bytes, swapper_pg_dir)?"""
    if symbols.banner is None or not symbols.has_symbol("linux_banner"):
        return False
    pa = (symbols.symbol_address("linux_banner") + koff - START_KERNEL_MAP + phys_base) & U64
    raw = _read_phys(source, runs, pa, len(symbols.banner) + 1)
    if raw is None or normalize_banner(raw) != symbols.banner:
        return False
    spgd = _vmcoreinfo_int(vmci, "SYMBOL(swapper_pg_dir)", 16)
    for name in ("init_top_pgt", "swapper_pg_dir"):
        if spgd is not None and symbols.has_symbol(name):
            return (symbols.symbol_address(name) + koff) & U64 == spgd
    return True


def open_kernel(
    source: PhysicalSource,
    symbol_dirs: Iterable[str | os.PathLike[str]] = (),
    *,
    isf: str | os.PathLike[str] | None = None,
    use_vmcoreinfo: bool = True,
    include_default_symbols: bool = True,
    use_cache: bool = True,
) -> Program:
    """Identify the guest kernel in `source`, pick its ISF and find its KASLR layout.

    `symbol_dirs` are searched for ISFs besides the repository's symbols/ (unless
    `include_default_symbols` is False); `isf` forces one file.  Raises SymbolError
    (no matching ISF: one line naming the guest banner and how to make an ISF) or
    GuestDataError (the kernel's layout does not verify)."""
    if isf is not None:
        forced = load_isf(isf, use_cache=use_cache)
        candidates: list[tuple[Path, bytes | None]] = [(Path(isf).resolve(), forced.banner)]
        searched: list[Path] = [Path(isf)]
    else:
        candidates = list(isf_banners(symbol_dirs, include_default_symbols, use_cache=use_cache))
        searched = [Path(d) for d in symbol_dirs]
        if include_default_symbols:
            from .symbols import repo_symbol_dir

            searched.append(repo_symbol_dir() / "linux")
    runs = PhysicalRuns.of(source)
    vmci = source.vmcoreinfo() if use_vmcoreinfo else None
    koff = _vmcoreinfo_int(vmci, "KERNELOFFSET", 16) if vmci else None
    pbase = _vmcoreinfo_int(vmci, "NUMBER(phys_base)") if vmci else None

    def load(path: Path) -> SymbolTable:
        return load_isf(path, use_cache=use_cache)

    if vmci is not None and koff is not None and pbase is not None:
        release = (vmci.get("OSRELEASE") or "").strip() or None
        for path, banner in candidates:
            if banner is not None and release is not None and banner_release(banner) != release:
                continue
            symbols = load(path)
            if not _verify_vmcoreinfo_layout(source, runs, symbols, vmci, koff, pbase):
                continue
            d = (koff + pbase) & U64
            levels = _levels_options(source, runs, symbols, vmci, d)[0]
            root = _kernel_root(symbols, koff, pbase)
            if root is None:
                raise SymbolError(f"{symbols.name} has no init_top_pgt/swapper_pg_dir symbol")
            return Program(
                source,
                symbols,
                kaslr_offset=koff,
                phys_base=pbase,
                pgtable_levels=levels,
                kernel_root=root,
                layout_from="vmcoreinfo",
            )
        raise _no_isf_error(source, candidates, searched, release, forced=isf is not None)

    # No VMCOREINFO: find the banner in physical memory.
    by_banner: dict[bytes, list[Path]] = {}
    for path, banner in candidates:
        if banner is not None:
            by_banner.setdefault(banner, []).append(path)
    tried_match = False
    fallback: list[Program] = []
    for pa, text in scan_banners(source):
        paths = by_banner.get(text)
        if not paths:
            continue
        tried_match = True
        for path in paths:
            symbols = load(path)
            if not symbols.has_symbol("linux_banner"):
                continue
            for lay in _layouts_from_banner(source, runs, symbols, pa):
                root = _kernel_root(symbols, lay.kaslr_offset, lay.phys_base) or lay.root
                try:
                    prog = Program(
                        source,
                        symbols,
                        kaslr_offset=lay.kaslr_offset,
                        phys_base=lay.phys_base,
                        pgtable_levels=lay.levels,
                        kernel_root=root,
                        layout_from="banner scan",
                    )
                except GuestDataError:
                    continue
                if lay.by_vcpu:
                    return prog  # the vCPUs run this kernel
                fallback.append(prog)
    # No vCPU state confirms a layout: prefer a kernel whose task list is intact.
    for prog in fallback:
        if _task_list_walks(prog):
            return prog
    if fallback:
        return fallback[0]
    if tried_match:
        raise GuestDataError(
            "the guest's kernel banner matches an ISF but no KASLR offset maps it"
            " through the kernel page tables: corrupt or foreign page tables"
        )
    raise _no_isf_error(source, candidates, searched, None, forced=isf is not None)


def _no_isf_error(
    source: PhysicalSource,
    candidates: list[tuple[Path, bytes | None]],
    searched: list[Path],
    release: str | None,
    forced: bool,
) -> SymbolError:
    guest = _guest_banner_for_message(source, release)
    if guest is None:
        return SymbolError(
            "no Linux kernel banner found in guest memory: not a Linux guest, or a"
            " kernel image this tool cannot recognise"
        )
    if forced and candidates:
        path, banner = candidates[0]
        g = banner_text(guest) if isinstance(guest, bytes) else guest
        return SymbolError(
            f"ISF {path.name} is for '{banner_text(banner or b'?')}' but the guest runs"
            f" '{g}': use the ISF made from that kernel's vmlinux"
        )
    return missing_isf_error(guest, searched)
