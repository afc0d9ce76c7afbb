"""A snapshot of a running QEMU guest whose pause is QEMU's own: QEMU's background-snapshot
migration (userfaultfd write protection), streamed to us.

We only start the migration. QEMU prepares guest RAM while the guest runs (it reads every page
through its own mapping: 32 ms a GiB, 420 ms for a 1.4 GiB guest the first time), then stops the
guest itself, saves its device state (each vCPU's registers among it), write-protects guest RAM
and starts the guest again at once. It streams RAM as it was at that stop while the guest runs: a
page the guest is about to write is streamed first, its write waiting for it, and the device
state after the last page. The vCPUs' registers are read from that device state (vmstate.py), so
the moment is QEMU's stop and nothing of ours runs inside it. (Stopping the guest ourselves to read
registers over QMP first, as this did before, put QEMU's preparation inside our stop: 446 ms
against QEMU's 30 ms of downtime.) The host kernel enforces the protection on every write into
QEMU's mapping of guest RAM (TCG's stores, device emulation, vhost in QEMU's address space), so
the stream is the stop's memory exactly and needs none of pre-copy's check at the stop
(precopy.py). The result is a recorded live snapshot (guest-ram, mtree.txt and QEMU's device
state, `vmstate`) of the stop.

QEMU protects only tmpfs, hugetlbfs and anonymous memory: guest RAM must be a memory-backend-file
on /dev/shm or hugetlbfs (it refuses a file on a disk file system when asked, before the guest is
stopped). QEMU starts the guest itself once RAM is protected, so a guest paused before we came is
refused: a plain --live dump leaves it paused. A process of another program writing into the
same file (a vhost-user back end) is outside the protection, as it is outside QEMU's own.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import SourceError
from ._files import fail
from .live import RECORDED_VMSTATE
from .migration import PAGE_SIZE, RamStream
from .precopy import STREAM_BANDWIDTH, _Precopy, pause_words
from .qmp import QMP_TIMEOUT

__all__ = ["BackgroundReport", "background_snapshot"]

CAPABILITY = "background-snapshot"


@dataclasses.dataclass
class BackgroundReport:
    """How a background snapshot went: how long the guest was stopped (the STOP event to the
    RESUME event; None if not measured), QEMU's own downtime figure (device state and protecting
    RAM), what the stream carried, and the whole time. The guest always ran before: a paused
    one is refused."""

    paused_seconds: float | None
    downtime_ms: int
    ram: RamStream
    seconds: float
    was_running = True  # not a field: a guest paused before is refused

    def line(self) -> str:
        return (
            f"background snapshot: guest {pause_words(self.was_running, self.paused_seconds)} (QEMU downtime"
            f" {self.downtime_ms} ms), then {self.ram.pages} pages streamed in {self.seconds:.2f} s while it ran"
        )


def background_snapshot(
    qmp_socket: str | Path,
    directory: str | Path,
    memory_file: str | Path,
    *,
    timeout: float = QMP_TIMEOUT,
    max_seconds: float = 600.0,
    on_paused: Callable[[Callable[..., Any]], None] | None = None,
) -> BackgroundReport:
    """Write a recorded live snapshot of the QEMU guest behind `qmp_socket` into `directory`
    (which must exist and be empty) by a background-snapshot migration of its RAM, the
    memory-backend-file `memory_file`. The snapshot's moment is QEMU's own stop. Given
    `on_paused(execute)`, we stop the guest first and run it there instead, so that the moment is
    one a test can see (it takes a dump-guest-memory and HMP's registers there); QEMU's stop
    then falls inside ours. The guest runs again when this returns or raises."""
    run = _Background(str(qmp_socket), Path(directory), timeout)
    try:
        run.prepare(Path(memory_file))
        run.stream_from_stop(max_seconds, on_paused)
    except BaseException:
        run.abandon()
        raise
    paused = run.resume()
    ram = run.finished_stream()
    # read, and refused by name if it must be, where the snapshot is opened (as a dump file's notes are)
    (run.directory / RECORDED_VMSTATE).write_bytes(run.device_state())
    return BackgroundReport(
        paused_seconds=paused,
        downtime_ms=int(run.info.get("downtime", 0)),
        ram=ram,
        seconds=time.monotonic() - run.started,
    )


class _Background(_Precopy):
    """One background snapshot's QMP session, stream and what must be undone."""

    CHECKED_AT_STOP = False  # write protection, not a dirty bitmap: nothing to compare
    # cancelling a background snapshot can leave a vCPU asleep on a write-protect fault for good,
    # QEMU's main loop waiting behind it (measured: 3 in 14 cancels after a full disk, under
    # load); a snapshot streams RAM once, so it ends soon on its own while the stream is drained
    LET_FINISH = True
    TOO_SLOW = "the background snapshot did not stream guest RAM within {:g} s"

    def __init__(self, where: str, directory: Path, timeout: float) -> None:
        super().__init__(where, directory, timeout)
        self.capability_was: bool | None = None

    def prepare(self, memory_file: Path) -> str:
        if not self.qmp.execute("query-status").get("running"):
            raise fail(
                self.where,
                "the guest is paused, and QEMU starts a guest when its background snapshot begins;"
                " dump it with --live alone, which leaves it paused",
            )
        if _vmdesc_suppressed(self.qmp):
            raise fail(
                self.where,
                "this machine sends no description of its device state (suppress-vmdesc=on), where a"
                " background snapshot's vCPU registers are read; use --precopy",
            )
        block = super().prepare(memory_file)
        assert self.reader is not None
        self.reader.device_state = bytearray()  # the vCPUs' registers at QEMU's stop are in it
        _allocate_holes(memory_file)
        return block

    def device_state(self) -> bytes:
        """The stream after guest RAM, as the reader kept it."""
        assert self.reader is not None and self.reader.device_state is not None
        return bytes(self.reader.device_state)

    def stream_from_stop(self, max_seconds: float, on_paused: Callable[[Callable[..., Any]], None] | None) -> None:
        """Migrate until QEMU has streamed RAM and device state as they were at its stop (QEMU
        stops the guest once RAM is ready to protect, and lets it run again once it is)."""
        qmp = self.qmp
        capabilities = {c["capability"]: c["state"] for c in qmp.execute("query-migrate-capabilities")}
        if CAPABILITY not in capabilities:
            raise fail(self.where, "this QEMU has no background-snapshot migration (QEMU 6.0 and later); use --precopy")
        self.capability_was = bool(capabilities[CAPABILITY])
        self.guard()
        try:
            qmp.execute("migrate-set-capabilities", {"capabilities": [{"capability": CAPABILITY, "state": True}]})
        except SourceError as exc:
            raise fail(
                self.where,
                "QEMU cannot snapshot this guest in the background: its RAM must be a memory-backend-file on"
                f" tmpfs (/dev/shm) or hugetlbfs; use --precopy (QEMU: {str(exc).rsplit(': ', 1)[-1]})",
            ) from None
        parameters = qmp.execute("query-migrate-parameters")
        self.saved_parameters = {k: parameters[k] for k in ("max-bandwidth",) if k in parameters}
        self.guard()
        qmp.execute("migrate-set-parameters", {"max-bandwidth": STREAM_BANDWIDTH})
        if on_paused is not None:
            qmp.execute("stop")
            on_paused(qmp.execute)
        self.start_migration()
        self.follow_migration(max_seconds, lambda info: None)

    @staticmethod
    def whole(ram: RamStream) -> bool:
        # no end section: QEMU writes the device state it saved at the stop after the last page;
        # each page is sent once, with the stop's content
        return not ram.resent and ram.pages + ram.zero_pages == ram.block_bytes // PAGE_SIZE

    def settings_to_give_back(self) -> list[tuple[str, dict[str, Any]]]:
        give_back = super().settings_to_give_back()
        if self.capability_was is not None and not self.capability_was:
            give_back.append(
                ("migrate-set-capabilities", {"capabilities": [{"capability": CAPABILITY, "state": False}]})
            )
        return give_back


def _vmdesc_suppressed(qmp: Any) -> bool:
    """Does the machine leave the description of its device state out of the stream? (A
    machine property in QEMU 7.2; absent, QEMU sends it.)"""
    try:
        return bool(qmp.execute("qom-get", {"path": "/machine", "property": "suppress-vmdesc"}))
    except SourceError:
        return False


def _allocate_holes(memory_file: Path) -> None:
    """Allocate the pages of guest RAM's file the guest never touched (a hole reads as zero and
    still does). QEMU reads every page of guest RAM before it write-protects it, inside the
    pause, and a hole costs it an allocation there: an idle 4 GiB guest stopped for 8.4 s, and
    for 0.2 s with its holes allocated first. On a full tmpfs QEMU would
    die of SIGBUS instead; here it is refused. fallocate(2) itself, not posix_fallocate, whose
    emulation in glibc writes into the file."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    try:
        fd = os.open(memory_file, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise fail(memory_file, f"cannot open it for writing to allocate guest RAM: {exc.strerror}") from None
    try:
        if libc.fallocate(fd, 0, 0, os.fstat(fd).st_size) != 0:
            why = os.strerror(ctypes.get_errno())
            raise fail(
                memory_file, f"cannot allocate the guest RAM QEMU must write-protect: {why}; nothing was stopped"
            )
    finally:
        os.close(fd)
