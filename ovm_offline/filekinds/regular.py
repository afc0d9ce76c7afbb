"""Regular files, directories, symlinks and device files other than ttys (CRIU saves /dev/null
as a regular file): the common OpenFile fields are all CRIU records (reg_file_entry)."""

from __future__ import annotations

from ..criu.build.common import F
from ..criu.build.files import ExtraImage, FileTable
from ..state import OpenFile
from .base import S_IFBLK, S_IFCHR, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG, FileKind, Marks, Saved

__all__ = ["KIND"]


class RegularWriter:
    fd_type = F.REG

    def write(self, table: FileTable, f: OpenFile) -> int:
        return table.regular(f.identity, f.flags, f.pos, key=("file", f.key), owner=f.owner)

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


def unsaved_regular_file(f: OpenFile) -> str | None:
    """Why a regular file, directory or device node cannot be saved as a path, or None: one
    unlinked while open has no path to reopen (CRIU saves its contents as a ghost file)."""
    if f.identity.deleted:
        what = "a directory removed" if f.identity.mode & S_IFMT == S_IFDIR else "a file unlinked"
        return (
            f"{what} while open ({f.identity.path}); CRIU saves it as a ghost file, which ovm-offline"
            " does not write yet"
        )
    return None


KIND = FileKind(
    name="reg",
    noun="a file",
    marks=Marks(modes=(S_IFREG, S_IFDIR, S_IFLNK, S_IFBLK, S_IFCHR)),
    saved=Saved(writer=RegularWriter, fd_type=F.REG, check=unsaved_regular_file),
)
