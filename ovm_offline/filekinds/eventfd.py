"""eventfd files: the counter, as /proc fdinfo shows it and CRIU 3.17 saves it (eventfd_file_entry).

Eventfds in semaphore mode (EFD_SEMAPHORE) are refused: CRIU 3.17 has no image field for the
flag, so its restore would make a plain eventfd whose reads return the whole count.
"""

from __future__ import annotations

import dataclasses

from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer
from ..kernel.fs.anonfds import eventfd_count, eventfd_ctx_of, eventfd_is_semaphore
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved

__all__ = ["KIND", "EventfdState"]


@dataclasses.dataclass
class EventfdState(FileState):
    """An eventfd (struct eventfd_ctx): its counter, and whether reads take one at a time
    (EFD_SEMAPHORE; CRIU 3.17 has no field for it, so such eventfds are refused)."""

    count: int
    semaphore: bool = False


def extract_eventfd(ctx: ExtractContext, f: OpenFile, file: Pointer) -> EventfdState:
    ctx_ = eventfd_ctx_of(file)
    state = EventfdState(count=eventfd_count(ctx_), semaphore=eventfd_is_semaphore(ctx_))
    if state.semaphore:
        raise UnsupportedError("an eventfd in semaphore mode (EFD_SEMAPHORE), which criu 3.17 cannot restore")
    return state


class EventfdWriter:
    fd_type = F.EVENTFD

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, EventfdState)
        fid = table.next_id()
        entry = F.eventfd_file_entry(id=fid, flags=f.flags, fown=fown(f.owner), counter=f.state.count)
        table.entries.append(F.file_entry(type=F.EVENTFD, id=fid, efd=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="eventfd",
    noun="an eventfd",
    marks=Marks(fops=("eventfd_fops",)),
    saved=Saved(writer=EventfdWriter, fd_type=F.EVENTFD, state_type=EventfdState, extract=extract_eventfd),
)
