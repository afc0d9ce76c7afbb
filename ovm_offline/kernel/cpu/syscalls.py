"""x86-64 system calls a thread can be blocked in, and how the kernel ends each one when a
signal interrupts it: the return value it leaves in ``pt_regs->ax`` before signal delivery.

A thread asleep inside a system call has ``orig_ax`` = the call's number and ``ax`` =
-ENOSYS (the entry code's placeholder, arch/x86/entry/entry_64.S), with ``ip`` just past the
``syscall`` instruction. What a debugger or CRIU sees after interrupting it is decided by the
call itself:

* ``restart``: it returns -ERESTARTSYS, -ERESTARTNOINTR or -ERESTARTNOHAND, and the call is
  executed again with the same arguments (read, accept, wait4, pause, FUTEX_WAIT without a
  timeout, clock_nanosleep with TIMER_ABSTIME, ...);
* ``eintr``: it returns -EINTR, or -ERESTART_RESTARTBLOCK whose restart block lives in the
  kernel, which CRIU turns into -EINTR (epoll_wait, poll, nanosleep, rt_sigtimedwait, timed
  futex waits, relative clock_nanosleep);
* ``unknown``: not in the table; it is refused.

Some calls depend on their arguments (`interrupted_syscall`), and calls that move data can
return a partial count instead (`moves_data`): a write larger than PIPE_BUF that blocked
for room may already have moved part of its data (extract/syscall.py says where memory
shows how much: a write() to a TCP socket or a pipe, by its iterator).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from ...state import Registers

__all__ = [
    "ENOSYS",
    "PIPE_BUF",
    "BlockedSyscall",
    "RemainingOut",
    "Interruption",
    "SyscallInfo",
    "interrupted_syscall",
    "syscall_info",
]

ENOSYS = 38
#: include/uapi/linux/limits.h: writes up to this size to a pipe are atomic (all or nothing)
PIPE_BUF = 4096
MSG_WAITALL = 0x100
TIMER_ABSTIME = 1
# include/uapi/linux/futex.h
FUTEX_CMD_MASK = 0x7F
FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI2 = 0, 6, 9, 13

Interruption = Literal["restart", "eintr", "unknown"]
#: A user pointer (in a register) the interrupted call writes the time left to, as a
#: struct timespec or a struct timeval.
RemainingOut = tuple[str, Literal["timespec", "timeval"]]
#: How the byte count of a data-moving call is found: in an argument register, in an iovec
#: array (pointer and count registers), or in a struct msghdr's iovec array.
DataArgs = Literal["count", "iovec", "msghdr"]


@dataclasses.dataclass(frozen=True)
class SyscallInfo:
    name: str
    interruption: Interruption
    #: a call that moves data out of the caller and may return a partial count
    moves_data: DataArgs | None = None
    #: the register holding the count (moves_data="count") or iovec pointer and count
    data_regs: tuple[str, ...] = ()
    #: the register holding recv flags, where MSG_WAITALL can make a read partial
    recv_flags_reg: str | None = None
    #: where the caller's own signal mask waits while the call has replaced it (sigsuspend
    #: sets ``blocked`` to its argument, sigtimedwait unblocks what it waits for); the call
    #: (or the signal path after it) puts it back when interrupted
    sigmask_in: Literal["saved_sigmask", "real_blocked"] | None = None
    #: where the call writes the time left of its timeout when interrupted (nanosleep's rem,
    #: select's timeval: kernel/time/hrtimer.c nanosleep_copyout, fs/select.c
    #: poll_select_finish); NULL pointers are left alone
    remaining_out: RemainingOut | None = None
    #: a call that only sleeps until its hrtimer fires (do_nanosleep), returning 0 then
    timer_sleep: bool = False


def _row(nr: int, name: str, how: Interruption, **kw: object) -> tuple[int, SyscallInfo]:
    return nr, SyscallInfo(name, how, **kw)  # type: ignore[arg-type]


#: arch/x86/entry/syscalls/syscall_64.tbl; the interruption each returns is from its
#: implementation (fs/read_write.c, fs/pipe.c, net/socket.c, fs/select.c, fs/eventpoll.c,
#: kernel/time/hrtimer.c, kernel/futex/, kernel/exit.c, kernel/signal.c, fs/locks.c, fs/fifo)
SYSCALLS: dict[int, SyscallInfo] = dict(
    (
        _row(0, "read", "restart"),
        _row(1, "write", "restart", moves_data="count", data_regs=("dx",)),
        _row(2, "open", "restart"),  # a FIFO waiting for its other end
        _row(7, "poll", "eintr"),  # always -ERESTART_RESTARTBLOCK (do_restart_poll)
        _row(17, "pread64", "restart"),
        _row(18, "pwrite64", "restart", moves_data="count", data_regs=("dx",)),
        _row(19, "readv", "restart"),
        _row(20, "writev", "restart", moves_data="iovec", data_regs=("si", "dx")),
        _row(23, "select", "restart", remaining_out=("r8", "timeval")),  # -ERESTARTNOHAND
        _row(34, "pause", "restart"),  # -ERESTARTNOHAND
        _row(35, "nanosleep", "eintr", remaining_out=("si", "timespec"), timer_sleep=True),  # -ERESTART_RESTARTBLOCK
        _row(42, "connect", "restart"),
        _row(43, "accept", "restart"),
        _row(44, "sendto", "restart", moves_data="count", data_regs=("dx",)),
        _row(45, "recvfrom", "restart", recv_flags_reg="r10"),
        _row(46, "sendmsg", "restart", moves_data="msghdr", data_regs=("si",)),
        _row(47, "recvmsg", "restart", recv_flags_reg="dx"),
        _row(61, "wait4", "restart"),
        _row(72, "fcntl", "restart"),  # F_SETLKW and F_OFD_SETLKW are its only waits
        _row(73, "flock", "restart"),
        _row(128, "rt_sigtimedwait", "eintr", sigmask_in="real_blocked"),
        _row(130, "rt_sigsuspend", "restart", sigmask_in="saved_sigmask"),  # -ERESTARTNOHAND
        _row(202, "futex", "restart"),  # by operation and timeout: interrupted_syscall
        _row(
            230, "clock_nanosleep", "eintr", remaining_out=("r10", "timespec"), timer_sleep=True
        ),  # TIMER_ABSTIME: see below
        _row(232, "epoll_wait", "eintr"),
        _row(247, "waitid", "restart"),
        _row(257, "openat", "restart"),
        _row(270, "pselect6", "restart", remaining_out=("r8", "timespec")),  # -ERESTARTNOHAND
        _row(271, "ppoll", "restart", remaining_out=("dx", "timespec")),  # -ERESTARTNOHAND
        _row(281, "epoll_pwait", "eintr"),
        _row(288, "accept4", "restart"),
        _row(295, "preadv", "restart"),
        _row(296, "pwritev", "restart", moves_data="iovec", data_regs=("si", "dx")),
        _row(327, "preadv2", "restart"),
        _row(328, "pwritev2", "restart", moves_data="iovec", data_regs=("si", "dx")),
        _row(437, "openat2", "restart"),
        _row(441, "epoll_pwait2", "eintr"),
        _row(449, "futex_waitv", "restart"),  # -ERESTARTSYS; its timeout is absolute
    )
)


@dataclasses.dataclass(frozen=True)
class BlockedSyscall:
    """A system call a thread sleeps in, with the outcome an interrupting signal gives it."""

    number: int
    name: str
    interruption: Interruption
    #: why the outcome cannot be known from memory (refuse), else ""
    unknowable: str = ""
    sigmask_in: Literal["saved_sigmask", "real_blocked"] | None = None
    remaining_out: RemainingOut | None = None
    timer_sleep: bool = False


def syscall_info(number: int) -> SyscallInfo | None:
    return SYSCALLS.get(number)


def _futex_interruption(regs: Registers) -> tuple[Interruption, str]:
    """kernel/futex/waitwake.c futex_wait: -ERESTARTSYS without a timeout, a restart block
    with one; futex_lock_pi: -ERESTARTNOINTR."""
    cmd = regs.si & FUTEX_CMD_MASK
    if cmd in (FUTEX_WAIT, FUTEX_WAIT_BITSET):
        return ("eintr" if regs.r10 else "restart"), ""
    if cmd in (FUTEX_LOCK_PI, FUTEX_LOCK_PI2):
        return "restart", ""
    return "unknown", f"futex operation {cmd} is not one whose interruption ovm-offline knows"


def interrupted_syscall(regs: Registers) -> BlockedSyscall:
    """The call a thread asleep in a system call (``orig_ax`` >= 0, ``ax`` = -ENOSYS) is
    blocked in, and how a signal would end it. Data-moving calls still need their byte
    count checked against PIPE_BUF by the caller, which can read user memory."""
    number = regs.orig_ax
    info = SYSCALLS.get(number)
    if info is None:
        return BlockedSyscall(
            number, f"syscall {number}", "unknown", "ovm-offline does not know how it ends when interrupted"
        )
    how, why, remaining = info.interruption, "", info.remaining_out
    if info.name == "futex":
        how, why = _futex_interruption(regs)
    elif info.name == "clock_nanosleep" and regs.si & TIMER_ABSTIME:
        how, remaining = "restart", None  # hrtimer_nanosleep: an absolute sleep returns -ERESTARTNOHAND
    elif info.recv_flags_reg and getattr(regs, info.recv_flags_reg) & MSG_WAITALL:
        why = "a MSG_WAITALL receive may already have taken part of its data"
    if remaining is not None and not getattr(regs, remaining[0]):
        remaining = None
    return BlockedSyscall(number, info.name, how, why, info.sigmask_in, remaining, info.timer_sleep)
