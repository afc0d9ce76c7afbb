"""Guest RAM straight from QEMU's memory-backend-file, for a live (paused) guest or a recorded copy.

The file is one RAM memory region; where its bytes appear in guest-physical space comes from
HMP `info mtree -f` (the flat view of address space "memory": each range names the region it
shows and the offset into it, so the pc machine's ram-below-4g/ram-above-4g aliases arrive
already resolved). vCPU registers come from HMP `info registers -a` (hmp_registers.py).

A recorded snapshot is a directory with `guest-ram` (a copy of the file), `mtree.txt` and
`registers.txt` (the two HMP outputs, saved at the same moment).
"""

from __future__ import annotations

import atexit
import dataclasses
import mmap
import os
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ._files import MappedFile, RunMap, fail, read_text_input
from .base import PhysicalRun, VcpuState
from .hmp_registers import parse_registers
from .notes import parse_vmcoreinfo
from .watchdog import Watchdog

__all__ = [
    "LiveSource",
    "RECORDED_MEMORY",
    "RecordedLiveSource",
    "find_vmcoreinfo",
    "memdev_backed_by",
    "guess_memdev",
    "is_recorded_live",
    "parse_mtree_flat",
    "parse_registers",
    "ram_layout",
]


RECORDED_MEMORY = "guest-ram"
RECORDED_MTREE = "mtree.txt"
RECORDED_REGISTERS = "registers.txt"

QMP_TIMEOUT = 10.0


# ==== HMP text ====================================================================================
@dataclasses.dataclass(frozen=True)
class FlatRange:
    """One line of a flat view: [start, end] (inclusive, as QEMU prints it) shows `region` at `offset`."""

    start: int
    end: int
    priority: int
    kind: str  # "ram", "rom", "i/o", "romd", ...
    region: str
    offset: int


_FLATVIEW = re.compile(r"^FlatView #\d+")
_AS = re.compile(r'^\s+AS "([^"]*)"')
_RANGE = re.compile(
    r"^\s+([0-9a-fA-F]+)-([0-9a-fA-F]+) \(prio (-?\d+), ([^)]*)\): (.*?)(?: @([0-9a-fA-F]+))?(?: KVM)?\s*$"
)


def parse_mtree_flat(text: str, address_space: str = "memory") -> list[FlatRange]:
    """The ranges of the flat view that serves `address_space` in `info mtree -f` output."""
    views: list[tuple[list[str], list[FlatRange]]] = []
    for line in text.splitlines():
        if _FLATVIEW.match(line):
            views.append(([], []))
            continue
        if not views:
            continue
        m = _AS.match(line)
        if m:
            views[-1][0].append(m.group(1))
            continue
        m = _RANGE.match(line)
        if m:
            start, end, prio, kind, region, offset = m.groups()
            views[-1][1].append(
                FlatRange(int(start, 16), int(end, 16), int(prio), kind.strip(), region.strip(), int(offset or "0", 16))
            )
    for spaces, ranges in views:
        if address_space in spaces:
            return ranges
    raise ValueError(f'no flat view of address space "{address_space}" (is this `info mtree -f` output?)')


def ram_layout(ranges: list[FlatRange], memdev: str) -> list[tuple[int, int, int]]:
    """(guest-physical start, length, file offset) of every range showing region `memdev`,
    adjacent ones merged. ROM-typed ranges count too: PAM makes parts of RAM below 1 MiB read-only."""
    layout: list[list[int]] = []
    for r in sorted(ranges, key=lambda r: r.start):
        if r.region != memdev or r.kind not in ("ram", "rom"):
            continue
        length = r.end - r.start + 1
        if layout and layout[-1][0] + layout[-1][1] == r.start and layout[-1][2] + layout[-1][1] == r.offset:
            layout[-1][1] += length
        else:
            layout.append([r.start, length, r.offset])
    return [(s, n, o) for s, n, o in layout]


def guess_memdev(ranges: list[FlatRange], file_size: int) -> str | None:
    """For a recorded snapshot: the RAM region the file must be, i.e. the one that maps the most
    guest memory among those that fit in the file."""
    totals: dict[str, int] = {}
    fits: dict[str, bool] = {}
    for r in ranges:
        if r.kind != "ram":
            continue
        totals[r.region] = totals.get(r.region, 0) + (r.end - r.start + 1)
        fits[r.region] = fits.get(r.region, True) and r.offset + (r.end - r.start + 1) <= file_size
    candidates = [name for name in totals if fits[name]]
    return max(candidates, key=lambda name: totals[name]) if candidates else None


# ==== VMCOREINFO in guest RAM =====================================================================
# search for the name, not the zero note type before it: a pattern starting with a rare byte
# lets find() skip through memory (a leading NUL matches everywhere in zeroed RAM)
_VMCOREINFO_NAME = b"VMCOREINFO\x00\x00"
_SCAN_WINDOW = 16 << 20  # read, then let go of: the peak RSS of a live dump is ~40 MiB plus this
_PAGE = 4096
_NAME_WORD = int.from_bytes(_VMCOREINFO_NAME[:4], "little")
_MAX_VMCOREINFO = 1 << 16


def find_vmcoreinfo(data: Any) -> dict[str, str] | None:
    """The guest kernel's VMCOREINFO ELF note, found in RAM the way QEMU's vmcoreinfo device
    would hand it over: namesz 11, type 0, "VMCOREINFO", text starting with OSRELEASE=. Linux
    allocates the note page-aligned, so the start of every page is looked at first (one word
    a page: about ten times faster than searching every byte); only when none holds it is all
    of RAM searched, and the first unaligned copy taken (a kernel that keeps the note in its
    data). An mmap is read a window at a time, each let go of once read: the note can sit GiBs
    in, and every page read would otherwise stay resident in this process."""
    for head in _page_starts_named(data):
        note = _note_at(data, head)
        if note is not None:
            return note
    for hit in _find_all(data, _VMCOREINFO_NAME):
        head = hit - 12
        if head >= 0 and head % 4 == 0 and (note := _note_at(data, head)) is not None:
            return note
    return None


def _note_at(data: Any, head: int) -> dict[str, str] | None:
    """The VMCOREINFO note whose header is at `head`, if that is one."""
    if head + 24 > len(data):
        return None
    namesz, descsz, ntype = struct.unpack_from("<III", data, head)
    desc = head + 12 + 12
    if namesz != 11 or ntype != 0 or not 0 < descsz <= _MAX_VMCOREINFO or desc + descsz > len(data):
        return None
    if bytes(data[head + 12 : head + 24]) != _VMCOREINFO_NAME:
        return None
    text = bytes(data[desc : desc + descsz])
    return parse_vmcoreinfo(text) if text.startswith(b"OSRELEASE=") else None


def _page_starts_named(data: Any) -> Iterator[int]:
    """Offsets of the pages of `data` whose bytes 12..15 are "VMCO" (where a page-aligned note
    has its name), read as one word a page."""
    release = getattr(data, "madvise", None)
    end = len(data) // _PAGE * _PAGE
    with memoryview(data) as whole:
        for window in range(0, end, _SCAN_WINDOW):
            stop = min(end, window + _SCAN_WINDOW)
            with whole[window:stop] as piece, piece.cast("I") as words, words[3 :: _PAGE // 4] as name_words:
                found = [i for i, word in enumerate(name_words.tolist()) if word == _NAME_WORD]
            yield from (window + i * _PAGE for i in found)
            if release is not None:
                release(mmap.MADV_DONTNEED, window, stop - window)


def _find_all(data: Any, needle: bytes) -> Iterator[int]:
    """Offsets of `needle` in `data` (an mmap, or bytes), in order."""
    release = getattr(data, "madvise", None)
    end = len(data)
    for window in range(0, end, _SCAN_WINDOW):
        stop = min(end, window + _SCAN_WINDOW + len(needle) - 1)  # a hit across the border
        pos = window
        while (hit := data.find(needle, pos, stop)) >= 0:
            pos = hit + 1
            yield hit
        if release is not None:
            release(mmap.MADV_DONTNEED, window, min(_SCAN_WINDOW, end - window))


def memdev_backed_by(qmp: _Qmp, memory_file: str | os.PathLike[str]) -> str:
    """The id of the memory backend of the QEMU behind `qmp` whose mem-path is `memory_file`;
    SourceError if none is (another guest's file, or a copy)."""
    backends = qmp.execute("query-memdev")
    ids = [b.get("id") for b in backends if b.get("id")]
    for backend_id in ids:
        try:
            mem_path = qmp.execute("qom-get", {"path": f"/objects/{backend_id}", "property": "mem-path"})
        except Exception:
            continue  # memory-backend-ram has no mem-path
        try:
            if os.path.samefile(mem_path, memory_file):
                return backend_id
        except OSError:
            continue
    raise fail(
        memory_file,
        f"is not the mem-path of any memory backend of this QEMU (backends: {', '.join(ids) or 'none'})",
    )


# ==== sources =====================================================================================
class RamFileSource:
    """Guest RAM from a memory-backend-file (or a copy of it) plus the HMP texts that place it."""

    format_name = "live snapshot"
    guest_runs_on = False

    def __init__(
        self, memory_file: str | os.PathLike[str], mtree_text: str, registers_text: str, memdev: str | None = None
    ) -> None:
        self.memory_file = str(memory_file)
        self._file = MappedFile(memory_file, "a guest memory file")
        try:
            self._setup(mtree_text, registers_text, memdev)
        except BaseException:
            self._file.close()
            raise
        self._vmcoreinfo: dict[str, str] | None | bool = False  # False: not looked for yet

    def _setup(self, mtree_text: str, registers_text: str, memdev: str | None) -> None:
        where = self.memory_file
        try:
            ranges = parse_mtree_flat(mtree_text)
        except ValueError as exc:
            raise fail(where, f"cannot place guest RAM: {exc}") from None
        if memdev is None:
            memdev = guess_memdev(ranges, self._file.size)
            if memdev is None:
                raise fail(where, "no RAM region of `info mtree -f` fits in this memory file")
        layout = ram_layout(ranges, memdev)
        if not layout:
            raise fail(where, f"`info mtree -f` maps no guest memory from region {memdev!r}")
        for _start, length, offset in layout:
            if offset + length > self._file.size:
                raise fail(
                    where,
                    f"region {memdev!r} maps file offset {offset:#x}+{length:#x}, beyond the file's {self._file.size:#x} bytes",
                )
        self.memdev = memdev
        self.layout = layout
        self._map = RunMap(where, layout)
        self._vcpus = parse_registers(registers_text)

    def runs(self) -> list[PhysicalRun]:
        return self._map.runs()

    def _pieces(self, paddr: int, length: int) -> list[tuple[int, int]]:
        """(file offset, size) pieces of a guest-physical range; every run here is file-backed."""
        return [(offset or 0, size) for _addr, size, offset in self._map.pieces(paddr, length)]

    def read(self, paddr: int, length: int) -> bytes:
        return b"".join(self._file.pread(offset, size) for offset, size in self._pieces(paddr, length))

    def copy_to(self, paddr: int, length: int, out: BinaryIO) -> None:
        for offset, size in self._pieces(paddr, length):
            self._file.copy_to(offset, size, out)

    def vcpus(self) -> list[VcpuState]:
        return list(self._vcpus)

    def vmcoreinfo(self) -> dict[str, str] | None:
        """Found by scanning RAM once for the kernel's VMCOREINFO note (about 0.1 s per GiB
        of RAM in the page cache before it; 0.45 s per GiB where no page starts with it)."""
        if self._vmcoreinfo is False:
            self._vmcoreinfo = find_vmcoreinfo(self._file.mm) if self._file.mm is not None else None
        return self._vmcoreinfo  # type: ignore[return-value]

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RamFileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordedLiveSource(RamFileSource):
    """A recorded live snapshot: a directory with guest-ram, mtree.txt and registers.txt."""

    format_name = "live snapshot (recorded)"

    def __init__(self, directory: str | os.PathLike[str], memdev: str | None = None) -> None:
        directory = Path(directory)
        texts = []
        for name, what in (
            (RECORDED_MTREE, "HMP `info mtree` text"),
            (RECORDED_REGISTERS, "HMP `info registers` text"),
        ):
            if not os.path.lexists(directory / name):
                raise fail(directory, f"recorded live snapshot lacks {name}")
            texts.append(read_text_input(directory / name, what))
        super().__init__(directory / RECORDED_MEMORY, texts[0], texts[1], memdev)
        self.directory = directory


def is_recorded_live(path: str | os.PathLike[str]) -> bool:
    path = Path(path)
    return path.is_dir() and (path / RECORDED_MEMORY).exists() and (path / RECORDED_MTREE).exists()


# ==== QMP =========================================================================================
class _Qmp:
    """A synchronous QMP session with a timeout on every step (qemu.qmp's legacy wrapper waits
    forever for a greeting that a non-QEMU socket never sends)."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        from qemu.qmp import QMPClient

        self.where = socket_path
        self.timeout = timeout
        import asyncio  # here, not at the top: only a live source pays for importing it

        self._loop = asyncio.new_event_loop()
        self._client = QMPClient("ovm-offline")
        if not os.path.exists(socket_path):
            self._loop.close()
            raise fail(socket_path, "no such QMP socket")
        try:
            self._run(self._client.connect(socket_path), "connecting")
        except BaseException:
            self.close()
            raise

    def _run(self, coro: Any, doing: str) -> Any:
        from qemu.qmp import QMPError

        try:
            return self._loop.run_until_complete(_with_timeout(coro, self.timeout))
        except TimeoutError:
            raise fail(
                self.where, f"no answer within {self.timeout:g} s while {doing}; is this a QEMU QMP socket?"
            ) from None
        except QMPError as exc:
            raise fail(self.where, f"QMP error while {doing}: {_one_line(exc)}") from None
        except (OSError, EOFError, ValueError) as exc:
            raise fail(self.where, f"QMP connection failed while {doing}: {_one_line(exc)}") from None

    def execute(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        return self._run(self._client.execute(command, arguments), command)

    def hmp(self, command_line: str) -> str:
        return self.execute("human-monitor-command", {"command-line": command_line})

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(_with_timeout(self._client.disconnect(), self.timeout))
        except Exception:
            pass
        self._loop.close()


def _with_timeout(coro: Any, seconds: float) -> Any:
    import asyncio

    return asyncio.wait_for(coro, seconds)


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {cause}"
    return " ".join(text.split())


class LiveSource(RamFileSource):
    """A live QEMU guest: paused (if running) for as long as this source is open, resumed by
    close() — also on exceptions and Ctrl-C when used as a context manager (and at interpreter
    exit as a last resort). A guest that was already paused is left paused."""

    format_name = "live"

    def __init__(
        self,
        qmp_socket: str | os.PathLike[str],
        memory_file: str | os.PathLike[str],
        memdev: str | None = None,
        timeout: float = QMP_TIMEOUT,
    ) -> None:
        self.qmp_socket = str(qmp_socket)
        self.we_paused = False
        self.paused_seconds = 0.0
        self._paused_at: float | None = None
        self._closed = False
        self._qmp = _Qmp(self.qmp_socket, timeout)
        self._watchdog: Watchdog | None = None
        try:
            self._pause()
            mtree = self._qmp.hmp("info mtree -f")
            registers = self._qmp.hmp("info registers -a")
            if memdev is None:
                memdev = self._find_memdev(memory_file)
            super().__init__(memory_file, mtree, registers, memdev)
        except BaseException:
            self._shutdown(raise_errors=False)
            raise

    @property
    def guest_runs_on(self) -> bool:  # type: ignore[override]
        return self.we_paused

    def _pause(self) -> None:
        status = self._qmp.execute("query-status")
        if status.get("running"):
            atexit.register(self._atexit)
            # resumes the guest if we die holding it (SIGKILL, OOM killer): told before the stop
            self._watchdog = Watchdog(self.qmp_socket)
            self._watchdog.hold(resume=True, give_back=[])
            self._paused_at = time.monotonic()
            self._qmp.execute("stop")
            self.we_paused = True

    def _find_memdev(self, memory_file: str | os.PathLike[str]) -> str:
        return memdev_backed_by(self._qmp, memory_file)

    def _atexit(self) -> None:
        self._shutdown(raise_errors=False)

    def _shutdown(self, raise_errors: bool) -> None:
        error = None
        if self.we_paused and self._paused_at is not None:
            try:
                self._qmp.execute("cont")
            except Exception as exc:
                error = exc
            self.paused_seconds = time.monotonic() - self._paused_at
            self._paused_at = None
        try:
            atexit.unregister(self._atexit)
        except Exception:
            pass
        self._qmp.close()
        if self._watchdog is not None and error is None:
            self._watchdog.release()  # (if `cont` failed, the watchdog tries again once we are gone)
            self._watchdog = None
        if error is not None and raise_errors:
            raise fail(self.qmp_socket, f"could not resume the guest, it is still paused: {error}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._shutdown(raise_errors=True)
        finally:
            super().close()

    def __enter__(self) -> LiveSource:
        return self
