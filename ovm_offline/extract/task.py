"""Per-thread and per-process task state, extracted from guest kernel memory into the
dataclasses of ovm_offline.state, with the values CRIU's own dump would record.

* `extract_thread(prog, task, pid_ns)` -> ThreadState: registers (after the syscall
  restart and rseq fix-ups below), FPU, TLS, signal mask and private queue, alternate
  stack, robust list, rseq, scheduling, credentials, seccomp mode.
* `extract_task_common(prog, leader, pid_ns)` -> TaskCommon: the process-level fields of
  ProcessState (same names) plus every thread; ``ProcessState(**common.as_kwargs(),
  mm=..., fds=..., fs=..., namespaces=..., cgroup=..., ...)`` completes it.

The syscall fix-ups (a thread stopped in signal delivery, or asleep inside a system call)
are in ``syscall.py``.

The rseq fix-up (criu/cr-dump.c fixup_thread_rseq): a thread caught inside an rseq
critical section resumes at the section's abort_ip unless the section asks not to be
restarted; ``rseq_cs`` is then kept so restore can put it back.

Zombies keep no kernel stack (it is freed when they exit), so a zombie process has no
threads here; CRIU too writes only comm, task_state and exit_code for one, and writes
its task_state as TASK_DEAD (2).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.features import kernel_has
from ..kernel.core.memory import Program
from ..kernel.core.objects import Pointer, Struct
from ..kernel.cpu.fpu import task_fpu
from ..kernel.cpu.regs import task_tls, task_user_regs
from ..kernel.task.cred import SECCOMP_MODE_FILTER, task_credentials, task_loginuid, task_seccomp_mode
from ..kernel.task.pid import pid_nr_ns, task_pgid, task_pid_ptr, task_sid, task_tgid_ptr
from ..kernel.task.sched import task_nice, task_policy, task_rt_priority
from ..kernel.task.seccomp import task_seccomp_filters
from ..kernel.task.signal import (
    SIGSTOP,
    sigpending_mask,
    sigpending_queue,
    task_pending,
    task_shared_pending,
    task_sigactions,
    task_sigaltstack,
    task_sigmask,
    task_signal,
    task_stop_signal,
)
from ..kernel.task.tasks import (
    task_comm,
    task_read_user,
    task_robust_list,
    task_rseq_area,
    task_state,
    thread_group,
)
from ..kernel.task.timers import signal_itimers, signal_posix_timers
from ..state import (
    Itimer,
    PosixTimer,
    QueuedSignal,
    Registers,
    Rseq,
    SigAction,
    TaskStateName,
    ThreadState,
)
from .running import running_thread_state
from .syscall import syscall_fixup

__all__ = ["SNAPSHOT_DIFFERENCES", "TIMER_SIGNAL_RACE", "TaskCommon", "extract_task_common"]


#: include/uapi/linux/rseq.h; struct rseq before 6.3 had no rseq_len (32 bytes, ORIG_RSEQ_SIZE)
ORIG_RSEQ_SIZE = 32
RSEQ_CS_FLAG_NO_RESTART_ON_SIGNAL = 1 << 1
_RSEQ_CS_OFFSET = 8  # struct rseq: u32 cpu_id_start, u32 cpu_id, u64 rseq_cs, u32 flags
_RSEQ_FLAGS_OFFSET = 16
_RSEQ_CS_SIZE = 32  # struct rseq_cs: u32 version, u32 flags, u64 start_ip, post_commit_offset, abort_ip
#: sizeof(struct robust_list_head): what get_robust_list(2) always reports as the length
ROBUST_LIST_HEAD_SIZE = 24

#: ProcessState.task_state by the leader's ps letter (CRIU's seize decides the same way)
TASK_STATES: dict[str, TaskStateName] = {"T": "stopped", "t": "stopped", "Z": "zombie", "X": "dead"}

#: The queue a timer signal can join between the snapshot and criu's dump (see below).
TIMER_SIGNAL_RACE = "core.tc.signals_s"

#: Fields of CRIU's core image that a memory snapshot cannot reproduce, in the path syntax
#: of ovm_offline.criu.diff's IgnoreRule ("*" one field, "[*]" any element), with why.
#: The golden images are written by criu dump seconds after the snapshot, while the
#: process stays stopped; everything else must match exactly.
SNAPSHOT_DIFFERENCES: tuple[tuple[str, str], ...] = (
    (
        "core.tc.timers.*.vsec",
        "an armed timer's remaining time shrinks between the memory snapshot and criu's later dump",
    ),
    (
        "core.tc.timers.*.vusec",
        "an armed timer's remaining time shrinks between the memory snapshot and criu's later dump",
    ),
    (
        "core.tc.timers.posix[*].vsec",
        "an armed timer's remaining time shrinks between the memory snapshot and criu's later dump",
    ),
    (
        "core.tc.timers.posix[*].vnsec",
        "an armed timer's remaining time shrinks between the memory snapshot and criu's later dump",
    ),
    (
        "core.tc.timers.posix[*].overrun",
        "a periodic timer whose signal is still queued keeps counting overruns until criu reads it",
    ),
    (
        TIMER_SIGNAL_RACE,
        (
            "a timer that expires after the snapshot queues its signal (SIGALRM for ITIMER_REAL) only in"
            " criu's image; only a trailing timer signal with a timer armed at the snapshot may differ"
        ),
    ),
)


# ---------------------------------------------------------------------------- fix-ups


def task_rseq(prog: Program, task: Struct) -> Rseq | None:
    """The rseq registration of a ``struct task_struct`` as PTRACE_GET_RSEQ_CONFIGURATION
    reports it (abi_size: ``rseq_len`` since 6.3, sizeof(struct rseq) = 32 before);
    None on kernels without rseq, and on kernels without that request (before 5.13), where
    criu writes no rseq entry and refuses a thread that registered one."""
    if not task.has_member_("rseq"):
        return None
    ptr, length, signature = task_rseq_area(task)
    if not kernel_has(prog.symbols, "has_ptrace_get_rseq_conf"):
        if ptr:
            raise UnsupportedError(
                f"pid {task.pid} registered rseq on a kernel without PTRACE_GET_RSEQ_CONFIGURATION (before 5.13), "
                "where criu refuses it too (glibc registers none with GLIBC_TUNABLES=glibc.pthread.rseq=0)"
            )
        return None
    size = length if length is not None else (ORIG_RSEQ_SIZE if ptr else 0)
    return Rseq(abi_pointer=ptr, abi_size=size, signature=signature)


def rseq_fixup(task: Struct, rseq: Rseq | None, regs: Registers) -> tuple[Rseq | None, Registers]:
    """CRIU's rseq handling of a thread (see the module doc): reads ``struct rseq`` and its
    current ``struct rseq_cs`` from user memory; moves ip to abort_ip when the thread is
    inside a restartable critical section, keeps cs_pointer when it asked not to be."""
    if rseq is None or not rseq.abi_pointer:
        return rseq, regs
    raw = task_read_user(task, rseq.abi_pointer, _RSEQ_FLAGS_OFFSET + 4)
    cs_ptr = struct.unpack_from("<Q", raw, _RSEQ_CS_OFFSET)[0]
    if not cs_ptr:
        return rseq, regs
    rseq_flags = struct.unpack_from("<I", raw, _RSEQ_FLAGS_OFFSET)[0]
    cs_abi, cs_flags, start_ip, post_commit_offset, abort_ip = struct.unpack(
        "<IIQQQ", task_read_user(task, cs_ptr, _RSEQ_CS_SIZE)
    )
    if cs_abi != 0:
        raise UnsupportedError(f"pid {task.pid}: rseq_cs at 0x{cs_ptr:x} has ABI version {cs_abi}")
    flags = cs_flags | rseq_flags
    if flags & RSEQ_CS_FLAG_NO_RESTART_ON_SIGNAL:
        rseq = dataclasses.replace(rseq, cs_pointer=cs_ptr)
    elif start_ip and start_ip <= regs.ip < start_ip + post_commit_offset:
        regs = dataclasses.replace(regs, ip=abort_ip)
    return rseq, regs


# ---------------------------------------------------------------------------- threads


def _queued(pending: Struct, name: str) -> list[QueuedSignal]:
    return [QueuedSignal(siginfo=s) for s in sigpending_queue(pending, name=name)]


def extract_thread(prog: Program, task: Struct, pid_ns: Pointer | Struct) -> ThreadState:
    """The per-thread state of a stopped or sleeping user ``struct task_struct``, ids as
    seen from ``struct pid_namespace`` `pid_ns`."""
    tid = pid_nr_ns(task_pid_ptr(task), pid_ns)
    if not tid:
        raise GuestDataError(f"thread {task.pid} is not visible in the dumped PID namespace")
    if task.has_member_("on_cpu") and task.on_cpu:
        outcome, fpu = running_thread_state(prog, task)
    else:
        outcome, fpu = syscall_fixup(task, task_user_regs(task)), task_fpu(task)
    regs = outcome.regs
    rseq, regs = rseq_fixup(task, task_rseq(prog, task), regs)
    sas_sp, sas_size, sas_flags = task_sigaltstack(task)
    pending = task_pending(task)
    seccomp_mode = task_seccomp_mode(task)
    return ThreadState(
        tid=tid,
        global_tid=task.pid,
        comm=task_comm(task),
        state=task_state(task),
        regs=regs,
        fpu=fpu,
        tls=task_tls(task),
        clear_tid_addr=int(task.clear_child_tid),
        blocked=task_sigmask(task) if outcome.sigmask is None else outcome.sigmask,
        pending=_queued(pending, f"pending of pid {task.pid}"),
        pending_mask=sigpending_mask(pending),
        sas_sp=sas_sp,
        sas_size=sas_size,
        sas_flags=sas_flags,
        robust_list=task_robust_list(task),
        robust_list_len=_robust_list_head_size(prog),
        rseq=rseq,
        sched_policy=task_policy(task),
        sched_nice=task_nice(task),
        sched_prio=task_rt_priority(task),
        creds=task_credentials(task),
        seccomp_mode=seccomp_mode,
        seccomp_filters=task_seccomp_filters(task) if seccomp_mode == SECCOMP_MODE_FILTER else [],
        syscall_restarted=outcome.rewritten,
        user_writes=list(outcome.user_writes),
        pdeath_signal=task.pdeath_signal,
    )


def _robust_list_head_size(prog: Program) -> int:
    if prog.symbols.has_type("robust_list_head"):
        return prog.struct_type("robust_list_head").size
    return ROBUST_LIST_HEAD_SIZE


# ---------------------------------------------------------------------------- processes


@dataclasses.dataclass
class TaskCommon:
    """The fields of ProcessState that come from the task side (same names and meaning),
    plus the identity of the shared sighand_struct."""

    pid: int
    global_pid: int
    ppid: int  # the real parent's pid seen from pid_ns; 0 if it is outside (the caller zeroes the root's)
    pgid: int
    sid: int
    comm: str
    task_state: str  # "alive", "stopped", "zombie", "dead"
    exit_code: int
    personality: int
    flags: int
    sigactions: list[SigAction]
    shared_pending: list[QueuedSignal]
    shared_pending_mask: int
    itimers: dict[str, Itimer]
    posix_timers: list[PosixTimer]
    rlimits: list[tuple[int, int]]
    oom_score_adj: int
    loginuid: int
    child_subreaper: bool
    threads: list[ThreadState]
    sighand_key: int = 0
    stop_signal: int | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """The fields as keyword arguments for ProcessState (a shallow copy)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def process_task_state(leader: Struct) -> TaskStateName:
    """ProcessState.task_state of a thread-group leader: "stopped" for a stopped (or
    traced-stopped) leader, "zombie", "dead", else "alive"."""
    return TASK_STATES.get(task_state(leader), "alive")


def task_rlimits(signal: Struct) -> list[tuple[int, int]]:
    """(rlim_cur, rlim_max) per RLIMIT_* of a ``struct signal_struct`` (``rlim[16]``)."""
    return [(r.rlim_cur, r.rlim_max) for r in signal.rlim]


_SIGSTOP_BIT = 1 << (SIGSTOP - 1)


def _without_sigstop(queue: list[QueuedSignal]) -> list[QueuedSignal]:
    return [q for q in queue if int.from_bytes(q.siginfo[:4], "little", signed=True) != SIGSTOP]


def consume_pending_sigstop(
    state: TaskStateName, shared: list[QueuedSignal], shared_mask: int, threads: list[ThreadState]
) -> tuple[TaskStateName, list[QueuedSignal], int, list[ThreadState]]:
    """What CRIU's seize leaves of a process with SIGSTOP pending (compel_wait_task): it lets
    the task take every pending SIGSTOP, so the process is saved stopped and no SIGSTOP is
    left in its queues. Kept in a queue, restore would deliver it while restoring ("Task N
    stopped with 19") or stop the process again once it was continued."""
    pending = shared_mask & _SIGSTOP_BIT or any(t.pending_mask & _SIGSTOP_BIT for t in threads)
    if not pending or state not in ("alive", "stopped"):
        return state, shared, shared_mask, threads
    threads = [
        dataclasses.replace(t, pending=_without_sigstop(t.pending), pending_mask=t.pending_mask & ~_SIGSTOP_BIT)
        for t in threads
    ]
    return "stopped", _without_sigstop(shared), shared_mask & ~_SIGSTOP_BIT, threads


def extract_task_common(prog: Program, leader: Struct, pid_ns: Pointer | Struct) -> TaskCommon:
    """The process-level state of thread-group leader ``struct task_struct`` `leader`, and
    every thread (leader first), ids as seen from ``struct pid_namespace`` `pid_ns`."""
    if leader.pid != leader.tgid:
        raise GuestDataError(f"task {leader.pid} is not a thread-group leader (tgid {leader.tgid})")
    pid = pid_nr_ns(task_pid_ptr(leader), pid_ns)
    if not pid:
        raise GuestDataError(f"pid {leader.pid} is not visible in the dumped PID namespace")
    state = process_task_state(leader)
    signal = task_signal(leader)
    shared = task_shared_pending(leader)
    parent = leader.real_parent
    threads: list[ThreadState] = []
    if state not in ("zombie", "dead"):
        threads = [extract_thread(prog, t, pid_ns) for t in thread_group(leader)]
        if not threads or threads[0].global_tid != leader.pid:
            raise GuestDataError(f"pid {leader.pid}: thread list does not start with the leader")
    stop_signal = task_stop_signal(leader) if state == "stopped" else None
    state, shared_queue, shared_mask, threads = consume_pending_sigstop(
        state, _queued(shared, f"shared_pending of pid {leader.pid}"), sigpending_mask(shared), threads
    )
    if state == "stopped" and stop_signal is None:
        stop_signal = SIGSTOP  # the pending SIGSTOP taken as criu's seize takes it
    return TaskCommon(
        pid=pid,
        global_pid=leader.pid,
        ppid=pid_nr_ns(task_tgid_ptr(parent.deref()), pid_ns) if parent else 0,
        pgid=task_pgid(leader, pid_ns),
        sid=task_sid(leader, pid_ns),
        comm=task_comm(leader),
        task_state=state,
        exit_code=leader.exit_code if state in ("zombie", "dead") else 0,
        personality=leader.personality & 0xFFFF_FFFF,
        flags=leader.flags & 0xFFFF_FFFF,
        sigactions=task_sigactions(leader),
        shared_pending=shared_queue,
        shared_pending_mask=shared_mask,
        itimers=signal_itimers(signal),
        posix_timers=signal_posix_timers(signal, pid_ns),
        rlimits=task_rlimits(signal),
        oom_score_adj=signal.oom_score_adj,
        loginuid=task_loginuid(leader),
        child_subreaper=bool(signal.is_child_subreaper),
        threads=threads,
        sighand_key=int(leader.sighand),
        stop_signal=stop_signal,
    )
