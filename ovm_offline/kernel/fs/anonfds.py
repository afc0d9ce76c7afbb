"""Anon-inode files whose state lives in a context hung off ``file->private_data``:
eventfd (``struct eventfd_ctx``), signalfd (``struct signalfd_ctx``), timerfd (``struct
timerfd_ctx``) and epoll (``struct eventpoll``), read as their /proc/PID/fdinfo shows them
(which is what CRIU records).

* eventfd: ``count`` is the counter; ``flags`` holds EFD_SEMAPHORE (the fcntl flags are
  in the file's f_flags).
* signalfd: the context stores the *complement* of the mask given to signalfd(2), without
  SIGKILL and SIGSTOP; fdinfo complements it back.
* timerfd: ``t`` is an hrtimer, or an alarm for the *_ALARM clocks. fdinfo's it_value is
  the expiry minus the clock's "now" of the timer's base, 0 when that is not positive (a
  timer that fired stays unqueued at its old expiry until it is read), so a disarmed
  timer (expiry 0) shows 0 too. "Now" comes from the timekeeper (kernel/timers.py) and may
  lag the snapshot by up to a tick.
* epoll: the watched files are ``struct epitem``s in the red-black tree ``ep->rbr``, keyed
  by (file address, fd); fdinfo lists them in tree order. The walk is bounded (node count
  and depth) and stops with one GuestDataError on a loop or an unreadable node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from ..ds.rbtree import rb_inorder
from ..task.signal import sigset_value
from ..task.timers import (
    CLOCK_BOOTTIME,
    CLOCK_BOOTTIME_ALARM,
    CLOCK_REALTIME,
    CLOCK_REALTIME_ALARM,
    clock_now,
    hrtimer_remaining,
)

__all__ = [
    "epitem_event",
    "epitem_target",
    "eventfd_count",
    "eventfd_ctx_of",
    "eventfd_is_semaphore",
    "eventpoll_items",
    "eventpoll_of",
    "file_private",
    "rb_inorder",
    "signalfd_ctx_of",
    "signalfd_mask",
    "timerfd_clockid",
    "timerfd_ctx_of",
    "timerfd_interval_ns",
    "timerfd_remaining_ns",
    "timerfd_settime_flags",
    "timerfd_ticks",
]


if TYPE_CHECKING:
    pass

#: include/uapi/linux/eventfd.h
EFD_SEMAPHORE = 1
#: fs/timerfd.c: the settime flags a timerfd keeps (TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET)
TFD_SETTIME_FLAGS = 0b11
U64 = (1 << 64) - 1
#: include/linux/alarmtimer.h enum alarmtimer_type -> the clock its base reads
_ALARM_BASE_CLOCKS = {0: CLOCK_REALTIME, 1: CLOCK_BOOTTIME}  # ALARM_REALTIME, ALARM_BOOTTIME
#: More watches than any epoll can hold: fs.epoll.max_user_watches defaults to 4% of low
#: memory over ~200 bytes a watch, a few million on the biggest machines.
MAX_EPOLL_ITEMS = 1 << 22


def file_private(file: Pointer | Struct, type_name: str) -> Pointer:
    """``file->private_data`` of a ``struct file`` as a ``struct type_name *``; GuestDataError
    if NULL."""
    f = file.deref() if isinstance(file, Pointer) else file
    ctx = int(f.private_data)
    if not ctx:
        raise GuestDataError(f"struct file at 0x{f.address_:x} has no {type_name} (NULL private_data)")
    return f.prog_.pointer(type_name, ctx)


# --------------------------------------------------------------------------- eventfd


def eventfd_ctx_of(file: Pointer | Struct) -> Pointer:
    """The ``struct eventfd_ctx *`` of an eventfd's ``struct file``."""
    return file_private(file, "eventfd_ctx")


def eventfd_count(ctx: Pointer | Struct) -> int:
    """The counter of a ``struct eventfd_ctx`` (fdinfo's eventfd-count)."""
    return ctx.count


def eventfd_is_semaphore(ctx: Pointer | Struct) -> bool:
    """Was the ``struct eventfd_ctx`` created with EFD_SEMAPHORE (reads take 1 at a time)?"""
    return bool(ctx.flags & EFD_SEMAPHORE)


# --------------------------------------------------------------------------- signalfd


def signalfd_ctx_of(file: Pointer | Struct) -> Pointer:
    """The ``struct signalfd_ctx *`` of a signalfd's ``struct file``."""
    return file_private(file, "signalfd_ctx")


def signalfd_mask(ctx: Pointer | Struct) -> int:
    """The signals a ``struct signalfd_ctx`` reads, bit n-1 = signal n, as fdinfo's sigmask
    shows them: the complement of what the context stores."""
    return ~sigset_value(ctx.sigmask) & U64


# --------------------------------------------------------------------------- timerfd


def timerfd_ctx_of(file: Pointer | Struct) -> Pointer:
    """The ``struct timerfd_ctx *`` of a timerfd's ``struct file``."""
    return file_private(file, "timerfd_ctx")


def timerfd_clockid(ctx: Pointer | Struct) -> int:
    """The clock a ``struct timerfd_ctx`` was created on (CLOCK_*)."""
    return ctx.clockid


def timerfd_is_alarm(ctx: Pointer | Struct) -> bool:
    """Does the ``struct timerfd_ctx`` run an alarm timer (``t.alarm``) rather than an
    hrtimer (``t.tmr``)? fs/timerfd.c isalarm()."""
    return timerfd_clockid(ctx) in (CLOCK_REALTIME_ALARM, CLOCK_BOOTTIME_ALARM)


def timerfd_ticks(ctx: Pointer | Struct) -> int:
    """Expirations of a ``struct timerfd_ctx`` not yet read."""
    return ctx.ticks


def timerfd_settime_flags(ctx: Pointer | Struct) -> int:
    """TFD_TIMER_ABSTIME / TFD_TIMER_CANCEL_ON_SET of the last timerfd_settime()."""
    return ctx.settime_flags & TFD_SETTIME_FLAGS


def timerfd_interval_ns(ctx: Pointer | Struct) -> int:
    """The interval (it_interval) of a ``struct timerfd_ctx`` in ns; 0 for a one-shot timer."""
    return max(ctx.tintv, 0)


def timerfd_remaining_ns(ctx: Pointer | Struct, now: int | None = None) -> int:
    """Time left (it_value) of a ``struct timerfd_ctx`` in ns as of the snapshot, as
    fs/timerfd.c timerfd_get_remaining() computes it: expiry minus the timer base's clock,
    0 when not positive. `now` overrides the clock reading (for tests)."""
    t = ctx.t
    if timerfd_is_alarm(ctx):
        alarm = t.alarm
        clock = _ALARM_BASE_CLOCKS.get(alarm.type)
        if clock is None:
            raise GuestDataError(f"alarm of timerfd_ctx at 0x{int(ctx):x} has impossible type {alarm.type}")
        remaining = alarm.node.expires - (clock_now(ctx.prog_, clock) if now is None else now)
    else:
        remaining = hrtimer_remaining(t.tmr, now)
    return remaining if remaining > 0 else 0


# --------------------------------------------------------------------------- epoll


def eventpoll_of(file: Pointer | Struct) -> Pointer:
    """The ``struct eventpoll *`` of an epoll instance's ``struct file``."""
    return file_private(file, "eventpoll")


def eventpoll_items(ep: Pointer | Struct, *, limit: int = MAX_EPOLL_ITEMS) -> list[Struct]:
    """The ``struct epitem``s (watched files) of a ``struct eventpoll``, in the order of its
    red-black tree ``rbr``, which is the order /proc fdinfo lists them."""
    prog = ep.prog_
    addr = int(ep) if isinstance(ep, Pointer) else ep.address_
    root = int(ep.rbr.rb_root.rb_node)
    rbn_off = prog.member_offset("epitem", "rbn")
    epitem = prog.struct_type("epitem")
    return [
        Struct(prog, epitem, node - rbn_off)
        for node in rb_inorder(prog, root, name=f"epoll tree of eventpoll 0x{addr:x}", limit=limit)
    ]


def epitem_target(epi: Struct) -> tuple[int, Pointer]:
    """(fd, ``struct file *``) a ``struct epitem`` watches (``ffd``), as it was added: the fd
    number is the one given to epoll_ctl() and may since have been closed or reused."""
    ffd = epi.ffd
    file = ffd.file
    if not file:
        raise GuestDataError(f"epitem at 0x{epi.address_:x} watches no file")
    return ffd.fd, file


def epitem_event(epi: Struct) -> tuple[int, int]:
    """(events, data) of a ``struct epitem``: the EPOLL* mask (EPOLLERR|EPOLLHUP always
    added by the kernel; EPOLLONESHOT items that fired keep only the private bits) and the
    user's 64-bit cookie."""
    ev = epi.event
    return ev.events, ev.data
