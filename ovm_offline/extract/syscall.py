"""The registers a thread caught in a system call continues with, as CRIU records them.

CRIU interrupts every thread it dumps (PTRACE_INTERRUPT); a thread asleep in a system call
leaves it as a signal would make it leave, and compel (compel/arch/x86/src/lib/infect.c
get_task_regs) rewrites its registers so that the restored thread continues correctly.
A memory snapshot catches threads in two such states:

* **Stopped in signal delivery** (SIGSTOP, a tracer): the call has already ended with
  ``ax`` = an internal -ERESTART* code and ``ip`` just past the ``syscall`` instruction.
  -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND: ax = orig_ax, ip -= 2, so the restored
  thread executes the call again; -ERESTART_RESTARTBLOCK: ax = -EINTR (its restart block
  lives in the kernel and is not saved).
* **Asleep inside the call** (a VM paused as it is): ``ax`` is still the entry code's
  -ENOSYS. The call is ended here as an interrupting signal would end it
  (kernel/cpu/syscalls.py says how, by call and arguments), then rewritten as above:
  restarted, or returning -EINTR. A call whose progress memory does not show is refused
  by name: a write of more than PIPE_BUF bytes that blocked for room when no iterator on
  its kernel stack says how many moved (to a TCP socket, any write whose bytes may have begun
  the send queue's unacknowledged tail), writev and sendmsg beyond PIPE_BUF, a MSG_WAITALL
  receive, a call not in the table, a thread in uninterruptible sleep or runnable inside
  the call (woken or preempted there: how far it got is on its kernel stack only). The
  signal mask is the caller's own again, as the interrupted call leaves it (sigsuspend's
  is in ``saved_sigmask``, sigtimedwait's in ``real_blocked`` while they sleep), and a timed
  sleep writes the time it had left where it writes it (nanosleep's rem, select's timeval),
  from its hrtimer on the kernel stack: a restarted select waits what was left, a nanosleep
  loop sleeps the rest. A write() that has moved part of its bytes into a TCP socket's send
  queue or a pipe returns that count, as tcp_sendmsg and pipe_write do when a signal ends
  their wait for room.

Registers of a thread not in a system call (preempted or faulting in user mode: ``orig_ax``
is -1 or an exception's error code and ``ax`` its user value), or of one whose call has
already produced its result, are kept as they are.
"""

from __future__ import annotations

import dataclasses
import struct

from ..errors import MomentError, UnsupportedError
from ..kernel.core.objects import Struct
from ..kernel.cpu.syscalls import ENOSYS, PIPE_BUF, BlockedSyscall, interrupted_syscall, syscall_info
from ..kernel.fs.fdtable import task_fd_file
from ..kernel.fs.pipe import file_is_pipe, file_pipe, pipe_read_data
from ..kernel.fs.uio import task_ubuf_iters
from ..kernel.net.tcp import tcp_outq_len, tcp_send_queue_bytes, tcp_sock_of_file
from ..kernel.task.signal import sigset_value
from ..kernel.task.tasks import task_comm, task_read_user, task_state
from ..kernel.task.timers import hrtimer_soft_remaining, task_fired_sleep_hrtimer, task_sleep_hrtimer
from ..sources.base import VcpuState
from ..state import Registers, UserWrite

__all__ = ["SyscallOutcome", "restart_syscall_fixup", "syscall_fixup"]

# include/linux/errno.h (kernel-internal restart codes) and EINTR
ERESTARTSYS = 512
ERESTARTNOINTR = 513
ERESTARTNOHAND = 514
ERESTART_RESTARTBLOCK = 516
EINTR = 4
SYSCALL_INSN = b"\x0f\x05"
INT80_INSN = b"\xcd\x80"
U64 = 0xFFFF_FFFF_FFFF_FFFF
#: include/uapi/linux/uio.h: a larger iovec array fails with EINVAL before blocking
UIO_MAXIOV = 1024
_MSGHDR_IOV_OFFSET = 16
NSEC_PER_SEC, NSEC_PER_USEC = 10**9, 1000  # struct user_msghdr: name, namelen (padded), iov, iovlen, ...


@dataclasses.dataclass(frozen=True)
class SyscallOutcome:
    """How a thread caught in a system call continues: its registers, whether they were
    rewritten, its signal mask where the call had replaced it, and what the call writes into
    its memory as it ends (the time left of its timeout)."""

    regs: Registers
    rewritten: bool = False
    sigmask: int | None = None
    user_writes: tuple[UserWrite, ...] = ()


def _signed(v: int) -> int:
    v &= U64
    return v - (1 << 64) if v >> 63 else v


#: bytes of do_nanosleep's code: 320 and 304 to the next symbol on the pinned 6.1 and 6.12
DO_NANOSLEEP_SIZE = 0x130


def _woken_by_its_timer(task: Struct, vcpu: VcpuState | None) -> bool:
    """Was a runnable thread inside nanosleep woken by its own timer? Off a CPU: a fired
    sleeper in its live frames. On a vCPU in the kernel: only while it runs do_nanosleep
    itself (whose sleeper is this call's, initialized with the task before any wait), with
    the frames from the vCPU's RSP up."""
    if vcpu is None:
        return task_fired_sleep_hrtimer(task) is not None
    prog = task.prog_
    if vcpu.rip is None or vcpu.rsp is None or not prog.has_symbol("do_nanosleep"):
        return False
    if not 0 <= vcpu.rip - prog.symbol_address("do_nanosleep") < DO_NANOSLEEP_SIZE:
        return False
    return task_fired_sleep_hrtimer(task, vcpu.rsp) is not None


def _restarted(regs: Registers) -> Registers:
    return dataclasses.replace(regs, ax=regs.orig_ax, ip=(regs.ip - len(SYSCALL_INSN)) & U64)


def _returning_eintr(regs: Registers) -> Registers:
    return dataclasses.replace(regs, ax=-EINTR & U64)


def restart_syscall_fixup(regs: Registers) -> tuple[Registers, bool]:
    """The registers CRIU records for a thread stopped in signal delivery after a system call
    ended with a -ERESTART* code (see the module doc), and whether they were changed."""
    if _signed(regs.orig_ax) < 0:
        return regs, False
    ax = _signed(regs.ax)
    if ax in (-ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND):
        return _restarted(regs), True
    if ax == -ERESTART_RESTARTBLOCK:
        return _returning_eintr(regs), True
    return regs, False


def _asleep_in_syscall(regs: Registers) -> bool:
    return _signed(regs.orig_ax) >= 0 and _signed(regs.ax) == -ENOSYS


def _iovec_bytes(task: Struct, iov: int, count: int) -> int:
    if not 0 <= count <= UIO_MAXIOV:
        return 0  # the kernel refuses such a call with EINVAL before it can block
    raw = task_read_user(task, iov, 16 * count)
    return sum(struct.unpack_from("<Q", raw, 16 * i + 8)[0] for i in range(count))


def _bytes_to_move(task: Struct, regs: Registers, call: BlockedSyscall) -> int:
    """How many bytes a blocked data-moving call was asked to move (0 for other calls)."""
    info = syscall_info(call.number)
    if info is None or info.moves_data is None:
        return 0
    args = [getattr(regs, r) for r in info.data_regs]
    if info.moves_data == "count":
        return int(args[0])
    if info.moves_data == "iovec":
        return _iovec_bytes(task, args[0], _signed(args[1]))
    iov, count = struct.unpack("<QQ", task_read_user(task, args[0] + _MSGHDR_IOV_OFFSET, 16))
    return _iovec_bytes(task, iov, _signed(count))


def _user_bytes(task: Struct, regs: Registers, call: BlockedSyscall, limit: int) -> bytes:
    """The first `limit` bytes a blocked data-moving call was asked to move."""
    info = syscall_info(call.number)
    assert info is not None and info.moves_data is not None
    if info.moves_data == "count":
        return task_read_user(task, regs.si, limit)
    if info.moves_data == "iovec":
        iov, count = regs.si, _signed(regs.dx)
    else:
        iov, count = struct.unpack("<QQ", task_read_user(task, regs.si + _MSGHDR_IOV_OFFSET, 16))
    out = bytearray()
    raw = task_read_user(task, iov, 16 * count)
    for i in range(count):
        base, length = struct.unpack_from("<QQ", raw, 16 * i)
        out += task_read_user(task, base, min(length, limit - len(out)))
        if len(out) >= limit:
            break
    return bytes(out)


def _bytes_moved(task: Struct, regs: Registers, call: BlockedSyscall, size: int) -> int:
    """How many of its `size` bytes a write-like call asleep for room has moved: what it
    returns when a signal ends it (tcp_sendmsg and pipe_write return what they copied; 0: it
    is restarted). Refused where memory does not say."""
    file = task_fd_file(task, _signed(regs.di))  # the fd is the first argument
    tcp = tcp_sock_of_file(file) if file is not None else None
    if tcp is not None:
        return _tcp_write_moved(task, regs, call, tcp, size)
    if size <= PIPE_BUF:
        return 0  # it has moved nothing: a pipe takes it whole, a socket in one buffer
    moved = _moved_by_iterator(task, regs, call, size) if file is not None and file_is_pipe(file) else 0
    if not moved:
        raise _refuse(task, call, f"a write of {size} bytes (more than PIPE_BUF) may already have moved part of them")
    assert file is not None
    if not _ends_with_moved(task, pipe_read_data(task.prog_, file_pipe(file)), regs.si, moved):
        raise _refuse(
            task, call, f"its kernel stack says it moved {moved} of {size} bytes, which its pipe does not end with"
        )
    return moved


def _tcp_write_moved(task: Struct, regs: Registers, call: BlockedSyscall, sk: Struct, size: int) -> int:
    """How many bytes a write asleep on a TCP socket has moved into the send queue.

    tcp_sendmsg() copies into the send queue as room allows and sleeps for more: the bytes it
    moved are the newest in the queue, and a writer sleeping for room has not seen them all
    acknowledged (that would have freed the room and woken it). The count is the offset of
    the call's own iterator on its kernel stack, believed when it is the only one there that
    moved and the send queue ends with those bytes. Without such an iterator: if no tail of
    the queue's unacknowledged bytes equals a head of the buffer, the call moved nothing; if
    one does, it may have moved that many, and the call is refused."""
    queued = tcp_outq_len(sk)
    moved = _moved_by_iterator(task, regs, call, size)
    if moved:
        if not queued or not _ends_with_moved(task, tcp_send_queue_bytes(sk, queued), regs.si, moved):
            raise _refuse(
                task,
                call,
                f"its kernel stack says it moved {moved} of {size} bytes, which its send queue does not end with",
            )
        return moved
    if not queued:
        return 0
    head = _user_bytes(task, regs, call, min(size, queued))
    k = _overlap(tcp_send_queue_bytes(sk, queued)[-len(head) :], head)
    if k:
        raise _refuse(
            task,
            call,
            f"the socket's send queue ends with the first {k} of the {size} bytes it writes: part may have moved already",
        )
    return 0


def _moved_by_iterator(task: Struct, regs: Registers, call: BlockedSyscall, size: int) -> int:
    """The bytes a write() asleep half-way has moved, by its iterator (0 when none says so)."""
    info = syscall_info(call.number)
    if info is None or info.moves_data != "count":
        return 0
    moved = {int(it.iov_offset) for it in task_ubuf_iters(task, regs.si, size, source=True)} - {0, size}
    if len(moved) > 1:
        raise _refuse(task, call, f"its kernel stack holds iterators of its buffer at offsets {sorted(moved)}")
    return moved.pop() if moved else 0


def _ends_with_moved(task: Struct, queued: bytes, buf: int, moved: int) -> bool:
    """Do the bytes `queued` in a pipe or send queue end with the first `moved` bytes at user
    address `buf` (or, when fewer are still queued, with the end of those)?"""
    tail = min(len(queued), moved)
    return tail > 0 and queued[-tail:] == task_read_user(task, buf + moved - tail, tail)


def _overlap(tail: bytes, head: bytes) -> int:
    """The largest k such that `tail` ends with head[:k] (a Knuth-Morris-Pratt scan of `tail`)."""
    fail = [0] * len(head)
    k = 0
    for i in range(1, len(head)):
        while k and head[i] != head[k]:
            k = fail[k - 1]
        if head[i] == head[k]:
            k += 1
        fail[i] = k
    k = 0
    for c in tail:
        while k and (k == len(head) or c != head[k]):
            k = fail[k - 1]
        if k < len(head) and c == head[k]:
            k += 1
    return k


def _refuse(task: Struct, call: BlockedSyscall, why: str, error: type[UnsupportedError] = UnsupportedError):
    return error(f"PID {task.tgid} ({task_comm(task)}) thread {task.pid} is inside {call.name}(): {why}")


def _refuse_moment(task: Struct, call: BlockedSyscall, why: str) -> MomentError:
    """A call caught mid-way: the same thread a moment later is asleep in it or out of it."""
    return _refuse(task, call, why, MomentError)


def _check_syscall_entry(task: Struct, regs: Registers) -> bool:
    """Did the thread enter the kernel through the 64-bit ``syscall`` instruction just before
    ``ip``? (Telling a system call from an exception whose user ax happens to be -ENOSYS.)"""
    insn = task_read_user(task, (regs.ip - len(SYSCALL_INSN)) & U64, len(SYSCALL_INSN))
    if insn == INT80_INSN:
        raise UnsupportedError(f"thread {task.pid} is inside a 32-bit system call (int 0x80)")
    return insn == SYSCALL_INSN


def _time_left(task: Struct, call: BlockedSyscall, regs: Registers) -> tuple[UserWrite, ...]:
    """The remaining time an interrupted timed sleep writes back (see kernel/cpu/syscalls.py),
    from the sleep's hrtimer; nothing for a call without such an out-parameter."""
    if call.remaining_out is None:
        return ()
    reg, layout = call.remaining_out
    timer = task_sleep_hrtimer(task)
    if timer is None:
        raise _refuse(task, call, "the timer of its timed sleep is not on its kernel stack")
    sec, nsec = divmod(max(0, hrtimer_soft_remaining(timer)), NSEC_PER_SEC)
    data = struct.pack("<qq", sec, nsec if layout == "timespec" else nsec // NSEC_PER_USEC)
    return (UserWrite(getattr(regs, reg), data),)


def blocked_syscall_fixup(task: Struct, regs: Registers, vcpu: VcpuState | None = None) -> SyscallOutcome:
    """The registers a ``struct task_struct`` asleep inside a system call continues with
    (restarted, or returning -EINTR), as if a signal had interrupted the call and been
    handled; UnsupportedError naming the call when that outcome is not in memory. `vcpu`:
    the vCPU it was current on (it may have been about to sleep there)."""
    call = interrupted_syscall(regs)
    state = task_state(task)
    if state in ("T", "t"):
        raise _refuse(task, call, "it is stopped by a tracer at the call's entry")
    if state == "R" and call.timer_sleep and _woken_by_its_timer(task, vcpu):
        # woken by its own timer: do_nanosleep returns 0 whatever else is pending
        return SyscallOutcome(dataclasses.replace(regs, ax=0), True)
    if state == "R" and vcpu is not None:
        raise _refuse_moment(
            task, call, f"it was running there on vCPU {vcpu.index}: how far the call got is not in memory"
        )
    if state == "R":
        raise _refuse_moment(
            task, call, "it is runnable there (woken or preempted): how far the call got is not in memory"
        )
    if state != "S":
        raise _refuse_moment(task, call, "it is in uninterruptible sleep, so no signal would end the call")
    if call.interruption == "unknown" or call.unknowable:
        raise _refuse(task, call, call.unknowable or "ovm-offline does not know how it ends when interrupted")
    size = _bytes_to_move(task, regs, call)
    moved = _bytes_moved(task, regs, call, size) if size else 0
    if moved:  # ended as a signal ends it: short, with what it copied
        return SyscallOutcome(dataclasses.replace(regs, ax=moved), True)
    fixed = _restarted(regs) if call.interruption == "restart" else _returning_eintr(regs)
    sigmask = sigset_value(getattr(task, call.sigmask_in)) if call.sigmask_in else None
    return SyscallOutcome(fixed, True, sigmask, _time_left(task, call, regs))


def syscall_fixup(task: Struct, regs: Registers, vcpu: VcpuState | None = None) -> SyscallOutcome:
    """The registers CRIU would record for a user ``struct task_struct`` whose registers are
    the ones saved on its kernel stack (see the module doc; `vcpu`: the vCPU it was in the
    kernel on, if any)."""
    if _asleep_in_syscall(regs) and _check_syscall_entry(task, regs):
        return blocked_syscall_fixup(task, regs, vcpu)
    return SyscallOutcome(*restart_syscall_fixup(regs))
