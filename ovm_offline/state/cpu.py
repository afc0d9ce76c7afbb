"""Registers and CPU state of a thread."""

from __future__ import annotations

import dataclasses
from dataclasses import field

__all__ = ["REGISTER_NAMES", "Registers", "FpuState", "TlsEntry"]


REGISTER_NAMES = (
    "r15",
    "r14",
    "r13",
    "r12",
    "bp",
    "bx",
    "r11",
    "r10",
    "r9",
    "r8",
    "ax",
    "cx",
    "dx",
    "si",
    "di",
    "orig_ax",
    "ip",
    "cs",
    "flags",
    "sp",
    "ss",
    "fs_base",
    "gs_base",
    "ds",
    "es",
    "fs",
    "gs",
)


@dataclasses.dataclass
class Registers:
    """User registers in user_regs_struct order (what ptrace GETREGS gives and CRIU stores),
    after the syscall-restart fix-ups CRIU's own dump applies."""

    r15: int = 0
    r14: int = 0
    r13: int = 0
    r12: int = 0
    bp: int = 0
    bx: int = 0
    r11: int = 0
    r10: int = 0
    r9: int = 0
    r8: int = 0
    ax: int = 0
    cx: int = 0
    dx: int = 0
    si: int = 0
    di: int = 0
    orig_ax: int = 0
    ip: int = 0
    cs: int = 0
    flags: int = 0
    sp: int = 0
    ss: int = 0
    fs_base: int = 0
    gs_base: int = 0
    ds: int = 0
    es: int = 0
    fs: int = 0
    gs: int = 0


@dataclasses.dataclass
class FpuState:
    """FPU/SSE/AVX state. `fxsave` is the 512-byte legacy area (cwd, swd, twd, fop, rip, rdp,
    mxcsr, mxcsr_mask, st_space, xmm_space); `xstate_bv` and `components` come from the XSAVE
    header and extended areas (component number -> its bytes in standard, non-compacted form),
    or are None/empty when the task has no XSAVE state beyond the legacy area."""

    fxsave: bytes
    xstate_bv: int | None = None
    components: dict[int, bytes] = field(default_factory=dict)


@dataclasses.dataclass
class TlsEntry:
    """One GDT TLS slot (struct user_desc as CRIU stores it)."""

    entry_number: int
    base_addr: int
    limit: int
    seg_32bit: bool
    contents: int  # 2 bits
    read_exec_only: bool
    limit_in_pages: bool
    seg_not_present: bool
    usable: bool
