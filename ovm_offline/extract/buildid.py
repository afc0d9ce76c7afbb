"""Build-ids of the ELF files a process uses, which CRIU records so that restore can check it
finds the same files; read from the guest's page cache."""

from __future__ import annotations

from ..kernel.core.memory import Program
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs.fdtable import for_each_file, task_files
from ..kernel.mm.mmap import for_each_vma
from ..kernel.mm.pagecache import inode_build_id
from ..state import FileIdentity, ProcessState

__all__ = ["attach_build_ids"]


S_IFMT, S_IFREG = 0o170000, 0o100000


def task_inodes(task: Struct) -> dict[tuple[int, int], Pointer]:
    """``struct inode *`` of every file ``task_struct`` `task` maps or has open, by (dev, ino)."""
    files = []
    mm = task.mm
    if mm:
        if mm.exe_file:
            files.append(mm.exe_file)
        files += [vma.vm_file for vma in for_each_vma(mm) if vma.vm_file]
    table = task_files(task)
    if table is not None:
        files += [f for _, f in for_each_file(table)]
    inodes = {}
    for f in files:
        inode = f.f_inode
        inodes[(inode.i_sb.s_dev, inode.i_ino)] = inode
    return inodes


def attach_build_ids(prog: Program, task: Struct, proc: ProcessState) -> None:
    """Fill `build_id` of every regular-file identity of `proc` (exe, mappings, fds)."""
    inodes = task_inodes(task)
    cache: dict[tuple[int, int], bytes | None] = {}

    def fill(identity: FileIdentity | None) -> None:
        if identity is None or (identity.mode & S_IFMT) != S_IFREG:
            return
        key = (identity.dev, identity.ino)
        if key not in cache:
            inode = inodes.get(key)
            cache[key] = inode_build_id(prog, inode) if inode is not None else None
        identity.build_id = cache[key]

    if proc.mm is not None:
        fill(proc.mm.exe_file)
        for vma in proc.mm.vmas:
            fill(vma.file)
    for fd in proc.fds:
        fill(fd.file.identity)
