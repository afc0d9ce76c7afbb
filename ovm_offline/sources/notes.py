"""ELF note streams as QEMU writes them (ELF PT_NOTE, and the kdump sub header's note area):
NT_PRSTATUS and QEMU CPU-state notes per vCPU, and the guest's VMCOREINFO.

Layouts checked against QEMU 7.2 dumps of Linux 6.1 and 6.12 guests (see tests/test_sources_real.py).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

from ._files import fail
from .base import VcpuState

__all__ = [
    "NOTE_HEADER",
    "PR_REG_NAMES",
    "ParsedNotes",
    "PrStatus",
    "QEMU_GPR_NAMES",
    "QEMU_SEGMENT_NAMES",
    "QemuCpuState",
    "Segment",
    "iter_notes",
    "parse_notes",
    "parse_prstatus",
    "parse_qemu_cpu_state",
    "parse_vmcoreinfo",
]


NT_PRSTATUS = 1
QEMU_NOTE_TYPE = 0
VMCOREINFO_NOTE_TYPE = 0

NOTE_HEADER = struct.Struct("<III")  # namesz, descsz, type (Elf64_Nhdr)

#: struct elf_prstatus (x86-64): 336 bytes, pr_pid at +32, pr_reg (27 u64) at +112
PRSTATUS_SIZE = 336
PRSTATUS_PID_OFFSET = 32
PR_REG_OFFSET = 112
PR_REG_NAMES = (
    "r15",
    "r14",
    "r13",
    "r12",
    "rbp",
    "rbx",
    "r11",
    "r10",
    "r9",
    "r8",
    "rax",
    "rcx",
    "rdx",
    "rsi",
    "rdi",
    "orig_rax",
    "rip",
    "cs",
    "eflags",
    "rsp",
    "ss",
    "fs_base",
    "gs_base",
    "ds",
    "es",
    "fs",
    "gs",
)
PR_REG = struct.Struct(f"<{len(PR_REG_NAMES)}Q")

#: QEMUCPUState (target/i386/arch_dump.c), version 1
QEMU_GPR_NAMES = (
    "rax",
    "rbx",
    "rcx",
    "rdx",
    "rsi",
    "rdi",
    "rsp",
    "rbp",
    "r8",
    "r9",
    "r10",
    "r11",
    "r12",
    "r13",
    "r14",
    "r15",
)
QEMU_SEGMENT_NAMES = ("cs", "ds", "es", "fs", "gs", "ss", "ldt", "tr", "gdt", "idt")
QEMU_HEAD = struct.Struct("<II")  # version, size
QEMU_GPRS = struct.Struct("<16Q")  # at +8
QEMU_RIP_RFLAGS = struct.Struct("<QQ")  # at +136
QEMU_SEGMENT = struct.Struct("<IIIIQ")  # selector, limit, flags, pad, base: 24 bytes
QEMU_SEGMENTS_OFFSET = 152
QEMU_CR_OFFSET = 392  # cr[0..4], so CR3 at +416, CR4 at +424
QEMU_CR = struct.Struct("<5Q")
QEMU_STATE_V1_SIZE = 432
QEMU_KERNEL_GS_BASE_OFFSET = 432  # appended later without a version bump; present when size >= 440


@dataclasses.dataclass(frozen=True)
class Note:
    name: str
    type: int
    desc: bytes


@dataclasses.dataclass(frozen=True)
class PrStatus:
    pid: int
    regs: dict[str, int]


@dataclasses.dataclass(frozen=True)
class Segment:
    selector: int
    limit: int
    flags: int
    base: int


@dataclasses.dataclass(frozen=True)
class QemuCpuState:
    version: int
    size: int
    gprs: dict[str, int]
    rip: int
    rflags: int
    segments: dict[str, Segment]
    cr: tuple[int, int, int, int, int]
    kernel_gs_base: int | None


@dataclasses.dataclass(frozen=True)
class ParsedNotes:
    notes: tuple[Note, ...]
    prstatus: tuple[PrStatus, ...]
    cpu_states: tuple[QemuCpuState, ...]
    vcpus: tuple[VcpuState, ...]
    vmcoreinfo: dict[str, str] | None


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def iter_notes(data: bytes, where: str) -> Iterator[Note]:
    """The notes of an ELF note stream (4-byte aligned names and descriptors, as Linux and QEMU
    write them). Trailing zero padding is accepted; anything else that does not fit is an error."""
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < NOTE_HEADER.size:
            if any(data[pos:end]):
                raise fail(where, f"truncated note header at note offset {pos}")
            return
        namesz, descsz, ntype = NOTE_HEADER.unpack_from(data, pos)
        name_at = pos + NOTE_HEADER.size
        desc_at = name_at + _pad4(namesz)
        if namesz > end or descsz > end or desc_at + descsz > end:
            raise fail(
                where, f"note at note offset {pos} claims {namesz}+{descsz} bytes, beyond the note area ({end} bytes)"
            )
        name = bytes(data[name_at : name_at + namesz]).split(b"\0", 1)[0].decode("ascii", "replace")
        yield Note(name, ntype, bytes(data[desc_at : desc_at + descsz]))
        pos = desc_at + _pad4(descsz)


def parse_prstatus(desc: bytes, where: str) -> PrStatus:
    if len(desc) < PR_REG_OFFSET + PR_REG.size:
        raise fail(where, f"NT_PRSTATUS note has {len(desc)} bytes, expected {PRSTATUS_SIZE}")
    (pid,) = struct.unpack_from("<i", desc, PRSTATUS_PID_OFFSET)
    regs = dict(zip(PR_REG_NAMES, PR_REG.unpack_from(desc, PR_REG_OFFSET)))
    return PrStatus(pid, regs)


def parse_qemu_cpu_state(desc: bytes, where: str) -> QemuCpuState:
    if len(desc) < QEMU_STATE_V1_SIZE:
        raise fail(where, f"QEMU CPU-state note has {len(desc)} bytes, expected at least {QEMU_STATE_V1_SIZE}")
    note_format, size = QEMU_HEAD.unpack_from(desc, 0)
    if note_format != 1:
        raise fail(where, f"QEMU CPU-state note has unknown version {note_format}")
    gprs = dict(zip(QEMU_GPR_NAMES, QEMU_GPRS.unpack_from(desc, 8)))
    rip, rflags = QEMU_RIP_RFLAGS.unpack_from(desc, 136)
    segments = {}
    for i, seg_name in enumerate(QEMU_SEGMENT_NAMES):
        selector, limit, flags, _pad, base = QEMU_SEGMENT.unpack_from(
            desc, QEMU_SEGMENTS_OFFSET + i * QEMU_SEGMENT.size
        )
        segments[seg_name] = Segment(selector, limit, flags, base)
    cr = QEMU_CR.unpack_from(desc, QEMU_CR_OFFSET)
    kernel_gs_base = None
    if size >= QEMU_KERNEL_GS_BASE_OFFSET + 8 and len(desc) >= QEMU_KERNEL_GS_BASE_OFFSET + 8:
        (kernel_gs_base,) = struct.unpack_from("<Q", desc, QEMU_KERNEL_GS_BASE_OFFSET)
    return QemuCpuState(note_format, size, gprs, rip, rflags, segments, cr, kernel_gs_base)


def parse_vmcoreinfo(text: bytes) -> dict[str, str]:
    """VMCOREINFO's 'KEY=VALUE\\n' lines as a dict (later keys win; lines without '=' are skipped)."""
    info: dict[str, str] = {}
    for line in bytes(text).split(b"\0", 1)[0].decode("utf-8", "replace").split("\n"):
        key, eq, value = line.partition("=")
        if eq and key:
            info[key] = value
    return info


def vcpu_from(index: int, prstatus: PrStatus | None, state: QemuCpuState | None) -> VcpuState:
    """One vCPU from its PRSTATUS and/or QEMU note; the QEMU note is the richer one (CR3/CR4)."""
    gprs = dict(prstatus.regs) if prstatus is not None else None
    if state is not None:
        return VcpuState(
            index=index,
            cr3=state.cr[3],
            cr4=state.cr[4],
            rip=state.rip,
            rsp=state.gprs["rsp"],
            gs_base=state.segments["gs"].base,
            kernel_gs_base=state.kernel_gs_base,
            cpl=state.segments["cs"].selector & 3,
            gprs=gprs,
        )
    if prstatus is not None:
        return VcpuState(
            index=index,
            rip=prstatus.regs["rip"],
            rsp=prstatus.regs["rsp"],
            gs_base=prstatus.regs["gs_base"],
            cpl=prstatus.regs["cs"] & 3,
            gprs=gprs,
        )
    return VcpuState(index=index)


def parse_notes(data: bytes, where: str) -> ParsedNotes:
    """Every note of the stream, decoded where we know the type. QEMU writes all PRSTATUS notes
    (vCPU order), then all QEMU notes (same order), then VMCOREINFO; we pair them by position."""
    notes = tuple(iter_notes(data, where))
    prstatus = tuple(parse_prstatus(n.desc, where) for n in notes if n.name == "CORE" and n.type == NT_PRSTATUS)
    states = tuple(parse_qemu_cpu_state(n.desc, where) for n in notes if n.name == "QEMU" and n.type == QEMU_NOTE_TYPE)
    vmcoreinfo = None
    for note in notes:
        if note.name == "VMCOREINFO":
            vmcoreinfo = parse_vmcoreinfo(note.desc)
    count = max(len(prstatus), len(states))
    vcpus = tuple(
        vcpu_from(i, prstatus[i] if i < len(prstatus) else None, states[i] if i < len(states) else None)
        for i in range(count)
    )
    return ParsedNotes(notes, prstatus, states, vcpus, vmcoreinfo)


# ==== writing (converters that must synthesize notes, and tests) ===================================
