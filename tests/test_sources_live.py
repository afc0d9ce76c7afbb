"""Live guest RAM: `info mtree -f` / `info registers -a` parsing (real QEMU 7.2 text), recorded
snapshots, and a real paused QEMU (no kernel needed) read through LiveSource."""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ovm_offline.errors import SourceError
from ovm_offline.sources import LiveSource, RecordedLiveSource, open_live, open_source
from ovm_offline.sources.live import (
    find_vmcoreinfo,
    guess_memdev,
    parse_mtree_flat,
    parse_registers,
    ram_layout,
)
from tests.support.notes_writer import build_note

# `info mtree -f` of a pc guest (-m 512M, memory-backend-file ram0) running Linux 6.1; the I/O
# view is cut short and the second vCPU's SMM view left out. Note the SMM view maps
# 0-0xbffff as RAM: only the view of AS "memory" is the guest's physical map.
MTREE_LINUX_512M = """FlatView #0
 AS "I/O", root: io
 Root memory region: io
  0000000000000000-0000000000000007 (prio 0, i/o): dma-chan
  0000000000000008-000000000000000f (prio 0, i/o): dma-cont
  0000000000000010-000000000000001f (prio 0, i/o): io @0000000000000010
  0000000000000020-0000000000000021 (prio 0, i/o): pic
  0000000000000022-000000000000003f (prio 0, i/o): io @0000000000000022
  0000000000000040-0000000000000043 (prio 0, i/o): pit

FlatView #1
 AS "i440FX", root: bus master container
 AS "PIIX3", root: bus master container
 AS "VGA", root: bus master container
 AS "e1000", root: bus master container
 AS "piix3-ide", root: bus master container
 AS "PIIX4_PM", root: bus master container
 Root memory region: (none)
  No rendered FlatView

FlatView #2
 AS "memory", root: system
 AS "cpu-memory-0", root: system
 AS "cpu-memory-1", root: system
 Root memory region: system
  0000000000000000-000000000009ffff (prio 0, ram): ram0
  00000000000a0000-00000000000bffff (prio 1, i/o): vga-lowmem
  00000000000c0000-00000000000cafff (prio 0, rom): ram0 @00000000000c0000
  00000000000cb000-00000000000cdfff (prio 0, ram): ram0 @00000000000cb000
  00000000000ce000-00000000000e7fff (prio 0, rom): ram0 @00000000000ce000
  00000000000e8000-00000000000effff (prio 0, ram): ram0 @00000000000e8000
  00000000000f0000-00000000000fffff (prio 0, rom): ram0 @00000000000f0000
  0000000000100000-000000001fffffff (prio 0, ram): ram0 @0000000000100000
  00000000fd000000-00000000fdffffff (prio 1, ram): vga.vram
  00000000febc0000-00000000febdffff (prio 1, i/o): e1000-mmio
  00000000febf0000-00000000febf017f (prio 0, i/o): edid
  00000000febf0180-00000000febf03ff (prio 1, i/o): vga.mmio @0000000000000180
  00000000febf0400-00000000febf041f (prio 0, i/o): vga ioports remapped
  00000000febf0420-00000000febf04ff (prio 1, i/o): vga.mmio @0000000000000420
  00000000febf0500-00000000febf0515 (prio 0, i/o): bochs dispi interface
  00000000febf0516-00000000febf05ff (prio 1, i/o): vga.mmio @0000000000000516
  00000000febf0600-00000000febf0607 (prio 0, i/o): qemu extended regs
  00000000febf0608-00000000febf0fff (prio 1, i/o): vga.mmio @0000000000000608
  00000000fec00000-00000000fec00fff (prio 0, i/o): ioapic
  00000000fed00000-00000000fed003ff (prio 0, i/o): hpet
  00000000fee00000-00000000feefffff (prio 4096, i/o): apic-msi
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios

FlatView #3
 AS "cpu-smm-0", root: memory
 Root memory region: memory
  0000000000000000-00000000000bffff (prio 0, ram): ram0
  00000000000c0000-00000000000cafff (prio 0, rom): ram0 @00000000000c0000
  00000000000cb000-00000000000cdfff (prio 0, ram): ram0 @00000000000cb000
  00000000000ce000-00000000000e7fff (prio 0, rom): ram0 @00000000000ce000
  00000000000e8000-00000000000effff (prio 0, ram): ram0 @00000000000e8000
  00000000000f0000-00000000000fffff (prio 0, rom): ram0 @00000000000f0000
  0000000000100000-000000001fffffff (prio 0, ram): ram0 @0000000000100000
  00000000fd000000-00000000fdffffff (prio 1, ram): vga.vram
  00000000febc0000-00000000febdffff (prio 1, i/o): e1000-mmio
  00000000febf0000-00000000febf017f (prio 0, i/o): edid
  00000000febf0180-00000000febf03ff (prio 1, i/o): vga.mmio @0000000000000180
  00000000febf0400-00000000febf041f (prio 0, i/o): vga ioports remapped
  00000000febf0420-00000000febf04ff (prio 1, i/o): vga.mmio @0000000000000420
  00000000febf0500-00000000febf0515 (prio 0, i/o): bochs dispi interface
  00000000febf0516-00000000febf05ff (prio 1, i/o): vga.mmio @0000000000000516
  00000000febf0600-00000000febf0607 (prio 0, i/o): qemu extended regs
  00000000febf0608-00000000febf0fff (prio 1, i/o): vga.mmio @0000000000000608
  00000000fec00000-00000000fec00fff (prio 0, i/o): ioapic
  00000000fed00000-00000000fed003ff (prio 0, i/o): hpet
  00000000fee00000-00000000feefffff (prio 4096, i/o): apic-msi
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios
"""

# `info mtree -f` of a pc guest with -m 4G before the firmware ran (-S): RAM >= 3.5 GiB, so only
# 3 GiB stay below 4 GiB and ram-above-4g starts at file offset 0xc0000000.
MTREE_PRELAUNCH_4G = """FlatView #0
 AS "i440FX", root: bus master container
 AS "PIIX3", root: bus master container
 AS "VGA", root: bus master container
 AS "e1000", root: bus master container
 AS "piix3-ide", root: bus master container
 AS "PIIX4_PM", root: bus master container
 Root memory region: (none)
  No rendered FlatView

FlatView #1
 AS "I/O", root: io
 Root memory region: io
  0000000000000000-0000000000000007 (prio 0, i/o): dma-chan
  0000000000000008-000000000000000f (prio 0, i/o): dma-cont
  0000000000000010-000000000000001f (prio 0, i/o): io @0000000000000010
  0000000000000020-0000000000000021 (prio 0, i/o): pic

FlatView #2
 AS "cpu-smm-0", root: memory
 Root memory region: memory
  0000000000000000-000000000009ffff (prio 0, ram): ram0
  00000000000a0000-00000000000bffff (prio 1, i/o): vga-lowmem
  00000000000c0000-00000000000dffff (prio 1, rom): pc.rom
  00000000000e0000-00000000000fffff (prio 0, rom): pc.bios @0000000000020000
  0000000000100000-00000000bfffffff (prio 0, ram): ram0 @0000000000100000
  00000000fec00000-00000000fec00fff (prio 0, i/o): ioapic
  00000000fed00000-00000000fed003ff (prio 0, i/o): hpet
  00000000fee00000-00000000feefffff (prio 4096, i/o): apic-msi
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios
  0000000100000000-000000013fffffff (prio 0, ram): ram0 @00000000c0000000

FlatView #3
 AS "memory", root: system
 AS "cpu-memory-0", root: system
 Root memory region: system
  0000000000000000-000000000009ffff (prio 0, ram): ram0
  00000000000a0000-00000000000bffff (prio 1, i/o): vga-lowmem
  00000000000c0000-00000000000dffff (prio 1, rom): pc.rom
  00000000000e0000-00000000000fffff (prio 0, rom): pc.bios @0000000000020000
  0000000000100000-00000000bfffffff (prio 0, ram): ram0 @0000000000100000
  00000000fec00000-00000000fec00fff (prio 0, i/o): ioapic
  00000000fed00000-00000000fed003ff (prio 0, i/o): hpet
  00000000fee00000-00000000feefffff (prio 4096, i/o): apic-msi
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios
  0000000100000000-000000013fffffff (prio 0, ram): ram0 @00000000c0000000
"""

# `info registers -a` of the same 6.1 guest (2 vCPUs, 64-bit mode)
REGISTERS_LINUX = """
CPU#0
RAX=000000000001ad40 RBX=0000000000000000 RCX=0000000000000000 RDX=4000000000000000
RSI=0000000000000000 RDI=000000000001f634 RBP=ffffffffb561aa40 RSP=ffffffffb5603e98
R8 =ffffffffffc79f69 R9 =0000000037a6dd15 R10=00000000fffffffb R11=0000000000000000
R12=0000000000000000 R13=0000000000000000 R14=0000000000000000 R15=0000000000014790
RIP=ffffffffb4617a0b RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1
ES =0000 0000000000000000 00000000 00000000
CS =0010 0000000000000000 ffffffff 00a09b00 DPL=0 CS64 [-RA]
SS =0018 0000000000000000 ffffffff 00c09300 DPL=0 DS   [-WA]
DS =0000 0000000000000000 00000000 00000000
FS =0000 0000000000000000 00000000 00000000
GS =0000 ffff8ce91ee00000 00000000 00000000
LDT=0000 0000000000000000 00000000 00008200 DPL=0 LDT
TR =0040 fffffe0000003000 00004087 00008900 DPL=0 TSS64-avl
GDT=     fffffe0000001000 0000007f
IDT=     fffffe0000000000 00000fff
CR0=80050033 CR2=000000002f294730 CR3=0000000001858000 CR4=000006b0
DR0=0000000000000000 DR1=0000000000000000 DR2=0000000000000000 DR3=0000000000000000 
DR6=00000000ffff0ff0 DR7=0000000000000400
EFER=0000000000000d01
FCW=037f FSW=0000 [ST=0] FTW=00 MXCSR=00001f80
FPR0=0000000000000000 0000 FPR1=0000000000000000 0000
FPR2=0000000000000000 0000 FPR3=0000000000000000 0000
FPR4=0000000000000000 0000 FPR5=0000000000000000 0000
FPR6=0000000000000000 0000 FPR7=0000000000000000 0000
XMM00=ffffffffffffffff ffffffff00000000 XMM01=0001010101010101 00010100000000ff
XMM02=006e69676f6c7573 0075730079747473 XMM03=0000000000000000 0000000000000000
XMM04=ffffffffffffffff ffffffff00000000 XMM05=2d302e312e360000 0000000000000000
XMM06=000000002f2957a0 00000000004349f4 XMM07=0000000000000000 0000000000000000
XMM08=0000000000000000 0000000000000000 XMM09=0000000000000000 0000000000000000
XMM10=0000000000000000 0000000000000000 XMM11=0000000000000000 0000000000000000
XMM12=0000000000000000 0000000000000000 XMM13=0000000000000000 0000000000000000
XMM14=0000000000000000 0000000000000000 XMM15=0000000000000000 0000000000000000

CPU#1
RAX=0000000000000000 RBX=0000000000000001 RCX=0000000000000001 RDX=0000000000000000
RSI=ffff8ce9011fb000 RDI=0000000000000011 RBP=0000000000000011 RSP=ffffcd3c003a39c8
R8 =0000000000000000 R9 =ffffcd3c003a3a00 R10=0000000000000001 R11=0000000000000001
R12=0000000000000046 R13=0000000000000011 R14=ffff8ce9011fb000 R15=ffff8ce901221f80
RIP=ffffffffb3ca5f7f RFL=00000046 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=0
ES =0000 0000000000000000 00000000 00000000
CS =0010 0000000000000000 ffffffff 00a09b00 DPL=0 CS64 [-RA]
SS =0018 0000000000000000 ffffffff 00c09300 DPL=0 DS   [-WA]
DS =0000 0000000000000000 00000000 00000000
FS =0000 0000000000000000 00000000 00000000
GS =0000 ffff8ce91ef00000 00000000 00000000
LDT=0000 0000000000000000 00000000 00008200 DPL=0 LDT
TR =0040 fffffe000003e000 00004087 00008900 DPL=0 TSS64-avl
GDT=     fffffe000003c000 0000007f
IDT=     fffffe0000000000 00000fff
CR0=80050033 CR2=000000000042ee70 CR3=000000000d610000 CR4=000006a0
DR0=0000000000000000 DR1=0000000000000000 DR2=0000000000000000 DR3=0000000000000000 
DR6=00000000ffff0ff0 DR7=0000000000000400
EFER=0000000000000d01
FCW=037f FSW=0000 [ST=0] FTW=00 MXCSR=00001f80
FPR0=0000000000000000 0000 FPR1=0000000000000000 0000
FPR2=0000000000000000 0000 FPR3=0000000000000000 0000
FPR4=0000000000000000 0000 FPR5=0000000000000000 0000
FPR6=0000000000000000 0000 FPR7=0000000000000000 0000
XMM00=0000000000000000 0000000000000000 XMM01=0000000000000000 0000000000000000
XMM02=0000000000000000 0000000000000000 XMM03=0000000000000000 0000000000000000
XMM04=ff00000000000000 0000000000000000 XMM05=000000002f2946f0 000000002f2958f5
XMM06=000000002f294a60 eb7b1e078102fd1d XMM07=0000000000000001 0000000000000000
XMM08=0000000000000000 0000000000000000 XMM09=0000000000000000 0000000000000000
XMM10=0000000000000000 0000000000000000 XMM11=0000000000000000 0000000000000000
XMM12=0000000000000000 0000000000000000 XMM13=0000000000000000 0000000000000000
XMM14=0000000000000000 0000000000000000 XMM15=0000000000000000 0000000000000000
"""

# `info registers -a` of a guest still in the reset state (32-bit names)
REGISTERS_RESET = """
CPU#0
EAX=00000000 EBX=00000000 ECX=00000000 EDX=00060fb1
ESI=00000000 EDI=00000000 EBP=00000000 ESP=00000000
EIP=0000fff0 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0
ES =0000 00000000 0000ffff 00009300
CS =f000 ffff0000 0000ffff 00009b00
SS =0000 00000000 0000ffff 00009300
DS =0000 00000000 0000ffff 00009300
FS =0000 00000000 0000ffff 00009300
GS =0000 00000000 0000ffff 00009300
LDT=0000 00000000 0000ffff 00008200
TR =0000 00000000 0000ffff 00008b00
GDT=     00000000 0000ffff
IDT=     00000000 0000ffff
CR0=60000010 CR2=00000000 CR3=00000000 CR4=00000000
DR0=0000000000000000 DR1=0000000000000000 DR2=0000000000000000 DR3=0000000000000000 
DR6=00000000ffff0ff0 DR7=0000000000000400
EFER=0000000000000000
FCW=037f FSW=0000 [ST=0] FTW=00 MXCSR=00001f80
FPR0=0000000000000000 0000 FPR1=0000000000000000 0000
FPR2=0000000000000000 0000 FPR3=0000000000000000 0000
FPR4=0000000000000000 0000 FPR5=0000000000000000 0000
FPR6=0000000000000000 0000 FPR7=0000000000000000 0000
XMM00=0000000000000000 0000000000000000 XMM01=0000000000000000 0000000000000000
XMM02=0000000000000000 0000000000000000 XMM03=0000000000000000 0000000000000000
XMM04=0000000000000000 0000000000000000 XMM05=0000000000000000 0000000000000000
XMM06=0000000000000000 0000000000000000 XMM07=0000000000000000 0000000000000000
"""

QEMU = shutil.which("qemu-system-x86_64")


# ==== text parsing ===============================================================================
def test_mtree_uses_the_memory_address_space():
    ranges = parse_mtree_flat(MTREE_LINUX_512M)
    assert ranges[0].start == 0 and ranges[0].end == 0x9FFFF and ranges[0].region == "ram0"
    assert ranges[1].kind == "i/o" and ranges[1].region == "vga-lowmem"
    assert any(r.region == "vga ioports remapped" for r in ranges)  # names with spaces
    # PAM: pieces of RAM below 1 MiB are read-only (rom) but still ram0 at the same offset
    assert ram_layout(ranges, "ram0") == [(0, 0xA0000, 0), (0xC0000, 0x20000000 - 0xC0000, 0xC0000)]
    smm = parse_mtree_flat(MTREE_LINUX_512M, "cpu-smm-0")
    assert ram_layout(smm, "ram0")[0] == (0, 0x20000000, 0)


def test_mtree_above_4g_split():
    ranges = parse_mtree_flat(MTREE_PRELAUNCH_4G)
    assert ram_layout(ranges, "ram0") == [
        (0, 0xA0000, 0),
        (0x100000, 0xC0000000 - 0x100000, 0x100000),
        (0x100000000, 0x40000000, 0xC0000000),
    ]
    assert guess_memdev(ranges, 4 << 30) == "ram0"
    assert guess_memdev(ranges, 1 << 20) is None  # ram0 does not fit a 1 MiB file


def test_mtree_without_memory_view():
    with pytest.raises(ValueError, match='"memory"'):
        parse_mtree_flat('FlatView #0\n AS "I/O", root: io\n')
    with pytest.raises(ValueError):
        parse_mtree_flat("")


def test_registers_64bit():
    cpu0, cpu1 = parse_registers(REGISTERS_LINUX)
    assert (cpu0.index, cpu0.cr3, cpu0.cr4) == (0, 0x1858000, 0x6B0)
    assert cpu0.rip == 0xFFFFFFFFB4617A0B and cpu0.rsp == 0xFFFFFFFFB5603E98
    assert cpu0.gs_base == 0xFFFF8CE91EE00000
    assert (cpu1.index, cpu1.cr3, cpu1.cr4, cpu1.gs_base) == (1, 0xD610000, 0x6A0, 0xFFFF8CE91EF00000)
    assert cpu0.kernel_gs_base is None  # HMP does not print it


def test_registers_reset_state():
    (cpu,) = parse_registers(REGISTERS_RESET)
    assert (cpu.cr3, cpu.cr4, cpu.rip, cpu.rsp, cpu.gs_base) == (0, 0, 0xFFF0, 0, 0)


# ==== recorded snapshots ==========================================================================
def make_snapshot(directory: Path, mtree: str, registers: str, size: int, marks: dict[int, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "guest-ram", "wb") as f:
        f.truncate(size)  # sparse
        for offset, data in marks.items():
            f.seek(offset)
            f.write(data)
    (directory / "mtree.txt").write_text(mtree)
    (directory / "registers.txt").write_text(registers)


def test_recorded_snapshot_above_4g(tmp_path):
    marks = {
        0: b"low",
        0x100000: b"one MiB",
        0xBFFFFFF0: b"end of low RAM!!",
        0xC0000000: b"above 4G",
        (4 << 30) - 3: b"end",
    }
    make_snapshot(tmp_path / "live", MTREE_PRELAUNCH_4G, REGISTERS_RESET, 4 << 30, marks)
    with open_source(tmp_path / "live") as src:
        assert isinstance(src, RecordedLiveSource)
        assert [(r.start, r.length) for r in src.runs()] == [
            (0, 0xA0000),
            (0x100000, 0xBFF00000),
            (0x100000000, 0x40000000),
        ]
        assert src.read(0, 3) == b"low"
        assert src.read(0x100000, 7) == b"one MiB"
        assert src.read(0x100000000, 8) == b"above 4G"
        assert src.read(0x13FFFFFFD, 3) == b"end"
        out = io.BytesIO()
        src.copy_to(0xBFFFFFF0, 16, out)
        assert out.getvalue() == b"end of low RAM!!"
        with open(tmp_path / "out", "w+b") as f:
            src.copy_to(0x100000000, 8, f)
            f.seek(0)
            assert f.read() == b"above 4G"
        for hole in (0xA0000, 0xC0000000, 0x140000000):
            with pytest.raises(SourceError, match="not in the dump"):
                src.read(hole, 1)
        assert src.vcpus()[0].rip == 0xFFF0


def test_recorded_snapshot_finds_vmcoreinfo_note(tmp_path):
    note = build_note("VMCOREINFO", 0, b"OSRELEASE=6.1.0-test\nKERNELOFFSET=2b600000\n")
    stale = build_note("VMCOREINFO", 0, b"OSRELEASE=stale\n")
    make_snapshot(tmp_path / "live", MTREE_LINUX_512M, REGISTERS_LINUX, 512 << 20, {0x1234: stale, 0x11E2000: note})
    with RecordedLiveSource(tmp_path / "live") as src:
        # the page-aligned note wins over an unaligned stale copy
        assert src.vmcoreinfo() == {"OSRELEASE": "6.1.0-test", "KERNELOFFSET": "2b600000"}
    assert find_vmcoreinfo(b"no note here") is None
    assert find_vmcoreinfo(bytes(4096) + b"VMCOREINFO\0\0OSRELEASE=x") is None  # no note header before it


def test_the_vmcoreinfo_scan_finds_a_note_across_windows_and_keeps_little_resident(tmp_path, monkeypatch):
    """The note can sit GiBs into RAM (a 5.5 GiB guest's did: the scan then held 3 GiB of it
    resident); windows are let go of once scanned, and a name across a window's end is found."""
    import subprocess
    import sys

    from ovm_offline.sources import vmcoreinfo_scan as live

    note = build_note("VMCOREINFO", 0, b"OSRELEASE=6.1.0-test\n")
    monkeypatch.setattr(live, "_SCAN_WINDOW", 4096)
    across = bytearray(3 * 4096)
    across[4096 - 16 : 4096 - 16 + len(note)] = note  # header in one window, name across the end
    assert live.find_vmcoreinfo(bytes(across)) == {"OSRELEASE": "6.1.0-test"}
    monkeypatch.undo()
    ram = tmp_path / "guest-ram"
    with open(ram, "wb") as f:
        f.truncate(384 << 20)
        f.seek((380 << 20) + 64)  # not page-aligned: found by the search through every byte
        f.write(note)
    script = (
        "import mmap, sys\n"
        "from ovm_offline.sources.vmcoreinfo_scan import find_vmcoreinfo\n"
        "def kib(key): return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1])\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "before = kib('VmRSS:')\n"
        "with open(sys.argv[1], 'rb') as f:\n"
        "    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
        "    print(find_vmcoreinfo(m), kib('VmHWM:') - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(ram)], capture_output=True, text=True, check=True).stdout
    found, grew_kib = out.rsplit(" ", 1)
    assert found == "{'OSRELEASE': '6.1.0-test'}"
    assert int(grew_kib) < 192 << 10, f"the scan of 384 MiB left {int(grew_kib) >> 10} MiB resident"


def test_bad_recorded_snapshots(tmp_path):
    make_snapshot(tmp_path / "small", MTREE_PRELAUNCH_4G, REGISTERS_RESET, 1 << 20, {})
    with pytest.raises(SourceError, match="no RAM region"):
        open_source(tmp_path / "small")
    with pytest.raises(SourceError, match="beyond the file"):
        RecordedLiveSource(tmp_path / "small", memdev="ram0")
    make_snapshot(tmp_path / "nomtree", "garbage", REGISTERS_RESET, 1 << 20, {})
    with pytest.raises(SourceError, match="cannot place guest RAM"):
        open_source(tmp_path / "nomtree")
    (tmp_path / "noregs").mkdir()
    (tmp_path / "noregs" / "guest-ram").write_bytes(b"x")
    (tmp_path / "noregs" / "mtree.txt").write_text(MTREE_PRELAUNCH_4G)
    with pytest.raises(SourceError, match="registers.txt"):
        RecordedLiveSource(tmp_path / "noregs")
    with pytest.raises(SourceError, match="maps no guest memory"):
        RecordedLiveSource(tmp_path / "small", memdev="nonesuch")


# ==== bad QMP sockets =============================================================================
def test_missing_socket(tmp_path):
    (tmp_path / "ram").write_bytes(bytes(4096))
    with pytest.raises(SourceError, match="no such QMP socket") as info:
        open_live(tmp_path / "nope.sock", tmp_path / "ram")
    assert str(info.value).startswith(str(tmp_path / "nope.sock"))


def test_regular_file_is_not_a_socket(tmp_path):
    (tmp_path / "ram").write_bytes(bytes(4096))
    with pytest.raises(SourceError, match="QMP"):
        LiveSource(tmp_path / "ram", tmp_path / "ram", timeout=2)


@pytest.mark.parametrize("greeting", [None, b"SSH-2.0-OpenSSH_9.2\r\n", b'{"hello": 1}\r\n'])
def test_non_qemu_socket(tmp_path, greeting):
    path = tmp_path / "fake.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    stop = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        if greeting:
            conn.sendall(greeting)
        stop.wait(10)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    (tmp_path / "ram").write_bytes(bytes(4096))
    started = time.monotonic()
    try:
        with pytest.raises(SourceError) as info:
            LiveSource(path, tmp_path / "ram", timeout=1.5)
    finally:
        stop.set()
        server.close()
    assert time.monotonic() - started < 10
    assert "\n" not in str(info.value) and str(path) in str(info.value)


# ==== a real QEMU ================================================================================
class Qemu:
    """A kernel-less QEMU (-S) with RAM in a memory-backend-file and two QMP sockets: one for
    LiveSource, one for the test to watch it."""

    def __init__(
        self, workdir: Path, ram_mib: int = 64, ram_dir: Path | None = None, memory: list[str] | None = None
    ) -> None:
        self.ram = (ram_dir or workdir) / "ram"
        self.qmp_path = workdir / "qmp.sock"
        self.ctl_path = workdir / "ctl.sock"
        # `memory`: the machine and memory options instead of one memory-backend-file
        argv = [
            QEMU,
            *(
                memory
                or [
                    "-machine",
                    "pc,accel=tcg,memory-backend=ram0",
                    "-object",
                    f"memory-backend-file,id=ram0,size={ram_mib}M,mem-path={self.ram},share=on",
                    "-m",
                    f"{ram_mib}M",
                ]
            ),
            "-display",
            "none",
            "-S",
            "-qmp",
            f"unix:{self.qmp_path},server=on,wait=off",
            "-qmp",
            f"unix:{self.ctl_path},server=on,wait=off",
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while not (self.qmp_path.exists() and self.ctl_path.exists()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.skip(f"QEMU did not start: {self.proc.stderr.read().decode(errors='replace')[:300]}")
            time.sleep(0.05)
        from qemu.qmp import ConnectError
        from qemu.qmp.legacy import QEMUMonitorProtocol

        # the socket file exists from bind(2); under load, connect(2) can come before listen(2)
        while True:
            self.ctl = QEMUMonitorProtocol(str(self.ctl_path))
            try:
                self.ctl.connect()
                # a QEMU that hangs fails the test that asked, instead of waiting for the suite's timeout
                self.ctl.settimeout(60)
                break
            except ConnectError:
                self.ctl.close()
                if time.monotonic() > deadline:
                    self.proc.kill()  # the fixture's teardown never sees a Qemu that did not start
                    self.proc.wait(10)
                    raise
                time.sleep(0.05)

    def cmd(self, name: str, **args):
        reply = self.ctl.cmd_raw(name, args or None)
        assert "error" not in reply, reply
        return reply["return"]

    def status(self) -> dict:
        return self.cmd("query-status")

    def pmemsave(self, tmp: Path, addr: int, size: int) -> bytes:
        out = tmp / f"pmem-{addr:x}-{size:x}"
        self.cmd("pmemsave", val=addr, size=size, filename=str(out))
        return out.read_bytes()

    def kill(self) -> None:
        try:
            self.ctl.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def qemu(tmp_path):
    if QEMU is None:
        pytest.skip("qemu-system-x86_64 not installed")
    vm = Qemu(tmp_path)
    try:
        yield vm
    finally:
        vm.kill()


def _wait_for_firmware(vm: Qemu) -> None:
    """Let SeaBIOS run so RAM holds something (its tables and its relocated copy)."""
    vm.cmd("cont")
    time.sleep(1.0)


def test_live_guest_bytes_match_pmemsave_and_guest_is_resumed(qemu, tmp_path):
    _wait_for_firmware(qemu)
    assert qemu.status()["running"]
    with LiveSource(qemu.qmp_path, qemu.ram) as src:
        assert src.we_paused and not qemu.status()["running"]
        assert src.memdev == "ram0"
        runs = [(r.start, r.length) for r in src.runs()]
        assert runs[0] == (0, 0xA0000) and runs[-1][0] + runs[-1][1] == 64 << 20
        ranges = [
            (0, 0x1000),
            (0x400, 0x100),
            (0x9F000, 0x1000),
            (0xF0000, 0x10000),
            (0x100000, 0x2000),
            ((64 << 20) - 0x20000, 0x20000),
        ]
        nonzero = False
        for addr, size in ranges:
            expected = qemu.pmemsave(tmp_path, addr, size)
            assert src.read(addr, size) == expected, hex(addr)
            out = io.BytesIO()
            src.copy_to(addr, size, out)
            assert out.getvalue() == expected
            nonzero |= any(expected)
        assert nonzero, "firmware left no trace in RAM; the comparison proved nothing"
        assert len(src.vcpus()) == 1 and src.vcpus()[0].cr3 is not None
    assert qemu.status()["running"]
    assert 0 < src.paused_seconds < 60


def test_paused_guest_is_left_paused(qemu):
    before = qemu.status()
    assert before["status"] == "prelaunch"
    with LiveSource(qemu.qmp_path, qemu.ram) as src:
        assert not src.we_paused
        assert src.read(0, 16) == bytes(16)
    assert qemu.status() == before and src.paused_seconds == 0


@pytest.mark.parametrize("exc_type", [RuntimeError, KeyboardInterrupt])
def test_guest_is_resumed_on_exceptions(qemu, exc_type):
    _wait_for_firmware(qemu)
    with pytest.raises(exc_type), LiveSource(qemu.qmp_path, qemu.ram):
        assert not qemu.status()["running"]
        raise exc_type("boom")
    assert qemu.status()["running"]


def test_wrong_memory_file_resumes_and_reports(qemu, tmp_path):
    _wait_for_firmware(qemu)
    other = tmp_path / "other"
    other.write_bytes(bytes(1 << 20))
    with pytest.raises(
        SourceError,
        match=r"is not the memory of any memory backend of this QEMU \(backends: ram0 \(memory-backend-file, 64 MiB\)\)",
    ):
        LiveSource(qemu.qmp_path, other)
    assert qemu.status()["running"]


def test_guest_is_resumed_when_interrupted_while_opening(qemu, monkeypatch):
    from ovm_offline.sources import qmp

    _wait_for_firmware(qemu)
    real_hmp = qmp.QmpSession.hmp

    def interrupted(self, command_line):
        if command_line.startswith("info registers"):
            assert not qemu.status()["running"]  # we had paused it by now
            raise KeyboardInterrupt
        return real_hmp(self, command_line)

    monkeypatch.setattr(qmp.QmpSession, "hmp", interrupted)
    with pytest.raises(KeyboardInterrupt):
        LiveSource(qemu.qmp_path, qemu.ram)
    assert qemu.status()["running"]
