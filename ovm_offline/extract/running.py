"""The user state of a thread that was on a vCPU at the snapshot, from that vCPU.

In user mode (CPL 3) every register is in the vCPU: its general registers, segment bases and
FPU/SSE/AVX registers are taken from there, as a debugger stopping the thread would see them.
In kernel mode (CPL 0) its general registers are on its kernel stack as for a sleeping thread
(a system call it is executing is handled as in syscall.py: one about to sleep is ended as a
signal would end it, one still working is refused), its FS base is still the user's in the
vCPU, and its FPU registers are in the vCPU unless the kernel has saved them
(TIF_NEED_FPU_LOAD; the kernel's FPU owner of the CPU tells the few instructions where the
flag and the registers disagree, refused as a moment). Dump files carry no FPU registers: those come from `info registers -a`
text (live guests and recorded snapshots have it; `--vcpu-state` adds it to a dump file).
"""

from __future__ import annotations

import dataclasses

from ..errors import MomentError, UnsupportedError
from ..kernel.core.memory import Program
from ..kernel.core.objects import Struct
from ..kernel.cpu.fpu import fpu_from_vcpu, task_fpu, task_fpu_struct
from ..kernel.cpu.regs import task_user_regs
from ..kernel.cpu.vcpu import (
    fpregs_owner,
    in_entry_text,
    kernel_fpu_in_use,
    task_fpregs_in_cpu,
    task_fpu_in_memory,
    task_vcpu,
    vcpu_entry_user_regs,
    vcpu_user_regs,
)
from ..sources.base import VcpuState
from ..state import FpuState
from .syscall import SyscallOutcome, syscall_fixup

__all__ = ["running_thread_state"]

USER_MODE = 3


def _live_fpu(task: Struct, vcpu: VcpuState) -> FpuState:
    if vcpu.fpu is None:
        raise UnsupportedError(
            f"thread {task.pid} was running on vCPU {vcpu.index}, whose FPU/SSE registers the source lacks"
            " (dump files carry none; AVX-512 state is not read yet): capture HMP `info registers -a` with"
            " the dump and pass it as --vcpu-state FILE"
        )
    return fpu_from_vcpu(task_fpu(task), vcpu.fpu)


def _kernel_mode_fpu(prog: Program, task: Struct, vcpu: VcpuState) -> FpuState:
    """The FPU state of a thread on `vcpu` in kernel mode. TIF_NEED_FPU_LOAD says where it
    is, except for a few instructions where the kernel moves it: 6.1's __switch_to sets the
    flag on the incoming task only after making it current (the vCPU still holds the
    outgoing task's registers), and kernel_fpu_begin sets it before saving the registers."""
    cpu = vcpu.index
    if task_fpu_in_memory(task):
        if kernel_fpu_in_use(prog, cpu) and fpregs_owner(prog, cpu) == task_fpu_struct(task).address_:
            raise MomentError(f"the kernel was saving thread {task.pid}'s FPU registers on CPU {cpu} to use them")
        return task_fpu(task)
    if not task_fpregs_in_cpu(prog, task, cpu):
        raise MomentError(
            f"thread {task.pid} was being switched onto CPU {cpu}, whose FPU registers are still another task's"
        )
    return _live_fpu(task, vcpu)


def running_thread_state(prog: Program, task: Struct) -> tuple[SyscallOutcome, FpuState]:
    """How a user ``struct task_struct`` with ``on_cpu`` set continues (its registers after
    the syscall fix-ups, ...) and its FPU state."""
    vcpu = task_vcpu(prog, task, prog.source.vcpus())
    if vcpu.cpl == USER_MODE:
        return SyscallOutcome(vcpu_user_regs(vcpu)), _live_fpu(task, vcpu)
    entered = vcpu_entry_user_regs(prog, vcpu)
    if entered is not None:
        return SyscallOutcome(*entered), _live_fpu(task, vcpu)
    if vcpu.rip is not None and in_entry_text(prog, vcpu.rip):
        raise MomentError(
            f"thread {task.pid} was entering or leaving the kernel on vCPU {vcpu.index} (RIP 0x{vcpu.rip:x}),"
            " where its user registers are in neither place whole"
        )
    outcome = syscall_fixup(task, task_user_regs(task), vcpu)
    # thread.fsbase/gsbase are saved only when the task is switched out: while it runs, the
    # user's FS base is live in the vCPU and, after swapgs, its GS base in MSR_KERNEL_GS_BASE
    # (the dump notes have it; HMP text does not print it)
    regs = outcome.regs
    if vcpu.gprs is not None:
        regs = dataclasses.replace(regs, fs_base=vcpu.gprs["fs_base"])
    if vcpu.kernel_gs_base is not None:
        regs = dataclasses.replace(regs, gs_base=vcpu.kernel_gs_base)
    outcome = dataclasses.replace(outcome, regs=regs)
    return outcome, _kernel_mode_fpu(prog, task, vcpu)
