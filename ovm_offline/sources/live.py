"""Guest RAM straight from the files of QEMU's memory backends, for a live (paused) guest or a
recorded copy.

Each file is one RAM memory region, named after its backend (backends.py finds them: files,
memfds, several); where its bytes appear in guest-physical space comes from HMP
`info mtree -f` (the flat view of address space "memory": each range names the region it shows
and the offset into it, so the pc machine's ram-below-4g/ram-above-4g aliases, NUMA nodes and
DIMMs arrive already resolved). vCPU registers come from HMP `info registers -a`
(hmp_registers.py).

A recorded snapshot is a directory with `guest-ram` (a copy of the file), `mtree.txt` and
`registers.txt` (the two HMP outputs, saved at the same moment).
"""

from __future__ import annotations

import atexit
import bisect
import dataclasses
import os
import re
import time
from pathlib import Path
from typing import BinaryIO

from ._files import MappedFile, RunMap, fail, read_binary_input, read_text_input
from .backends import backend_files, memory_backends
from .base import PhysicalRun, VcpuState
from .hmp_registers import parse_registers
from .qmp import QMP_TIMEOUT, QmpSession
from .vmcoreinfo_scan import find_vmcoreinfo, find_vmcoreinfo_at
from .watchdog import Watchdog

__all__ = [
    "LiveSource",
    "RECORDED_MEMORY",
    "RecordedLiveSource",
    "find_vmcoreinfo",
    "locate_guest_ram",
    "memdev_backed_by",
    "guess_memdev",
    "is_recorded_live",
    "parse_mtree_flat",
    "parse_registers",
    "ram_layout",
    "single_ram_file",
]


RECORDED_MEMORY = "guest-ram"
RECORDED_MTREE = "mtree.txt"
RECORDED_REGISTERS = "registers.txt"
#: QEMU's device state at a background snapshot's stop, which holds its vCPUs' registers (vmstate.py)
RECORDED_VMSTATE = "vmstate"


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


def locate_guest_ram(qmp: QmpSession, ranges: list[FlatRange], given: str | None = None) -> dict[str, str]:
    """The host file of every memory backend that guest memory shows (backends.py); `given`
    (--mem) must be one of them."""
    found = memory_backends(qmp)
    return backend_files(qmp, found, {b.id: ram_layout(ranges, b.id) for b in found}, given)


def memdev_backed_by(qmp: QmpSession, memory_file: str | os.PathLike[str]) -> str:
    """The id of the memory backend of the QEMU behind `qmp` whose memory is `memory_file`;
    SourceError if none is (another guest's file, or a copy)."""
    try:
        ranges = parse_mtree_flat(qmp.hmp("info mtree -f"))
    except ValueError as exc:
        raise fail(qmp.where, f"cannot place guest RAM: {exc}") from None
    files = locate_guest_ram(qmp, ranges, str(memory_file))
    return next(backend_id for backend_id, path in files.items() if path == str(memory_file))


def single_ram_file(qmp_socket: str | os.PathLike[str], snapshot: str) -> str:
    """The file of the one memory backend of the guest behind `qmp_socket`, for a `snapshot`
    that streams one RAM block (QEMU's pre-copy and background snapshots)."""
    qmp = QmpSession(str(qmp_socket), QMP_TIMEOUT)
    try:
        try:
            ranges = parse_mtree_flat(qmp.hmp("info mtree -f"))
        except ValueError as exc:
            raise fail(qmp_socket, f"cannot place guest RAM: {exc}") from None
        files = locate_guest_ram(qmp, ranges)
    finally:
        qmp.close()
    if len(files) != 1:
        raise fail(
            qmp_socket,
            f"guest RAM is in {len(files)} memory backends ({', '.join(files)}), and a {snapshot} snapshot"
            " streams one; dump it with --live alone",
        )
    return next(iter(files.values()))


# ==== sources =====================================================================================
class RamFileSource:
    """Guest RAM from memory backends' files (or a copy of one) plus the HMP texts that place it.
    `files`: each backend's id (None: the RAM region the file fits, for a recorded copy) and file."""

    format_name = "live snapshot"
    guest_runs_on = False

    def __init__(self, files: dict[str | None, str] | dict[str, str], mtree_text: str, vcpus: list[VcpuState]) -> None:
        self.memory_file = str(next(iter(files.values())))
        self._files: list[MappedFile] = []
        try:
            for path in files.values():
                self._files.append(MappedFile(path, "a guest memory file"))
            self._setup(list(files), mtree_text)
            self._vcpus = vcpus
        except BaseException:
            self.close()
            raise
        self._vmcoreinfo: dict[str, str] | None | bool = False  # False: not looked for yet
        self._vmcoreinfo_at: tuple[MappedFile, int, bytes] | None = None

    def _setup(self, memdevs: list[str | None], mtree_text: str) -> None:
        where = self.memory_file
        try:
            ranges = parse_mtree_flat(mtree_text)
        except ValueError as exc:
            raise fail(where, f"cannot place guest RAM: {exc}") from None
        self.memdevs: list[str] = []
        self._bases: list[int] = []  # each file's place in one virtual concatenation of them all
        entries: list[tuple[int, int, int]] = []
        base = 0
        for memdev, mapped in zip(memdevs, self._files):
            memdev = memdev if memdev is not None else guess_memdev(ranges, mapped.size)
            if memdev is None:
                raise fail(mapped.name, "no RAM region of `info mtree -f` fits in this memory file")
            layout = _file_layout(ranges, memdev, mapped)
            self.memdevs.append(memdev)
            self._bases.append(base)
            entries += [(start, length, base + offset) for start, length, offset in layout]
            base += mapped.size
        self.memdev = self.memdevs[0]
        self.layout = sorted(entries)
        self._map = RunMap(where, entries)

    def layout_of(self, memdev: str) -> list[tuple[int, int, int]]:
        """`memdev`'s (guest-physical start, length, offset in its own file), as placed here."""
        i = self.memdevs.index(memdev)
        base, end = self._bases[i], self._bases[i] + self._files[i].size
        return [(s, n, o - base) for s, n, o in self.layout if base <= o < end]

    def runs(self) -> list[PhysicalRun]:
        return self._map.runs()

    def _pieces(self, paddr: int, length: int) -> list[tuple[MappedFile, int, int]]:
        """(file, offset, size) pieces of a guest-physical range; every run here is file-backed,
        and no run crosses from one file into the next."""
        pieces = []
        for _addr, size, backing in self._map.pieces(paddr, length):
            i = bisect.bisect_right(self._bases, backing or 0) - 1
            pieces.append((self._files[i], (backing or 0) - self._bases[i], size))
        return pieces

    def read(self, paddr: int, length: int) -> bytes:
        return b"".join(mapped.pread(offset, size) for mapped, offset, size in self._pieces(paddr, length))

    def copy_to(self, paddr: int, length: int, out: BinaryIO) -> None:
        for mapped, offset, size in self._pieces(paddr, length):
            mapped.copy_to(offset, size, out)

    def vcpus(self) -> list[VcpuState]:
        return list(self._vcpus)

    def vmcoreinfo(self) -> dict[str, str] | None:
        """Found by scanning RAM once for the kernel's VMCOREINFO note (about 0.1 s per GiB
        of RAM in the page cache before it; 0.45 s per GiB where no page starts with it), the
        file that holds guest-physical 0 first."""
        if self._vmcoreinfo is False:
            self._vmcoreinfo = None
            for mapped in sorted(self._files, key=self._lowest_address):
                found = find_vmcoreinfo_at(mapped.mm) if mapped.mm is not None else None
                if found is not None:
                    head, length, self._vmcoreinfo = found
                    self._vmcoreinfo_at = (mapped, head, mapped.pread(head, length))
                    break
        return self._vmcoreinfo  # type: ignore[return-value]

    def _lowest_address(self, mapped: MappedFile) -> int:
        base = self._bases[self._files.index(mapped)]
        return min((start for start, _n, offset in self.layout if offset >= base), default=1 << 64)

    def close(self) -> None:
        for mapped in self._files:
            mapped.close()

    def __enter__(self) -> RamFileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _file_layout(ranges: list[FlatRange], memdev: str, mapped: MappedFile) -> list[tuple[int, int, int]]:
    layout = ram_layout(ranges, memdev)
    if not layout:
        raise fail(mapped.name, f"`info mtree -f` maps no guest memory from region {memdev!r}")
    for _start, length, offset in layout:
        if offset + length > mapped.size:
            raise fail(
                mapped.name,
                f"region {memdev!r} maps file offset {offset:#x}+{length:#x}, beyond the file's {mapped.size:#x} bytes",
            )
    return layout


class RecordedLiveSource(RamFileSource):
    """A recorded live snapshot: a directory with guest-ram, mtree.txt and the vCPUs' registers,
    as HMP printed them (registers.txt) or in QEMU's device state (vmstate, a background
    snapshot's)."""

    format_name = "live snapshot (recorded)"

    def __init__(self, directory: str | os.PathLike[str], memdev: str | None = None) -> None:
        directory = Path(directory)
        if not os.path.lexists(directory / RECORDED_MTREE):
            raise fail(directory, f"recorded live snapshot lacks {RECORDED_MTREE}")
        mtree = read_text_input(directory / RECORDED_MTREE, "HMP `info mtree` text")
        super().__init__({memdev: str(directory / RECORDED_MEMORY)}, mtree, _recorded_vcpus(directory))
        self.directory = directory


def _recorded_vcpus(directory: Path) -> list[VcpuState]:
    if os.path.lexists(directory / RECORDED_REGISTERS):
        return parse_registers(read_text_input(directory / RECORDED_REGISTERS, "HMP `info registers` text"))
    if os.path.lexists(directory / RECORDED_VMSTATE):
        from .vmstate import MAX_VMSTATE_BYTES, vcpus_from_vmstate

        data = read_binary_input(directory / RECORDED_VMSTATE, "QEMU's device state", MAX_VMSTATE_BYTES)
        return vcpus_from_vmstate(data, str(directory / RECORDED_VMSTATE))
    raise fail(
        directory, f"recorded live snapshot lacks {RECORDED_REGISTERS} (or QEMU's device state, {RECORDED_VMSTATE})"
    )


def is_recorded_live(path: str | os.PathLike[str]) -> bool:
    path = Path(path)
    return path.is_dir() and (path / RECORDED_MEMORY).exists() and (path / RECORDED_MTREE).exists()


class LiveSource(RamFileSource):
    """A live QEMU guest: paused (if running) from pause() until close() — also on exceptions
    and Ctrl-C when used as a context manager (and at interpreter exit as a last resort). A
    guest that was already paused is left paused.

    Its RAM is found and mapped, and its kernel may be looked for, while it runs (none of that
    moves while a guest runs); pause() stops it, reads its vCPUs and checks that RAM and the
    kernel's note are where they were. `memory_file` (--mem) names one backend's file: it must
    be this guest's; by default every backend's file is found through QMP."""

    format_name = "live"

    def __init__(
        self,
        qmp_socket: str | os.PathLike[str],
        memory_file: str | os.PathLike[str] | None = None,
        timeout: float = QMP_TIMEOUT,
        *,
        pause: bool = True,
        qemu_pid: int | None = None,
    ) -> None:
        self.qmp_socket = str(qmp_socket)
        self.we_paused = False
        self.paused_seconds = 0.0
        self._paused_at: float | None = None
        self._closed = False
        self._files = []
        self._qmp = QmpSession(self.qmp_socket, timeout)
        self._watchdog: Watchdog | None = None
        try:
            if self._qmp.execute("query-status").get("running"):
                # resumes the guest if we die holding it (SIGKILL, OOM killer); its start-up
                # overlaps finding RAM (and, before pause(), the kernel)
                self._watchdog = Watchdog(self.qmp_socket, wait=False)
            if qemu_pid is not None:
                self._qmp.peer_pid = qemu_pid_of(self._qmp, qemu_pid)
            mtree = self._qmp.hmp("info mtree -f")
            try:
                ranges = parse_mtree_flat(mtree)
            except ValueError as exc:
                raise fail(self.qmp_socket, f"cannot place guest RAM: {exc}") from None
            files = locate_guest_ram(self._qmp, ranges, None if memory_file is None else str(memory_file))
            super().__init__(files, mtree, [])
            if pause:
                self.pause()
        except BaseException:
            self._shutdown(raise_errors=False)
            super().close()
            raise

    @property
    def guest_runs_on(self) -> bool:  # type: ignore[override]
        return self.we_paused

    def pause(self) -> None:
        """Stop the guest (if it runs) and read what only a stopped guest holds still."""
        self._pause()
        mtree = self._qmp.hmp("info mtree -f")
        try:
            ranges = parse_mtree_flat(mtree)
        except ValueError as exc:
            raise fail(self.qmp_socket, f"cannot place guest RAM: {exc}") from None
        if any(ram_layout(ranges, m) != self.layout_of(m) for m in self.memdevs):
            raise fail(
                self.qmp_socket, "guest RAM moved while it was being opened (memory plugged or unplugged?); try again"
            )
        if self._vmcoreinfo_at is not None:
            mapped, head, note = self._vmcoreinfo_at
            if mapped.pread(head, len(note)) != note:
                raise fail(
                    self.qmp_socket, "the guest's kernel changed while it was being opened (a reboot?); try again"
                )
        self._vcpus = parse_registers(self._qmp.hmp("info registers -a"))

    def _pause(self) -> None:
        status = self._qmp.execute("query-status")
        if status.get("running"):
            atexit.register(self._atexit)
            if self._watchdog is None:  # (paused by someone else when we came)
                self._watchdog = Watchdog(self.qmp_socket, wait=False)
            self._watchdog.hold(resume=True, give_back=[])  # told before the stop
            self._paused_at = time.monotonic()
            self._qmp.execute("stop")
            self.we_paused = True

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


def qemu_pid_of(qmp: QmpSession, given: int) -> int:
    """--qemu-pid, where it does not contradict the QMP socket's peer."""
    if qmp.peer_pid is not None and qmp.peer_pid != given:
        raise fail(qmp.where, f"--qemu-pid {given} is not the QEMU behind this QMP socket (its pid is {qmp.peer_pid})")
    return given
