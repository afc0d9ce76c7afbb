"""Files with no name left, as CRIU saves them: ghost files.

A file unlinked while an fd or a mapping holds it, or a directory removed while it is a
process's cwd, has no path to reopen at restore. CRIU (files-reg.c, check_path_remap) saves
such an inode when no link to it is left (st_nlink 0): ghost-file-N.img holds its owner,
mode, times and contents, and restore recreates it beside its old path, opens it there and
removes it again. An inode unlinked under one name but linked under another CRIU links back
at dump time (a link remap), which needs the guest's file system written: refused here.

A file in the /proc directory of a process that has exited (a cwd left in /proc/PID) has no
name left either. CRIU saves its path and remaps it to the PID (a procfs remap): restore forks
a helper process with that PID, opens the file while the helper lives and reaps it after.

The contents come from the page cache: whole on a tmpfs (and the kernel's other shmem file
systems), whose page cache is its data and where lseek(SEEK_DATA) finds exactly the cached
pages; on any other file system only when every page is cached, read as one stretch.
"""

from __future__ import annotations

import dataclasses
import stat

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs import dcache
from ..kernel.fs.procfs import proc_pid_dir, proc_pid_dir_gone, proc_sb_pid_ns, super_block_is_proc
from ..kernel.fs.tmpfs import inode_nlink, shmem_symlink_target
from ..kernel.mm.pagecache import read_cached
from ..kernel.mm.shmem import PAGE_SIZE, inode_on_shmem, shmem_data_pages, shmem_pages_runs
from ..state import FileIdentity, GhostFile

__all__ = ["DEFAULT_GHOST_LIMIT", "Ghosts"]

#: criu's DEFAULT_GHOST_LIMIT: a bigger ghost file is refused unless --ghost-limit allows it
DEFAULT_GHOST_LIMIT = 1 << 20


class Ghosts:
    """The ghost files of one dump: each inode read once however many fds, mappings and cwds
    hold it, none bigger than `limit` bytes. `pid_ns` (``struct pid_namespace *``) is the
    dumped tree's, where restore gives an exited process's PID to its helper."""

    def __init__(self, limit: int = DEFAULT_GHOST_LIMIT, pid_ns: Pointer | None = None) -> None:
        self.limit = limit
        self.pid_ns = pid_ns
        self._by_inode: dict[int, GhostFile] = {}
        #: each exited process's PID a file is remapped to, with the first such file's path
        self.dead_pids: dict[int, str] = {}

    def named(self, identity: FileIdentity, path: Struct) -> FileIdentity:
        """`identity` of the file at ``struct path`` `path`, with its `GhostFile` when it has
        no name left, or the PID of the exited process whose /proc directory it is in.
        UnsupportedError (saying why, after the file's path) when CRIU would save it some
        other way or it cannot be read."""
        dentry = path.dentry
        if super_block_is_proc(dentry.d_sb):
            return self._in_proc(identity, dentry)
        if not identity.deleted:
            return identity
        inode = dentry.d_inode
        if not inode:
            raise GuestDataError(f"{identity.path}: dentry 0x{int(dentry):x} has no inode")
        key = int(inode)
        ghost = self._by_inode.get(key)
        if ghost is None:
            ghost = self._by_inode[key] = self._read(inode.deref(), identity.path)
        return dataclasses.replace(identity, ghost=ghost)

    def _in_proc(self, identity: FileIdentity, dentry: Pointer) -> FileIdentity:
        """criu's check_path_remap on procfs: a file in the /proc directory of a process that
        has exited is remapped to its PID."""
        found = proc_pid_dir(dentry)
        if found is None or not proc_pid_dir_gone(found[1]):
            if identity.deleted:
                raise UnsupportedError(
                    f"{identity.path} is gone from /proc (a thread or an entry that has exited) while its process"
                    " directory is not; CRIU's restore could not open it"
                )
            return identity
        pid = found[0]
        if self.pid_ns is not None and int(proc_sb_pid_ns(dentry.d_sb)) != int(self.pid_ns):
            raise UnsupportedError(
                f"{identity.path} is in the /proc directory of PID {pid}, which has exited, on a proc mount of"
                " another PID namespace than the dumped tree's; CRIU's restore would give that PID to a helper"
                " in the tree's namespace"
            )
        self.dead_pids.setdefault(pid, identity.path)
        return dataclasses.replace(identity, dead_pid=pid)

    def _read(self, inode: Struct, path: str) -> GhostFile:
        mode = dcache.inode_mode(inode)
        noun = "directory" if stat.S_ISDIR(mode) else "symbolic link" if stat.S_ISLNK(mode) else "file"
        what = f"the {noun} {path}, {'removed' if stat.S_ISDIR(mode) else 'unlinked'},"
        links = inode_nlink(inode)
        if links:
            raise UnsupportedError(
                f"{what} is still linked under {links} other name(s); CRIU links it back into the guest's file"
                " system (a link remap), which a dump from memory cannot"
            )
        size = dcache.inode_size(inode)
        ghost = GhostFile(
            dev=dcache.new_encode_dev(dcache.inode_sb_dev(inode)),
            ino=dcache.inode_ino(inode),
            mode=mode,
            uid=int(inode.i_uid.val),
            gid=int(inode.i_gid.val),
            rdev=dcache.new_encode_dev(int(inode.i_rdev)) if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else 0,
            atime=dcache.inode_time(inode, "a"),
            mtime=dcache.inode_time(inode, "m"),
            size=size,
        )
        if stat.S_ISLNK(mode):
            if not inode_on_shmem(inode) and not inode.i_link:
                raise UnsupportedError(f"{what} has its target on disk, not in memory")
            ghost.symlink_target = shmem_symlink_target(inode, path).decode("utf-8", "surrogateescape")
        elif stat.S_ISREG(mode) and size:
            if size > self.limit:
                raise UnsupportedError(
                    f"{what} holds {size} bytes, more than the {self.limit} a ghost file may hold (--ghost-limit"
                    " raises it, as criu dump's)"
                )
            ghost.data = _contents(inode, size, what)
        return ghost


#: include/uapi/linux/magic.h: a hugetlbfs page cache is indexed by huge page, not by 4 KiB page
HUGETLBFS_MAGIC = 0x958458F6


def _contents(inode: Struct, size: int, what: str) -> list[tuple[int, bytes]]:
    """(offset, bytes) of the data stretches of a regular file's `size` bytes."""
    prog = inode.prog_
    if inode_on_shmem(inode):
        found = shmem_data_pages(prog, inode.i_mapping, (size + PAGE_SIZE - 1) // PAGE_SIZE)
        if found.swapped:
            raise UnsupportedError(f"{what} has {found.swapped} pages swapped out, which a dump cannot read")
        # stretches of pages adjacent in the file, each read into one buffer
        stretches: list[tuple[int, bytearray]] = []
        for off, pa, length in shmem_pages_runs(found.pages):
            data = prog.source.read(pa, min(length, size - off))
            if stretches and stretches[-1][0] + len(stretches[-1][1]) == off:
                stretches[-1][1].extend(data)
            else:
                stretches.append((off, bytearray(data)))
        return [(off, bytes(data)) for off, data in stretches]
    if dcache.inode_sb_magic(inode) == HUGETLBFS_MAGIC:
        raise UnsupportedError(f"{what} is on hugetlbfs, whose contents a dump does not read yet")
    cached = read_cached(prog, prog.pointer("inode", inode.address_), 0, size)
    if cached is None:
        fstype = inode.i_sb.s_type.name.string_(64).decode(errors="replace")
        raise UnsupportedError(f"{what} is on {fstype} and not all of its {size} bytes are in the page cache")
    return [(0, cached)]
