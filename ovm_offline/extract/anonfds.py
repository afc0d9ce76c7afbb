"""eventfd, signalfd, timerfd and epoll files held by a dumped process, as CRIU saves them.

`attach_anon_fds` gives every `OpenFile` of kind "eventfd", "signalfd", "timerfd" or
"eventpoll" its state (ovm_offline.kernel.fs.anonfds): what the file's /proc fdinfo shows,
which is what CRIU 3.17 copies into its images. A file shared by several processes gets
its state once, from the first process that holds it (as CRIU dumps it once).

An epoll target is saved by fd number, so it must be open, at that number and on the same
file, among the saved fds of the process (CRIU's restore re-adds it with epoll_ctl on that
fd). A target that was closed or replaced, or one ovm-offline cannot save, is refused.

Eventfds in semaphore mode (EFD_SEMAPHORE) are refused: CRIU 3.17 has no image field for
the flag, so its restore would make a plain eventfd whose reads return the whole count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.fs.anonfds import (
    epitem_event,
    epitem_target,
    eventfd_count,
    eventfd_ctx_of,
    eventfd_is_semaphore,
    eventpoll_items,
    eventpoll_of,
    signalfd_ctx_of,
    signalfd_mask,
    timerfd_clockid,
    timerfd_ctx_of,
    timerfd_interval_ns,
    timerfd_remaining_ns,
    timerfd_settime_flags,
    timerfd_ticks,
)
from ..kernel.fs.dcache import inode_ino, inode_sb_dev
from ..kernel.fs.fdtable import file_inode_ptr, file_pos
from ..state import EpollState, EpollTarget, EventfdState, Fd, SignalfdState, TimerfdState

if TYPE_CHECKING:
    from ..kernel.core.memory import Program

#: OpenFile.kind -> the OpenFile field its state goes to
ANON_FD_KINDS = {"eventfd": "eventfd", "signalfd": "signalfd", "timerfd": "timerfd", "eventpoll": "epoll"}


def eventfd_state(file) -> EventfdState:
    """The `EventfdState` of an eventfd's ``struct file *``."""
    ctx = eventfd_ctx_of(file)
    return EventfdState(count=eventfd_count(ctx), semaphore=eventfd_is_semaphore(ctx))


def signalfd_state(file) -> SignalfdState:
    """The `SignalfdState` of a signalfd's ``struct file *``."""
    return SignalfdState(sigmask=signalfd_mask(signalfd_ctx_of(file)))


def timerfd_state(file) -> TimerfdState:
    """The `TimerfdState` of a timerfd's ``struct file *``, time left as of the snapshot."""
    ctx = timerfd_ctx_of(file)
    return TimerfdState(
        clock_id=timerfd_clockid(ctx),
        ticks=timerfd_ticks(ctx),
        settime_flags=timerfd_settime_flags(ctx),
        value_ns=timerfd_remaining_ns(ctx),
        interval_ns=timerfd_interval_ns(ctx),
    )


class EpollTargetNotSaved(UnsupportedError):
    """An epoll watches a file that is not a saved fd of the process at the number it was added."""


def epoll_state(file, fds: list[Fd]) -> EpollState:
    """The `EpollState` of an epoll's ``struct file *`` held by a process whose saved fds
    are `fds`; EpollTargetNotSaved if a target is not among them."""
    saved = {fd.fd: fd.file.key for fd in fds}
    targets = []
    for epi in eventpoll_items(eventpoll_of(file)):
        tfd, tfile = epitem_target(epi)
        if saved.get(tfd) != int(tfile):
            raise EpollTargetNotSaved(
                f"an epoll watching fd {tfd}, which is {'not open' if tfd not in saved else 'open on another file'}"
                " among the saved fds (closed, replaced, or of a kind that cannot be saved); "
                "ovm-offline cannot save such an epoll yet"
            )
        events, data = epitem_event(epi)
        inode = file_inode_ptr(tfile)
        targets.append(
            EpollTarget(
                fd=tfd, events=events, data=data, dev=inode_sb_dev(inode), ino=inode_ino(inode), pos=file_pos(tfile)
            )
        )
    return EpollState(targets=targets)


def _guest_data(pid: int, fd: Fd, e: GuestDataError) -> GuestDataError:
    return GuestDataError(f"pid {pid} fd {fd.fd} ({fd.file.identity.path}): {e}")


def attach_anon_fds(prog: Program, fds: list[Fd], *, pid: int, comm: str, unsupported: list[str] | None = None) -> None:
    """Fill the eventfd / signalfd / timerfd / epoll state of the saved fds `fds` of
    process `pid` (`comm` for messages). Epolls come last, their targets looked up in
    `fds`. A file that cannot be saved (a semaphore eventfd, an epoll watching a file not
    saved) is an UnsupportedError, or, when `unsupported` is given, is taken out of `fds`
    and described there (which may leave out an epoll watching it in turn)."""

    def refuse(fd: Fd, reason: str) -> None:
        message = f"PID {pid} ({comm}) fd {fd.fd}: {reason}"
        if unsupported is None:
            raise UnsupportedError(message)
        unsupported.append(message)
        fds.remove(fd)

    epolls = []
    for fd in list(fds):
        f = fd.file
        field_name = ANON_FD_KINDS.get(f.kind)
        if field_name is None or getattr(f, field_name) is not None:
            continue  # another kind, or a file met in an earlier process of the tree
        if f.kind == "eventpoll":
            epolls.append(fd)
            continue
        file = prog.pointer("file", f.key)
        try:
            if f.kind == "eventfd":
                state = eventfd_state(file)
                if state.semaphore:
                    # CRIU 3.17 has no image field for it: its restore would make a plain
                    # eventfd whose reads return the whole count
                    refuse(fd, "an eventfd in semaphore mode (EFD_SEMAPHORE), which criu 3.17 cannot restore")
                    continue
                f.eventfd = state
            elif f.kind == "signalfd":
                f.signalfd = signalfd_state(file)
            else:
                f.timerfd = timerfd_state(file)
        except GuestDataError as e:
            raise _guest_data(pid, fd, e) from None
    while True:
        refused = None
        for fd in epolls:
            try:
                fd.file.epoll = epoll_state(prog.pointer("file", fd.file.key), fds)
            except EpollTargetNotSaved as e:
                refused, reason = fd, str(e)
                break
            except GuestDataError as e:
                raise _guest_data(pid, fd, e) from None
        if refused is None:
            return
        refuse(refused, reason)
        # start over without it: another epoll may have been watching it
        epolls.remove(refused)
        for fd in epolls:
            fd.file.epoll = None
