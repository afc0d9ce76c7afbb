"""vCPU registers from QEMU's own device state: the "cpu" sections a migration stream carries
after guest RAM, saved by QEMU at the stop it makes itself (a background snapshot's moment, with
no stop of ours before it), read field by field by the description QEMU appends to the stream,
as its scripts/analyze-migration.py reads them.

Format (QEMU 7.2 migration/savevm.c, migration/vmstate.c): device sections FULL (0x04): section
id (be32), name (u8 length, bytes), instance id (be32), version id (be32), the fields in order
(integers big-endian), each subsection sent (0x05, name, version id, its fields), a footer
(0x7e, section id); then EOF (0x00), then VMDESCRIPTION (0x06), a be32 length and JSON:
{"page_size", "devices": [{"name", "instance_id", "fields": [{"name", "type", "size",
"array_len"?, "struct"?}], "subsections": [...]}]}, one entry per section in the stream. The
description is the only way past a section: none carries its own length.

x86's "cpu" section (target/i386/machine.c vmstate_x86_cpu) holds what HMP `info registers`
prints, from the same CPUX86State, plus MSR_KERNEL_GS_BASE, which HMP does not print.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

from ..errors import SourceError
from .base import VcpuFpu, VcpuState, user_regs
from .migration import SECTION_EOF, SECTION_FOOTER, SECTION_FULL, SECTION_VMDESCRIPTION, StreamReader

__all__ = ["MAX_VMSTATE_BYTES", "vcpus_from_vmstate"]

SUBSECTION = 0x05  # inside a section (migration/vmstate.c QEMU_VM_SUBSECTION)

#: far beyond a pc or q35 machine's device state (RAM and video RAM stream as RAM blocks)
MAX_VMSTATE_BYTES = 64 << 20
#: the key under which a struct's values keep its kind (QEMU's VMStateDescription name)
_VMSD = "\0vmsd"
#: structs inside structs: QEMU nests a few levels
_MAX_DEPTH = 16
#: field values read in all: bounds a description of absurd array lengths
_MAX_VALUES = 1 << 22

# target/i386/cpu.h
_HF_CPL_MASK = 0x3
_HF_CS64_MASK = 1 << 15
_XSTATE_YMM = 1 << 2
_XSTATE_AVX_512 = 0xE0  # opmask, ZMM_Hi256, Hi16_ZMM: HMP then prints ZMM registers
#: env.regs in QEMU's order (R_EAX, R_ECX, ...), by user_regs_struct name
_GPRS = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", *(f"r{i}" for i in range(8, 16)))
#: env.segs in QEMU's order (R_ES, R_CS, ...)
_SEGMENTS = ("es", "cs", "ss", "ds", "fs", "gs")


class _Reader(StreamReader):
    """The migration stream's reader over the device state's sections (up to their EOF byte),
    its errors in the device state's words."""

    def __init__(self, data: bytes, end: int, where: str) -> None:
        super().__init__(io.BytesIO(data[:end]), where)
        self.data, self.end = data, end
        self.values = 0  # field values read so far, against _MAX_VALUES

    def short(self, end: int) -> SourceError:
        return self.bad("a field runs past the end of the device state")

    def bad(self, why: str) -> SourceError:
        return SourceError(
            f"{self.where}: QEMU's device state is not as its description says (byte {self.offset}): {why}"
        )


def _description(data: bytes, where: str) -> tuple[int, dict[str, Any]]:
    """Where the sections end (the EOF byte) and the JSON description after it."""
    end = len(data)
    at = data.rfind(bytes([SECTION_VMDESCRIPTION]))
    while at >= 1:
        if at + 5 <= end and struct.unpack(">I", data[at + 1 : at + 5])[0] == end - at - 5:
            if data[at - 1] != SECTION_EOF:
                break
            try:
                desc = json.loads(data[at + 5 :])
            except ValueError:
                break
            if not isinstance(desc, dict) or not isinstance(desc.get("devices"), list):
                break
            return at - 1, desc
        at = data.rfind(bytes([SECTION_VMDESCRIPTION]), 0, at)
    raise SourceError(
        f"{where}: QEMU sent no description of its device state (machine option suppress-vmdesc?),"
        " so its vCPU registers cannot be read"
    )


def _fields(r: _Reader, desc: dict[str, Any], depth: int) -> dict[str, Any]:
    """One struct's values by field name (bytes, a dict for a struct, a list for an array),
    then its subsections' by name."""
    if depth > _MAX_DEPTH:
        raise r.bad(f"structs nested more than {_MAX_DEPTH} deep")
    values: dict[str, Any] = {}
    for field in desc.get("fields", []):
        count = field.get("array_len", 1)
        if not isinstance(count, int) or count < 0:
            raise r.bad(f"field {field.get('name')!r} has array length {count!r}")
        r.values += count
        if r.values > _MAX_VALUES:
            raise r.bad(f"more than {_MAX_VALUES} values")
        if field.get("type") == "struct":
            struct_desc = field.get("struct") or {}
            items: list[Any] = [_fields(r, struct_desc, depth + 1) for _ in range(count)]
            for item in items:
                item[_VMSD] = struct_desc.get("vmsd_name")
        else:
            size = field.get("size")
            if not isinstance(size, int):
                raise r.bad(f"field {field.get('name')!r} has no size")
            items = [r.take(size) for _ in range(count)]
        values[str(field.get("name"))] = items if "array_len" in field else items[0]
    for subsection in desc.get("subsections", []):
        if r.u8() != SUBSECTION:
            raise r.bad(f"subsection {subsection.get('vmsd_name')!r} is not where it was sent")
        name = r.name()
        if name != subsection.get("vmsd_name"):
            raise r.bad(f"subsection {name!r} where {subsection.get('vmsd_name')!r} was sent")
        r.u32()  # version id
        values[name] = _fields(r, subsection, depth + 1)
    return values


def _sections(data: bytes, where: str, wanted: str) -> dict[int, dict[str, Any]]:
    """The values of each section named `wanted`, by instance id; every other section is
    stepped over by its description."""
    end, desc = _description(data, where)
    devices = {(d.get("name"), d.get("instance_id")): d for d in desc["devices"] if isinstance(d, dict)}
    r = _Reader(data, end, where)
    found: dict[int, dict[str, Any]] = {}
    while r.offset < end:
        kind = r.u8()
        if kind != SECTION_FULL:
            raise r.bad(f"section type {kind:#x} among the devices")
        section_id, name, instance = r.u32(), r.name(), r.u32()
        r.u32()  # version id
        device = devices.get((name, instance))
        if device is None:
            raise r.bad(f"section {name!r} {instance} has no description")
        values = _fields(r, device, 0)
        if r.offset < end and r.data[r.offset] == SECTION_FOOTER:
            r.u8()
            if r.u32() != section_id:
                raise r.bad(f"the footer of section {name!r} names another section")
        if name == wanted:
            found[instance] = values
    return found


def vcpus_from_vmstate(data: bytes, where: str) -> list[VcpuState]:
    """Each vCPU's registers from QEMU's device state (the stream's tail after guest RAM, from
    its first device section to the end of its description), by vCPU index."""
    if len(data) > MAX_VMSTATE_BYTES:
        raise SourceError(f"{where}: QEMU's device state is larger than {MAX_VMSTATE_BYTES >> 20} MiB")
    cpus = _sections(data, where, "cpu")
    if not cpus:
        raise SourceError(f'{where}: QEMU\'s device state has no x86 vCPU (no "cpu" section)')
    return [_vcpu(index, cpus[index], where) for index in sorted(cpus)]


class _CpuSection:
    """One "cpu" section's values, read by name; SourceError naming what is not as expected."""

    def __init__(self, values: dict[str, Any], place: str) -> None:
        self.values, self.place = values, place

    def missing(self, what: str) -> SourceError:
        return SourceError(f"{self.place}: QEMU's x86 vCPU state has no {what} as expected")

    def number(self, value: Any, name: str) -> int:
        if not isinstance(value, bytes):
            raise self.missing(f"field {name}")
        return int.from_bytes(value, "big")

    def field(self, name: str) -> int:
        return self.number(self.values.get(name), name)

    def array(self, name: str, length: int) -> list[Any]:
        items = self.values.get(name)
        if not isinstance(items, list) or len(items) != length:
            raise self.missing(f"field {name} of {length}")
        return items

    def lanes(self, vmsd_name: str) -> tuple[bytes, ...]:
        """The 16 128-bit lanes of the array of `vmsd_name` structs (QEMU names both such
        arrays env.xmm_regs[...]), little-endian: XMM0-15, or the upper halves of YMM0-15."""
        for value in self.values.values():
            if not (isinstance(value, list) and value):
                continue
            if not all(isinstance(v, dict) and v.get(_VMSD) == vmsd_name for v in value):
                continue
            lanes = []
            for reg in value:
                words = [word for name, word in sorted(reg.items()) if name != _VMSD]
                if len(words) != 2 or any(not isinstance(w, bytes) or len(w) != 8 for w in words):
                    break
                lanes.append(words[0][::-1] + words[1][::-1])
            if len(lanes) == 16:
                return tuple(lanes)
        raise self.missing(f"16 {vmsd_name} registers")


def _vcpu(index: int, values: dict[str, Any], where: str) -> VcpuState:
    cpu = _CpuSection(values, f"{where}: vCPU {index}")
    regs = [cpu.number(v, "env.regs") for v in cpu.array("env.regs", 16)]
    segments = {
        seg: (cpu.number(s.get("selector"), "selector"), cpu.number(s.get("base"), "base"))
        for seg, s in zip(_SEGMENTS, cpu.array("env.segs", 6))
    }
    hflags, rip = cpu.field("env.hflags"), cpu.field("env.eip")
    gprs: dict[str, int] | None = None
    if hflags & _HF_CS64_MASK:
        gprs = user_regs({**dict(zip(_GPRS, regs)), "rip": rip, "eflags": cpu.field("env.eflags")}, segments)
    return VcpuState(
        index=index,
        cr3=cpu.field("env.cr[3]"),
        cr4=cpu.field("env.cr[4]"),
        rip=rip,
        rsp=regs[4],
        gs_base=segments["gs"][1],
        kernel_gs_base=cpu.field("env.kernelgsbase"),
        cpl=hflags & _HF_CPL_MASK,
        gprs=gprs,
        fpu=_fpu(cpu, hflags),
    )


def _fpu(cpu: _CpuSection, hflags: int) -> VcpuFpu | None:
    """The x87/SSE/AVX registers as HMP prints them; None where HMP prints none we carry (not
    in 64-bit mode, or AVX-512 enabled)."""
    xcr0 = cpu.field("env.xcr0")
    if not hflags & _HF_CS64_MASK or xcr0 & _XSTATE_AVX_512 == _XSTATE_AVX_512:
        return None
    if cpu.field("env.fpregs_format_vmstate") != 0:
        raise SourceError(f"{cpu.place}: x87 registers saved as 64-bit doubles, not the 80-bit form QEMU writes")
    fpr = []
    for reg in cpu.array("env.fpregs", 8):
        raw = reg.get("tmp") if isinstance(reg, dict) else None
        if not isinstance(raw, bytes) or len(raw) != 10:
            raise cpu.missing("80-bit x87 register")
        fpr.append(raw[7::-1] + raw[9:7:-1])  # big-endian mantissa and exponent, as FXSAVE lays them
    return VcpuFpu(
        fcw=cpu.field("env.fpuc"),
        fsw=cpu.field("env.fpus_vmstate"),
        ftw=cpu.field("env.fptag_vmstate") & 0xFF,
        mxcsr=cpu.field("env.mxcsr"),
        fpr=tuple(fpr),
        xmm=cpu.lanes("xmm_reg"),
        ymm_hi=cpu.lanes("ymmh_reg") if xcr0 & _XSTATE_YMM else None,
    )
