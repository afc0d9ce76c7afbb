"""Shared memory as CRIU 3.17 saves it: the shmem file behind a VMA (anonymous shared
memory, a memfd, a System V segment) turned into a `SharedMemory`.

CRIU (proc_parse.c handle_vma) treats every mapping of a file on its "shmem device" (the
internal shm_mnt) as a memfd: the VMA becomes VMA_FILE_SHARED|VMA_AREA_MEMFD (or
VMA_FILE_PRIVATE) with the memfd file's id as shmid, and memfd.c dumps the inode once:
memfd.img (name, owner, size, seals, shmid = inode number) and pagemap-shmem-<ino>.img
with the pages lseek(SEEK_DATA) finds. A /SYSV... file is a System V segment instead:
VMA_ANON_SHARED|VMA_AREA_SYSVIPC with the shmid, its pages saved with the IPC namespace
(ipc_ns.c, extract/ipc.py), which CRIU dumps when the tree has an IPC namespace of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kernel.core.objects import Pointer
from ..kernel.fs import dcache
from ..kernel.mm.shmem import SYSV_NAME_PREFIX, file_on_shm_mnt, shmem_data_pages, shmem_pages_runs, shmem_seals
from ..state import PageRun, SharedMemory

__all__ = ["shared_memory_of"]


if TYPE_CHECKING:
    from ..kernel.core.memory import Program

PAGE_SIZE = 4096
MEMFD_PREFIX = "/memfd:"


def criu_memfd_name(path: str) -> str:
    """memfd.img's name for a shmem file's path (already without " (deleted)"): CRIU's
    dump_one_memfd drops the "/memfd:" of memfd_create files and keeps other paths."""
    return path[len(MEMFD_PREFIX) :] if path.startswith(MEMFD_PREFIX) else path


def shared_memory_of(prog: Program, file: Pointer, cache: dict[int, SharedMemory]) -> SharedMemory | None:
    """The `SharedMemory` of a mapped ``struct file`` on the internal shmem mount, or None
    for any other file. Files of one inode share one object (cached by inode address), so
    its page cache is walked once however many VMAs and processes map it."""
    if not file_on_shm_mnt(file):
        return None
    inode = dcache.file_inode(file)
    key = int(inode)
    found = cache.get(key)
    if found is not None:
        return found
    ident = dcache.file_identity(file)
    size = dcache.inode_size(inode)
    nr_pages = (size + PAGE_SIZE - 1) // PAGE_SIZE if size > 0 else 0
    data = shmem_data_pages(prog, inode.i_mapping, nr_pages)
    shm = SharedMemory(
        ino=ident.ino,
        name=criu_memfd_name(ident.path),
        uid=inode.i_uid.val,
        gid=inode.i_gid.val,
        size=size,
        seals=shmem_seals(inode),
        mode=int(inode.i_mode),
        pages=[PageRun(off, pa, n) for off, pa, n in shmem_pages_runs(data.pages)],
        swapped_pages=data.swapped,
        sysv=ident.path.startswith(SYSV_NAME_PREFIX),
    )
    cache[key] = shm
    return shm
