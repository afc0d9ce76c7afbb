"""FPU/SSE/AVX state of a task (x86-64), as ptrace shows it to CRIU.

A task that is not on a CPU keeps its user FPU registers in its ``struct fpstate``
(``task->thread.fpu.fpstate``, 5.16+; ``thread.fpu.state`` before) in the kernel's own
format: the 512-byte FXSAVE image on CPUs without XSAVE (the default QEMU TCG CPU,
qemu64, is one), else an XSAVE image, *compacted* (XSAVES/XSAVEC: bit 63 of the header's
xcomp_bv, components packed in feature order, some 64-byte aligned) or standard
(XSAVE: each component at its fixed CPUID offset).

CRIU reads it with PTRACE_GETFPREGS (no XSAVE: the FXSAVE image as stored) or
PTRACE_GETREGSET NT_X86_XSTATE, which the kernel converts to the standard user layout
(arch/x86/kernel/fpu/xstate.c __copy_xstate_to_uabi_buf): features missing from the
header are filled from their init state, the header is masked with the task's
user_xfeatures, and PKRU comes from ``thread.pkru`` (5.14+; before, the kernel keeps no copy
of it and the XSAVE image's own PKRU component is it). `uabi_xstate` does the same
conversion from bytes, so it can be checked without a guest.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ...sources.base import VcpuFpu
from ...state import FpuState
from ..core.objects import Pointer, Struct
from .regs import X86_FEATURE_XSAVE, boot_cpu_has

__all__ = ["XstateLayout", "compacted_offsets", "fpu_from_vcpu", "task_fpu", "task_fpu_struct", "uabi_xstate"]


if TYPE_CHECKING:
    from ..core.memory import Program

FXSAVE_SIZE = 512
XSAVE_HDR_OFFSET = 512
XSAVE_EXTENDED_OFFSET = 576  # FXSAVE_SIZE + XSAVE_HDR_SIZE
XCOMP_BV_COMPACTED_FORMAT = 1 << 63
XFEATURE_FP = 0
XFEATURE_SSE = 1
XFEATURE_YMM = 2
XFEATURE_PKRU = 9
#: arch/x86/kernel/fpu/xstate.c: xstate_flags[] holds CPUID(0xd, i).ECX; bit 1 = 64-byte aligned
XSTATE_FLAG_ALIGNED64 = 1 << 1
#: No kernel XSAVE buffer is near this large (AMX makes it about 11 KiB).
MAX_XSTATE_SIZE = 64 << 10
# Offsets inside the FXSAVE image (struct fxregs_state)
_FX_MXCSR = 24
_FX_ST_SPACE = 32
_FX_XMM_SPACE = 160
_FX_PADDING = 416
_FX_SW_RESERVED = 464


@dataclasses.dataclass(frozen=True)
class XstateLayout:
    """Where each XSAVE feature lives: standard-format `offsets`, `sizes`, 64-byte
    `aligned` flags (index = feature number), and the kernel's user feature mask."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    aligned: tuple[bool, ...]
    user_features: int


def xstate_layout(prog: Program) -> XstateLayout:
    """The guest kernel's XSAVE layout: its ``xstate_offsets``, ``xstate_sizes`` and
    ``xstate_flags`` arrays and ``fpu_user_cfg.max_features``."""
    offsets = tuple(prog["xstate_offsets"])
    sizes = tuple(prog["xstate_sizes"])
    flags = tuple(prog["xstate_flags"]) if prog.has_symbol("xstate_flags") else (0,) * len(sizes)
    if prog.has_symbol("fpu_user_cfg"):
        user = prog["fpu_user_cfg"].max_features
    else:  # before 5.16
        user = prog["xfeatures_mask_all"] if prog.has_symbol("xfeatures_mask_all") else (1 << len(sizes)) - 1
    for i in range(2, len(sizes)):
        if user >> i & 1 and not (0 < sizes[i] <= MAX_XSTATE_SIZE and offsets[i] + sizes[i] <= MAX_XSTATE_SIZE):
            raise GuestDataError(f"xstate feature {i} has impossible offset {offsets[i]} / size {sizes[i]}")
    return XstateLayout(offsets, sizes, tuple(bool(f & XSTATE_FLAG_ALIGNED64) for f in flags), user)


def compacted_offsets(xcomp_bv: int, layout: XstateLayout) -> dict[int, int]:
    """Offset of each extended feature in a compacted XSAVE image with header xcomp_bv
    (the kernel's xfeature_get_offset): packed in feature order from byte 576, aligned
    to 64 where the CPU says so."""
    offs = XSAVE_EXTENDED_OFFSET
    out: dict[int, int] = {}
    for i in range(2, len(layout.sizes)):
        if not xcomp_bv >> i & 1:
            continue
        if layout.aligned[i]:
            offs = (offs + 63) & ~63
        out[i] = offs
        offs += layout.sizes[i]
    return out


def uabi_xstate(
    xsave: bytes, init_legacy: bytes, sw_reserved: bytes, layout: XstateLayout, user_xfeatures: int, pkru: int | None
) -> FpuState:
    """The NT_X86_XSTATE view of a kernel XSAVE image `xsave` (compacted or standard):
    the legacy 512 bytes with FP/SSE parts taken from `init_legacy` (init_fpstate's
    FXSAVE area) when the header says they are in init state, the padding zeroed and the
    software-reserved bytes replaced by `sw_reserved`; xstate_bv = header & user_xfeatures;
    one entry per user feature >= 2 (PKRU from `pkru` unless it is None, absent features zero)."""
    if len(xsave) < XSAVE_EXTENDED_OFFSET or len(init_legacy) < FXSAVE_SIZE:
        raise GuestDataError(f"XSAVE image of {len(xsave)} bytes is shorter than its header")
    xfeatures, xcomp_bv = struct.unpack_from("<QQ", xsave, XSAVE_HDR_OFFSET)
    header = xfeatures & user_xfeatures

    def part(feature_set: bool, start: int, end: int) -> bytes:
        return (xsave if feature_set else init_legacy)[start:end]

    fp = bool(header & 1 << XFEATURE_FP)
    sse = bool(header & 1 << XFEATURE_SSE)
    ymm = bool(header & 1 << XFEATURE_YMM)
    fx = (
        part(fp, 0, _FX_MXCSR)
        + part(sse or ymm, _FX_MXCSR, _FX_ST_SPACE)
        + part(fp, _FX_ST_SPACE, _FX_XMM_SPACE)
        + part(sse, _FX_XMM_SPACE, _FX_PADDING)
        + bytes(_FX_SW_RESERVED - _FX_PADDING)
        + sw_reserved[: FXSAVE_SIZE - _FX_SW_RESERVED].ljust(48, b"\0")
    )

    where = (
        compacted_offsets(xcomp_bv, layout)
        if xcomp_bv & XCOMP_BV_COMPACTED_FORMAT
        else {i: layout.offsets[i] for i in range(2, len(layout.sizes))}
    )
    components: dict[int, bytes] = {}
    for i in range(2, len(layout.sizes)):
        if not user_xfeatures >> i & 1:
            continue
        size = layout.sizes[i]
        if i == XFEATURE_PKRU and pkru is not None:
            components[i] = struct.pack("<I", pkru & 0xFFFF_FFFF).ljust(size, b"\0")  # struct pkru_state
        elif header >> i & 1:
            off = where.get(i)
            if off is None or off + size > len(xsave):
                raise GuestDataError(f"XSAVE image of {len(xsave)} bytes lacks feature {i} its header claims")
            components[i] = xsave[off : off + size]
        else:
            components[i] = bytes(size)  # init state: all zeros for every extended user feature
    return FpuState(fxsave=fx, xstate_bv=header, components=components)


def task_fpu_struct(task: Struct) -> Struct:
    """The ``struct fpu`` of a ``struct task_struct`` (x86_task_fpu): ``thread.fpu``, or
    where thread_struct has none (6.16+), the one allocated right after the task_struct."""
    thread = task.thread
    if thread.has_member_("fpu"):
        fpu = thread.fpu
        return fpu.deref() if isinstance(fpu, Pointer) else fpu
    prog = task.prog_
    return prog.struct("fpu", task.address_ + prog.struct_type("task_struct").size)


def task_fpstate(task: Struct) -> Struct:
    """The ``struct fpstate`` of a ``struct task_struct`` (5.16+); before 5.16 the
    ``union fpregs_state`` ``thread.fpu.state``."""
    fpu = task_fpu_struct(task)
    if fpu.has_member_("fpstate"):
        p = fpu.fpstate
        if not p:
            raise GuestDataError(f"pid {task.pid}: thread.fpu.fpstate is NULL")
        return p.deref()
    return fpu.state


def _fpregs(fpstate: Struct) -> tuple[int, int | None, int | None]:
    """(address of the register image, kernel size, user_xfeatures) of an fpstate."""
    if fpstate.has_member_("regs"):
        size = fpstate.size
        if not FXSAVE_SIZE <= size <= MAX_XSTATE_SIZE:
            raise GuestDataError(f"struct fpstate at 0x{fpstate.address_:x} has impossible size {size}")
        return fpstate.member_address_("regs"), size, fpstate.user_xfeatures
    return fpstate.address_, None, None  # old union fpregs_state


def task_uses_xsave(task: Struct) -> bool:
    """Does the kernel keep this task's FPU state in XSAVE format (use_xsave())?"""
    has = boot_cpu_has(task.prog_, X86_FEATURE_XSAVE)
    if has is not None:
        return has
    fps = task_fpstate(task)
    return bool(fps.has_member_("xfeatures") and fps.xfeatures)


def task_fpu(task: Struct) -> FpuState:
    """The FPU state of a ``struct task_struct`` that is not running, as ptrace gives it
    to CRIU: the raw FXSAVE image without XSAVE, else the converted XSAVE image."""
    prog = task.prog_
    addr, size, user_xfeatures = _fpregs(task_fpstate(task))
    if not task_uses_xsave(task):
        return FpuState(fxsave=prog.read(addr, FXSAVE_SIZE))
    layout = xstate_layout(prog)
    if size is None:
        size = max(
            (layout.offsets[i] + layout.sizes[i] for i in range(2, len(layout.sizes)) if layout.user_features >> i & 1),
            default=XSAVE_EXTENDED_OFFSET,
        )
    if user_xfeatures is None:
        user_xfeatures = layout.user_features
    init_addr, _, _ = _fpregs(prog["init_fpstate"])
    init_legacy = prog.read(init_addr, FXSAVE_SIZE)
    sw = prog["xstate_fx_sw_bytes"].read_() if prog.has_symbol("xstate_fx_sw_bytes") else b""
    pkru = int(task.thread.pkru) if task.thread.has_member_("pkru") else None
    return uabi_xstate(prog.read(addr, size), init_legacy, sw, layout, user_xfeatures, pkru)


def fpu_from_vcpu(saved: FpuState, live: VcpuFpu) -> FpuState:
    """The FPU state of a task whose registers are live in a vCPU: `saved` (its fpstate in
    memory, stale but laid out for this CPU: MXCSR_MASK, last-instruction pointers, XSAVE
    components HMP does not print such as PKRU) with the x87, SSE and AVX registers the vCPU
    holds. FXSAVE keeps ST(i) in stack order, QEMU prints physical FPR0-7."""
    legacy = bytearray(saved.fxsave)
    top = live.fsw >> 11 & 7
    struct.pack_into("<HHB", legacy, 0, live.fcw, live.fsw, live.ftw)
    struct.pack_into("<I", legacy, 24, live.mxcsr)
    for i in range(8):
        legacy[32 + 16 * i : 32 + 16 * i + 10] = live.fpr[(top + i) & 7]
    legacy[160:416] = b"".join(live.xmm)
    if saved.xstate_bv is None:
        return FpuState(fxsave=bytes(legacy))
    components = dict(saved.components)
    xstate_bv = saved.xstate_bv | 1 << XFEATURE_FP | 1 << XFEATURE_SSE
    if live.ymm_hi is not None:
        components[XFEATURE_YMM] = b"".join(live.ymm_hi)
        xstate_bv |= 1 << XFEATURE_YMM
    return FpuState(fxsave=bytes(legacy), xstate_bv=xstate_bv, components=components)
