"""User-mode CPU state of a task (x86-64): the saved ``struct pt_regs``, segment bases and
selectors from ``struct thread_struct``, the GDT TLS slots, and boot CPU feature bits.

A task that is not running left its user registers in the ``struct pt_regs`` at the top
of its kernel stack (arch/x86/include/asm/processor.h task_pt_regs): ``task->stack +
THREAD_SIZE - TOP_OF_KERNEL_STACK_PADDING - sizeof(struct pt_regs)``. What ptrace
(PTRACE_GETREGS, NT_PRSTATUS) shows a tracer, and so what CRIU stores, is those registers
plus fs/gs bases and selectors from ``task->thread`` (arch/x86/kernel/ptrace.c getreg).

Kernel differences handled: THREAD_SIZE is derived per task from its vmapped stack area
(16 KiB on both pinned kernels, 32 KiB with KASAN); the 16 bytes of stack padding that
CONFIG_X86_FRED (6.9+) adds above pt_regs; in 6.9+ ``cs``/``ss`` sit in unions with the
FRED fields (read as the full 8-byte slot, as ptrace does).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ...state import REGISTER_NAMES, Registers, TlsEntry
from ..core.objects import Struct

__all__ = [
    "X86_FEATURE_XSAVE",
    "boot_cpu_has",
    "task_pt_regs",
    "task_stack_from",
    "task_tls",
    "task_user_regs",
    "user_desc",
]


if TYPE_CHECKING:
    from ..core.memory import Program

PAGE_SIZE = 4096
#: arch/x86/include/asm/page_64_types.h: THREAD_SIZE = PAGE_SIZE << (2 + KASAN_STACK_ORDER)
THREAD_SIZE_DEFAULT = 16 << 10
#: include/linux/vmalloc.h: a vmap area without the trailing guard page
VM_NO_GUARD = 0x40
#: arch/x86/include/asm/segment.h
USER_CS = 0x33
USER32_CS = 0x23
USER_DS = 0x2B
GDT_ENTRY_TLS_MIN = 12
GDT_ENTRY_TLS_ENTRIES = 3
SEGMENT_TI_MASK = 0x4  # selector refers to the LDT

#: arch/x86/include/asm/cpufeatures.h: word * 32 + bit
X86_FEATURE_XSAVE = 4 * 32 + 26
X86_FEATURE_FSGSBASE = 9 * 32 + 0

#: user_regs_struct fields that come from struct pt_regs (the first 21, same order)
PT_REGS_NAMES = REGISTER_NAMES[:21]


def boot_cpu_has(prog: Program, feature: int) -> bool | None:
    """Does ``boot_cpu_data.x86_capability`` have X86_FEATURE bit `feature`? None if the
    kernel's symbols do not tell."""
    if not prog.has_symbol("boot_cpu_data"):
        return None
    caps = prog["boot_cpu_data"]
    if not caps.has_member_("x86_capability"):
        return None
    words = caps.x86_capability
    word, bit = divmod(feature, 32)
    if word >= len(words):
        return None
    return bool(words[word] >> bit & 1)


def _top_padding(prog: Program) -> int:
    # arch/x86/include/asm/thread_info.h: TOP_OF_KERNEL_STACK_PADDING is 2*8 on x86-64
    # with CONFIG_X86_FRED (6.9+), else 0. The FRED entry code is the config's witness.
    return 16 if prog.has_symbol("asm_fred_entrypoint_user") else 0


def task_thread_size(task: Struct) -> int:
    """THREAD_SIZE: the kernel stack size of a ``struct task_struct``, from its vmapped
    stack area (``stack_vm_area->size`` less the guard page) when the kernel has
    CONFIG_VMAP_STACK, else the x86-64 default of 16 KiB."""
    if task.has_member_("stack_vm_area"):
        vm = task.stack_vm_area
        if vm and int(vm.addr) == int(task.stack):
            size = vm.size - (0 if vm.flags & VM_NO_GUARD else PAGE_SIZE)
            if size & (size - 1) or not PAGE_SIZE * 2 <= size <= 1 << 20:
                raise GuestDataError(f"pid {task.pid}: kernel stack area of impossible size {vm.size}")
            return size
    return THREAD_SIZE_DEFAULT


def task_stack_from(task: Struct, sp: int | None = None) -> tuple[int, bytes] | None:
    """(start, bytes) of the kernel stack of a ``struct task_struct`` from `sp` to its top (all
    of it by default; from its saved SP, the live frames of a task switched out), or None when
    it has no stack or `sp` is outside it."""
    stack, size = int(task.stack), task_thread_size(task)
    start = stack if sp is None else sp
    if not stack or not stack <= start < stack + size:
        return None
    return start, task.prog_.read(start, stack + size - start)


def task_pt_regs(task: Struct) -> Struct:
    """The ``struct pt_regs`` at the top of the kernel stack of a ``struct task_struct``:
    the user registers saved on entry to the kernel (the kernel's task_pt_regs)."""
    prog = task.prog_
    stack = int(task.stack)
    if not stack:
        raise GuestDataError(f"pid {task.pid}: task has no kernel stack (exited?)")
    size = prog.struct_type("pt_regs").size
    return prog.struct("pt_regs", stack + task_thread_size(task) - _top_padding(prog) - size)


def pt_regs_values(regs: Struct) -> dict[str, int]:
    """The 21 user_regs_struct registers held in a ``struct pt_regs``, each read as the
    full 8-byte slot (ptrace's pt_regs_access), keyed by user_regs_struct name."""
    raw = regs.read_()
    t = regs.type_
    out: dict[str, int] = {}
    for name in PT_REGS_NAMES:
        off = t.member(name).offset
        if off + 8 > len(raw):
            raise GuestDataError(f"struct pt_regs has no 8-byte slot for {name}")
        out[name] = struct.unpack_from("<Q", raw, off)[0]
    return out


def desc_base(desc: int) -> int:
    """Base address of an 8-byte segment descriptor (as a little-endian integer)."""
    return (desc >> 16 & 0xFFFF) | (desc >> 32 & 0xFF) << 16 | (desc >> 56 & 0xFF) << 24


def desc_limit(desc: int) -> int:
    return (desc & 0xFFFF) | (desc >> 48 & 0xF) << 16


def task_tls_descs(task: Struct) -> list[int]:
    """The GDT TLS descriptors of a ``struct task_struct`` (``thread.tls_array``), each as
    the 8-byte hardware descriptor read as a little-endian integer."""
    raw = task.thread.tls_array.read_()
    if len(raw) != 8 * GDT_ENTRY_TLS_ENTRIES:
        raise GuestDataError(f"thread.tls_array is {len(raw)} bytes, expected {8 * GDT_ENTRY_TLS_ENTRIES}")
    return list(struct.unpack("<3Q", raw))


def user_desc(entry_number: int, desc: int) -> TlsEntry:
    """A descriptor as get_thread_area(2) fills ``struct user_desc`` (arch/x86/kernel/tls.c
    fill_user_desc): an empty slot reads as read_exec_only and seg_not_present."""
    type_ = desc >> 40 & 0xF
    return TlsEntry(
        entry_number=entry_number,
        base_addr=desc_base(desc),
        limit=desc_limit(desc),
        seg_32bit=bool(desc >> 54 & 1),  # d
        contents=type_ >> 2,
        read_exec_only=not type_ & 2,
        limit_in_pages=bool(desc >> 55 & 1),  # g
        seg_not_present=not desc >> 47 & 1,  # p
        usable=bool(desc >> 52 & 1),  # avl
    )


def task_tls(task: Struct) -> list[TlsEntry]:
    """The three GDT TLS slots (entries 12..14) of a ``struct task_struct`` as user_desc."""
    return [user_desc(GDT_ENTRY_TLS_MIN + i, d) for i, d in enumerate(task_tls_descs(task))]


def _segment_base(task: Struct, selector: int, saved_base: int) -> int:
    """arch/x86/kernel/process_64.c x86_fsbase_read_task for a task that is not running:
    the saved base, unless the CPU lacks FSGSBASE and the selector is nonzero, in which
    case the base is that of the descriptor the selector names."""
    if selector == 0 or boot_cpu_has(task.prog_, X86_FEATURE_FSGSBASE):
        return saved_base
    if selector & SEGMENT_TI_MASK:
        # An LDT selector (modify_ldt users such as Wine). CRIU refuses such tasks;
        # report the saved base rather than walk mm->context.ldt.
        return saved_base
    idx = selector >> 3
    if not GDT_ENTRY_TLS_MIN <= idx < GDT_ENTRY_TLS_MIN + GDT_ENTRY_TLS_ENTRIES:
        return 0  # no other user GDT segment has a nonzero base
    return desc_base(task_tls_descs(task)[idx - GDT_ENTRY_TLS_MIN])


def task_user_regs(task: Struct) -> Registers:
    """The user registers of a stopped or sleeping ``struct task_struct`` as ptrace's
    GETREGS shows them (user_regs_struct), before any syscall-restart fix-up. Raises
    GuestDataError when the saved frame is not a 64-bit user frame."""
    values = pt_regs_values(task_pt_regs(task))
    cs, ss = values["cs"] & 0xFFFF, values["ss"] & 0xFFFF
    if cs not in (USER_CS, USER32_CS) or ss != USER_DS:
        raise GuestDataError(
            f"pid {task.pid}: saved pt_regs have cs=0x{values['cs']:x} ss=0x{values['ss']:x},"
            " not a user frame (kernel thread, or wrong stack layout)"
        )
    th = task.thread
    fsindex, gsindex = th.fsindex, th.gsindex
    values.update(
        fs_base=_segment_base(task, fsindex, th.fsbase),
        gs_base=_segment_base(task, gsindex, th.gsbase),
        ds=th.ds,
        es=th.es,
        fs=fsindex,
        gs=gsindex,
    )
    return Registers(**values)
