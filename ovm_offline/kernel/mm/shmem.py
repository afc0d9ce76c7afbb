"""Shared memory files of the kernel's internal tmpfs (mm/shmem.c ``shm_mnt``): what backs
MAP_SHARED|MAP_ANONYMOUS mappings (shmem_zero_setup: "/dev/zero (deleted)"), memfd_create
files ("/memfd:NAME (deleted)") and System V segments ("/SYSV%08x", inode number = shmid).

CRIU's kdat.shmem_dev is the st_dev of that mount, so "a file on shm_mnt" is exactly what
CRIU 3.17 treats as memfd (or, named /SYSV..., as System V shm). Its contents are the
inode's page cache; CRIU dumps the pages lseek(SEEK_DATA) reports: swap entries and
uptodate folios (mm/filemap.c folio_seek_hole_data), not holes or fallocated-only pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from ..ds.xarray import xa_for_each
from .mmap import page_to_pfn
from .page import page_flags, page_index

__all__ = [
    "SYSV_NAME_PREFIX",
    "file_on_shm_mnt",
    "inode_on_shmem",
    "shmem_data_pages",
    "shmem_pages_runs",
    "shmem_seals",
]


if TYPE_CHECKING:
    from ..core.memory import Program

PAGE_SIZE = 4096
#: The largest folio the page cache holds here (a PMD-sized THP): 512 pages.
MAX_FOLIO_PAGES = 512
SYSV_NAME_PREFIX = "/SYSV"


def shm_mnt_sb(prog: Program) -> int | None:
    """Address of the ``struct super_block`` of the internal shmem mount (``shm_mnt->mnt_sb``),
    or None when the kernel has no shm_mnt symbol or it is not set up."""
    cached = getattr(prog, "_shm_mnt_sb", False)
    if cached is not False:
        return cached
    sb = None
    if prog.has_symbol("shm_mnt"):
        mnt = prog.read_u64(prog.symbol_address("shm_mnt"))
        if mnt:
            sb = int(prog.pointer("vfsmount", mnt).mnt_sb) or None
    prog._shm_mnt_sb = sb  # type: ignore[attr-defined]
    return sb


def file_on_shm_mnt(file: Pointer | Struct) -> bool:
    """Whether a ``struct file`` is a file of the internal shmem mount (anonymous shared
    memory, a memfd or a System V segment) rather than of a mounted tmpfs or other fs."""
    sb = shm_mnt_sb(file.prog_)
    if sb is None:
        return False
    inode = file.f_inode
    return bool(inode) and int(inode.i_sb) == sb


def inode_on_shmem(inode: Pointer | Struct) -> bool:
    """Whether a ``struct inode`` belongs to a shmem file system (a tmpfs, or the internal shm
    mount): its super block's operations are ``shmem_ops``, so its page cache is its data."""
    prog = inode.prog_
    sb = inode.i_sb
    return bool(sb) and prog.has_symbol("shmem_ops") and int(sb.s_op) == prog.symbol_address("shmem_ops")


def shmem_inode_info(inode: Pointer | Struct) -> Struct:
    """The ``struct shmem_inode_info`` around a shmem ``struct inode`` (SHMEM_I)."""
    addr = int(inode) if isinstance(inode, Pointer) else inode.address_
    return inode.prog_.container_of(addr, "shmem_inode_info", "vfs_inode")


def shmem_seals(inode: Pointer | Struct) -> int:
    """F_GET_SEALS of a shmem ``struct inode`` (SHMEM_I(inode)->seals): F_SEAL_SEAL for
    anonymous shared memory and memfds created without MFD_ALLOW_SEALING."""
    return shmem_inode_info(inode).seals


class ShmemPages(NamedTuple):
    """What lseek(SEEK_DATA) finds in a shmem file: (page index, pfn) of every uptodate
    page in its page cache, and how many of its data pages are swapped out."""

    pages: list[tuple[int, int]]
    swapped: int


def shmem_data_pages(prog: Program, mapping: Pointer | Struct, nr_pages: int) -> ShmemPages:
    """The data pages below `nr_pages` of a shmem ``struct address_space`` (its i_pages
    xarray): folios with PG_uptodate give (index, pfn) for each page they cover; value
    entries are swapped-out pages, which are data too but not in memory."""
    addr = int(mapping) if isinstance(mapping, Pointer) else mapping.address_
    if not addr:
        raise GuestDataError("shmem file without an address_space")
    xa = prog.struct("xarray", addr + prog.member_offset("address_space", "i_pages"))
    uptodate_bit = prog.symbols.enum_value("pageflags", "PG_uptodate")
    pages: list[tuple[int, int]] = []
    swapped = 0
    if nr_pages <= 0:
        return ShmemPages(pages, 0)
    for first, span, entry in xa_for_each(prog, xa, nr_pages - 1):
        indices = range(first, min(first + span, nr_pages))
        if entry & 1:  # a swap entry (value entry)
            swapped += len(indices)
            continue
        head = prog.struct("page", entry)
        if not (page_flags(head) >> uptodate_bit) & 1:
            continue  # allocated (fallocate) but never written: a hole to SEEK_DATA
        head_index = page_index(head)
        head_pfn = page_to_pfn(prog, entry)
        for index in indices:
            if not 0 <= index - head_index < MAX_FOLIO_PAGES:
                raise GuestDataError(
                    f"page cache of address_space 0x{addr:x}: index {index} holds a folio"
                    f" starting at index {head_index}"
                )
            pages.append((index, head_pfn + index - head_index))
    return ShmemPages(pages, swapped)


def shmem_pages_runs(pages: list[tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
    """(file offset, physical address, length) runs of (index, pfn) pages, merging pages
    that are adjacent both in the file and in guest memory."""
    run: list[int] | None = None
    for index, pfn in pages:
        off, pa = index * PAGE_SIZE, pfn * PAGE_SIZE
        if run is not None and run[0] + run[2] == off and run[1] + run[2] == pa:
            run[2] += PAGE_SIZE
            continue
        if run is not None:
            yield run[0], run[1], run[2]
        run = [off, pa, PAGE_SIZE]
    if run is not None:
        yield run[0], run[1], run[2]
