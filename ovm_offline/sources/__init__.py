"""Where guest bytes come from: dump files (ELF core, kdump flattened or plain), a recorded live
snapshot, or a paused live QEMU guest. Every source is a PhysicalSource and a context manager.

Each kind's module is imported when a source of its kind is opened: a command that reads an
ELF core does not pay for importing the kdump, live and HMP readers (start-up time, issue 12).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._files import fail, open_input
from .base import PhysicalRun, PhysicalSource, VcpuState
from .magic import ELF_MAGIC, FLAT_SIGNATURE, KDUMP_SIGNATURE

if TYPE_CHECKING:
    from .elf import ElfSource
    from .kdump import KdumpSource
    from .live import LiveSource, RecordedLiveSource

#: the names this package exports from its kinds' modules, imported on first use
_LAZY = {
    "ElfSource": "elf",
    "KdumpSource": "kdump",
    "LiveSource": "live",
    "RecordedLiveSource": "live",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def open_source(path: str | os.PathLike[str], vcpu_state: str | os.PathLike[str] | None = None) -> PhysicalSource:
    """Open a dump file by its magic (ELF, flattened makedumpfile stream, plain kdump), or a
    recorded live snapshot directory. `vcpu_state`: HMP `info registers -a` text captured
    with a dump file (dump files carry no FPU registers). Any problem is a SourceError naming
    the file."""
    source = _open_source(Path(path))
    if vcpu_state is None:
        return source
    if Path(path).is_dir():  # a recorded live snapshot
        source.close()
        raise fail(path, "a recorded live snapshot has its own vCPU state (registers.txt): drop --vcpu-state")
    from .hmp_registers import VcpuStateOverlay

    try:
        return VcpuStateOverlay(source, vcpu_state)
    except BaseException:
        source.close()
        raise


def _open_source(path: Path) -> PhysicalSource:
    if path.is_dir():
        from .live import RecordedLiveSource, is_recorded_live

        if is_recorded_live(path):
            return RecordedLiveSource(path)
        raise fail(path, "is a directory, not a dump file or a recorded live snapshot")
    with os.fdopen(open_input(path), "rb") as f:
        magic = f.read(16)
    if magic.startswith(ELF_MAGIC):
        from .elf import ElfSource

        return ElfSource(path)
    if magic.startswith((FLAT_SIGNATURE, KDUMP_SIGNATURE)):
        from .kdump import KdumpSource

        return KdumpSource(path)
    if not magic:
        raise fail(path, "file is empty")
    raise fail(path, "unknown format: not an ELF core, kdump or flattened makedumpfile stream")


def open_live(
    qmp: str | os.PathLike[str],
    mem: str | os.PathLike[str] | None = None,
    pause: bool = True,
    qemu_pid: int | None = None,
) -> LiveSource:
    """The QEMU guest behind QMP socket `qmp`, its RAM mapped from its memory backends' files
    (found through QMP and QEMU's /proc/PID/fd; `mem`, if given, must be one of them), paused
    now (if running) or at the source's pause(); closing the source resumes a guest it paused.
    `qemu_pid`: QEMU's pid where the socket's peer is not visible (another pid namespace)."""
    from .live import LiveSource

    return LiveSource(qmp, mem, pause=pause, qemu_pid=qemu_pid)


__all__ = [
    "ElfSource",
    "KdumpSource",
    "LiveSource",
    "PhysicalRun",
    "PhysicalSource",
    "RecordedLiveSource",
    "VcpuState",
    "open_live",
    "open_source",
]
