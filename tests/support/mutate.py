"""A real recording with a few bytes of guest memory changed, as a hostile guest would have
them: kernel objects are found through the library, their fields rewritten in a source that
overlays the patches on the recording's own bytes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import BinaryIO

from ovm_offline.kernel.core.memory import Program
from ovm_offline.sources.base import PhysicalSource


class PatchedSource:
    """`base` with `patches` (guest-physical address -> bytes) laid over it."""

    def __init__(self, base: PhysicalSource, patches: dict[int, bytes] | None = None) -> None:
        self.base = base
        self.format_name = f"{base.format_name} (patched)"
        self.patches: dict[int, bytes] = dict(patches or {})

    def patch_virtual(self, prog: Program, vaddr: int, data: bytes) -> None:
        """Rewrite kernel virtual memory at `vaddr` (page by page, as it may cross pages)."""
        done = 0
        while done < len(data):
            room = 4096 - ((vaddr + done) & 4095)
            piece = data[done : done + room]
            self.patches[prog.translate(vaddr + done)] = piece
            done += len(piece)

    def read(self, paddr: int, length: int) -> bytes:
        data = bytearray(self.base.read(paddr, length))
        for start, patch in self.patches.items():
            lo, hi = max(start, paddr), min(start + len(patch), paddr + length)
            if lo < hi:
                data[lo - paddr : hi - paddr] = patch[lo - start : hi - start]
        return bytes(data)

    def copy_to(self, paddr: int, length: int, out: BinaryIO, **kwargs: object) -> None:
        if any(start < paddr + length and paddr < start + len(p) for start, p in self.patches.items()):
            out.write(self.read(paddr, length))
        else:
            self.base.copy_to(paddr, length, out, **kwargs)  # type: ignore[call-arg]

    def __getattr__(self, name: str) -> object:
        return getattr(self.base, name)  # runs, vcpus, vmcoreinfo, close: the recording's own

    def __enter__(self) -> PatchedSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.base.close()


def write_patched_elf(elf: Path, out: Path, patches: dict[int, bytes]) -> None:
    """A copy of ELF dump `elf` at `out` with `patches` (guest-physical address -> bytes, as a
    PatchedSource holds them) written into its PT_LOAD segments: a dump file the CLI reads."""
    from ovm_offline.sources.elf import PT_LOAD, ElfSource

    shutil.copyfile(elf, out)
    with ElfSource(out) as source:
        segments = [(ph.p_paddr, ph.p_offset, ph.p_filesz) for ph in source.program_headers if ph.p_type == PT_LOAD]
    with open(out, "r+b") as f:
        for paddr, data in patches.items():
            base, offset, _size = next(s for s in segments if s[0] <= paddr and paddr + len(data) <= s[0] + s[2])
            f.seek(offset + paddr - base)
            f.write(data)


__all__ = ["PatchedSource", "write_patched_elf"]
