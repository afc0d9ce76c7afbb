"""Pre-copy's check at the stop: is the snapshot the migration stream wrote the guest's RAM
at the stop, page for page? QEMU's dirty tracking is not exact under TCG (a guest's first
migration here lost about 30 pages of kernel writes), so every page is checked and the stale
ones copied from the guest's memory file. precopy.py runs it."""

from __future__ import annotations

import array
import os
import threading
from pathlib import Path
from typing import Any

from ._files import fail
from .migration import PAGE_SIZE, WrittenChunks

__all__ = ["GuestRamPair", "xxh3_with_seed"]

CHECK_CHUNK_SHIFT = 20  # 1 MiB: fewer calls (each a few µs of Python) against chunks the last round writes into
CHECK_CHUNK = 1 << CHECK_CHUNK_SHIFT
HASH_IDLE_SECONDS = 0.005
XXHASH_LIBRARY = "libxxhash.so.0"


class GuestRamPair:
    """The guest's memory file and the snapshot, mapped shared and read-only with their page
    tables filled while the guest still runs (page faults were 90% of the check before: 850 ms
    of a 512 MiB guest's stop), and a keyed XXH3 hash of each 1 MiB chunk of the snapshot,
    kept current by a thread while the stream writes it. At the stop the check hashes the
    guest's RAM, reading it once, and reads the snapshot only where the stream wrote after the
    chunk's hash (the last rounds' pages): half the bytes memcmp of both copies reads, in 0.67x
    its time here (docs/benchmarks.md)."""

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
        self.xxh3 = xxh3  # xxh3_with_seed's
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
                        for page in range(start, start + n, PAGE_SIZE)
                        if self.memcmp(self.live_base + page, self.snap_base + page, PAGE_SIZE)
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
                os.pwrite(self.snapshot_fd, ctypes.string_at(self.live_base + page, PAGE_SIZE), page)
        except OSError as exc:
            raise fail(self.where, f"cannot check the snapshot against {self.memory_file}: {exc.strerror}") from None
        return len(stale)

    def close(self) -> None:
        self.stop_hashing()  # it reads the snapshot's mapping
        for base in (self.live_base, self.snap_base):
            if base:
                self._libc.munmap(base, self.size)
        self.live_base = self.snap_base = 0


def xxh3_with_seed(where: str) -> Any:
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
