"""VMAs as CRIU 3.17 records them (vma_entry): what /proc/PID/smaps shows and CRIU's
parse_smaps turns into prot, MAP_* flags, madvise bits, pgoff and kind; and which VMAs CRIU
saves pages of, lazily or not. See mm.py for the whole picture."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.core.paging import PAGE_SIZE
from ..kernel.fs import dcache
from ..kernel.mm.mmap import (
    VM_DONTCOPY,
    VM_DONTDUMP,
    VM_EXEC,
    VM_GROWSDOWN,
    VM_HUGEPAGE,
    VM_HUGETLB,
    VM_IO,
    VM_LOCKED,
    VM_MAYSHARE,
    VM_MERGEABLE,
    VM_NOHUGEPAGE,
    VM_NORESERVE,
    VM_PFNMAP,
    VM_RAND_READ,
    VM_READ,
    VM_SEQ_READ,
    VM_WRITE,
    gate_vma,
    vma_file,
    vma_flags,
    vma_is_heap,
    vma_is_initial_stack,
    vma_special_mapping_name,
)
from ..state import FileIdentity, Vma, VmaKind

__all__ = [
    "CRIU_AUXV_WORDS",
    "MAP_ANONYMOUS",
    "MAP_GROWSDOWN",
    "MAP_HUGETLB",
    "MAP_LOCKED",
    "MAP_NORESERVE",
    "MAP_PRIVATE",
    "MAP_SHARED",
    "PROT_EXEC",
    "criu_can_be_lazy",
    "criu_dumps_pages_of",
    "criu_lazy_allowed",
    "vm_madvise",
    "vm_map_flags",
    "vm_prot",
    "vma_to_state",
    "vsyscall_vma",
]


if TYPE_CHECKING:
    pass

# include/uapi/asm-generic/mman-common.h, arch/x86/include/uapi/asm/mman.h
PROT_READ = 0x1
PROT_WRITE = 0x2
PROT_EXEC = 0x4
MAP_SHARED = 0x01
MAP_PRIVATE = 0x02
MAP_ANONYMOUS = 0x20
MAP_GROWSDOWN = 0x0100
MAP_LOCKED = 0x2000
MAP_NORESERVE = 0x4000
MAP_HUGETLB = 0x40000
MADV_RANDOM = 1
MADV_SEQUENTIAL = 2
MADV_DONTFORK = 10
MADV_MERGEABLE = 12
MADV_HUGEPAGE = 14
MADV_NOHUGEPAGE = 15
MADV_DONTDUMP = 16

# include/linux/fs.h f_mode
FMODE_READ = 0x1
FMODE_WRITE = 0x2

#: CRIU 3.17 x86 AT_VECTOR_SIZE: it reads at most this many auxv words (6.12 has more,
#: so its AT_NULL pair is cut off) and restore refuses an image with more.
CRIU_AUXV_WORDS = 44

# (VM flag, MADV bit) in the order CRIU's __parse_vmflags matches VmFlags letters.
_MADV_BITS = (
    (VM_SEQ_READ, MADV_SEQUENTIAL),  # sr
    (VM_RAND_READ, MADV_RANDOM),  # rr
    (VM_DONTCOPY, MADV_DONTFORK),  # dc
    (VM_DONTDUMP, MADV_DONTDUMP),  # dd
    (VM_MERGEABLE, MADV_MERGEABLE),  # mg
    (VM_HUGEPAGE, MADV_HUGEPAGE),  # hg
    (VM_NOHUGEPAGE, MADV_NOHUGEPAGE),  # nh
)
_MAP_BITS = (
    (VM_GROWSDOWN, MAP_GROWSDOWN),  # gd
    (VM_LOCKED, MAP_LOCKED),  # lo
    (VM_NORESERVE, MAP_NORESERVE),  # nr
    (VM_HUGETLB, MAP_HUGETLB),  # ht
)


# ------------------------------------------------------------------------- VMAs


def vm_prot(flags: int) -> int:
    """PROT_* of vm_flags (the rwx of /proc/PID/maps)."""
    return (
        (PROT_READ if flags & VM_READ else 0)
        | (PROT_WRITE if flags & VM_WRITE else 0)
        | (PROT_EXEC if flags & VM_EXEC else 0)
    )


def vm_madvise(flags: int) -> int:
    """The madvise bits (1 << MADV_x) CRIU records for vm_flags."""
    out = 0
    for vm, madv in _MADV_BITS:
        if flags & vm:
            out |= 1 << madv
    return out


def vm_map_flags(flags: int, anonymous: bool) -> int:
    """MAP_* CRIU records for vm_flags: shared/private from VM_MAYSHARE, anonymous when
    no file backs the VMA, and the VmFlags-derived gd/lo/nr/ht bits."""
    out = MAP_SHARED if flags & VM_MAYSHARE else MAP_PRIVATE
    if anonymous:
        out |= MAP_ANONYMOUS
    for vm, mp in _MAP_BITS:
        if flags & vm:
            out |= mp
    return out


def file_open_flags(file: Pointer) -> int:
    """The fdflags CRIU records for a mapped file: O_RDONLY/O_WRONLY/O_RDWR from the
    file's f_mode, as the mode of its /proc/PID/map_files link shows it."""
    mode = file.f_mode
    r, w = bool(mode & FMODE_READ), bool(mode & FMODE_WRITE)
    if r and w:
        return os.O_RDWR
    if w:
        return os.O_WRONLY
    return os.O_RDONLY


def vma_to_state(vma: Struct, mm: Struct) -> Vma:
    """Convert one ``struct vm_area_struct`` to the `Vma` CRIU's parse_smaps would make."""
    flags = vma_flags(vma)
    start, end = vma.vm_start, vma.vm_end
    prot = vm_prot(flags)
    f = vma_file(vma)
    ident: FileIdentity | None = None
    file_flags = 0
    kind: VmaKind
    if f is not None:
        ident = dcache.file_identity(f)
        file_flags = file_open_flags(f)
        kind = "file"
    else:
        special = vma_special_mapping_name(vma)
        # handle_vdso_vma/handle_vvar_vma: the status only while the protection is intact.
        if special == "[vdso]" and prot & (PROT_READ | PROT_EXEC) == PROT_READ | PROT_EXEC:
            kind = "vdso"
        elif special is not None and special.startswith("[vvar") and prot & PROT_READ:
            kind = "vvar"  # 6.13+ adds "[vvar_vclock]"; 6.1 and 6.12 have one "[vvar]"
        elif special is not None:
            kind = "anon"
        elif vma_is_heap(vma, mm):
            kind = "heap"
        elif vma_is_initial_stack(vma, mm):
            kind = "stack"
        else:
            kind = "anon"
    shared = bool(flags & VM_MAYSHARE)
    if flags & (VM_IO | VM_PFNMAP) and kind != "vvar" and not (f is not None and shared):
        raise UnsupportedError(f"VMA 0x{start:x}-0x{end:x} is VM_IO/VM_PFNMAP (a device mapping): CRIU cannot dump it")
    pgoff = (vma.vm_pgoff << 12) if f is not None else 0
    if pgoff + (end - start) > 1 << 64:
        # vm_pgoff is in pages: mmap refuses an offset whose mapping would end past 2**64
        raise GuestDataError(f"VMA 0x{start:x}-0x{end:x} maps its file from offset 0x{pgoff:x}, past 2**64")
    return Vma(
        start=start,
        end=end,
        pgoff=pgoff,
        prot=prot,
        flags=vm_map_flags(flags, anonymous=f is None),
        kind=kind,
        file=ident,
        file_flags=file_flags,
        madvise=vm_madvise(flags),
        shared=shared,
    )


def vsyscall_vma(mm: Struct) -> Vma | None:
    """The [vsyscall] entry CRIU records from /proc/PID/maps when the kernel emulates
    vsyscalls (the gate VMA is no VMA of the mm); None on kernels booted without it."""
    g = gate_vma(mm)
    if g is None:
        return None
    return Vma(
        start=g.start, end=g.end, pgoff=0, prot=vm_prot(g.flags), flags=MAP_PRIVATE | MAP_ANONYMOUS, kind="vsyscall"
    )


def criu_dumps_pages_of(v: Vma, task_size: int) -> bool:
    """vma_entry_is_private: regular, private anonymous or private file, below TASK_SIZE."""
    return not v.shared and v.kind != "vsyscall" and v.end <= task_size


def criu_lazy_allowed(thread_sps: Iterable[int]) -> bool:
    """False when CRIU 3.17's is_stack() holds for every page: it tests
    ``!((sp ^ vaddr) & ~PAGE_MASK)`` (meant: same page; does: sp's page offset is 0), so
    a thread whose stack pointer is page-aligned makes no page of the process lazy."""
    return not any(sp & (PAGE_SIZE - 1) == 0 for sp in thread_sps)


def criu_can_be_lazy(v: Vma) -> bool:
    """vma_entry_can_be_lazy: private anonymous, not locked, vdso, vsyscall or hugetlb."""
    return bool(
        v.flags & MAP_ANONYMOUS
        and v.flags & MAP_PRIVATE
        and not v.flags & (MAP_LOCKED | MAP_HUGETLB)
        and v.kind not in ("vdso", "vsyscall")
    )
