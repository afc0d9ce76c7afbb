"""Files of the kernel's internal shmem mount held open: memfds (memfd_create) and a shared
anonymous mapping's "/dev/zero" file opened through /proc/PID/map_files. CRIU 3.17 saves every
file on that mount as a memfd (criu/memfd.c dump_one_memfd): a MEMFD entry in files.img with the
open file's flags, offset and owner, naming its inode in memfd.img (name, owner, size, seals),
whose contents go to pagemap-shmem-INO.img once per inode, however many fds and mappings share
it. The inode is the same `SharedMemory` the mappings of it use (extract/shmem.py).
"""

from __future__ import annotations

import dataclasses

from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import GuestDataError, UnsupportedError
from ..extract.shmem import shared_memory_of
from ..kernel.core.objects import Pointer
from ..state import FileState, OpenFile, SharedMemory
from .base import ExtractContext, FileKind, Marks, Saved

__all__ = ["KIND", "MemfdState"]


@dataclasses.dataclass
class MemfdState(FileState):
    """The shmem inode an open memfd is a file of."""

    shmem: SharedMemory


def extract_memfd(ctx: ExtractContext, f: OpenFile, file: Pointer) -> MemfdState:
    shm = shared_memory_of(ctx.prog, file, ctx.shmem)
    if shm is None:
        raise GuestDataError("a shmem file that is not on the kernel's shm mount")
    if shm.sysv:
        raise UnsupportedError(f"a System V shared memory segment's file held open ({f.identity.path})")
    return MemfdState(shmem=shm)


class MemfdWriter:
    fd_type = F.MEMFD

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, MemfdState)
        fid, slot = table.reserve()  # dump_one_memfd dumps the inode before it writes the entry
        inode_id = table.memfd_inode_id(f.state.shmem)
        entry = F.memfd_file_entry(id=fid, flags=f.flags, pos=f.pos, fown=fown(f.owner), inode_id=inode_id)
        table.entries[slot] = F.file_entry(type=F.MEMFD, id=fid, memfd=entry)
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="memfd",
    noun="a memfd",
    marks=Marks(mount="shm_mnt"),
    saved=Saved(writer=MemfdWriter, fd_type=F.MEMFD, state_type=MemfdState, extract=extract_memfd),
)
