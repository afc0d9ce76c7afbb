"""timerfd files: clock, expirations not yet read, time left and interval, as
timerfd_gettime() and /proc fdinfo show them (timerfd_entry)."""

from __future__ import annotations

import dataclasses

from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..kernel.core.objects import Pointer
from ..kernel.fs.anonfds import (
    timerfd_clockid,
    timerfd_ctx_of,
    timerfd_interval_ns,
    timerfd_remaining_ns,
    timerfd_settime_flags,
    timerfd_ticks,
)
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved

__all__ = ["KIND", "TimerfdState"]

NSEC_PER_SEC = 10**9


@dataclasses.dataclass
class TimerfdState(FileState):
    """A timerfd (struct timerfd_ctx) as timerfd_gettime() and /proc fdinfo show it."""

    clock_id: int  # CLOCK_* it was created on
    ticks: int  # expirations not yet read
    settime_flags: int  # TFD_TIMER_ABSTIME / TFD_TIMER_CANCEL_ON_SET
    value_ns: int  # time left as of the snapshot; 0 when disarmed or already expired
    interval_ns: int


def extract_timerfd(ctx: ExtractContext, f: OpenFile, file: Pointer) -> TimerfdState:
    """Time left as of the snapshot."""
    t = timerfd_ctx_of(file)
    return TimerfdState(
        clock_id=timerfd_clockid(t),
        ticks=timerfd_ticks(t),
        settime_flags=timerfd_settime_flags(t),
        value_ns=timerfd_remaining_ns(t),
        interval_ns=timerfd_interval_ns(t),
    )


class TimerfdWriter:
    fd_type = F.TIMERFD

    def write(self, table: FileTable, f: OpenFile) -> int:
        t = f.state
        assert isinstance(t, TimerfdState)
        fid = table.next_id()
        entry = F.timerfd_entry(
            id=fid,
            flags=f.flags,
            fown=fown(f.owner),
            clockid=t.clock_id,
            ticks=t.ticks,
            settime_flags=t.settime_flags,
            vsec=t.value_ns // NSEC_PER_SEC,
            vnsec=t.value_ns % NSEC_PER_SEC,
            isec=t.interval_ns // NSEC_PER_SEC,
            insec=t.interval_ns % NSEC_PER_SEC,
        )
        table.entries.append(F.file_entry(type=F.TIMERFD, id=fid, tfd=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="timerfd",
    noun="a timerfd",
    marks=Marks(fops=("timerfd_fops",)),
    saved=Saved(writer=TimerfdWriter, fd_type=F.TIMERFD, state_type=TimerfdState, extract=extract_timerfd),
)
