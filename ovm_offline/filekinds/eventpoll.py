"""epoll instances: every watched fd with its events and data, in the kernel's tree order, the
order /proc fdinfo lists them in (eventpoll_file_entry).

A target is saved by fd number, and CRIU's restore re-adds it with epoll_ctl on that fd: the
number it was added with when that fd is still open on its file, else (the fd closed or reused
since, the file open at another) the lowest fd of the process open on its file, which is where
criu's kcmp lookup finds it. A target the process holds at no saved fd is refused; so is an
epoll whose target is left out later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ..criu.build.common import U64, F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer
from ..kernel.fs.anonfds import epitem_event, epitem_target, eventpoll_items, eventpoll_of
from ..kernel.fs.dcache import inode_ino, inode_sb_dev
from ..kernel.fs.fdtable import file_inode_ptr, file_pos
from ..state import Fd, FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved

__all__ = ["KIND", "EpollState", "EpollTarget"]


@dataclasses.dataclass
class EpollTarget:
    """One file an epoll instance watches (struct epitem), with what CRIU records of it."""

    fd: int  # the fd number given to epoll_ctl(), open on the same file in the process
    events: int  # EPOLL* mask as the kernel keeps it (EPOLLERR | EPOLLHUP included)
    data: int  # the user's 64-bit cookie
    dev: int  # the target inode's s_dev, kernel encoding (MAJOR << 20 | MINOR)
    ino: int
    pos: int  # the target file's f_pos


@dataclasses.dataclass
class EpollState(FileState):
    """An epoll instance (struct eventpoll): its targets in the kernel's tree order, the
    order /proc fdinfo lists them in."""

    targets: list[EpollTarget] = dataclasses.field(default_factory=list)


def extract_eventpoll(ctx: ExtractContext, f: OpenFile, file: Pointer) -> EpollState:
    """The targets of an epoll, each looked up among the process's saved fds."""
    saved = {fd.fd: fd.file.key for fd in ctx.fds}
    targets = []
    for epi in eventpoll_items(eventpoll_of(file)):
        tfd, tfile = epitem_target(epi)
        if saved.get(tfd) != int(tfile):
            elsewhere = sorted(n for n, key in saved.items() if key == int(tfile))
            if not elsewhere:
                where = "not open" if tfd not in saved else "open on another file"
                raise UnsupportedError(
                    f"an epoll watching fd {tfd}, which is {where} among the saved fds, and whose file no other"
                    " saved fd of the process holds (closed, passed away, or of a kind that cannot be saved)"
                )
            tfd = elsewhere[0]
        events, data = epitem_event(epi)
        inode = file_inode_ptr(tfile)
        targets.append(
            EpollTarget(
                fd=tfd, events=events, data=data, dev=inode_sb_dev(inode), ino=inode_ino(inode), pos=file_pos(tfile)
            )
        )
    return EpollState(targets=targets)


def dangling_targets(tree: Sequence[Fd]) -> Callable[[Fd, Sequence[Fd]], str | None]:
    """An epoll watching an fd of its process that was left out."""

    def check(fd: Fd, process_fds: Sequence[Fd]) -> str | None:
        assert isinstance(fd.file.state, EpollState)
        saved = {f.fd for f in process_fds}
        gone = [t.fd for t in fd.file.state.targets if t.fd not in saved]
        return f"an epoll watching fd {gone[0]}, which is left out" if gone else None

    return check


class EventpollWriter:
    fd_type = F.EVENTPOLL

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, EpollState)
        fid = table.next_id()
        # each target's own id stays 0: CRIU 3.17 embeds them in the epoll's entry and never sets it
        tfds = [
            F.eventpoll_tfd_entry(id=0, tfd=t.fd, events=t.events, data=t.data, dev=t.dev, inode=t.ino, pos=t.pos & U64)
            for t in f.state.targets
        ]
        entry = F.eventpoll_file_entry(id=fid, flags=f.flags, fown=fown(f.owner), tfd=tfds)
        table.entries.append(F.file_entry(type=F.EVENTPOLL, id=fid, epfd=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="eventpoll",
    noun="an epoll instance",
    marks=Marks(fops=("eventpoll_fops",)),
    saved=Saved(
        writer=EventpollWriter,
        fd_type=F.EVENTPOLL,
        state_type=EpollState,
        extract=extract_eventpoll,
        late=True,
        dangling=dangling_targets,
    ),
)
