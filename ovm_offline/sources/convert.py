"""Converting a kdump into an ELF64 core that Volatility 3, drgn and crash read.

The ELF carries the kdump's note area unchanged (PRSTATUS, QEMU CPU state, VMCOREINFO) and one
PT_LOAD per run of present pages. It is written streaming (page batches through copy_to, zero
stretches as holes) to a temporary file in the target directory, then renamed into place.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import OutputError
from ._files import fail
from .elf_writer import core_layout
from .kdump import KdumpSource

__all__ = ["kdump_to_elf"]


def kdump_to_elf(src: str | os.PathLike[str] | KdumpSource, out_path: str | os.PathLike[str]) -> Path:
    """Write `src` (a kdump path or an open KdumpSource) as an ELF core at `out_path`; returns it."""
    out_path = Path(out_path)
    if isinstance(src, KdumpSource):
        _convert(src, out_path)
    else:
        with KdumpSource(src) as source:
            _convert(source, out_path)
    return out_path


def _convert(source: KdumpSource, out_path: Path) -> None:
    runs = [(r.start, r.length) for r in source.runs()]
    layout = core_layout(source.note_bytes(), runs)
    directory = out_path.parent if str(out_path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise fail(out_path, f"cannot create a file here: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode of a new file
        with os.fdopen(fd, "wb") as out:
            out.write(layout.header)
            for (start, length), offset in zip(runs, layout.segment_offsets):
                out.seek(offset)
                source.copy_to(start, length, out, sparse=True)
            # holes at the end (a trailing zero stretch) still count toward the size
            out.truncate(layout.total_size)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_name, out_path)
    except BaseException as exc:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OutputError.writing(out_path, exc) from None
        raise


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask
