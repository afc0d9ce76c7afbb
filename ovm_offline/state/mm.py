"""Memory: VMAs, the pages to save, shared memory files, the mm."""

from __future__ import annotations

import dataclasses
from typing import Literal

#: What a VMA is, as /proc/PID/maps names it (a file mapping is "file").
VmaKind = Literal["anon", "file", "heap", "stack", "vdso", "vvar", "vsyscall"]

__all__ = ["VmaKind", "FileIdentity", "GhostFile", "Vma", "PageRun", "SharedMemory", "MmState", "UserWrite"]


@dataclasses.dataclass
class GhostFile:
    """The inode of a file with no name left (unlinked, or a directory removed, while an fd, a
    mapping or a cwd holds it): what CRIU's ghost-file image recreates it from at restore."""

    dev: int  # st_dev: the user-visible encoding of its file system's s_dev
    ino: int
    mode: int
    uid: int
    gid: int
    rdev: int  # st_rdev of a device node (user-visible encoding), else 0
    atime: tuple[int, int]  # (seconds, nanoseconds)
    mtime: tuple[int, int]
    size: int
    # (offset, bytes) of every stretch of data lseek(SEEK_DATA/SEEK_HOLE) finds, ascending,
    # within size: a regular file's contents, its holes left out
    data: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    symlink_target: str | None = None  # of a symbolic link (undecodable bytes as surrogates)


@dataclasses.dataclass
class FileIdentity:
    """What names an open file or mapped file: enough to find it again and to tell two
    struct files (or two inodes) apart."""

    path: str
    dev: int
    ino: int
    size: int
    mode: int
    deleted: bool = False  # unlinked: `path` is where it was (no " (deleted)" suffix)
    build_id: bytes | None = None  # NT_GNU_BUILD_ID of an ELF file, from the page cache
    mnt_id: int = 0  # the id of the mount it was reached through (mountinfo's first field)
    ghost: GhostFile | None = None  # its inode, when it has no name left to reopen it by
    dead_pid: int | None = None  # the exited process whose /proc directory it is in (a helper takes the PID)


@dataclasses.dataclass
class Vma:
    start: int
    end: int
    pgoff: int  # bytes
    prot: int  # PROT_*
    flags: int  # MAP_*
    kind: VmaKind
    file: FileIdentity | None = None
    file_flags: int = 0  # O_* of the mapped struct file
    madvise: int = 0  # MADV_* bits CRIU records (1 << MADV_x)
    shared: bool = False
    shmem: SharedMemory | None = None  # the file is on the kernel's internal shmem mount


@dataclasses.dataclass
class PageRun:
    """Present user pages to save: `length` bytes at user `vaddr`, guest-physically contiguous
    at `paddr` (so the writer can copy them from the source in one go)."""

    vaddr: int
    paddr: int
    length: int
    lazy: bool = False  # CRIU marks these pages PE_LAZY (anonymous private memory)


@dataclasses.dataclass(frozen=True)
class UserWrite:
    """Bytes the kernel stores into a process as it ends a call that a signal interrupted
    (nanosleep's remaining time, select's timeval): laid over its saved pages."""

    vaddr: int
    data: bytes


@dataclasses.dataclass
class SharedMemory:
    """A file of the kernel's internal shmem mount that a VMA maps: anonymous shared memory
    (MAP_SHARED|MAP_ANONYMOUS, named "/dev/zero"), a memfd, or a System V segment (`sysv`;
    its inode number is the shmid). CRIU 3.17 saves the first two as memfd inodes, the
    contents of all of them as a shmem pagemap named by `ino`."""

    ino: int
    name: str  # the path without " (deleted)" and "/memfd:", as memfd.img names it
    uid: int
    gid: int
    size: int  # i_size in bytes
    seals: int  # F_GET_SEALS
    mode: int  # i_mode (st_mode): CRIU 4.x saves it and its restore sets it with fchmod
    pages: list[PageRun]  # vaddr = offset in the file: the data pages lseek(SEEK_DATA) finds
    swapped_pages: int = 0  # data pages swapped out: not in memory, not saved
    sysv: bool = False


@dataclasses.dataclass
class MmState:
    start_code: int
    end_code: int
    start_data: int
    end_data: int
    start_stack: int
    start_brk: int
    brk: int
    arg_start: int
    arg_end: int
    env_start: int
    env_end: int
    auxv: list[int]  # (type, value) words up to and including AT_NULL, at most 44 (CRIU's limit)
    exe_file: FileIdentity | None
    vmas: list[Vma]
    dumpable: int
    thp_disabled: bool
    pages: list[PageRun]  # ascending vaddr, only inside private VMAs CRIU dumps
    swapped_pages: int = 0  # present in no dump: counted and reported
    zero_pages: int = 0  # mapped to the zero page: not saved, as CRIU does
    user_writes: list[UserWrite] = dataclasses.field(default_factory=list)  # over `pages`
