"""Regular files, directories, symlinks and device files other than ttys (CRIU saves /dev/null
as a regular file): the common OpenFile fields are all CRIU records (reg_file_entry)."""

from __future__ import annotations

from ..criu.build.common import F
from ..criu.build.files import ExtraImage, FileTable
from ..state import OpenFile
from .base import S_IFBLK, S_IFCHR, S_IFDIR, S_IFLNK, S_IFREG, FileKind, Marks, Saved

__all__ = ["KIND"]


class RegularWriter:
    fd_type = F.REG

    def write(self, table: FileTable, f: OpenFile) -> int:
        return table.regular(f.identity, f.flags, f.pos, key=("file", f.key), owner=f.owner)

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="reg",
    noun="a file",
    marks=Marks(modes=(S_IFREG, S_IFDIR, S_IFLNK, S_IFBLK, S_IFCHR)),
    saved=Saved(writer=RegularWriter, fd_type=F.REG),
)
