"""mm-PID.img (the mm and its VMAs), pagemap-PID.img, and shared memory as CRIU 3.17
saves it: memfd.img, pagemap-shmem-INO.img and the pages-N.img of shmem inodes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...state import MmState, SharedMemory, Vma
from .. import images
from .common import F, M, Written, fown
from .files import FileTable

__all__ = [
    "VMA_ANON_PRIVATE",
    "VMA_ANON_SHARED",
    "VMA_AREA_HEAP",
    "VMA_AREA_MEMFD",
    "VMA_AREA_REGULAR",
    "VMA_AREA_SYSVIPC",
    "VMA_AREA_VDSO",
    "VMA_AREA_VSYSCALL",
    "VMA_AREA_VVAR",
    "VMA_FILE_PRIVATE",
    "VMA_FILE_SHARED",
    "ShmemImages",
    "mm_entry",
    "pagemap_entries",
    "vma_status",
]

# vma_entry.status bits (CRIU's VMA_AREA_*)
VMA_AREA_REGULAR = 0x1
VMA_AREA_VSYSCALL = 0x4
VMA_AREA_VDSO = 0x8
VMA_AREA_HEAP = 0x20
VMA_FILE_PRIVATE = 0x40
VMA_FILE_SHARED = 0x80
VMA_ANON_SHARED = 0x100
VMA_ANON_PRIVATE = 0x200
VMA_AREA_VVAR = 0x1000
VMA_AREA_SYSVIPC = 0x400
VMA_AREA_MEMFD = 0x4000


def vma_status(v: Vma) -> int:
    """The vma_entry.status CRIU 3.17 gives a VMA of this kind: anon 0x201, heap 0x221, private
    file 0x41, vdso 0x209, vvar 0x1201, vsyscall 0x204. CRIU sets no VMA_AREA_STACK for
    [stack]: it is plain anonymous memory there."""
    if v.kind == "vsyscall":
        return VMA_AREA_VSYSCALL | VMA_ANON_PRIVATE
    status = VMA_AREA_REGULAR
    if v.shmem is not None and v.shmem.sysv:
        return status | VMA_ANON_SHARED | VMA_AREA_SYSVIPC
    if v.kind == "file":
        # CRIU 3.17 handle_vma: every file of its shmem device (shared anonymous memory too)
        # is mapped as a memfd
        memfd = VMA_AREA_MEMFD if v.shmem is not None else 0
        return status | memfd | (VMA_FILE_SHARED if v.shared else VMA_FILE_PRIVATE)
    status |= VMA_ANON_SHARED if v.shared else VMA_ANON_PRIVATE
    if v.kind == "heap":
        status |= VMA_AREA_HEAP
    elif v.kind == "vdso":
        status |= VMA_AREA_VDSO
    elif v.kind == "vvar":
        status |= VMA_AREA_VVAR
    return status


def mm_entry(mm: MmState, files: FileTable, shmem: ShmemImages) -> M.mm_entry:
    """The mm_entry of a process: its mm fields, saved auxv and every VMA, naming the files
    they map in `files` (file ids are handed out here, in VMA order, as CRIU does)."""
    entry = M.mm_entry(
        mm_start_code=mm.start_code,
        mm_end_code=mm.end_code,
        mm_start_data=mm.start_data,
        mm_end_data=mm.end_data,
        mm_start_stack=mm.start_stack,
        mm_start_brk=mm.start_brk,
        mm_brk=mm.brk,
        mm_arg_start=mm.arg_start,
        mm_arg_end=mm.arg_end,
        mm_env_start=mm.env_start,
        mm_env_end=mm.env_end,
        mm_saved_auxv=mm.auxv,
        dumpable=mm.dumpable,
        thp_disabled=mm.thp_disabled,
    )
    if mm.exe_file is not None:
        entry.exe_file_id = files.regular(mm.exe_file)
    for vma in mm.vmas:
        v = entry.vmas.add(
            start=vma.start,
            end=vma.end,
            pgoff=vma.pgoff,
            shmid=0,
            prot=vma.prot,
            flags=vma.flags,
            status=vma_status(vma),
            fd=-1,
        )
        if vma.shmem is not None:
            shmem.map(vma, v)
        elif vma.file is not None:
            # dump_filemap leaves fd_parms.flags 0; the open mode is the VMA's fdflags
            v.shmid = files.regular(vma.file)
            v.fdflags = vma.file_flags
        if vma.madvise:
            v.madv = vma.madvise
    return entry


def pagemap_entries(pages_id: int, runs: list[tuple[int, int, int]]) -> list[M.pagemap_head | M.pagemap_entry]:
    """A pagemap image's head (naming pages-`pages_id`.img) and one entry per run of pages."""
    # the count twice: CRIU 3.x reads the 32-bit field, 4.2 the 64-bit one
    return [
        M.pagemap_head(pages_id=pages_id),
        *(M.pagemap_entry(vaddr=v, nr_pages=n, nr_pages_64=n, flags=f) for v, n, f in runs),
    ]


class ShmemImages:
    """What CRIU 3.17's memfd.c writes for VMAs mapping files of its shmem device (shared
    anonymous memory and memfds): one MEMFD file entry per inode (files.img; the VMAs' shmid),
    memfd.img with the inodes in the order met, and each inode's contents as
    pagemap-shmem-<ino>.img plus a pages-N.img. CRIU dumps an inode when it collects the
    mappings of the first process mapping it, before that process's own pages, so its
    contents take the next pages-N number there."""

    def __init__(
        self,
        directory: Path,
        files: FileTable,
        next_pages_id: Callable[[], int],
        write_pages: Callable[[SharedMemory, Path], list[tuple[int, int, int]]] | None,
        written: Written,
        pagemaps_here: bool = True,  # False: a page server writes them
    ) -> None:
        self.directory = directory
        self.pagemaps_here = pagemaps_here
        self.files = files
        self.next_pages_id = next_pages_id
        self.write_pages = write_pages
        self.written = written
        self.inodes: dict[int, tuple[int, SharedMemory]] = {}  # ino -> (memfd inode_id, shmem)
        self.file_ids: dict[int, int] = {}  # ino -> MEMFD file entry id

    def map(self, vma: Vma, entry: M.vma_entry) -> None:
        """Fill in the vma_entry of a VMA mapping a shmem file: its memfd file id and open
        mode; System V segments are named by their shmid (the inode number) instead."""
        shm = vma.shmem
        assert shm is not None
        entry.shmid = shm.ino if shm.sysv else self.memfd_file_id(shm)
        entry.fdflags = vma.file_flags

    def memfd_file_id(self, shm: SharedMemory) -> int:
        """dump_one_memfd_cond: one file entry per inode (fd_id_generate_special keys VMA
        files by device and inode), flags and pos 0 as dump_filemap leaves them."""
        fid = self.file_ids.get(shm.ino)
        if fid is not None:
            return fid
        fid, slot = self.files.reserve()  # the entry comes before what dumping the inode writes
        inode_id = self.dump_inode(shm)
        self.files.entries[slot] = F.file_entry(
            type=F.MEMFD, id=fid, memfd=F.memfd_file_entry(id=fid, flags=0, pos=0, fown=fown(None), inode_id=inode_id)
        )
        self.file_ids[shm.ino] = fid
        return fid

    def dump_inode(self, shm: SharedMemory) -> int:
        """dump_unique_memfd_inode: inode ids count from 1; dump_one_memfd_shmem writes no
        pagemap for an empty file."""
        known = self.inodes.get(shm.ino)
        if known is not None:
            return known[0]
        inode_id = len(self.inodes) + 1
        self.inodes[shm.ino] = (inode_id, shm)
        if shm.size > 0:
            self.write_contents(shm)
        return inode_id

    def write_contents(self, shm: SharedMemory) -> None:
        if self.write_pages is None:
            raise ValueError("write_dump needs write_shmem_pages to save shared memory")
        pages_id = self.next_pages_id()
        runs = self.write_pages(shm, self.directory / images.PAGES.filename(pages_id))
        if self.pagemaps_here:
            images.write_image(
                self.directory / images.SHMEM_PAGEMAP.filename(shm.ino),
                images.SHMEM_PAGEMAP,
                pagemap_entries(pages_id, runs),
            )
            self.written.images += 1
        self.written.pages += sum(nr for _, nr, _ in runs)

    def inode_entries(self) -> list[F.memfd_inode_entry]:
        """memfd.img: the inodes in the order they were met."""
        return [
            F.memfd_inode_entry(
                name=shm.name,
                uid=shm.uid,
                gid=shm.gid,
                size=shm.size,
                shmid=shm.ino,
                seals=shm.seals,
                inode_id=inode_id,
                mode=shm.mode,  # CRIU 4.x's; 3.x's restore skips the field
            )
            for inode_id, shm in sorted(self.inodes.values(), key=lambda t: t[0])
        ]
