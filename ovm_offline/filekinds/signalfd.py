"""signalfd files: the signals they read (signalfd_entry)."""

from __future__ import annotations

import dataclasses

from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..kernel.core.objects import Pointer
from ..kernel.fs.anonfds import signalfd_ctx_of, signalfd_mask
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved

__all__ = ["KIND", "SignalfdState"]


@dataclasses.dataclass
class SignalfdState(FileState):
    """A signalfd (struct signalfd_ctx): the signals it reads, bit n-1 = signal n, as
    /proc fdinfo reports them (the kernel stores the complement)."""

    sigmask: int


def extract_signalfd(ctx: ExtractContext, f: OpenFile, file: Pointer) -> SignalfdState:
    return SignalfdState(sigmask=signalfd_mask(signalfd_ctx_of(file)))


class SignalfdWriter:
    fd_type = F.SIGNALFD

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, SignalfdState)
        fid = table.next_id()
        entry = F.signalfd_entry(id=fid, flags=f.flags, fown=fown(f.owner), sigmask=f.state.sigmask)
        table.entries.append(F.file_entry(type=F.SIGNALFD, id=fid, sgfd=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="signalfd",
    noun="a signalfd",
    marks=Marks(fops=("signalfd_fops",)),
    saved=Saved(writer=SignalfdWriter, fd_type=F.SIGNALFD, state_type=SignalfdState, extract=extract_signalfd),
)
