"""Regular files, directories, symlinks and device files other than ttys (CRIU saves /dev/null
as a regular file): the common OpenFile fields are all CRIU records (reg_file_entry), and for
one with no name left (unlinked while open, a directory removed) the ghost file CRIU recreates
it from (extract/ghost.py)."""

from __future__ import annotations

import dataclasses

from ..criu.build.common import F
from ..criu.build.files import ExtraImage, FileTable
from ..kernel.core.objects import Pointer
from ..state import FileState, GhostFile, OpenFile
from .base import S_IFBLK, S_IFCHR, S_IFDIR, S_IFLNK, S_IFREG, ExtractContext, FileKind, Marks, Saved

__all__ = ["KIND", "RegularState"]


@dataclasses.dataclass
class RegularState(FileState):
    """The inode of a file with no name left, which restore recreates, or the exited process
    whose /proc directory it is in (None for the others)."""

    ghost: GhostFile | None = None
    dead_pid: int | None = None


def extract_regular(ctx: ExtractContext, f: OpenFile, file: Pointer) -> RegularState:
    named = ctx.ghosts.named(f.identity, file.f_path)
    return RegularState(ghost=named.ghost, dead_pid=named.dead_pid)


class RegularWriter:
    fd_type = F.REG

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, RegularState)
        identity = dataclasses.replace(f.identity, ghost=f.state.ghost, dead_pid=f.state.dead_pid)
        return table.regular(identity, f.flags, f.pos, key=("file", f.key), owner=f.owner)

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="reg",
    noun="a file",
    marks=Marks(modes=(S_IFREG, S_IFDIR, S_IFLNK, S_IFBLK, S_IFCHR)),
    saved=Saved(writer=RegularWriter, fd_type=F.REG, state_type=RegularState, extract=extract_regular),
)
