"""Shared helpers for the kernel-layer tests: sample dumps (through
ovm_offline.sources.open_source), an in-memory fake source, Volatility ground truth.

The module is named test_* so it may live beside the tests; it defines a few
sanity tests of its own.
"""

from __future__ import annotations

import functools
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

import pytest

from ovm_offline.errors import SourceError
from ovm_offline.sources.base import PhysicalRun, VcpuState

REPO = Path(__file__).resolve().parents[1]
SYMBOLS = REPO / "symbols"
ISF = {
    "6.1": SYMBOLS / "linux" / "debian-6.1.0-56-cloud-amd64.json.xz",
    "6.12": SYMBOLS / "linux" / "debian-6.12.117+deb12-cloud-amd64.json.xz",
}


def open_dump(path: Path, *, hide_vmcoreinfo: bool = False):
    """A sample dump through the project's sources (optionally without VMCOREINFO)."""
    from ovm_offline.sources import open_source

    src = open_source(str(path))
    return HiddenVmcoreinfo(src) if hide_vmcoreinfo else src


class HiddenVmcoreinfo:
    """Wraps any source and pretends it has no VMCOREINFO."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.format_name = getattr(inner, "format_name", "?")

    def vmcoreinfo(self):
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)


class SparseSource:
    """An in-memory PhysicalSource: `size` bytes of zeros, pages written on demand."""

    format_name = "sparse test memory"

    def __init__(self, size: int = 1 << 40) -> None:
        self.size = size
        self.pages: dict[int, bytearray] = {}
        self.reads = 0

    def write(self, paddr: int, data: bytes) -> None:
        while data:
            page, off = paddr & ~0xFFF, paddr & 0xFFF
            n = min(len(data), 4096 - off)
            buf = self.pages.setdefault(page, bytearray(4096))
            buf[off : off + n] = data[:n]
            paddr += n
            data = data[n:]

    def write_u64(self, paddr: int, value: int) -> None:
        self.write(paddr, struct.pack("<Q", value & 0xFFFF_FFFF_FFFF_FFFF))

    def runs(self) -> list[PhysicalRun]:
        return [PhysicalRun(0, self.size)]

    def read(self, paddr: int, length: int) -> bytes:
        if paddr < 0 or paddr + length > self.size:
            raise SourceError(f"physical 0x{paddr:x} outside test memory")
        self.reads += 1
        out = bytearray()
        while length:
            page, off = paddr & ~0xFFF, paddr & 0xFFF
            n = min(length, 4096 - off)
            buf = self.pages.get(page)
            out += buf[off : off + n] if buf is not None else bytes(n)
            paddr += n
            length -= n
        return bytes(out)

    def copy_to(self, paddr: int, length: int, out: BinaryIO) -> None:
        out.write(self.read(paddr, length))

    def vcpus(self) -> list[VcpuState]:
        return []

    def vmcoreinfo(self) -> dict[str, str] | None:
        return None

    def close(self) -> None:
        pass


#: The direct map of the fake kernels below (x86-64's default page_offset_base), and where in
#: it their objects are allocated.
FAKE_POB = 0xFFFF_8880_0000_0000
FAKE_HEAP = 0x2000_0000


class FakeKernelMemory:
    """Kernel objects written member by member into SparseSource memory, laid out by a real
    ISF, reachable through the direct map: a Program over 2 GiB of fake RAM, an allocator,
    and a member writer. Tests subclass it with builders for the objects they need."""

    def __init__(self, kernel: str) -> None:
        from ovm_offline.kernel.core.memory import Program
        from ovm_offline.kernel.core.symbols import load_isf

        self.symbols = load_isf(ISF[kernel])
        self.src = SparseSource(1 << 31)
        self.prog = Program(
            self.src,
            self.symbols,
            kaslr_offset=0,
            phys_base=0,
            pgtable_levels=4,
            kernel_root=0x1000,
            page_offset_base=FAKE_POB,
        )
        self.next = FAKE_HEAP

    def alloc(self, size: int | str, align: int = 4096) -> int:
        """A zeroed block of `size` bytes (or the size of struct `size`) in the direct map."""
        if isinstance(size, str):
            size = self.symbols.struct_type(size).size
        addr = FAKE_POB + self.next
        self.next += (size + align - 1) & ~(align - 1)
        return addr

    def set(self, addr: int, type_name: str, path: str, value: int) -> None:
        """Write `value` into member `path` (dotted, e.g. "ffd.fd") of the `type_name` at `addr`."""
        t = self.symbols.struct_type(type_name)
        offset = 0
        for part in path.split("."):
            m = t.member(part)
            offset += m.offset
            t = m.type
        self.src.write(addr - FAKE_POB + offset, (value & ((1 << (8 * t.size)) - 1)).to_bytes(t.size, "little"))


def sample(kernel: str) -> Path:
    """The ELF dump of the corpus's counter guest on `kernel` (recorded on first use)."""
    from corpus.recorder import record

    return record(kernel, "counter", log=lambda m: print(m, file=sys.stderr)).elf


@functools.cache
def vol_pslist(kernel: str) -> list[dict]:
    """Volatility's linux.pslist of a sample, once per kernel per test session."""
    dump = sample(kernel)
    vol = shutil.which("vol") or shutil.which("vol.py")
    cmd = [vol] if vol else [sys.executable, "-m", "volatility3.cli"]
    out = subprocess.run(
        cmd + ["-q", "-r", "json", "-f", str(dump), "-s", str(SYMBOLS), "linux.pslist"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        pytest.fail(f"vol failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def test_sample_sources_have_what_the_kernel_layer_uses():
    src = open_dump(sample("6.1"))
    try:
        vmci = src.vmcoreinfo()
        assert vmci is not None and vmci["OSRELEASE"] == "6.1.0-56-cloud-amd64"
        assert {"KERNELOFFSET", "NUMBER(phys_base)", "SYMBOL(swapper_pg_dir)"} <= set(vmci)
        assert len(src.vcpus()) >= 1 and src.vcpus()[0].cr3
        assert sum(r.length for r in src.runs()) > 256 << 20
    finally:
        src.close()
