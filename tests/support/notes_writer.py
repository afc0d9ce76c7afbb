"""ELF notes as QEMU writes them (NT_PRSTATUS, QEMU's CPU state, VMCOREINFO), for tests that
build dumps: the inverse of ovm_offline.sources.notes."""

from __future__ import annotations

import struct

from ovm_offline.sources.notes import (
    NOTE_HEADER,
    NT_PRSTATUS,
    PR_REG,
    PR_REG_NAMES,
    PR_REG_OFFSET,
    PRSTATUS_PID_OFFSET,
    PRSTATUS_SIZE,
    QEMU_CR,
    QEMU_CR_OFFSET,
    QEMU_GPR_NAMES,
    QEMU_GPRS,
    QEMU_HEAD,
    QEMU_KERNEL_GS_BASE_OFFSET,
    QEMU_NOTE_TYPE,
    QEMU_RIP_RFLAGS,
    QEMU_SEGMENT,
    QEMU_SEGMENT_NAMES,
    QEMU_SEGMENTS_OFFSET,
    QEMU_STATE_V1_SIZE,
    VMCOREINFO_NOTE_TYPE,
    PrStatus,
    QemuCpuState,
    Segment,
    _pad4,
)


def build_note(name: str, ntype: int, desc: bytes) -> bytes:
    """One ELF note, 4-byte aligned like Linux's and QEMU's."""
    raw_name = name.encode() + b"\0"
    return (
        NOTE_HEADER.pack(len(raw_name), len(desc), ntype)
        + raw_name.ljust(_pad4(len(raw_name)), b"\0")
        + desc.ljust(_pad4(len(desc)), b"\0")
    )


def build_prstatus(pid: int, regs: dict[str, int]) -> bytes:
    """An x86-64 NT_PRSTATUS descriptor (336 bytes) with pr_pid and pr_reg filled in."""
    desc = bytearray(PRSTATUS_SIZE)
    struct.pack_into("<i", desc, PRSTATUS_PID_OFFSET, pid)
    PR_REG.pack_into(desc, PR_REG_OFFSET, *(regs.get(name, 0) for name in PR_REG_NAMES))
    return bytes(desc)


def build_qemu_cpu_state(state: QemuCpuState) -> bytes:
    """A QEMUCPUState v1 descriptor: 432 bytes, or 440 with kernel_gs_base (as QEMU 7.2 writes)."""
    size = QEMU_STATE_V1_SIZE + (8 if state.kernel_gs_base is not None else 0)
    desc = bytearray(size)
    QEMU_HEAD.pack_into(desc, 0, state.version, size)
    QEMU_GPRS.pack_into(desc, 8, *(state.gprs.get(name, 0) for name in QEMU_GPR_NAMES))
    QEMU_RIP_RFLAGS.pack_into(desc, 136, state.rip, state.rflags)
    for i, seg_name in enumerate(QEMU_SEGMENT_NAMES):
        seg = state.segments.get(seg_name, Segment(0, 0, 0, 0))
        QEMU_SEGMENT.pack_into(
            desc, QEMU_SEGMENTS_OFFSET + i * QEMU_SEGMENT.size, seg.selector, seg.limit, seg.flags, 0, seg.base
        )
    QEMU_CR.pack_into(desc, QEMU_CR_OFFSET, *state.cr)
    if state.kernel_gs_base is not None:
        struct.pack_into("<Q", desc, QEMU_KERNEL_GS_BASE_OFFSET, state.kernel_gs_base)
    return bytes(desc)


def build_vmcoreinfo(info: dict[str, str]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in info.items()).encode()


def build_qemu_notes(cpus: list[tuple[PrStatus, QemuCpuState]], vmcoreinfo: dict[str, str] | None) -> bytes:
    """A note stream in QEMU's order: all PRSTATUS, all QEMU notes, then VMCOREINFO."""
    parts = [build_note("CORE", NT_PRSTATUS, build_prstatus(p.pid, p.regs)) for p, _ in cpus]
    parts += [build_note("QEMU", QEMU_NOTE_TYPE, build_qemu_cpu_state(s)) for _, s in cpus]
    if vmcoreinfo is not None:
        parts.append(build_note("VMCOREINFO", VMCOREINFO_NOTE_TYPE, build_vmcoreinfo(vmcoreinfo)))
    return b"".join(parts)
