"""vCPU state from the text of HMP `info registers -a` (QEMU target/i386/cpu-dump.c
x86_cpu_dump_state): general registers, segments, control registers, CPL and, unlike the
ELF and kdump notes, the x87/SSE/AVX registers. Live guests give it over QMP; a recorded
snapshot keeps it as registers.txt; for a dump file a user captures it at the same moment
(`virsh qemu-monitor-command --hmp DOMAIN 'info registers -a'`) and passes `--vcpu-state`."""

from __future__ import annotations

import os
import re
from typing import Any

from ._files import fail, read_text_input
from .base import PhysicalSource, VcpuFpu, VcpuState, user_regs

__all__ = ["VcpuStateOverlay", "merge_vcpu_state", "parse_registers"]

_CPU = re.compile(r"^CPU#(\d+)", re.MULTILINE)
_REG = re.compile(
    r"\b(RAX|RBX|RCX|RDX|RSI|RDI|RBP|RSP|R8|R9|R10|R11|R12|R13|R14|R15|RIP|RFL|EIP|ESP|CR3|CR4) ?=([0-9a-fA-F]+)"
)
_SEGMENT = re.compile(r"^(ES|CS|SS|DS|FS|GS) =([0-9a-fA-F]{4}) ([0-9a-fA-F]+) ", re.MULTILINE)
_CPL = re.compile(r"\bCPL=(\d)")
_FPU_CONTROL = re.compile(r"FCW=([0-9a-f]{4}) FSW=([0-9a-f]{4}) \[ST=\d\] FTW=([0-9a-f]{2}) MXCSR=([0-9a-f]{8})")
_FPR = re.compile(r"FPR(\d)=([0-9a-f]{16}) ([0-9a-f]{4})")
_XMM = re.compile(r"XMM(\d\d)=([0-9a-f]{16}) ([0-9a-f]{16})")
_YMM = re.compile(r"YMM(\d\d)=([0-9a-f]{16}) ([0-9a-f]{16}) ([0-9a-f]{16}) ([0-9a-f]{16})")
_ZMM = re.compile(r"ZMM\d\d=")

#: HMP name -> user_regs_struct name
_GPR_NAMES = {
    "RAX": "rax",
    "RBX": "rbx",
    "RCX": "rcx",
    "RDX": "rdx",
    "RSI": "rsi",
    "RDI": "rdi",
    "RBP": "rbp",
    "RSP": "rsp",
    "R8": "r8",
    "R9": "r9",
    "R10": "r10",
    "R11": "r11",
    "R12": "r12",
    "R13": "r13",
    "R14": "r14",
    "R15": "r15",
    "RIP": "rip",
    "RFL": "eflags",
}


def _le(*words: str) -> bytes:
    """Little-endian bytes of hex words printed most significant first."""
    return b"".join(int(w, 16).to_bytes(8, "little") for w in reversed(words))


def _fpu(block: str) -> VcpuFpu | None:
    control = _FPU_CONTROL.search(block)
    if control is None:
        return None
    if _ZMM.search(block):
        return None  # AVX-512 state has no place in what we carry yet: its tasks are refused
    fpr = {
        int(i): int(m, 16).to_bytes(8, "little") + int(e, 16).to_bytes(2, "little") for i, m, e in _FPR.findall(block)
    }
    ymm = {int(i): (_le(q1, q0), _le(q3, q2)) for i, q3, q2, q1, q0 in _YMM.findall(block)}
    xmm = {int(i): _le(hi, lo) for i, hi, lo in _XMM.findall(block)} or {i: lo for i, (lo, _) in ymm.items()}
    if sorted(fpr) != list(range(8)) or sorted(xmm) != list(range(16)):
        return None  # not in 64-bit mode (QEMU prints XMM0-7 only): no 64-bit task runs there
    fcw, fsw, ftw, mxcsr = (int(v, 16) for v in control.groups())
    return VcpuFpu(
        fcw=fcw,
        fsw=fsw,
        ftw=ftw,
        mxcsr=mxcsr,
        fpr=tuple(fpr[i] for i in range(8)),
        xmm=tuple(xmm[i] for i in range(16)),
        ymm_hi=tuple(ymm[i][1] for i in range(16)) if ymm else None,
    )


def _vcpu(index: int, block: str) -> VcpuState:
    regs = {name: int(value, 16) for name, value in _REG.findall(block)}
    segments = {name.lower(): (int(sel, 16), int(base, 16)) for name, sel, base in _SEGMENT.findall(block)}
    cpl = _CPL.search(block)
    gprs: dict[str, int] | None = None
    if all(name in regs for name in _GPR_NAMES) and len(segments) == 6:
        gprs = user_regs({_GPR_NAMES[name]: value for name, value in regs.items() if name in _GPR_NAMES}, segments)
    return VcpuState(
        index=index,
        cr3=regs.get("CR3"),
        cr4=regs.get("CR4"),
        rip=regs.get("RIP", regs.get("EIP")),
        rsp=regs.get("RSP", regs.get("ESP")),
        gs_base=segments["gs"][1] if "gs" in segments else None,
        cpl=int(cpl.group(1)) if cpl else None,
        gprs=gprs,
        fpu=_fpu(block),
    )


def parse_registers(text: str) -> list[VcpuState]:
    """vCPUs from HMP `info registers -a` (64-bit or 32-bit register names)."""
    marks = list(_CPU.finditer(text))
    return [
        _vcpu(int(mark.group(1)), text[mark.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)])
        for i, mark in enumerate(marks)
    ]


def merge_vcpu_state(noted: list[VcpuState], text: str, where: str) -> list[VcpuState]:
    """A dump's vCPUs with the registers HMP text adds (FPU/SSE/AVX), after checking that the
    text was captured at the dump's moment: same vCPUs, same RIP, RSP and CR3 on each."""
    printed = {v.index: v for v in parse_registers(text)}
    if not printed:
        raise fail(where, "no 'CPU#N' blocks: not the output of HMP `info registers -a`")
    merged = []
    for vcpu in noted:
        other = printed.get(vcpu.index)
        if other is None:
            raise fail(where, f"has no CPU#{vcpu.index}, which the dump has")
        for name in ("rip", "rsp", "cr3"):
            ours, theirs = getattr(vcpu, name), getattr(other, name)
            if ours is not None and theirs is not None and ours != theirs:
                raise fail(
                    where,
                    f"CPU#{vcpu.index} {name.upper()} is 0x{theirs:x} there but 0x{ours:x} in the dump:"
                    " it was not captured at the dump's moment",
                )
        merged.append(
            VcpuState(
                index=vcpu.index,
                cr3=vcpu.cr3 if vcpu.cr3 is not None else other.cr3,
                cr4=vcpu.cr4 if vcpu.cr4 is not None else other.cr4,
                rip=vcpu.rip,
                rsp=vcpu.rsp,
                gs_base=vcpu.gs_base,
                kernel_gs_base=vcpu.kernel_gs_base,
                cpl=vcpu.cpl if vcpu.cpl is not None else other.cpl,
                gprs=vcpu.gprs or other.gprs,
                fpu=other.fpu,
            )
        )
    return merged


class VcpuStateOverlay:
    """A dump file's source whose vCPUs also carry what `info registers -a` text captured at
    the dump's moment adds (the FPU/SSE/AVX registers of tasks running on them)."""

    def __init__(self, source: PhysicalSource, text_path: str | os.PathLike[str]) -> None:
        text = read_text_input(text_path, "a file of `info registers -a` text")
        self._source = source
        self._vcpus = merge_vcpu_state(source.vcpus(), text, str(text_path))

    def vcpus(self) -> list[VcpuState]:
        return list(self._vcpus)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def close(self) -> None:
        self._source.close()

    def __enter__(self) -> VcpuStateOverlay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
