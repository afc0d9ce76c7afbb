"""A snapshot of a running QEMU guest with a short pause: QEMU's own pre-copy live migration,
streamed to us instead of to another QEMU (migration.py reads it).

The guest runs while its RAM streams; QEMU tracks what the guest writes meanwhile and re-sends
it, round after round, and stops the guest only for the last pages (its downtime limit). We
read the vCPU registers while it is stopped there and resume it. The result is a recorded live
snapshot (guest-ram, mtree.txt, registers.txt) of that stop, which every other command reads as
it reads any recorded snapshot, so the images are those of a one-pause dump at that moment.

QEMU's dirty tracking is not exact under TCG (a guest's first migration here lost about 30
pages written by the kernel), so at the stop every page of the snapshot is compared with the
guest's memory file and the stale ones copied. The check hashes the guest's side (keyed XXH3)
against hashes of the snapshot that a thread kept while the stream wrote it, and re-reads the
snapshot only where the stream wrote since: it reads guest RAM about once, over mappings filled
before the migration began, is most of the stop and grows with the guest's RAM (about 50 ms per
GiB here, against 57-75 for memcmp of both copies). The cost besides: the whole guest RAM
streams (zero pages as one flag byte), not only the dumped process's pages, and the snapshot
takes disk for the guest's non-zero pages until the dump is written.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

from ..errors import OutputError
from ._files import fail
from .live import (
    RECORDED_MEMORY,
    RECORDED_MTREE,
    RECORDED_REGISTERS,
    guess_memdev,
    memdev_backed_by,
    parse_mtree_flat,
)
from .migration import MAX_BLOCK_BYTES, PAGE_SIZE, RamStream, WrittenChunks, read_ram_stream
from .qmp import QMP_TIMEOUT, QmpSession
from .ramcheck import GuestRamPair, xxh3_with_seed
from .vmstate import MAX_VMSTATE_BYTES
from .watchdog import MIGRATION_RUNNING, Watchdog, put_back

__all__ = ["PrecopyReport", "pause_words", "precopy_snapshot"]

#: migration capabilities that change the stream's pages into what migration.py does not read
UNREAD_CAPABILITIES = ("xbzrle", "compress", "multifd", "postcopy-ram", "x-ignore-shared", "rdma-pin-all")
#: QEMU 7.2 caps migration at 128 MiB/s by default: stream as fast as the guest RAM reads
STREAM_BANDWIDTH = 1 << 40
CHECK_THREADS = 4
POLL_SECONDS = 0.002  # how late we may see QEMU stop the guest: part of the pause
#: QEMU stops the guest when what is left should stream within its downtime limit (300 ms by
#: default): start low, and double it after each round past the first few while the guest
#: dirties memory faster than that (the first round, the whole RAM, says nothing of that)
DOWNTIME_START_MS = 10
DOWNTIME_MAX_MS = 2000
ROUNDS_AT_START_LIMIT = 4
FD_NAME = "ovm-offline-migration"


def pause_words(was_running: bool, paused_seconds: float | None) -> str:
    """How long a snapshot stopped the guest, in a report's words."""
    if not was_running:
        return "was paused already"
    if paused_seconds is None:  # QEMU's STOP or RESUME event did not come
        return "paused for a time QEMU did not report"
    return f"paused for {paused_seconds * 1000:.0f} ms"


@dataclasses.dataclass
class PrecopyReport:
    """How a pre-copy snapshot went: whether the guest ran before (if not, we leave it paused),
    how long it was stopped (QEMU's STOP to RESUME events; None if not measured), QEMU's own
    downtime figure, its dirty-sync rounds, what the stream carried, and the whole time."""

    was_running: bool
    paused_seconds: float | None
    downtime_ms: int
    rounds: int
    ram: RamStream
    seconds: float
    fixed_pages: int = 0  # pages the stream had stale, copied from the memory file at the stop
    check_seconds: float = 0.0  # the check at the stop that found them: most of the pause

    def line(self) -> str:
        return (
            f"pre-copy: guest {pause_words(self.was_running, self.paused_seconds)} (QEMU downtime"
            f" {self.downtime_ms} ms) after {self.rounds} rounds in {self.seconds:.2f} s; {self.ram.pages} pages"
            f" streamed, {self.ram.resent} of them re-sent; {self.fixed_pages} stale pages fixed at the stop by a"
            f" check of {self.check_seconds * 1000:.0f} ms"
        )


class _StreamReader(threading.Thread):
    """Reads the migration stream into guest-ram, then drains it (QEMU writes device state after
    RAM, with the guest stopped: it must never wait for us)."""

    def __init__(
        self, sock: socket.socket, block: str, out_fd: int, where: str, size: int, written: WrittenChunks | None
    ) -> None:
        super().__init__(name="ovm-offline migration reader", daemon=True)
        self.sock, self.block, self.out_fd, self.where = sock, block, out_fd, where
        self.written = written  # the chunks of guest-ram it writes, for the snapshot's hasher
        self.size = size  # the memory file's: the block must be exactly that long
        self.result: RamStream | None = None
        self.error: BaseException | None = None
        self.ram_read = threading.Event()  # the stream's RAM is all in guest-ram (or it failed)
        #: the stream after RAM (QEMU's device state) is kept here when not None, at most MAX_VMSTATE_BYTES
        self.device_state: bytearray | None = None

    def run(self) -> None:
        stream = self.sock.makefile("rb", buffering=1 << 20)
        try:
            self.result = read_ram_stream(
                cast(BinaryIO, stream),
                self.block,
                self.out_fd,
                self.where,
                self.size,
                block_bytes=self.size,
                written=self.written,
            )
        except BaseException as exc:  # reported by the caller, after the guest runs again
            self.error = exc
        finally:
            self.ram_read.set()
        kept = self.device_state
        if kept is not None and self.result is not None and self.result.ended_by is not None:
            kept.append(self.result.ended_by)
        try:
            while chunk := stream.read(1 << 20):
                if kept is not None and len(kept) <= MAX_VMSTATE_BYTES:
                    kept += chunk
        except OSError:
            pass
        finally:
            stream.close()


def _event_seconds(event: dict[str, Any]) -> float:
    stamp = event.get("timestamp", {})
    return float(stamp.get("seconds", 0)) + float(stamp.get("microseconds", 0)) / 1e6


def precopy_snapshot(
    qmp_socket: str | os.PathLike[str],
    directory: str | os.PathLike[str],
    memory_file: str | os.PathLike[str],
    *,
    timeout: float = QMP_TIMEOUT,
    max_seconds: float = 600.0,
    on_paused: Callable[[Callable[..., Any]], None] | None = None,
) -> PrecopyReport:
    """Write a recorded live snapshot of the QEMU guest behind `qmp_socket` into `directory`
    (which must exist and be empty) by pre-copy migration, checked at the stop against the
    guest's memory-backend-file `memory_file` (pages that differ are copied from it).
    `on_paused(execute)` runs while the guest is stopped at the snapshot's moment (tests take a
    dump-guest-memory there). The guest runs again when this returns or raises, unless it was
    paused before."""
    run = _Precopy(str(qmp_socket), Path(directory), timeout)
    try:
        block = run.prepare(Path(memory_file))
        run.stream(block, max_seconds)
        # The guest is stopped at the snapshot's moment ("postmigrate") until we resume it
        check_started = time.monotonic()
        fixed = run.check_at_stop()
        check_seconds = time.monotonic() - check_started
        registers = run.qmp.hmp("info registers -a")
        if on_paused is not None:
            on_paused(run.qmp.execute)
    except BaseException:
        run.abandon()
        raise
    paused = run.resume()
    ram = run.finished_stream()
    (run.directory / RECORDED_REGISTERS).write_text(registers)
    return PrecopyReport(
        was_running=run.was_running,
        paused_seconds=paused,
        downtime_ms=int(run.info.get("downtime", 0)),
        rounds=int(run.info.get("ram", {}).get("dirty-sync-count", 0)),
        ram=ram,
        seconds=time.monotonic() - run.started,
        fixed_pages=fixed,
        check_seconds=check_seconds,
    )


class _Precopy:
    """One pre-copy snapshot's QMP session, stream and what must be undone."""

    #: the stream is compared with the memory file at the stop (QEMU's dirty bitmap misses pages)
    CHECKED_AT_STOP = True

    def __init__(self, where: str, directory: Path, timeout: float) -> None:
        from qemu.qmp import EventListener

        self.where, self.directory, self.timeout = where, directory, timeout
        self.qmp = QmpSession(where, timeout)
        self.ours, self.theirs = socket.socketpair()
        # started before anything of the guest changes; told before each change what undoes it
        self.watchdog = Watchdog(where, self.ours)
        self.listener = EventListener(("STOP", "RESUME"))
        self.qmp._client.register_listener(self.listener)
        self.started = time.monotonic()
        self.was_running = False
        self.migrating = False
        self.saved_parameters: dict[str, Any] = {}
        self.reader: _StreamReader | None = None
        self.out_fd = -1
        self.pair: GuestRamPair | None = None
        self.info: dict[str, Any] = {}

    def prepare(self, memory_file: Path) -> str:
        """Refuse what the stream reader cannot follow and a memory file that is not this
        guest's RAM, map both for the check at the stop, then start reading: the RAM block's
        name."""
        qmp, where = self.qmp, self.where
        xxh3 = xxh3_with_seed(where) if self.CHECKED_AT_STOP else None  # refused before anything starts
        self.was_running = bool(qmp.execute("query-status").get("running"))
        active = qmp.execute("query-migrate").get("status")
        if active in MIGRATION_RUNNING:
            raise fail(where, f"a migration of this guest is in progress ({active}); try again when it ends")
        capabilities = {c["capability"]: c["state"] for c in qmp.execute("query-migrate-capabilities")}
        on = [c for c in UNREAD_CAPABILITIES if capabilities.get(c)]
        if on:
            raise fail(where, f"migration capabilities {', '.join(on)} are on; pre-copy reads plain RAM pages only")
        mtree = qmp.hmp("info mtree -f")
        try:
            block = guess_memdev(parse_mtree_flat(mtree), 1 << 62)
        except ValueError as exc:
            raise fail(where, f"cannot place guest RAM: {exc}") from None
        if block is None:
            raise fail(where, "`info mtree -f` shows no guest RAM")
        size = {m.get("id"): m.get("size") for m in qmp.execute("query-memdev")}.get(block)
        try:
            file_size = os.stat(memory_file).st_size
        except OSError as exc:
            raise fail(memory_file, f"cannot open: {exc.strerror}") from None
        if not file_size or file_size % PAGE_SIZE or file_size > MAX_BLOCK_BYTES or (size and size != file_size):
            raise fail(memory_file, f"is {file_size} bytes, not this guest's RAM ({block}: {size} bytes)")
        # a file of the right size may still be another guest's: the check at the stop would
        # then copy that guest's pages into this one's snapshot
        backing = memdev_backed_by(qmp, memory_file)
        if backing != block:
            raise fail(memory_file, f"backs {backing}, but guest RAM is {block}; pre-copy snapshots one RAM block")
        (self.directory / RECORDED_MTREE).write_text(mtree)
        self.out_fd = os.open(self.directory / RECORDED_MEMORY, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(self.out_fd, file_size)
        except OSError as exc:
            raise OutputError.writing(self.directory / RECORDED_MEMORY, exc) from None
        if xxh3 is not None:
            self.pair = GuestRamPair(memory_file, self.out_fd, file_size, where, xxh3)
        self.reader = _StreamReader(
            self.ours,
            block,
            self.out_fd,
            f"{where}: migration stream",
            file_size,
            self.pair.written if self.pair else None,
        )
        self.reader.start()
        return block

    def stream(self, block: str, max_seconds: float) -> None:
        """Migrate to our socket until QEMU has stopped the guest and sent the last pages."""
        qmp = self.qmp
        parameters = qmp.execute("query-migrate-parameters")
        self.saved_parameters = {k: parameters[k] for k in ("max-bandwidth", "downtime-limit") if k in parameters}
        self.guard()
        downtime = DOWNTIME_START_MS
        qmp.execute("migrate-set-parameters", {"max-bandwidth": STREAM_BANDWIDTH, "downtime-limit": downtime})
        self.start_migration()
        rounds_seen = 0

        def lower_downtime_each_round(info: dict[str, Any]) -> None:
            nonlocal rounds_seen, downtime
            rounds = int(info.get("ram", {}).get("dirty-sync-count", 0))
            if rounds > rounds_seen:
                rounds_seen = rounds
                if rounds > ROUNDS_AT_START_LIMIT and downtime < DOWNTIME_MAX_MS:
                    downtime = min(downtime * 2, DOWNTIME_MAX_MS)
                    qmp.execute("migrate-set-parameters", {"downtime-limit": downtime})

        self.follow_migration(max_seconds, lower_downtime_each_round)

    #: why a migration may outlast `max_seconds`, for its refusal
    TOO_SLOW = (
        "pre-copy did not converge in {:g} s (the guest writes memory faster than it streams);"
        " use a one-pause --live dump"
    )

    def start_migration(self) -> None:
        """Hand QEMU our end of the socket and migrate into it."""
        self.qmp._client.send_fd_scm(self.theirs.fileno())
        self.qmp.execute("getfd", {"fdname": FD_NAME})
        self.theirs.close()  # QEMU holds its own copy now
        self.migrating = True
        self.guard()
        self.qmp.execute("migrate", {"uri": f"fd:{FD_NAME}"})

    def follow_migration(self, max_seconds: float, each_poll: Callable[[dict[str, Any]], None]) -> None:
        """Poll QEMU until our migration completes (`each_poll` sees each status); raise if it
        fails, the stream reader fails, or it outlasts `max_seconds` from our start."""
        deadline = self.started + max_seconds
        while True:
            self.info = self.qmp.execute("query-migrate")
            state = self.info.get("status")
            if state == "completed":
                break
            if state in ("failed", "cancelled"):
                self.migrating = False
                why = self.info.get("error-desc", "QEMU gave no reason")
                raise fail(self.where, f"the migration stream {state}: {why}")
            self.raise_reader_error()
            if time.monotonic() > deadline:
                raise fail(self.where, self.TOO_SLOW.format(max_seconds))
            each_poll(self.info)
            time.sleep(POLL_SECONDS)
        self.migrating = False

    def check_at_stop(self) -> int:
        """Compare the streamed RAM with the memory file while the guest is stopped, and copy
        every page that differs: QEMU's dirty tracking is not exact under TCG (a guest's first
        migration here lost about 30 pages of kernel writes), so the stream alone is not the
        stop. The number of pages fixed."""
        assert self.reader is not None and self.pair is not None
        if not self.reader.ram_read.wait(self.timeout):
            raise fail(self.where, "the migration completed but its stream did not reach the end of RAM")
        self.raise_reader_error()
        return self.pair.fix(min(CHECK_THREADS, os.cpu_count() or 1))

    def raise_reader_error(self) -> None:
        error = self.reader.error if self.reader is not None else None
        if isinstance(error, OSError):
            raise OutputError.writing(self.directory / RECORDED_MEMORY, error)
        if error is not None:
            raise error

    def resume(self) -> float | None:
        """Let the guest run again (if it ran before, and QEMU has not started it itself, as a
        background snapshot does) and give back the parameters; how long it was stopped, by QEMU's
        STOP and RESUME events."""
        paused: float | None = None
        try:
            if self.was_running:
                # `cont` of a running guest would send a STOP and a RESUME of its own
                if not self.qmp.execute("query-status").get("running"):
                    self.qmp.execute("cont")
                self.qmp.execute("query-status")  # lets the RESUME event arrive
                events = {e["event"]: _event_seconds(dict(e)) for e in self.listener.clear()}
                if "STOP" in events and "RESUME" in events:
                    paused = events["RESUME"] - events["STOP"]
            for command, arguments in self.settings_to_give_back():
                self.qmp.execute(command, arguments)
        except BaseException:
            self.abandon()
            raise
        self.watchdog.release()
        return paused

    def finished_stream(self) -> RamStream:
        """The reader's result once QEMU has closed the stream."""
        assert self.reader is not None
        self.reader.join(self.timeout)
        hung = self.reader.is_alive()
        self.unmap()  # after the guest runs again: unmapping guest RAM twice takes a while
        _close_reader(self.reader, self.ours, self.out_fd)
        self.qmp.close()
        if hung:
            raise fail(self.where, "the migration stream did not end after the migration completed")
        self.raise_reader_error()
        ram = self.reader.result
        if ram is None or not ram.block_bytes or not self.whole(ram):
            raise fail(self.where, f"the migration stream ended before guest RAM ({self.reader.block}) was complete")
        return ram

    @staticmethod
    def whole(ram: RamStream) -> bool:
        """Did the stream carry all of guest RAM? Pre-copy's RAM section ends when it has."""
        return ram.complete

    def unmap(self) -> None:
        if self.pair is not None:
            self.pair.close()

    def settings_to_give_back(self) -> list[tuple[str, dict[str, Any]]]:
        """The QMP commands that undo what we changed of QEMU's migration settings."""
        return [("migrate-set-parameters", self.saved_parameters)] if self.saved_parameters else []

    def guard(self) -> None:
        """Tell the watchdog what undoes our changes so far (before the next one)."""
        self.watchdog.hold(
            resume=self.was_running,
            migrating=self.migrating,
            give_back=self.settings_to_give_back(),
            let_finish=self.LET_FINISH,
        )

    #: after an error, let our migration end on its own (its stream drained) rather than cancel it
    LET_FINISH = False

    def abandon(self) -> None:
        _abandon(
            self.qmp, self.migrating, self.was_running, self.settings_to_give_back(), self.watchdog, self.LET_FINISH
        )
        self.unmap()
        _close_reader(self.reader, self.ours, self.out_fd)
        try:
            self.theirs.close()
        except OSError:
            pass


def _abandon(
    qmp: QmpSession,
    migrating: bool,
    was_running: bool,
    give_back: list[tuple[str, dict[str, Any]]],
    watchdog: Watchdog,
    let_finish: bool,
) -> None:
    """After an error or Ctrl-C: put the guest back (`put_back`), then let the watchdog go."""
    put_back(qmp, migrating, was_running, give_back, let_finish=let_finish)
    qmp.close()
    watchdog.release()


def _close_reader(reader: _StreamReader | None, sock: socket.socket, out_fd: int) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    if reader is not None:
        reader.join(QMP_TIMEOUT)
    sock.close()
    if out_fd >= 0:
        try:
            os.close(out_fd)
        except OSError:
            pass
