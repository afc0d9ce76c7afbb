"""The files of a tmpfs (mm/shmem.c) as its dentries and page cache hold them.

A tmpfs has no disk: every name it holds is a dentry under its super block's root, every
regular file's data is its page cache (or swap), a short symlink's target is a kmalloc'ed
string (``inode->i_link``) and a longer one page 0 of its page cache (shmem_symlink). So a
tmpfs read from memory is whole, which is what lets a dump archive one as ``criu dump``
archives it with tar.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass

from ...errors import GuestDataError, UnsupportedError
from ...state.ns import TmpfsFile
from ..core.objects import Pointer, Struct
from ..mm.shmem import PAGE_SIZE, shmem_data_pages
from .dcache import d_unhashed, dentry_name, inode_ino, inode_mode, inode_size, inode_time
from .namei import WalkBudget, dentry_children

__all__ = ["MAX_TMPFS_BYTES", "ByteBudget", "inode_mtime", "inode_nlink", "shmem_symlink_target", "tmpfs_files"]

#: the data one dump archives from the tmpfs mounts of a container: far more than a /dev, a
#: masked directory or a small /dev/shm hold; more is refused by name, not held in memory
MAX_TMPFS_BYTES = 64 << 20
PATH_MAX = 4096


@dataclass
class ByteBudget:
    """How many more bytes of tmpfs file data one dump may archive."""

    left: int = MAX_TMPFS_BYTES


def inode_mtime(inode: Struct) -> int:
    """The modification time of a ``struct inode`` in whole seconds."""
    return inode_time(inode, "m")[0]


def inode_nlink(inode: Pointer | Struct) -> int:
    """i_nlink of a ``struct inode``."""
    return int(inode.i_nlink)


def _shmem_data(inode: Pointer | Struct, size: int, what: str) -> bytes:
    """The first `size` bytes of a shmem file, holes read as zeros."""
    prog = inode.prog_
    nr_pages = (size + PAGE_SIZE - 1) // PAGE_SIZE
    found = shmem_data_pages(prog, inode.i_mapping, nr_pages)
    if found.swapped:
        raise UnsupportedError(f"{what} has {found.swapped} pages swapped out, which a dump cannot read")
    data = bytearray(size)
    for index, pfn in found.pages:
        start = index * PAGE_SIZE
        data[start : start + PAGE_SIZE] = prog.source.read(pfn * PAGE_SIZE, PAGE_SIZE)[: size - start]
    return bytes(data)


def shmem_symlink_target(inode: Pointer | Struct, what: str) -> bytes:
    """The target of a tmpfs symlink's ``struct inode``."""
    size = inode_size(inode)
    if not 0 < size < PATH_MAX:
        raise GuestDataError(f"{what}: a symlink of {size} bytes")
    link = inode.i_link
    if link:
        return inode.prog_.read(int(link), size)
    return _shmem_data(inode, size, what)


def _tmpfs_file(path: str, inode: Struct, data_budget: ByteBudget, what: str) -> TmpfsFile:
    mode = inode_mode(inode)
    size = inode_size(inode)
    uid, gid = int(inode.i_uid.val), int(inode.i_gid.val)
    file = TmpfsFile(path, mode, uid, gid, inode_mtime(inode), int(inode.i_rdev), inode_ino(inode), inode_nlink(inode))
    if stat.S_ISLNK(mode):
        file.target = shmem_symlink_target(inode, what)
    elif stat.S_ISREG(mode) and size:
        data_budget.left -= size
        if data_budget.left < 0:
            raise UnsupportedError(
                f"{what} holds {size} bytes: more tmpfs data than the {MAX_TMPFS_BYTES >> 20} MiB a dump archives"
            )
        file.data = _shmem_data(inode, size, what)
    return file


def tmpfs_files(root: Struct, where: str, budget: WalkBudget, data_budget: ByteBudget) -> list[TmpfsFile]:
    """Every file of the tmpfs whose root is the ``struct dentry`` `root`, the root first
    (path ""), each directory before what it holds; `where` names the tmpfs in errors;
    `data_budget` is what regular files may still hold, shared by one dump."""
    files: list[TmpfsFile] = []
    stack: list[tuple[str, Struct]] = [("", root)]
    while stack:
        path, dentry = stack.pop()
        what = f"{where}/{path}" if path else where
        file = _tmpfs_file(path, dentry.d_inode.deref(), data_budget, what)
        files.append(file)
        if not stat.S_ISDIR(file.mode):
            continue
        children = []
        for child in dentry_children(dentry, budget):
            if d_unhashed(child):
                continue  # unlinked while open: no longer a name of the tmpfs
            name = dentry_name(child).decode("utf-8", "surrogateescape")
            if name in ("", ".", "..") or "/" in name:
                raise GuestDataError(f"{what}: a dentry named {name!r}")
            child_path = f"{path}/{name}" if path else name
            if len(child_path) >= PATH_MAX:
                raise GuestDataError(f"{what}: a path longer than {PATH_MAX} bytes")
            children.append((child_path, child))
        stack.extend(reversed(children))  # depth first, each directory's in its list's order
    return files
