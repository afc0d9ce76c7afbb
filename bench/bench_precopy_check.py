"""Benchmark pre-copy's check at the stop against its baseline, memcmp of both copies.

    python bench/bench_precopy_check.py [--mib 1280] [--repeat 5] [--dir /dev/shm]

Two files of --mib MiB with the same contents stand for the guest's memory file and the
streamed snapshot. The check (`ramcheck.GuestRamPair.stale_pages`: the memory file hashed
against the snapshot's chunk hashes, which a thread computed first) and the baseline (memcmp
of the two whole, 1 MiB at a time, on as many threads) run in turn; best and median of
--repeat, and the check's time as a ratio of the baseline's. A third row is the floor: one
plain read of the memory file (memchr for a byte it lacks, split over as many threads).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ovm_offline.sources import precopy, ramcheck  # noqa: E402


def _on_threads(run: Callable[[int], None], workers: int) -> None:
    """run(0) .. run(workers - 1) at once, run(0) on this thread."""
    threads = [threading.Thread(target=run, args=(part,)) for part in range(1, workers)]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()


def _memcmp_both(pair: ramcheck.GuestRamPair, workers: int) -> None:
    chunks = range(0, pair.size, 1 << 20)

    def run(part: int) -> None:
        for start in chunks[part::workers]:
            pair.memcmp(pair.live_base + start, pair.snap_base + start, min(1 << 20, pair.size - start))

    _on_threads(run, workers)


def _read_once(pair: ramcheck.GuestRamPair, workers: int) -> None:
    memchr = ctypes.CDLL(None).memchr
    memchr.argtypes, memchr.restype = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t), ctypes.c_void_p
    part = pair.size // workers

    def run(i: int) -> None:
        if memchr(pair.live_base + i * part, 0, part):  # ctypes lets go of the GIL meanwhile
            raise SystemExit("the memory file has a zero byte: memchr did not read it all")

    _on_threads(run, workers)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1280, help="guest RAM (1280: a 1 GiB memhog's guest less 512)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm")
    args = ap.parse_args()
    size, workers = args.mib << 20, min(precopy.CHECK_THREADS, os.cpu_count() or 1)
    times: dict[str, list[float]] = {"memcmp of both": [], "check at the stop": [], "one read (floor)": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        live, snap = Path(tmp) / "memory-file", Path(tmp) / "guest-ram"
        block = bytes(b % 255 + 1 for b in os.urandom(1 << 20))  # no zero byte: see _read_once
        with open(live, "wb") as f:
            for _ in range(args.mib):
                f.write(block)
        snap_fd = os.open(snap, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(snap_fd, size)
        pair = ramcheck.GuestRamPair(live, snap_fd, size, "bench", ramcheck.xxh3_with_seed("bench"))
        try:
            for start in range(0, size, 1 << 20):  # as the stream writes it: flags after the writes
                os.pwrite(snap_fd, block, start)
                pair.written.flags[start >> pair.written.shift] = 1
            while any(pair.written.flags):
                time.sleep(0.01)
            time.sleep(0.1)  # the last chunk's hash
            pair.stop_hashing()
            for _ in range(args.repeat):
                t = time.perf_counter()
                _memcmp_both(pair, workers)
                times["memcmp of both"].append(time.perf_counter() - t)
                t = time.perf_counter()
                if pair.stale_pages(workers):
                    raise SystemExit("the check found pages that differ in equal files")
                times["check at the stop"].append(time.perf_counter() - t)
                t = time.perf_counter()
                _read_once(pair, workers)
                times["one read (floor)"].append(time.perf_counter() - t)
        finally:
            pair.close()
            os.close(snap_fd)
    base = min(times["memcmp of both"])
    print(f"{args.mib} MiB, {workers} threads, {args.repeat} runs each, in turn")
    print(f"{'':20} {'best ms':>8} {'median ms':>9} {'vs memcmp':>9}")
    for name, ts in times.items():
        ts.sort()
        print(f"{name:20} {ts[0] * 1000:8.1f} {ts[len(ts) // 2] * 1000:9.1f} {ts[0] / base:9.2f}")


if __name__ == "__main__":
    main()
