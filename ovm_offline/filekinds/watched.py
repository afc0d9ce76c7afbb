"""An inode an inotify or fanotify mark watches, as criu 3.17 names it (fh_entry, criu/fsnotify.c):
by number, device and file handle, with the path its restore reopens the inode by. Shared by
both kinds' modules."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from ..criu.build.common import F
from ..criu.build.files import FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs.dcache import inode_ino, inode_sb_dev
from ..kernel.fs.fsnotify import exportfs_encode_fh, inode_paths_through_mounts
from ..kernel.fs.mounts import path_reaches_mount

__all__ = ["WatchedInode", "fh_words"]

#: criu's fh_entry holds a handle as this many 64-bit words, zero-padded (FH_ENTRY_SIZES__min_entries)
FH_WORDS = 16


@dataclasses.dataclass
class WatchedInode:
    """An inode an inotify or fanotify mark watches, as criu names it: by number, device and
    file handle, with the path its restore reopens it by."""

    ino: int
    dev: int  # the inode's s_dev, in the kernel's encoding (as fdinfo shows it)
    handle_type: int
    handle: bytes  # the file handle's bytes, as fdinfo's f_handle
    path: str  # its name in the process's mount namespace
    mnt_id: int  # the mount that name is through

    @classmethod
    def of(cls, inode: Pointer, mounts: list[Struct], mark: str) -> WatchedInode:
        """The watched `inode`; UnsupportedError naming the `mark` when criu could not name it."""
        handle = exportfs_encode_fh(inode)
        if handle is None:
            raise UnsupportedError(f"{mark} on a file system whose file handles ovm-offline cannot encode")
        names = inode_paths_through_mounts(inode, mounts)
        # criu's dump takes the first name whose open gives the inode back (alloc_openable)
        reached = [(path, m) for path, m in names if path_reaches_mount(path, m, mounts)]
        if not reached:
            if names:
                raise UnsupportedError(
                    f"{mark} on {names[0][0]}, which a mount over it hides"
                    " (criu's restore would reopen what is mounted there by that name)"
                )
            raise UnsupportedError(f"{mark} on an inode with no name left, or none a mount of the process reaches")
        path, mount = reached[0]
        return cls(
            ino=inode_ino(inode),
            dev=inode_sb_dev(inode),
            handle_type=handle[0],
            handle=handle[1],
            path=path,
            mnt_id=int(mount.mnt_id),
        )

    def fh_entry(self, table: FileTable) -> Any:
        """criu's fh_entry for the inode (naming its mount when criu saves the mount namespace)."""
        fh = F.fh_entry(bytes=len(self.handle), type=self.handle_type, handle=fh_words(self.handle), path=self.path)
        if table.mnt_ids:
            fh.mnt_id = self.mnt_id
        return fh


def fh_words(handle: bytes) -> list[int]:
    """A file handle's bytes as criu's fh_entry.handle: 64-bit little-endian words, zero-padded."""
    padded = handle.ljust(FH_WORDS * 8, b"\0")[: FH_WORDS * 8]
    return list(struct.unpack(f"<{FH_WORDS}Q", padded))
