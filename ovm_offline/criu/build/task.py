"""core-TID.img: per-task and per-thread messages (registers, FPU, credentials, signals,
timers, rlimits, scheduling)."""

from __future__ import annotations

import struct
from typing import Any, cast

from ...state import REGISTER_NAMES, FpuState, ProcessState, TaskStateName, ThreadState
from .cgroup import CRIU_CG_SET
from .common import T, X

#: include/uapi/asm-generic/siginfo.h: a timer that signals one thread
SIGEV_THREAD_ID = 4

__all__ = ["TASK_STATES", "core", "creds", "fpregs", "gpregs", "task_core", "thread_core", "thread_info"]

TASK_STATES: dict[TaskStateName, int] = {"alive": 1, "dead": 2, "stopped": 3, "zombie": 6}
SIGKILL, SIGSTOP = 9, 19


def gpregs(thread: ThreadState) -> X.user_x86_regs_entry:
    regs = X.user_x86_regs_entry(mode=X.NATIVE)
    for name in REGISTER_NAMES:
        setattr(regs, name, getattr(thread.regs, name) & (2**64 - 1))
    return regs


def fpregs(fpu: FpuState) -> X.user_x86_fpregs_entry:
    fx = fpu.fxsave
    cwd, swd, twd, fop, rip, rdp, mxcsr, mxcsr_mask = struct.unpack_from("<HHHHQQII", fx, 0)
    entry = X.user_x86_fpregs_entry(
        cwd=cwd,
        swd=swd,
        twd=twd,
        fop=fop,
        rip=rip,
        rdp=rdp,
        mxcsr=mxcsr,
        mxcsr_mask=mxcsr_mask,
        st_space=struct.unpack_from("<32I", fx, 32),
        xmm_space=struct.unpack_from("<64I", fx, 160),
    )
    if fpu.xstate_bv is not None and fpu.components:
        xsave = X.user_x86_xsave_entry(xstate_bv=fpu.xstate_bv)
        for component, field_name, fmt in (
            (2, "ymmh_space", "<64I"),
            (3, "bndreg_state", "<8Q"),
            (4, "bndcsr_state", "<8Q"),
            (5, "opmask_reg", "<8Q"),
            (6, "zmm_upper", "<64Q"),
            (7, "hi16_zmm", "<128Q"),
            (9, "pkru", "<2I"),
        ):
            data = fpu.components.get(component)
            # CRIU saves a component only when the task's xstate_bv says it is in use
            if data is not None and fpu.xstate_bv >> component & 1:
                getattr(xsave, field_name).extend(struct.unpack_from(fmt, data.ljust(struct.calcsize(fmt), b"\0")))
        entry.xsave.CopyFrom(xsave)
    return entry


def creds(thread: ThreadState) -> T.creds_entry:
    c = thread.creds

    def words(v: int) -> list[int]:
        return [v & 0xFFFFFFFF, v >> 32]

    entry = T.creds_entry(
        uid=c.uid,
        gid=c.gid,
        euid=c.euid,
        egid=c.egid,
        suid=c.suid,
        sgid=c.sgid,
        fsuid=c.fsuid,
        fsgid=c.fsgid,
        cap_inh=words(c.cap_inh),
        cap_prm=words(c.cap_prm),
        cap_eff=words(c.cap_eff),
        cap_bnd=words(c.cap_bnd),
        cap_amb=words(c.cap_amb),  # CRIU 4.x restores them; 3.x skips the field
        secbits=c.secbits,
        groups=c.groups,
    )
    if c.no_new_privs:  # as 4.x writes it: only when set
        entry.no_new_privs = 1
    return entry


def thread_core(thread: ThreadState, leader: bool, seccomp: tuple[int, int | None]) -> T.thread_core_entry:
    tcore = T.thread_core_entry(
        futex_rla=thread.robust_list,
        futex_rla_len=thread.robust_list_len,
        sched_nice=thread.sched_nice,
        sched_policy=thread.sched_policy,
        sas=T.thread_sas_entry(ss_sp=thread.sas_sp, ss_size=thread.sas_size, ss_flags=thread.sas_flags),
        creds=creds(thread),
        comm=thread.comm,
    )
    if thread.sched_policy not in (0, 3, 5):  # SCHED_NORMAL, BATCH, IDLE have no static priority
        tcore.sched_prio = thread.sched_prio
    tcore.signals_p.SetInParent()
    for sig in thread.pending:
        tcore.signals_p.signals.add(siginfo=sig.siginfo)
    if not leader:
        tcore.blk_sigset = thread.blocked
    if thread.rseq is not None:
        tcore.rseq_entry.CopyFrom(
            T.rseq_entry(
                rseq_abi_pointer=thread.rseq.abi_pointer,
                rseq_abi_size=thread.rseq.abi_size,
                signature=thread.rseq.signature,
            )
        )
        if thread.rseq.cs_pointer:
            tcore.rseq_entry.rseq_cs_pointer = thread.rseq.cs_pointer
    mode, filter_index = seccomp
    if mode:
        tcore.seccomp_mode = cast(Any, mode)  # an enum field takes its int
    if filter_index is not None:
        tcore.seccomp_filter = filter_index
    if thread.pdeath_signal:
        tcore.pdeath_sig = thread.pdeath_signal
    return tcore


def thread_info(thread: ThreadState) -> X.thread_info_x86:
    info = X.thread_info_x86(clear_tid_addr=thread.clear_tid_addr, gpregs=gpregs(thread), fpregs=fpregs(thread.fpu))
    for tls in thread.tls:
        info.tls.add(
            entry_number=tls.entry_number,
            base_addr=tls.base_addr,
            limit=tls.limit,
            seg_32bit=tls.seg_32bit,
            contents_h=bool(tls.contents & 2),
            contents_l=bool(tls.contents & 1),
            read_exec_only=tls.read_exec_only,
            limit_in_pages=tls.limit_in_pages,
            seg_not_present=tls.seg_not_present,
            usable=tls.usable,
        )
    return info


def task_core(proc: ProcessState, cg_set: int = CRIU_CG_SET) -> T.task_core_entry:
    leader = proc.threads[0]
    tc = T.task_core_entry(
        task_state=TASK_STATES[proc.task_state],
        exit_code=proc.exit_code,
        personality=proc.personality,
        flags=proc.flags,
        blk_sigset=leader.blocked,
        comm=proc.comm,
        cg_set=cg_set,
        loginuid=proc.loginuid & 0xFFFFFFFF,
        oom_score_adj=proc.oom_score_adj,
        child_subreaper=proc.child_subreaper,
    )
    if proc.task_state == "stopped" and proc.stop_signal is not None:
        tc.stop_signo = proc.stop_signal  # CRIU 4.x stops the restored task with it
    timers = tc.timers
    for name in ("real", "virt", "prof"):
        it = proc.itimers[name]
        getattr(timers, name).CopyFrom(
            T.itimer_entry(
                isec=it.interval_us // 10**6,
                iusec=it.interval_us % 10**6,
                vsec=it.value_us // 10**6,
                vusec=it.value_us % 10**6,
            )
        )
    for pt in proc.posix_timers:
        entry = timers.posix.add(
            it_id=pt.timer_id,
            clock_id=pt.clock_id,
            si_signo=pt.signal,
            it_sigev_notify=pt.notify,
            sival_ptr=pt.sival_ptr,
            overrun=pt.overrun,
            isec=pt.interval_ns // 10**9,
            insec=pt.interval_ns % 10**9,
            vsec=pt.value_ns // 10**9,
            vnsec=pt.value_ns % 10**9,
        )
        if pt.notify & SIGEV_THREAD_ID:
            # CRIU names a thread only for SIGEV_THREAD_ID timers (parse_posix_timers)
            entry.notify_thread_id = pt.notify_thread_id
    for cur, max_ in proc.rlimits:
        tc.rlimits.rlimits.add(cur=cur, max=max_)
    tc.signals_s.SetInParent()
    for sig in proc.shared_pending:
        tc.signals_s.signals.add(siginfo=sig.siginfo)
    for signo, action in enumerate(proc.sigactions, start=1):
        if signo in (SIGKILL, SIGSTOP):
            continue
        tc.sigactions.add(
            sigaction=action.handler,
            flags=action.flags,
            restorer=action.restorer,
            mask=action.mask,
            compat_sigaction=False,
        )
    return tc


def core(
    proc: ProcessState,
    thread: ThreadState,
    cg_set: int = CRIU_CG_SET,
    seccomp: tuple[int, int | None] | None = None,
) -> T.core_entry:
    """A thread's core image; `seccomp` is its (mode, index in seccomp.img) as the dump's
    seccomp plan gives it (its own mode and no filter when None)."""
    leader = thread is proc.threads[0]
    tcore = thread_core(thread, leader, seccomp if seccomp is not None else (thread.seccomp_mode, None))
    tcore.cg_set = cg_set  # where CRIU 4.x reads it; 3.x reads tc.cg_set
    entry = T.core_entry(mtype=T.core_entry.X86_64, thread_info=thread_info(thread), thread_core=tcore)
    if leader:
        entry.tc.CopyFrom(task_core(proc, cg_set))
    return entry


def zombie_core(proc: ProcessState) -> T.core_entry:
    """A zombie's core image: criu writes its comm and exit status (the wait status its parent
    will reap), with task_state TASK_DEAD, and nothing of threads (core_entry_alloc(0, 1))."""
    tc = T.task_core_entry(
        task_state=TASK_STATES["dead"], exit_code=proc.exit_code, personality=0, flags=0, blk_sigset=0, comm=proc.comm
    )
    return T.core_entry(mtype=T.core_entry.X86_64, tc=tc)
