"""The memory of a process as CRIU 3.17 records it: VMAs, mm fields, and the pages to save.

`extract_mm(prog, task)` reads ``task->mm`` into an `MmState`. VMAs are what
/proc/PID/smaps shows and CRIU's parse_smaps turns into vma_entry: prot from
VM_READ/WRITE/EXEC; MAP_SHARED for VM_MAYSHARE (the maps "s"), else MAP_PRIVATE;
MAP_ANONYMOUS without a file; MAP_GROWSDOWN/LOCKED/NORESERVE/HUGETLB and the madvise
bits from the VmFlags letters CRIU understands (gd lo nr ht; sr rr dc dd mg hg nh);
pgoff in bytes for file mappings (0 for anonymous ones, as maps prints it); kind from
the maps name ([vdso], [vvar], [heap], [stack], [vsyscall]). Shared anonymous memory is a
file mapping here (its vm_file is "/dev/zero" on the internal shmem mount): such VMAs, and
memfd and System V segment ones, carry a `SharedMemory` (extract/shmem.py), whose pages
CRIU saves once per file, not per process; System V segments are MAP_ANONYMOUS to CRIU.

Which pages CRIU saves (criu/mem.c should_dump_page over /proc/PID/pagemap), for
"private" VMAs only (regular, anonymous or file-backed private, below TASK_SIZE):

* [vdso]: every page, present or not; [vvar]: none.
* private file mappings: only pages that are anonymous (COW'd: PageAnon); page-cache
  pages (pagemap PM_FILE) are left to the file. A VMA without anon_vma has none.
* otherwise every present page except the zero page (kdat.zero_page_pfn); swapped-out
  pages too, which a memory snapshot cannot read: they are counted in swapped_pages.
* PE_LAZY for anonymous private VMAs (not vdso/vsyscall/locked/hugetlb), unless a
  thread's stack pointer is page-aligned: CRIU 3.17's is_stack() tests
  ``!((sp ^ vaddr) & ~PAGE_MASK)``, i.e. the page offset of sp is 0, and then no page
  of the process is lazy.

Two artefacts of CRIU's own dump are reproduced so images equal golden ones
(`criu_compat`): compel injects its syscall at the first executable VMA (find_executable_area)
with ptrace pokes and restores the bytes, which COWs that first page into an anonymous
page, so CRIU saves it (same bytes as the file page). And the huge zero page is saved
like any page, because CRIU 3.17 compares pfns only with the 4 KiB zero page's: pass
`skip_huge_zero=True` to leave those 512-page stretches of zeros out (equivalent on
restore, where a missing private page reads as zeros).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.invariants import broken
from ..kernel.core.objects import Struct
from ..kernel.core.paging import PAGE_SIZE, PTE_PRESENT, NonPresent, Run
from ..kernel.fs import dcache
from ..kernel.mm.mmap import (
    for_each_vma,
    huge_zero_pfn,
    mm_exe_file,
    mm_page_tables,
    mm_saved_auxv,
    mm_task_size,
    mm_thp_disabled,
    mm_vdso_image,
    mmap_write_owner,
    page_cache_pfn,
    pages_anon,
    task_dumpable,
    vma_file,
    zero_page_pfn,
)
from ..kernel.task.tasks import task_comm
from ..state import MmState, PageRun, SharedMemory, Vma
from .ghost import Ghosts
from .shmem import shared_memory_of

if TYPE_CHECKING:
    from ..kernel.core.memory import Program
from .vma import (
    CRIU_AUXV_WORDS,
    MAP_ANONYMOUS,
    PROT_EXEC,
    criu_can_be_lazy,
    criu_dumps_pages_of,
    criu_lazy_allowed,
    vma_to_state,
    vsyscall_vma,
)

__all__ = ["MmBusyError", "extract_mm"]


# ------------------------------------------------------------------------- pages


class _Counters:
    __slots__ = ("swapped", "zero")

    def __init__(self) -> None:
        self.zero = 0
        self.swapped = 0


def _cut(runs: Iterable[tuple[int, int, int]], lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
    """Remove physical range [lo, hi) from (vaddr, paddr, length) runs."""
    for v, p, n in runs:
        if p + n <= lo or p >= hi:
            yield v, p, n
            continue
        if p < lo:
            yield v, p, lo - p
        if p + n > hi:
            d = hi - p
            yield v + d, hi, n - d


def _without_zero_pages(
    run: Run, zero_pa: int, huge: tuple[int, int] | None, counters: _Counters
) -> Iterator[tuple[int, int, int]]:
    v, p, n = run
    pieces: Iterable[tuple[int, int, int]] = ((v, p, n),)
    if p <= zero_pa < p + n:
        counters.zero += 1
        pieces = _cut(pieces, zero_pa, zero_pa + PAGE_SIZE)
    if huge is not None and p < huge[1] and huge[0] < p + n:
        counters.zero += (min(p + n, huge[1]) - max(p, huge[0])) // PAGE_SIZE
        pieces = _cut(pieces, huge[0], huge[1])
    return iter(list(pieces))


def _anon_pieces(prog: Program, v: int, p: int, n: int) -> Iterator[tuple[int, int, int]]:
    """The PageAnon sub-runs of a run in a private file mapping."""
    flags = pages_anon(prog, p >> 12, n >> 12)
    i = 0
    count = len(flags)
    while i < count:
        if not flags[i]:
            i += 1
            continue
        j = i
        while j < count and flags[j]:
            j += 1
        yield v + i * PAGE_SIZE, p + i * PAGE_SIZE, (j - i) * PAGE_SIZE
        i = j


def _mapped_pages(
    prog: Program, pt, kvma: Struct, v: Vma, zero_pa: int, huge: tuple[int, int] | None, counters: _Counters
) -> Iterator[tuple[int, int, int]]:
    """The present pages of a VMA that CRIU saves: of a private file mapping only the anonymous
    (COW'd) ones, which only a VMA with an anon_vma can hold (the invariant
    ``vm_area_struct.anon_vma``: one without it that maps one is forged, and its pages would
    be left out unsaid)."""
    file_private = v.kind == "file"
    no_anon_vma = file_private and not kvma.anon_vma
    for item in pt.walk(v.start, v.end):
        if isinstance(item, NonPresent):
            if item.level > 1 and item.entry & PTE_PRESENT:
                raise GuestDataError(
                    f"page table of 0x{item.vaddr:x} (VMA 0x{v.start:x}-0x{v.end:x}) points outside guest memory"
                )
            counters.swapped += item.size // PAGE_SIZE
            continue
        for piece in _without_zero_pages(item, zero_pa, huge, counters):
            if not prog.runs.contains(piece[1], piece[2]):
                raise GuestDataError(f"user page 0x{piece[0]:x} maps physical 0x{piece[1]:x}, outside guest RAM")
            if not file_private:
                yield piece
                continue
            for anon in _anon_pieces(prog, *piece):
                if no_anon_vma:
                    raise broken(
                        "vm_area_struct.anon_vma",
                        f"VMA 0x{v.start:x}-0x{v.end:x} (a private file mapping, no anon_vma)",
                        f"maps the anonymous page 0x{anon[1]:x} at 0x{anon[0]:x}",
                    )
                yield anon


def _vdso_pages(prog: Program, pt, v: Vma, mm: Struct) -> Iterator[tuple[int, int, int]]:
    """Every page of the [vdso] VMA: mapped ones from the page tables, the others from
    the vDSO image (vdso_fault maps page i to image->data + i pages)."""
    image = mm_vdso_image(mm)
    for va in range(v.start, v.end, PAGE_SIZE):
        pa = pt.translate(va)
        if pa is None:
            if image is None or va - v.start >= image[1]:
                raise GuestDataError(f"[vdso] page 0x{va:x} is neither mapped nor in the vDSO image")
            pa = prog.translate(image[0] + (va - v.start))
        yield va, pa & ~(PAGE_SIZE - 1), PAGE_SIZE


def _first_exec_page(prog: Program, pt, vma: Struct, v: Vma, zero_pa: int) -> int | None:
    """Physical address of the first page of the VMA compel pokes its syscall into, as
    it is after the COW: the mapped page, the page-cache page of an unmapped file page,
    or the zero page for untouched anonymous memory."""
    pa = pt.translate(v.start)
    if pa is not None:
        return pa & ~(PAGE_SIZE - 1)
    f = vma_file(vma)
    if f is None:
        return zero_pa
    pfn = page_cache_pfn(f.f_mapping, vma.vm_pgoff)
    return None if pfn is None else pfn << 12


def merge_vvar(vmas: list[Vma]) -> list[Vma]:
    """The VMAs with adjacent vvar ones as one, as criu's maps parser merges them (a kernel
    with [vvar_vclock] after [vvar], 6.13+; criu restores one vvar area and remaps the
    kernel's own over it). Two vvar VMAs apart are guest data no kernel makes."""
    out: list[Vma] = []
    for v in vmas:
        last = out[-1] if out else None
        if last is not None and v.kind == "vvar" and last.kind == "vvar":
            if last.end != v.start:
                raise GuestDataError(f"two vvar VMAs apart: 0x{last.start:x}-0x{last.end:x}, 0x{v.start:x}-0x{v.end:x}")
            out[-1] = dataclasses.replace(last, end=v.end)
            continue
        out.append(v)
    return out


def _merge(runs: Iterable[PageRun]) -> list[PageRun]:
    out: list[PageRun] = []
    for r in runs:
        if out:
            last = out[-1]
            if last.lazy == r.lazy and last.vaddr + last.length == r.vaddr and last.paddr + last.length == r.paddr:
                last.length += r.length
                continue
        out.append(r)
    return out


def select_pages(
    prog: Program,
    mm: Struct,
    vmas: list[tuple[Struct | None, Vma]],
    *,
    lazy_ok: bool,
    criu_compat: bool = True,
    skip_huge_zero: bool = False,
) -> tuple[list[PageRun], int, int]:
    """The pages CRIU would save for these (kernel VMA, Vma) pairs, in ascending order,
    with the counts of zero-page and swapped-out pages skipped. `lazy_ok` is False when
    a thread's SP is page-aligned (CRIU's is_stack quirk)."""
    pt = mm_page_tables(mm)
    zero_pa = zero_page_pfn(prog) << 12
    hz = huge_zero_pfn(prog) if skip_huge_zero else None
    huge = (hz << 12, (hz << 12) + (2 << 20)) if hz is not None else None
    task_size = mm_task_size(mm)
    counters = _Counters()
    pages: list[PageRun] = []
    first_exec = next((i for i, (_k, v) in enumerate(vmas) if v.prot & PROT_EXEC), None)
    for idx, (kvma, v) in enumerate(vmas):
        if kvma is None or not criu_dumps_pages_of(v, task_size) or v.kind == "vvar":
            continue
        lazy = lazy_ok and criu_can_be_lazy(v)
        found: list[tuple[int, int, int]] = []
        if v.kind == "vdso":
            found.extend(_vdso_pages(prog, pt, v, mm))
        else:
            found.extend(_mapped_pages(prog, pt, kvma, v, zero_pa, huge, counters))
        if criu_compat and idx == first_exec:
            found = _with_first_page(prog, pt, kvma, v, zero_pa, found)
        pages.extend(PageRun(va, pa, n, lazy) for va, pa, n in found)
    return _merge(pages), counters.zero, counters.swapped


def _with_first_page(
    prog: Program, pt, kvma: Struct, v: Vma, zero_pa: int, found: list[tuple[int, int, int]]
) -> list[tuple[int, int, int]]:
    if found and found[0][0] == v.start:
        return found
    pa = _first_exec_page(prog, pt, kvma, v, zero_pa)
    if pa is None:
        return found  # neither mapped nor cached: CRIU read it from the file, we cannot
    return [(v.start, pa, PAGE_SIZE)] + found


# ------------------------------------------------------------------------- the mm


class MmBusyError(GuestDataError):
    """The address space was being changed when memory was captured (its mmap_lock held
    for write): its page tables may be mid-update, so the pages cannot be trusted."""


def thread_stack_pointers(task: Struct) -> list[int]:
    """The user stack pointer of every thread of a process (their saved pt_regs)."""
    from ..kernel.cpu.regs import task_pt_regs
    from ..kernel.task.tasks import thread_group

    return [task_pt_regs(t).sp & ((1 << 64) - 1) for t in thread_group(task)]


def task_mm_at_rest(prog: Program, task: Struct, allow_busy: bool) -> Struct:
    """The ``struct mm_struct`` of a task; MmBusyError when a task held its mmap_lock for write
    at capture time (its VMAs and page tables may be half changed), unless `allow_busy`."""
    mm_ptr = task.mm
    if not mm_ptr:
        raise GuestDataError(f"pid {task.pid} has no mm (a kernel thread or an exited task)")
    mm = prog.struct("mm_struct", int(mm_ptr))
    if not allow_busy:
        owner = mmap_write_owner(mm)
        if owner is not None:
            raise MmBusyError(
                f"pid {task.pid}: its address space was being changed by"
                f" {task_comm(owner)} (pid {owner.pid}) holding mmap_lock for write when"
                " memory was captured; capture it again"
            )
    return mm


def mm_vmas(
    prog: Program, mm: Struct, shmem_cache: dict[int, SharedMemory], ghosts: Ghosts
) -> list[tuple[Struct | None, Vma]]:
    """(``struct vm_area_struct``, `Vma`) of every VMA of a ``struct mm_struct``, those of shmem
    files with their `SharedMemory` (read once per file through `shmem_cache`), those of files
    with no name left with their ghost (UnsupportedError when one cannot be saved)."""
    pairs: list[tuple[Struct | None, Vma]] = [(k, vma_to_state(k, mm)) for k in for_each_vma(mm)]
    for kvma, v in pairs:
        f = vma_file(kvma) if kvma is not None else None
        if f is None:
            continue
        v.shmem = shared_memory_of(prog, f, shmem_cache)
        if v.shmem is not None and v.shmem.sysv:
            v.flags |= MAP_ANONYMOUS  # handle_vma: a System V segment is anonymous shared memory
        if v.shmem is None and v.file is not None:
            try:
                v.file = ghosts.named(v.file, f.f_path)
            except UnsupportedError as e:
                raise UnsupportedError(f"its mapping 0x{v.start:x}-0x{v.end:x} of {e}") from None
    return pairs


def extract_mm(
    prog: Program,
    task: Struct,
    *,
    thread_sps: list[int] | None = None,
    criu_compat: bool = True,
    skip_huge_zero: bool = False,
    allow_busy: bool = False,
    shmem_cache: dict[int, SharedMemory] | None = None,
    ghosts: Ghosts | None = None,
) -> MmState:
    """The memory of a ``struct task_struct`` (a thread-group leader with an mm) as an
    `MmState`: VMAs, mm fields, auxv (cut to CRIU's 44 words) and the page runs CRIU
    3.17 would save. `thread_sps` are the threads' user stack pointers (read from their
    pt_regs when not given); see the module doc for `criu_compat` and `skip_huge_zero`.
    Raises MmBusyError when a task held the mm's mmap_lock for write at capture time,
    unless `allow_busy`. VMAs of shmem files (shared anonymous memory, memfds, System V
    segments) get their `SharedMemory`; pass one `shmem_cache` dict for every process of
    a dump so that each shmem file is read once, and one `ghosts` for files with no name
    left (mapped, or the executable), whose inodes are saved as ghost files.
    UnsupportedError, naming the process, when one of those cannot be saved."""
    mm = task_mm_at_rest(prog, task, allow_busy)
    ghosts = Ghosts() if ghosts is None else ghosts
    exe = mm_exe_file(mm)
    try:
        pairs = mm_vmas(prog, mm, {} if shmem_cache is None else shmem_cache, ghosts)
        exe_file = ghosts.named(dcache.file_identity(exe), exe.f_path) if exe is not None else None
    except UnsupportedError as e:
        what = str(e) if str(e).startswith("its mapping") else f"its executable: {e}"
        raise UnsupportedError(f"PID {task.pid} ({task_comm(task)}): {what}") from None
    vsys = vsyscall_vma(mm)
    if vsys is not None:
        pairs.append((None, vsys))
    if thread_sps is None:
        thread_sps = thread_stack_pointers(task)
    lazy_ok = criu_lazy_allowed(thread_sps)
    pages, zero, swapped = select_pages(
        prog, mm, pairs, lazy_ok=lazy_ok, criu_compat=criu_compat, skip_huge_zero=skip_huge_zero
    )
    return MmState(
        start_code=mm.start_code,
        end_code=mm.end_code,
        start_data=mm.start_data,
        end_data=mm.end_data,
        start_stack=mm.start_stack,
        start_brk=mm.start_brk,
        brk=mm.brk,
        arg_start=mm.arg_start,
        arg_end=mm.arg_end,
        env_start=mm.env_start,
        env_end=mm.env_end,
        auxv=mm_saved_auxv(mm)[:CRIU_AUXV_WORDS],
        exe_file=exe_file,
        vmas=merge_vvar([v for _k, v in pairs]),
        dumpable=task_dumpable(task),
        thp_disabled=mm_thp_disabled(mm),
        pages=pages,
        swapped_pages=swapped,
        zero_pages=zero,
    )
