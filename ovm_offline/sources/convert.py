"""Converting a kdump into an ELF64 core that Volatility 3, drgn and crash read.

The ELF carries the kdump's note area unchanged (PRSTATUS, QEMU CPU state, VMCOREINFO) and one
PT_LOAD per run of present pages. It is written streaming (page batches through copy_to, zero
stretches as holes) to a temporary file in the target directory, then renamed into place.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..output import atomic_file
from .elf_writer import core_layout
from .kdump import KdumpSource

__all__ = ["kdump_to_elf"]


def kdump_to_elf(
    src: str | os.PathLike[str] | KdumpSource, out_path: str | os.PathLike[str], force: bool = False
) -> Path:
    """Write `src` (a kdump path or an open KdumpSource) as an ELF core at `out_path`, which
    may be replaced only with `force`, and only if it is a regular file; returns it."""
    out_path = Path(out_path)
    if isinstance(src, KdumpSource):
        _convert(src, out_path, force)
    else:
        with KdumpSource(src) as source:
            _convert(source, out_path, force)
    return out_path


def _convert(source: KdumpSource, out_path: Path, force: bool) -> None:
    runs = [(r.start, r.length) for r in source.runs()]
    layout = core_layout(source.note_bytes(), runs)
    with atomic_file(out_path, force) as out:
        out.write(layout.header)
        for (start, length), offset in zip(runs, layout.segment_offsets):
            out.seek(offset)
            source.copy_to(start, length, out, sparse=True)
        # holes at the end (a trailing zero stretch) still count toward the size
        out.truncate(layout.total_size)
