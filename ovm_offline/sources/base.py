"""What every memory source offers: guest-physical bytes, vCPU state, VMCOREINFO.

A source knows nothing about the guest kernel; it only says where the bytes of
guest-physical memory are. Kernel-side code (ovm_offline.kernel) interprets them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import BinaryIO, Protocol

__all__ = ["PhysicalRun", "PhysicalSource", "VcpuFpu", "VcpuState", "iter_chunks", "user_regs"]


@dataclasses.dataclass(frozen=True)
class PhysicalRun:
    """A contiguous range of guest-physical memory present in the source."""

    start: int  # guest-physical address
    length: int  # bytes


@dataclasses.dataclass(frozen=True)
class VcpuFpu:
    """A vCPU's x87/SSE/AVX registers as HMP `info registers -a` prints them (dump files
    carry none). x87 registers in physical order (FPR0..7, 10 bytes each), the tag word in
    FXSAVE's abridged form; ``ymm_hi`` the upper 128 bits of YMM0..15 when AVX is enabled."""

    fcw: int
    fsw: int
    ftw: int
    mxcsr: int
    fpr: tuple[bytes, ...]
    xmm: tuple[bytes, ...]
    ymm_hi: tuple[bytes, ...] | None = None


@dataclasses.dataclass(frozen=True)
class VcpuState:
    """What the source recorded about one vCPU (from ELF notes, kdump notes or QMP)."""

    index: int
    cr3: int | None = None
    cr4: int | None = None
    rip: int | None = None
    rsp: int | None = None
    gs_base: int | None = None
    kernel_gs_base: int | None = None
    #: current privilege level (0 kernel, 3 user)
    cpl: int | None = None
    #: every general register by its user_regs_struct name (rax, ..., rip, eflags, cs, ss,
    #: fs_base, gs_base, ds, es, fs, gs)
    gprs: dict[str, int] | None = None
    fpu: VcpuFpu | None = None


def user_regs(registers: dict[str, int], segments: dict[str, tuple[int, int]]) -> dict[str, int]:
    """A vCPU's general registers by user_regs_struct name (`registers`: rax..r15, rip,
    eflags) with its segment selectors and FS/GS bases (`segments`: es..gs as (selector,
    base)), as VcpuState.gprs carries them; orig_rax -1, as a vCPU has no system call number."""
    gprs = dict(registers)
    gprs.update({name: selector for name, (selector, _) in segments.items()})
    gprs.update(fs_base=segments["fs"][1], gs_base=segments["gs"][1], orig_rax=(1 << 64) - 1)
    return gprs


class PhysicalSource(Protocol):
    """Read-only access to guest-physical memory.

    Reads of addresses outside every run return zeros only when the source itself
    says the memory is absent but defined as zero (kdump's excluded pages); reading
    a range no run covers raises SourceError.
    """

    #: a short human name of the format, e.g. "ELF core", "kdump-zlib (flattened)", "live"
    format_name: str
    #: the guest runs on after this source closes, so another moment of it can be taken (a
    #: live guest that was running until we paused it, or a pre-copy snapshot of one)
    guest_runs_on: bool

    def runs(self) -> list[PhysicalRun]:
        """Guest-physical ranges present, sorted, non-overlapping."""
        ...

    def read(self, paddr: int, length: int) -> bytes:
        """Exactly `length` bytes of guest-physical memory from `paddr`."""
        ...

    def copy_to(self, paddr: int, length: int, out: BinaryIO) -> None:
        """Bulk path: write `length` bytes from `paddr` to `out` without per-page Python overhead
        where the format allows it (preadv into one reused buffer and write, or mmap slices)."""
        ...

    def vcpus(self) -> list[VcpuState]:
        """Per-vCPU state, in vCPU order; may be empty."""
        ...

    def vmcoreinfo(self) -> dict[str, str] | None:
        """The guest's VMCOREINFO note as key -> value, or None if the source has none."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> PhysicalSource: ...

    def __exit__(self, *exc: object) -> None: ...


def iter_chunks(start: int, length: int, chunk: int) -> Iterator[tuple[int, int]]:
    """Split [start, start+length) into (address, size) pieces of at most `chunk` bytes."""
    end = start + length
    while start < end:
        size = min(chunk, end - start)
        yield start, size
        start += size
