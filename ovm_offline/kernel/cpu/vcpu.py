"""Tasks on a CPU: which vCPU a running ``struct task_struct`` is current on, and where its
user state lives while it runs (drgn's cpu_curr, task_cpu).

A task that was on a vCPU at the snapshot keeps part of its user state in that vCPU, not in
memory: in user mode (CPL 3) every register; in kernel mode its general registers are on
its kernel stack as for a sleeping task, but its FPU/SSE/AVX registers stay in the vCPU
until the kernel saves them (TIF_NEED_FPU_LOAD set means memory holds them)."""

from __future__ import annotations

import dataclasses
import struct

from ...errors import MomentError, UnsupportedError
from ...sources.base import VcpuState
from ...state import Registers
from ..core.memory import Program
from ..core.objects import Struct
from .fpu import task_fpu_struct
from .percpu import cpu_curr, per_cpu_address, rq_curr, task_cpu
from .regs import USER_CS, USER_DS

__all__ = [
    "fpregs_owner",
    "in_entry_text",
    "kernel_fpu_in_use",
    "task_fpregs_in_cpu",
    "task_fpu_in_memory",
    "task_vcpu",
    "vcpu_entry_user_regs",
    "vcpu_user_regs",
]

#: arch/x86/include/asm/thread_info.h (6.1 and 6.12)
TIF_NEED_FPU_LOAD = 14
U64 = (1 << 64) - 1
IDT_ENTRIES = 256
GATE = struct.Struct("<HHHHII")
#: exceptions for which the CPU pushes an error code below the interrupt frame
ERROR_CODE_VECTORS = frozenset({8, 10, 11, 12, 13, 14, 17, 21, 29, 30})
SYSCALL_INSN_SIZE = 2
#: CR3 bits that are no page-table address: PCID (11:0) and PTI's user-half bit (12)
_CR3_FLAGS = (1 << 13) - 1
_PHYS_MASK = (1 << 52) - 1


def _gs_swapped(prog: Program, vcpu: VcpuState, cpu: int) -> bool:
    """Does `vcpu` run with the kernel's GS base (kernel mode after swapgs)?"""
    return vcpu.cpl == 0 and vcpu.gs_base == int(prog["__per_cpu_offset"][cpu])


def _vcpu_shows(prog: Program, vcpu: VcpuState, task: Struct, cpu: int) -> bool:
    """Is `vcpu` CPU `cpu` running `task`? After swapgs its GS base is the CPU's per-CPU
    offset; before it (user mode, or the first instructions of a kernel entry) that offset is
    in MSR_KERNEL_GS_BASE where the source has it, and CR3 holds the task's page tables."""
    if _gs_swapped(prog, vcpu, cpu):
        return True
    if vcpu.kernel_gs_base is not None and vcpu.kernel_gs_base != int(prog["__per_cpu_offset"][cpu]):
        return False
    if vcpu.cr3 is None or not task.mm:
        return False
    pgd = prog.translate(int(task.mm.pgd))
    return (vcpu.cr3 & _PHYS_MASK & ~_CR3_FLAGS) == (pgd & ~_CR3_FLAGS)


def task_vcpu(prog: Program, task: Struct, vcpus: list[VcpuState]) -> VcpuState:
    """The vCPU a ``struct task_struct`` with ``on_cpu`` set is current on (QEMU's vCPU N is
    Linux's CPU N). MomentError when it is switching (not yet or no longer current: a moment
    later it is on its CPU or off it); UnsupportedError when the source's vCPU N does not show
    it."""
    cpu = task_cpu(task)
    # current_task changes in the middle of __switch_to, after the incoming task's FS and GS
    # bases are loaded: it names a task whose registers are all in the vCPU only when the
    # runqueue runs the same one
    if cpu_curr(prog, cpu) != task.address_ or rq_curr(prog, cpu) != task.address_:
        raise MomentError(f"thread {task.pid} was being switched on or off CPU {cpu} at the snapshot")
    vcpu = next((v for v in vcpus if v.index == cpu), None)
    if vcpu is None or vcpu.cpl not in (0, 3):
        raise UnsupportedError(f"thread {task.pid} runs on CPU {cpu}, whose vCPU state the source lacks")
    if not _vcpu_shows(prog, vcpu, task, cpu):
        raise UnsupportedError(f"thread {task.pid} runs on CPU {cpu}, but vCPU {cpu} does not show it (GS base, CR3)")
    return vcpu


def in_entry_text(prog: Program, address: int) -> bool:
    """Is `address` in the kernel's entry code, where registers move between the user frame
    and the kernel stack?"""
    return prog.symbol_address("__entry_text_start") <= address < prog.symbol_address("__entry_text_end")


def _idt_gates(prog: Program) -> dict[int, int]:
    """Handler address -> vector of every present gate of ``idt_table`` (struct gate_struct:
    offset_low, segment, bits (P is bit 15), offset_middle, offset_high, reserved)."""
    raw = prog.read(prog.symbol_address("idt_table"), IDT_ENTRIES * GATE.size)
    gates = {}
    for vector in range(IDT_ENTRIES):
        low, _segment, bits, middle, high, _ = GATE.unpack_from(raw, vector * GATE.size)
        if bits >> 15 & 1:
            gates[low | middle << 16 | high << 32] = vector
    return gates


def vcpu_entry_user_regs(prog: Program, vcpu: VcpuState) -> tuple[Registers, bool] | None:
    """The user registers of a thread whose vCPU stopped at the first instruction of a kernel
    entry from user mode, where nothing of them is saved yet (under TCG a pause lands there
    after the vCPU took an interrupt), and whether a system call is to be executed again:

    * ``entry_SYSCALL_64``: the ``syscall`` instruction left the user RIP in rcx and RFLAGS
      in r11 and no part of the call ran, so the thread executes the instruction again;
    * an IDT gate: the CPU pushed RIP, CS, RFLAGS, RSP, SS (after an error code for some
      exceptions) on the entry stack; the thread resumes at that RIP (an interrupt is simply
      over, a faulting instruction faults again).

    None when the vCPU is anywhere else."""
    if vcpu.cpl != 0 or vcpu.rip is None or vcpu.rsp is None or vcpu.gprs is None:
        return None
    regs = vcpu_user_regs(vcpu)
    if vcpu.rip == prog.symbol_address("entry_SYSCALL_64"):
        g = vcpu.gprs
        ip = (g["rcx"] - SYSCALL_INSN_SIZE) & U64
        return dataclasses.replace(regs, ip=ip, flags=g["r11"], cs=USER_CS, ss=USER_DS, orig_ax=g["rax"]), True
    vector = _idt_gates(prog).get(vcpu.rip)
    if vector is None:
        return None
    frame = vcpu.rsp + (8 if vector in ERROR_CODE_VECTORS else 0)
    ip, cs, flags, sp, ss = struct.unpack("<5Q", prog.read(frame, 40))
    if cs & 3 != 3:
        return None  # taken in kernel mode: the user frame is the one on the task's stack
    return dataclasses.replace(regs, ip=ip, cs=cs, flags=flags, sp=sp, ss=ss), False


def task_fpu_in_memory(task: Struct) -> bool:
    """Are the FPU registers of a running ``struct task_struct`` saved in its fpstate
    (TIF_NEED_FPU_LOAD), rather than live in its CPU?"""
    return bool(task.thread_info.flags >> TIF_NEED_FPU_LOAD & 1)


def fpregs_owner(prog: Program, cpu: int) -> int:
    """The address of the ``struct fpu`` whose registers `cpu` holds
    (``fpu_fpregs_owner_ctx``; 0 once the kernel has used them itself)."""
    return prog.read_u64(per_cpu_address(prog, "fpu_fpregs_owner_ctx", cpu))


def task_fpregs_in_cpu(prog: Program, task: Struct, cpu: int) -> bool:
    """Does `cpu` hold the FPU registers of ``struct task_struct`` `task`? The kernel's own
    test (fpregs_state_valid): the CPU's owner is its ``struct fpu``, which last ran there."""
    fpu = task_fpu_struct(task)
    return fpregs_owner(prog, cpu) == fpu.address_ and int(fpu.last_cpu) == cpu


def kernel_fpu_in_use(prog: Program, cpu: int) -> bool:
    """Is the kernel using the FPU on `cpu` (between kernel_fpu_begin and kernel_fpu_end)?"""
    return bool(prog.read(per_cpu_address(prog, "in_kernel_fpu", cpu), 1)[0])


def vcpu_user_regs(vcpu: VcpuState) -> Registers:
    """The user registers of a thread running in user mode on `vcpu` (user_regs_struct), as a
    debugger stopping it there would see them: not in a system call (orig_ax -1)."""
    g = vcpu.gprs
    if g is None:
        raise UnsupportedError(f"vCPU {vcpu.index}'s general registers are not in the source")
    return Registers(
        r15=g["r15"], r14=g["r14"], r13=g["r13"], r12=g["r12"], bp=g["rbp"], bx=g["rbx"],
        r11=g["r11"], r10=g["r10"], r9=g["r9"], r8=g["r8"], ax=g["rax"], cx=g["rcx"],
        dx=g["rdx"], si=g["rsi"], di=g["rdi"], orig_ax=U64, ip=g["rip"], cs=g["cs"],
        flags=g["eflags"], sp=g["rsp"], ss=g["ss"], fs_base=g["fs_base"], gs_base=g["gs_base"],
        ds=g["ds"], es=g["es"], fs=g["fs"], gs=g["gs"],
    )  # fmt: skip
