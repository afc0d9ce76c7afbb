"""Signals of a task: masks, queues, handlers and the alternate signal stack.

* ``task->blocked`` (``sigset_t``): the current mask; a task inside sigsuspend(),
  ppoll(), pselect() or epoll_pwait() runs with a temporary mask and keeps its own in
  ``task->saved_sigmask`` with ``restore_sigmask`` set. What a tracer sees
  (PTRACE_GETSIGMASK, hence CRIU's blk_sigset) is the saved one then: `task_sigmask`.
* ``task->pending`` (per thread) and ``signal->shared_pending`` (per process): a
  ``struct sigpending`` = a mask and a list of ``struct sigqueue`` with the
  ``kernel_siginfo`` of each queued signal.
* ``sighand->action[64]``: ``struct k_sigaction`` per signal (shared by CLONE_SIGHAND
  threads and processes).

A sigset on x86-64 is one 64-bit word (_NSIG_WORDS = 1): bit n-1 = signal n.
"""

from __future__ import annotations

from ...errors import GuestDataError
from ...state import SigAction
from ..core.objects import Struct
from ..ds.list import list_for_each_entry

__all__ = [
    "SIGSTOP",
    "sigpending_mask",
    "sigpending_queue",
    "sigset_value",
    "task_pending",
    "task_shared_pending",
    "task_sigactions",
    "task_sigaltstack",
    "task_sigmask",
    "task_signal",
    "task_stop_signal",
]


_NSIG = 64
SIGKILL = 9
SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU = 19, 20, 21, 22
#: the signals whose default action stops a process
STOP_SIGNALS = frozenset({SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU})
#: include/linux/sched/jobctl.h: the signal of a pending or completed group stop
JOBCTL_STOP_SIGMASK = 0xFFFF
#: include/uapi/asm-generic/siginfo.h: SI_MAX_SIZE, the user siginfo_t size
SIGINFO_SIZE = 128
#: include/uapi/linux/signal.h
SS_DISABLE = 2
SS_AUTODISARM = 1 << 31
SS_FLAG_BITS = SS_AUTODISARM
#: Far more than RLIMIT_SIGPENDING allows on any real system (it bounds queued signals).
MAX_QUEUED = 1 << 20


def sigset_value(sigset: Struct) -> int:
    """A ``sigset_t`` as an integer, bit n-1 = signal n."""
    words = sigset.sig
    v = 0
    for i in range(len(words)):
        v |= (words[i] & 0xFFFF_FFFF_FFFF_FFFF) << (64 * i)
    return v


def task_blocked(task: Struct) -> int:
    """``task->blocked`` of a ``struct task_struct``: the mask in force right now."""
    return sigset_value(task.blocked)


def task_restore_sigmask(task: Struct) -> bool:
    """Is the task's real mask parked in saved_sigmask (the kernel's
    test_tsk_restore_sigmask; a task_struct bit on architectures without
    TIF_RESTORE_SIGMASK, x86 among them)?"""
    if task.has_member_("restore_sigmask"):
        return bool(task.restore_sigmask)
    return False


def task_sigmask(task: Struct) -> int:
    """The signal mask of a ``struct task_struct`` as PTRACE_GETSIGMASK reports it
    (kernel/ptrace.c): ``saved_sigmask`` while a sigsuspend-like call has replaced the
    mask, else ``blocked``."""
    if task_restore_sigmask(task):
        return sigset_value(task.saved_sigmask)
    return task_blocked(task)


def sigqueue_siginfo(q: Struct) -> bytes:
    """The siginfo of a ``struct sigqueue`` as user space gets it (copy_siginfo_to_user):
    the kernel_siginfo bytes, zero-padded to SI_MAX_SIZE (128)."""
    raw = q.info.read_()
    if len(raw) > SIGINFO_SIZE:
        raise GuestDataError(f"kernel_siginfo of {len(raw)} bytes is larger than a user siginfo")
    return raw.ljust(SIGINFO_SIZE, b"\0")


def sigpending_mask(pending: Struct) -> int:
    """The pending-signal mask of a ``struct sigpending``."""
    return sigset_value(pending.signal)


def sigpending_queue(pending: Struct, *, name: str = "sigpending") -> list[bytes]:
    """The 128-byte siginfo of every ``struct sigqueue`` on a ``struct sigpending``, in
    queue (delivery) order, as PTRACE_PEEKSIGINFO shows them."""
    prog = pending.prog_
    return [
        sigqueue_siginfo(q)
        for q in list_for_each_entry(
            prog, "sigqueue", pending.member_address_("list"), "list", name=name, limit=MAX_QUEUED, check_prev=True
        )
    ]


def task_pending(task: Struct) -> Struct:
    """``task->pending``: the ``struct sigpending`` private to one thread."""
    return task.pending


def task_signal(task: Struct) -> Struct:
    """``task->signal``: the ``struct signal_struct`` of the thread group (GuestDataError
    if the task has already released it)."""
    signal = task.signal
    if not signal:
        raise GuestDataError(f"pid {task.pid}: task has no signal_struct")
    return signal.deref()


def task_shared_pending(task: Struct) -> Struct:
    """``task->signal->shared_pending``: the ``struct sigpending`` of the thread group."""
    return task_signal(task).shared_pending


def k_sigaction(act: Struct) -> SigAction:
    """A ``struct k_sigaction`` as rt_sigaction(2) returns it."""
    sa = act.sa
    return SigAction(
        handler=int(sa.sa_handler),
        flags=sa.sa_flags & 0xFFFF_FFFF_FFFF_FFFF,
        restorer=int(sa.sa_restorer),
        mask=sigset_value(sa.sa_mask),
    )


def task_sigactions(task: Struct) -> list[SigAction]:
    """The 64 signal handlers (index n-1 = signal n) of a ``struct task_struct``, from
    ``task->sighand->action``."""
    sighand = task.sighand
    if not sighand:
        raise GuestDataError(f"pid {task.pid}: task has no sighand_struct")
    actions = sighand.deref().action
    if len(actions) != _NSIG:
        raise GuestDataError(f"sighand_struct.action has {len(actions)} entries, expected {_NSIG}")
    return [k_sigaction(a) for a in actions]


def task_sigaltstack(task: Struct) -> tuple[int, int, int]:
    """(ss_sp, ss_size, ss_flags) of a ``struct task_struct`` as sigaltstack(2) reports
    it to code running off the alternate stack (CRIU's parasite does): SS_DISABLE when no
    stack is set, else only the SS_AUTODISARM bit of ``sas_ss_flags``."""
    sp, size = task.sas_ss_sp, task.sas_ss_size
    flags = SS_DISABLE if not size else task.sas_ss_flags & SS_FLAG_BITS
    return sp, size, flags


def task_stop_signal(task: Struct) -> int | None:
    """The signal a ``struct task_struct``'s group stop came from (``jobctl``'s low bits, what
    PTRACE_GETSIGINFO reports of a task in group stop), or None if they hold no stop signal."""
    signo = task.jobctl & JOBCTL_STOP_SIGMASK
    return signo if signo in STOP_SIGNALS else None
