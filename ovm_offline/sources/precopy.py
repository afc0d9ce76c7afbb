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
GiB here, against 57-75 for memcmp of both copies). The cost besides: the whole guest RAM streams (zero pages as one flag
byte), not only the dumped process's pages, and the snapshot takes disk for the guest's
non-zero pages until the dump is written.
"""

from __future__ import annotations

import array
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
    QMP_TIMEOUT,
    RECORDED_MEMORY,
    RECORDED_MTREE,
    RECORDED_REGISTERS,
    _Qmp,
    guess_memdev,
    memdev_backed_by,
    parse_mtree_flat,
)
from .migration import MAX_BLOCK_BYTES, RamStream, WrittenChunks, read_ram_stream

__all__ = ["PrecopyReport", "precopy_snapshot"]

#: migration capabilities that change the stream's pages into what migration.py does not read
UNREAD_CAPABILITIES = ("xbzrle", "compress", "multifd", "postcopy-ram", "x-ignore-shared", "rdma-pin-all")
#: QEMU 7.2 caps migration at 128 MiB/s by default: stream as fast as the guest RAM reads
STREAM_BANDWIDTH = 1 << 40
CHECK_CHUNK_SHIFT = 20  # 1 MiB: fewer calls (each a few µs of Python) against chunks the last round writes into
CHECK_CHUNK = 1 << CHECK_CHUNK_SHIFT
HASH_IDLE_SECONDS = 0.005
XXHASH_LIBRARY = "libxxhash.so.0"
PAGE_BYTES = 4096
CHECK_THREADS = 4
POLL_SECONDS = 0.002  # how late we may see QEMU stop the guest: part of the pause
#: QEMU stops the guest when what is left should stream within its downtime limit (300 ms by
#: default): start low, and double it after each round past the first few while the guest
#: dirties memory faster than that (the first round, the whole RAM, says nothing of that)
DOWNTIME_START_MS = 10
DOWNTIME_MAX_MS = 2000
ROUNDS_AT_START_LIMIT = 4
FD_NAME = "ovm-offline-migration"


@dataclasses.dataclass
class PrecopyReport:
    """How a pre-copy snapshot went: how long the guest was stopped (QEMU's STOP to RESUME
    events; None if it was paused before we began, then we leave it paused), QEMU's own
    downtime figure, its dirty-sync rounds, what the stream carried, and the whole time."""

    paused_seconds: float | None
    downtime_ms: int
    rounds: int
    ram: RamStream
    seconds: float
    fixed_pages: int = 0  # pages the stream had stale, copied from the memory file at the stop
    check_seconds: float = 0.0  # the check at the stop that found them: most of the pause

    def line(self) -> str:
        paused = (
            "was paused already" if self.paused_seconds is None else f"paused for {self.paused_seconds * 1000:.0f} ms"
        )
        return (
            f"pre-copy: guest {paused} (QEMU downtime {self.downtime_ms} ms) after {self.rounds} rounds in"
            f" {self.seconds:.2f} s; {self.ram.pages} pages streamed, {self.ram.resent} of them re-sent;"
            f" {self.fixed_pages} stale pages fixed at the stop by a check of {self.check_seconds * 1000:.0f} ms"
        )


class _StreamReader(threading.Thread):
    """Reads the migration stream into guest-ram, then drains it (QEMU writes device state after
    RAM, with the guest stopped: it must never wait for us)."""

    def __init__(
        self, sock: socket.socket, block: str, out_fd: int, where: str, size: int, written: WrittenChunks
    ) -> None:
        super().__init__(name="ovm-offline migration reader", daemon=True)
        self.sock, self.block, self.out_fd, self.where = sock, block, out_fd, where
        self.written = written  # the chunks of guest-ram it writes, for the snapshot's hasher
        self.size = size  # the memory file's: the block must be exactly that long
        self.result: RamStream | None = None
        self.error: BaseException | None = None
        self.ram_read = threading.Event()  # the stream's RAM is all in guest-ram (or it failed)

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
        try:
            while stream.read(1 << 20):
                pass
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

    def __init__(self, where: str, directory: Path, timeout: float) -> None:
        from qemu.qmp import EventListener

        self.where, self.directory, self.timeout = where, directory, timeout
        self.qmp = _Qmp(where, timeout)
        self.listener = EventListener(("STOP", "RESUME"))
        self.qmp._client.register_listener(self.listener)
        self.ours, self.theirs = socket.socketpair()
        self.started = time.monotonic()
        self.was_running = False
        self.migrating = False
        self.saved_parameters: dict[str, Any] = {}
        self.reader: _StreamReader | None = None
        self.out_fd = -1
        self.pair: _GuestRamPair | None = None
        self.info: dict[str, Any] = {}

    def prepare(self, memory_file: Path) -> str:
        """Refuse what the stream reader cannot follow and a memory file that is not this
        guest's RAM, map both for the check at the stop, then start reading: the RAM block's
        name."""
        qmp, where = self.qmp, self.where
        xxh3 = _xxh3_with_seed(where)
        self.was_running = bool(qmp.execute("query-status").get("running"))
        active = qmp.execute("query-migrate").get("status")
        if active in ("setup", "active", "pre-switchover", "device", "cancelling"):
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
        if not file_size or file_size % PAGE_BYTES or file_size > MAX_BLOCK_BYTES or (size and size != file_size):
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
        self.pair = _GuestRamPair(memory_file, self.out_fd, file_size, where, xxh3)
        self.reader = _StreamReader(
            self.ours, block, self.out_fd, f"{where}: migration stream", file_size, self.pair.written
        )
        self.reader.start()
        return block

    def stream(self, block: str, max_seconds: float) -> None:
        """Migrate to our socket until QEMU has stopped the guest and sent the last pages."""
        qmp = self.qmp
        parameters = qmp.execute("query-migrate-parameters")
        self.saved_parameters = {k: parameters[k] for k in ("max-bandwidth", "downtime-limit") if k in parameters}
        downtime = DOWNTIME_START_MS
        qmp.execute("migrate-set-parameters", {"max-bandwidth": STREAM_BANDWIDTH, "downtime-limit": downtime})
        qmp._client.send_fd_scm(self.theirs.fileno())
        qmp.execute("getfd", {"fdname": FD_NAME})
        self.theirs.close()  # QEMU holds its own copy now
        qmp.execute("migrate", {"uri": f"fd:{FD_NAME}"})
        self.migrating = True
        deadline = self.started + max_seconds
        rounds_seen = 0
        while True:
            self.info = qmp.execute("query-migrate")
            state = self.info.get("status")
            if state == "completed":
                break
            if state in ("failed", "cancelled"):
                self.migrating = False
                why = self.info.get("error-desc", "QEMU gave no reason")
                raise fail(self.where, f"the migration stream {state}: {why}")
            self.raise_reader_error()
            if time.monotonic() > deadline:
                raise fail(
                    self.where,
                    f"pre-copy did not converge in {max_seconds:g} s (the guest writes memory faster than it"
                    " streams); use a one-pause --live dump",
                )
            rounds = int(self.info.get("ram", {}).get("dirty-sync-count", 0))
            if rounds > rounds_seen:
                rounds_seen = rounds
                if rounds > ROUNDS_AT_START_LIMIT and downtime < DOWNTIME_MAX_MS:
                    downtime = min(downtime * 2, DOWNTIME_MAX_MS)
                    qmp.execute("migrate-set-parameters", {"downtime-limit": downtime})
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
        """Let the guest run again (if it ran before) and give back the parameters; how long it
        was stopped, by QEMU's STOP and RESUME events."""
        paused: float | None = None
        try:
            if self.was_running:
                self.qmp.execute("cont")
                self.qmp.execute("query-status")  # lets the RESUME event arrive
                events = {e["event"]: _event_seconds(dict(e)) for e in self.listener.clear()}
                if "STOP" in events and "RESUME" in events:
                    paused = events["RESUME"] - events["STOP"]
            if self.saved_parameters:
                self.qmp.execute("migrate-set-parameters", self.saved_parameters)
        except BaseException:
            self.abandon()
            raise
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
        if ram is None or not ram.complete or not ram.block_bytes:
            raise fail(self.where, f"the migration stream ended before guest RAM ({self.reader.block}) was complete")
        return ram

    def unmap(self) -> None:
        if self.pair is not None:
            self.pair.close()

    def abandon(self) -> None:
        _abandon(self.qmp, self.migrating, self.was_running, self.saved_parameters)
        self.unmap()
        _close_reader(self.reader, self.ours, self.out_fd)
        try:
            self.theirs.close()
        except OSError:
            pass


class _GuestRamPair:
    """The guest's memory file and the snapshot, mapped shared and read-only with their page
    tables filled while the guest still runs (page faults were 90% of the check before: 850 ms
    of a 512 MiB guest's stop), and a keyed XXH3 hash of each 256 KiB chunk of the snapshot,
    kept current by a thread while the stream writes it. At the stop the check hashes the
    guest's RAM, reading it once, and reads the snapshot only where the stream wrote after the
    chunk's hash (the last rounds' pages): about half the memory traffic of comparing the two
    whole, which is what bounds the check (docs/benchmarks.md)."""

    def __init__(self, memory_file: Path, snapshot_fd: int, size: int, where: str, xxh3: Any) -> None:
        import ctypes
        import mmap

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        self.memcmp = libc.memcmp
        self.memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        self.memcmp.restype = ctypes.c_int
        self.xxh3 = xxh3  # _xxh3_with_seed's
        # keyed per snapshot: a guest cannot aim a write at a collision it cannot compute
        self.seed = int.from_bytes(os.urandom(8), "little")
        self._libc, self.size, self.where, self.memory_file = libc, size, where, memory_file
        self.snapshot_fd = snapshot_fd
        self.live_base = self.snap_base = 0
        chunks = -(-size // CHECK_CHUNK)
        # the snapshot file is all zeros until the stream writes it: hash that once, not per chunk
        zeros = bytes(CHECK_CHUNK)
        self.snapshot_hashes = array.array("Q", [self.xxh3(zeros, CHECK_CHUNK, self.seed)]) * chunks
        tail = size - (chunks - 1) * CHECK_CHUNK
        self.snapshot_hashes[-1] = self.xxh3(zeros, tail, self.seed)
        self.written = WrittenChunks(bytearray(chunks), CHECK_CHUNK_SHIFT)
        self._stop_hashing = threading.Event()
        self._hasher: threading.Thread | None = None
        try:
            live_fd = os.open(memory_file, os.O_RDONLY)
        except OSError as exc:
            raise fail(memory_file, f"cannot open: {exc.strerror}") from None
        try:
            self.live_base = self._map(live_fd, mmap)
            self.snap_base = self._map(snapshot_fd, mmap)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(live_fd)
        self._hasher = threading.Thread(target=self._hash_snapshot, name="ovm-offline snapshot hasher", daemon=True)
        self._hasher.start()

    def _map(self, fd: int, mmap: Any) -> int:
        import ctypes

        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        address = self._libc.mmap(None, self.size, mmap.PROT_READ, flags, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            why = os.strerror(ctypes.get_errno())
            raise fail(self.where, f"cannot map {self.size >> 20} MiB to check the snapshot at the stop: {why}")
        return int(address)

    def _chunk(self, chunk: int) -> tuple[int, int]:
        start = chunk << CHECK_CHUNK_SHIFT
        return start, min(CHECK_CHUNK, self.size - start)

    def _hash_snapshot(self) -> None:
        """While the stream runs: hash each chunk it has written since the chunk's last hash.
        The flag is cleared before the chunk is read, and the reader sets it after it writes:
        a write the hash may have missed leaves the flag set."""
        flags, stop = self.written.flags, self._stop_hashing
        while not stop.is_set():
            chunk = flags.find(1)
            if chunk < 0:
                stop.wait(HASH_IDLE_SECONDS)
            while chunk >= 0 and not stop.is_set():
                flags[chunk] = 0
                start, n = self._chunk(chunk)
                self.snapshot_hashes[chunk] = self.xxh3(self.snap_base + start, n, self.seed)
                chunk = flags.find(1, chunk + 1)

    def stop_hashing(self) -> None:
        self._stop_hashing.set()
        if self._hasher is not None:
            self._hasher.join()

    def stale_pages(self, workers: int) -> list[int]:
        """Offsets of the pages where the snapshot differs from the memory file, found by
        `workers` threads (the hash and memcmp run without the GIL; the stopped guest leaves the
        cores free) once the stream has written its last page. A chunk whose hash is current
        is compared by hashing the guest's side; one written since, by memcmp of both."""
        self.stop_hashing()
        flags, hashes = self.written.flags, self.snapshot_hashes
        found: list[list[int]] = [[] for _ in range(workers)]

        def compare(part: int) -> None:
            for chunk in range(part, len(flags), workers):
                start, n = self._chunk(chunk)
                live = self.live_base + start
                if flags[chunk]:
                    same = not self.memcmp(live, self.snap_base + start, n)
                else:
                    same = self.xxh3(live, n, self.seed) == hashes[chunk]
                if not same:
                    found[part].extend(
                        page
                        for page in range(start, start + n, PAGE_BYTES)
                        if self.memcmp(self.live_base + page, self.snap_base + page, PAGE_BYTES)
                    )

        threads = [threading.Thread(target=compare, args=(part,), daemon=True) for part in range(1, workers)]
        for t in threads:
            t.start()
        compare(0)
        for t in threads:
            t.join()
        return sorted(page for part in found for page in part)

    def fix(self, workers: int) -> int:
        """Copy into the snapshot every page of the memory file that differs from it; how many."""
        import ctypes

        stale = self.stale_pages(workers)
        try:
            for page in stale:
                os.pwrite(self.snapshot_fd, ctypes.string_at(self.live_base + page, PAGE_BYTES), page)
        except OSError as exc:
            raise fail(self.where, f"cannot check the snapshot against {self.memory_file}: {exc.strerror}") from None
        return len(stale)

    def close(self) -> None:
        self.stop_hashing()  # it reads the snapshot's mapping
        for base in (self.live_base, self.snap_base):
            if base:
                self._libc.munmap(base, self.size)
        self.live_base = self.snap_base = 0


def _xxh3_with_seed(where: str) -> Any:
    """XXH3_64bits_withSeed(data, length, seed) from Debian's libxxhash (which apt itself
    needs), in the entry that picks the host's widest vector unit: AVX2 hashes guest RAM at
    about 1.4x its SSE2 default here, and faster than memcmp reads two copies of it."""
    import ctypes

    try:
        library = ctypes.CDLL(XXHASH_LIBRARY)
    except OSError:
        raise fail(where, f"pre-copy needs xxHash ({XXHASH_LIBRARY}: apt-get install libxxhash0)") from None
    function = getattr(library, "XXH3_64bits_withSeed_dispatch", None) or library.XXH3_64bits_withSeed
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64)
    function.restype = ctypes.c_uint64
    return function


def _abandon(qmp: _Qmp, migrating: bool, was_running: bool, parameters: dict[str, Any]) -> None:
    """After an error or Ctrl-C: cancel our migration, let a guest that was running run on,
    whatever stopped it (QEMU stops it for the last round), and give back the migration
    parameters we changed."""
    commands: list[tuple[str, dict[str, Any] | None]] = []
    if migrating:
        commands.append(("migrate_cancel", None))
    if was_running:
        commands.append(("cont", None))
    if parameters:
        commands.append(("migrate-set-parameters", parameters))
    for command, arguments in commands:
        try:
            qmp.execute(command, arguments)
        except Exception:
            pass  # cont of a guest still running fails harmlessly
    qmp.close()


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
