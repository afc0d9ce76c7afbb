"""What a thread or process has besides memory and files: signals, credentials, timers,
rseq, scheduling."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from .cpu import FpuState, Registers, TlsEntry
from .mm import UserWrite

__all__ = ["SigAction", "QueuedSignal", "Credentials", "Itimer", "PosixTimer", "Rseq", "SeccompFilter", "ThreadState"]


@dataclasses.dataclass
class SigAction:
    handler: int
    flags: int
    restorer: int
    mask: int


@dataclasses.dataclass
class QueuedSignal:
    siginfo: bytes  # 128 bytes, the kernel's siginfo as CRIU stores it


@dataclasses.dataclass(frozen=True)
class SeccompFilter:
    """One ``struct seccomp_filter``: its address (`key`, shared by the threads under it), its
    classic BPF program as the process installed it (8 bytes per instruction), and whether it
    logs (SECCOMP_FILTER_FLAG_LOG)."""

    key: int
    program: bytes
    log: bool


@dataclasses.dataclass
class Credentials:
    uid: int
    gid: int
    euid: int
    egid: int
    suid: int
    sgid: int
    fsuid: int
    fsgid: int
    cap_inh: int
    cap_prm: int
    cap_eff: int
    cap_bnd: int
    secbits: int
    groups: list[int] = field(default_factory=list)
    cap_amb: int = 0  # ambient capabilities (CRIU 4.x restores them; 3.17 does not save them)
    no_new_privs: bool = False  # PR_SET_NO_NEW_PRIVS (likewise)


@dataclasses.dataclass
class Itimer:
    """Interval and remaining value, in microseconds (remaining is as of the snapshot)."""

    interval_us: int
    value_us: int


@dataclasses.dataclass
class PosixTimer:
    timer_id: int
    clock_id: int
    signal: int
    notify: int  # sigev_notify
    notify_thread_id: int
    sival_ptr: int
    overrun: int
    interval_ns: int
    value_ns: int  # remaining


@dataclasses.dataclass
class Rseq:
    abi_pointer: int
    abi_size: int
    signature: int
    cs_pointer: int = 0


@dataclasses.dataclass
class ThreadState:
    """What is per thread: registers, FPU, signal mask and queue, stacks, credentials."""

    tid: int  # inside the dumped tree's PID namespace
    global_tid: int
    comm: str
    state: str  # ps letter of the thread: S, T, R, D, ...
    regs: Registers
    fpu: FpuState
    tls: list[TlsEntry]
    clear_tid_addr: int
    blocked: int  # signal mask, bit n-1 = signal n
    pending: list[QueuedSignal]  # per-thread queue
    pending_mask: int
    sas_sp: int
    sas_size: int
    sas_flags: int
    robust_list: int
    robust_list_len: int
    rseq: Rseq | None
    sched_policy: int
    sched_nice: int
    sched_prio: int
    creds: Credentials
    seccomp_mode: int
    #: the filters of SECCOMP_MODE_FILTER, newest first (the chain from task->seccomp.filter)
    seccomp_filters: list[SeccompFilter] = field(default_factory=list)
    syscall_restarted: bool = False  # registers were rewritten so the interrupted syscall restarts
    pdeath_signal: int = 0  # prctl(PR_SET_PDEATHSIG); CRIU stores it only when nonzero
    #: what the kernel writes into the process as it ends the call the thread sleeps in
    user_writes: list[UserWrite] = field(default_factory=list)
