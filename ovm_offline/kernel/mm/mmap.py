"""Address spaces (``struct mm_struct``), their VMAs (``struct vm_area_struct``) and the
``struct page`` facts needed to decide which user pages hold private data.

VMAs live in the maple tree mm->mm_mt since 6.1 (a linked list mm->mmap before it).
Names follow fs/proc/task_mmu.c show_map_vma: a file's path; a special mapping's own
name ([vdso], [vvar]); [heap] for the VMA overlapping start_brk..brk; [stack] for the one
holding start_stack. [vsyscall] is not a VMA at all but the kernel's gate_vma, shown in
/proc/PID/maps when vsyscall emulation is on (vsyscall_mode != NONE).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from ..core.paging import PAGE_SHIFT, PageTables
from ..ds.maple import mt_for_each
from ..ds.xarray import xa_load
from ..locking.rwsem import rwsem_write_owner
from .page import page_compound_head, page_index, page_layout

__all__ = [
    "mm_task_size",
    "VM_DONTCOPY",
    "VM_DONTDUMP",
    "VM_EXEC",
    "VM_GROWSDOWN",
    "VM_HUGEPAGE",
    "VM_HUGETLB",
    "VM_IO",
    "VM_LOCKED",
    "VM_MAYSHARE",
    "VM_MERGEABLE",
    "VM_NOHUGEPAGE",
    "VM_NORESERVE",
    "VM_PFNMAP",
    "VM_RAND_READ",
    "VM_READ",
    "VM_SEQ_READ",
    "VM_WRITE",
    "for_each_vma",
    "gate_vma",
    "huge_zero_pfn",
    "task_dumpable",
    "mm_exe_file",
    "mm_flags",
    "mm_page_tables",
    "mm_saved_auxv",
    "mm_thp_disabled",
    "mm_vdso_image",
    "mmap_write_owner",
    "page_cache_pfn",
    "page_to_pfn",
    "pages_anon",
    "vma_file",
    "vma_flags",
    "vma_is_heap",
    "vma_is_initial_stack",
    "vma_special_mapping_name",
    "zero_page_pfn",
]


if TYPE_CHECKING:
    from ..core.memory import Program

# include/linux/mm.h: vm_flags (unchanged between 6.1 and 6.12 for these bits)
VM_READ = 0x00000001
VM_WRITE = 0x00000002
VM_EXEC = 0x00000004
VM_SHARED = 0x00000008
VM_MAYWRITE = 0x00000020
VM_MAYSHARE = 0x00000080
VM_GROWSDOWN = 0x00000100
VM_PFNMAP = 0x00000400
VM_LOCKED = 0x00002000
VM_IO = 0x00004000
VM_SEQ_READ = 0x00008000
VM_RAND_READ = 0x00010000
VM_DONTCOPY = 0x00020000
VM_NORESERVE = 0x00200000
VM_HUGETLB = 0x00400000
VM_WIPEONFORK = 0x02000000
VM_DONTDUMP = 0x04000000
VM_HUGEPAGE = 0x20000000
VM_NOHUGEPAGE = 0x40000000
VM_MERGEABLE = 0x80000000

# include/linux/sched/coredump.h: mm->flags
MMF_DUMPABLE_MASK = 0x3
MMF_DISABLE_THP = 24
# arch/x86/include/asm/mmu.h: mm->context.flags bit (6.1: BIT(1); 6.12: bit number 1)
MM_CONTEXT_HAS_VSYSCALL = 1

# include/uapi/linux/auxvec.h
AT_NULL = 0

# arch/x86/include/asm/page_64_types.h, arch/x86/include/uapi/asm/vsyscall.h
VSYSCALL_ADDR = 0xFFFF_FFFF_FF60_0000
DEFAULT_VMEMMAP_BASE = 0xFFFF_EA00_0000_0000  # without CONFIG_RANDOMIZE_MEMORY
STRUCT_PAGE_SIZE = 64

# include/linux/page-flags.h: page->mapping low bits
PAGE_MAPPING_ANON = 0x1

#: More VMAs than vm.max_map_count (65530 by default) allows, a hundredfold.
MAX_VMAS = 1 << 23

ULONG_MAX = (1 << 64) - 1


def _mm(mm: Pointer | Struct) -> Struct:
    if isinstance(mm, Pointer):
        if not mm:
            raise GuestDataError("NULL mm_struct")
        return mm.prog_.struct("mm_struct", int(mm))
    return mm


# ------------------------------------------------------------------------- VMAs

#: include/linux/xarray.h xa_mk_internal(257): what dup_mmap leaves in a half-copied mm_mt
XA_ZERO_ENTRY = (257 << 2) | 2


def for_each_vma(mm: Pointer | Struct, *, limit: int = MAX_VMAS) -> Iterator[Struct]:
    """Every ``struct vm_area_struct`` of a ``struct mm_struct``, ascending: the maple tree
    mm_mt (6.1+) or the mmap list (older). Checks that VMAs are ordered and do not
    overlap, and that each covers the range the tree gives it."""
    m = _mm(mm)
    prog = m.prog_
    prev_end = 0
    count = 0
    if m.has_member_("mm_mt"):
        items: Iterator[tuple[int, int, int]] = mt_for_each(m.mm_mt)
    else:
        items = _mmap_list(m, limit)
    for first, last, entry in items:
        if entry == XA_ZERO_ENTRY:
            continue  # dup_mmap's marker where a failed fork stopped copying
        if entry & 7:
            raise GuestDataError(f"mm_mt of mm_struct at 0x{m.address_:x} holds 0x{entry:x}, which is no VMA pointer")
        vma = prog.struct("vm_area_struct", entry)
        start, end = vma.vm_start, vma.vm_end
        if not (start < end and start >= prev_end):
            raise GuestDataError(
                f"VMA 0x{entry:x} [0x{start:x}, 0x{end:x}) is empty or overlaps the"
                f" previous one ending at 0x{prev_end:x}"
            )
        if first != ULONG_MAX and (first != start or last != end - 1):
            raise GuestDataError(f"mm_mt maps [0x{first:x}, 0x{last:x}] to VMA [0x{start:x}, 0x{end:x})")
        count += 1
        if count > limit:
            raise GuestDataError(f"mm_struct at 0x{m.address_:x} has more than {limit} VMAs")
        prev_end = end
        yield vma
    if count != m.map_count:
        # a tree cut short or a garbage root would otherwise give a plausible, smaller mm
        raise GuestDataError(f"mm_struct at 0x{m.address_:x} has map_count {m.map_count} but {count} VMAs were found")


def _mmap_list(mm: Struct, limit: int) -> Iterator[tuple[int, int, int]]:
    """Pre-6.1 kernels: mm->mmap, linked through vm_next (ULONG_MAX marks "unchecked")."""
    seen: set[int] = set()
    v = int(mm.mmap)
    while v:
        if v in seen or len(seen) >= limit:
            raise GuestDataError(f"mm->mmap list of mm 0x{mm.address_:x} loops or is longer than {limit}")
        seen.add(v)
        yield ULONG_MAX, ULONG_MAX, v
        v = int(mm.prog_.struct("vm_area_struct", v).vm_next)


#: the values x86-64 gives mm->task_size: TASK_SIZE_MAX with 4- and 5-level paging, and
#: IA32_PAGE_OFFSET (or 3 GiB with ADDR_LIMIT_3GB) for 32-bit tasks
X86_64_TASK_SIZES = frozenset({(1 << 47) - 4096, (1 << 56) - 4096, 0xFFFFE000, 0xC0000000})


def mm_task_size(mm: Pointer | Struct) -> int:
    """``task_size`` of a ``struct mm_struct``: the end of its user address space; one of the
    sizes x86-64 sets, else GuestDataError (a wrong one would hide pages)."""
    m = _mm(mm)
    size = int(m.task_size)
    if size not in X86_64_TASK_SIZES:
        raise GuestDataError(f"mm_struct at 0x{m.address_:x} has task_size 0x{size:x}, which x86-64 never sets")
    return size


def vma_flags(vma: Struct) -> int:
    """vm_flags of a ``struct vm_area_struct`` (a union with __vm_flags since 6.3)."""
    return vma.vm_flags & ULONG_MAX


def vma_file(vma: Struct) -> Pointer | None:
    """The ``struct file *`` mapped by a VMA, or None for anonymous memory."""
    f = vma.vm_file
    return f if f else None


def vma_special_mapping_name(vma: Struct) -> str | None:
    """The name of a special mapping (``_install_special_mapping``: vm_ops ==
    &special_mapping_vmops, vm_private_data -> ``struct vm_special_mapping``), such as
    "[vdso]" or "[vvar]" ("[vvar_vclock]" too on 6.13+); None for other VMAs. Legacy
    special mappings (legacy_special_mapping_vmops) have no name, as in the kernel."""
    prog = vma.prog_
    ops = int(vma.vm_ops)
    if not ops or not prog.has_symbol("special_mapping_vmops"):
        return None
    if ops != prog.symbol_address("special_mapping_vmops"):
        return None
    sm = vma.vm_private_data
    if not sm:
        return None
    name = prog.pointer("vm_special_mapping", int(sm)).name
    if not name:
        return None
    return name.string_(64).decode("utf-8", "backslashreplace")


def vma_is_heap(vma: Struct, mm: Pointer | Struct) -> bool:
    """show_map_vma's [heap] test: the VMA overlaps [start_brk, brk]."""
    m = _mm(mm)
    return vma.vm_start <= m.brk and vma.vm_end >= m.start_brk


def vma_is_initial_stack(vma: Struct, mm: Pointer | Struct) -> bool:
    """show_map_vma's [stack] test: the VMA holds mm->start_stack."""
    m = _mm(mm)
    return vma.vm_start <= m.start_stack <= vma.vm_end


class GateVma(NamedTuple):
    start: int
    end: int
    flags: int


def gate_vma(mm: Pointer | Struct) -> GateVma | None:
    """The [vsyscall] page (arch/x86/entry/vsyscall get_gate_vma) as /proc/PID/maps shows
    it for this mm, or None: none when vsyscall_mode is NONE, or (CONFIG_COMPAT) when the
    mm lacks MM_CONTEXT_HAS_VSYSCALL (32-bit tasks)."""
    m = _mm(mm)
    prog = m.prog_
    if not prog.has_symbol("gate_vma") or not prog.has_symbol("vsyscall_mode"):
        return None
    mode = prog.read_u32(prog.symbol_address("vsyscall_mode"))
    # static enum { EMULATE, XONLY, NONE } vsyscall_mode: anonymous, read its constants
    t = prog.symbols.symbol_type("vsyscall_mode")
    none = getattr(t, "constants", {}).get("NONE", 2)
    if mode == none:
        return None
    if m.has_member_("context"):
        ctx_flags = m.context.flags
        if not (ctx_flags >> MM_CONTEXT_HAS_VSYSCALL) & 1:
            return None
    # gate_vma is a struct vm_area_struct (the ISF may type the symbol as a pointer).
    g = prog.struct("vm_area_struct", prog.symbol_address("gate_vma"))
    return GateVma(g.vm_start, g.vm_end, vma_flags(g))


# ------------------------------------------------------------------------- mm fields


def mm_saved_auxv(mm: Pointer | Struct) -> list[int]:
    """mm->saved_auxv as (type, value) words up to and including the AT_NULL pair (what
    /proc/PID/auxv shows), bounded by the array's length."""
    m = _mm(mm)
    arr = m.saved_auxv
    n = len(arr)
    raw = arr.read_()
    words = struct.unpack(f"<{n}Q", raw[: 8 * n])
    out: list[int] = []
    for i in range(0, n - 1, 2):
        out += [words[i], words[i + 1]]
        if words[i] == AT_NULL:
            return out
    # No AT_NULL within the array: the kernel would stop at the end too.
    return out


def mm_exe_file(mm: Pointer | Struct) -> Pointer | None:
    """mm->exe_file (``struct file *``) or None."""
    f = _mm(mm).exe_file
    return f if f else None


def mm_flags(mm: Pointer | Struct) -> int:
    """The first word of mm->flags: an unsigned long, or (7.x) mm_flags_t's bitmap, whose
    first word holds every flag below 64 (MMF_*)."""
    flags = _mm(mm).flags
    return flags.member_("__mm_flags")[0] if isinstance(flags, Struct) else flags


def task_dumpable(task: Struct) -> int:
    """get_dumpable() of a ``struct task_struct`` with an mm, as prctl(PR_GET_DUMPABLE) gives
    it: SUID_DUMP_DISABLE 0, SUID_DUMP_USER 1, SUID_DUMP_ROOT 2. The low bits of mm->flags, or
    where the task has an exec state of its own (7.x), its ``exec_state->dumpable``."""
    if task.has_member_("exec_state"):
        state = task.exec_state
        if not state:
            raise GuestDataError(f"pid {task.pid} has no exec_state")
        return int(state.dumpable) & MMF_DUMPABLE_MASK
    return mm_flags(task.mm) & MMF_DUMPABLE_MASK


def mm_thp_disabled(mm: Pointer | Struct) -> bool:
    """prctl(PR_GET_THP_DISABLE): MMF_DISABLE_THP in mm->flags."""
    return bool((mm_flags(mm) >> MMF_DISABLE_THP) & 1)


def mmap_write_owner(mm: Pointer | Struct) -> Struct | None:
    """The ``struct task_struct`` holding a ``struct mm_struct``'s mmap_lock for write
    (khugepaged collapsing, a racing mmap/munmap...), or None when it is not write-locked.
    While it is held the VMAs and page tables may be half-updated: khugepaged, for
    example, clears a PMD while it copies 512 pages into a new huge page."""
    return rwsem_write_owner(_mm(mm).mmap_lock)


def mm_page_tables(mm: Pointer | Struct) -> PageTables:
    """The user page tables (mm->pgd) of a ``struct mm_struct`` as `PageTables`."""
    m = _mm(mm)
    prog = m.prog_
    pgd = int(m.pgd)
    if not pgd:
        raise GuestDataError(f"mm_struct at 0x{m.address_:x} has no page tables")
    return PageTables(prog.source, prog.translate(pgd), prog.pgtable_levels, runs=prog.runs)


def mm_vdso_image(mm: Pointer | Struct) -> tuple[int, int] | None:
    """(kernel address, size) of the vDSO image mapped into this mm (mm->context.vdso_image
    ->data, ->size), or None. vdso_fault maps page i of the [vdso] VMA to data + i pages."""
    m = _mm(mm)
    if not m.has_member_("context"):
        return None
    img = m.context.vdso_image
    if not img:
        return None
    size = img.size
    if not 0 < size <= 1 << 20:
        raise GuestDataError(f"vdso_image at 0x{int(img):x} has size {size}")
    return int(img.data), size


# ------------------------------------------------------------------------- struct page


def vmemmap_base(prog: Program) -> int:
    """Start of the ``struct page`` array (SPARSEMEM_VMEMMAP), KASLR'd on x86-64."""
    cached = getattr(prog, "_vmemmap_base", None)
    if cached is None:
        cached = (
            prog.read_u64(prog.symbol_address("vmemmap_base"))
            if prog.has_symbol("vmemmap_base")
            else DEFAULT_VMEMMAP_BASE
        )
        prog._vmemmap_base = cached  # type: ignore[attr-defined]
    return cached


def zero_page_pfn(prog: Program) -> int:
    """The pfn of empty_zero_page (ZERO_PAGE: what read faults on anonymous memory map)."""
    cached = getattr(prog, "_zero_pfn", None)
    if cached is None:
        cached = prog.translate(prog.symbol_address("empty_zero_page")) >> PAGE_SHIFT
        prog._zero_pfn = cached  # type: ignore[attr-defined]
    return cached


def huge_zero_pfn(prog: Program) -> int | None:
    """The first pfn of the huge zero page (a 2 MiB THP read faults map), or None when
    it is not allocated (huge_zero_pfn == ~0UL) or the kernel has none."""
    if not prog.has_symbol("huge_zero_pfn"):
        return None
    v = prog.read_u64(prog.symbol_address("huge_zero_pfn"))
    return None if v == ULONG_MAX else v


#: struct pages read per bulk read when classifying pages (4096 pages = 256 KiB).
_PAGE_BATCH = 4096


def pages_anon(prog: Program, pfn: int, count: int) -> list[bool]:
    """PageAnon() of `count` consecutive page frames from `pfn`: the compound head's
    page->mapping has PAGE_MAPPING_ANON (anonymous and KSM pages; not page cache).
    Reads the struct pages in bulk from the vmemmap."""
    layout = page_layout(prog)
    ch_off, map_off = layout.compound_offset, layout.mapping_offset
    base = vmemmap_base(prog)
    out: list[bool] = []
    heads: dict[int, bool] = {}
    for b in range(0, count, _PAGE_BATCH):
        n = min(_PAGE_BATCH, count - b)
        raw = prog.read((base + (pfn + b) * STRUCT_PAGE_SIZE) & ULONG_MAX, n * STRUCT_PAGE_SIZE)
        for i in range(n):
            o = i * STRUCT_PAGE_SIZE
            ch = int.from_bytes(raw[o + ch_off : o + ch_off + 8], "little")
            if ch & 1:  # a tail page
                head = page_compound_head(layout, (base + (pfn + b + i) * STRUCT_PAGE_SIZE) & ULONG_MAX, ch)
                anon = heads.get(head)
                if anon is None:
                    anon = bool(prog.read_u64(head + map_off) & PAGE_MAPPING_ANON)
                    heads[head] = anon
                out.append(anon)
            else:
                out.append(bool(int.from_bytes(raw[o + map_off : o + map_off + 8], "little") & PAGE_MAPPING_ANON))
    return out


# ------------------------------------------------------------------------- page cache


def page_to_pfn(prog: Program, page: int) -> int:
    off = (page - vmemmap_base(prog)) & ULONG_MAX
    if off % STRUCT_PAGE_SIZE or off >> 52:
        raise GuestDataError(f"0x{page:x} is not a struct page address")
    return off // STRUCT_PAGE_SIZE


def page_cache_pfn(mapping: Pointer | Struct, index: int) -> int | None:
    """The pfn of page `index` (in pages) of a file's page cache (``struct address_space``
    i_pages: folios, or shadow/value entries for evicted pages), or None if not cached."""
    prog = mapping.prog_
    addr = int(mapping) if isinstance(mapping, Pointer) else mapping.address_
    if not addr:
        return None
    xa = prog.struct("xarray", addr + prog.member_offset("address_space", "i_pages"))
    entry = xa_load(xa, index)
    if not entry or entry & 1:  # empty, or a value (shadow) entry of an evicted page
        return None
    head = prog.struct("page", entry)
    first = page_index(head)
    if not 0 <= index - first < 1 << 18:  # a folio is at most PUD-sized
        raise GuestDataError(f"page cache entry for index {index} is a folio starting at {first}")
    return page_to_pfn(prog, entry) + (index - first)
