#!/usr/bin/env python3
"""Decoding a kdump-zlib dump's pages as ovm-offline does (copy_to over every run: to /dev/null
on one thread and on all cores, then into a file), against zlib alone decompressing the same
compressed pages in one tight loop on one core (C speed plus one call per page; nothing
written). Issue 12 asks for decoding on all cores at >= 0.8x zlib alone.

    python bench/bench_kdump.py [--kernel 6.1] [--workload memhog-0] [--repeat 3] [--tmpdir DIR]

All of the guest's pages are decoded, not one process's: QEMU stores a page uncompressed when
zlib does not shrink it, as it does memhog's, so the kernel's and the page cache's pages are
what there is to decompress. The recording comes from the corpus cache (recorded if missing).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus.recorder import record  # noqa: E402
from ovm_offline.sources import KdumpSource, kdump, open_source  # noqa: E402
from ovm_offline.sources.kdump_format import DUMP_DH_COMPRESSED_ZLIB, PAGE_SIZE  # noqa: E402
from ovm_offline.sources.ordered import cores  # noqa: E402


def compressed_pages(src: KdumpSource, stretches: list[tuple[int, int]]) -> list[bytes]:
    """The zlib-compressed bytes of every dumped page of `stretches` (read before timing)."""
    image = src.image
    pages = []
    for paddr, length in stretches:
        for pfn in range(paddr // PAGE_SIZE, (paddr + length) // PAGE_SIZE):
            if image.dumped.test(pfn):
                desc = image.descs(image.dumped.rank(pfn), 1)[0]
                if desc.flags & DUMP_DH_COMPRESSED_ZLIB:
                    pages.append(image.layout.pread(desc.offset, desc.size))
    return pages


def best(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--workload", default="memhog-0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args()
    rec = record(args.kernel, args.workload, log=lambda m: print(m, file=sys.stderr))
    threads = min(cores(), kdump.MAX_DECODE_THREADS)
    with open_source(str(rec.kdumps["kdump-zlib"])) as src, tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        assert isinstance(src, KdumpSource)
        stretches = [(run.start, run.length) for run in src.runs()]
        total = sum(n for _p, n in stretches)
        blobs = compressed_pages(src, stretches)

        def copy(path: str, workers: int):
            def run() -> None:
                kdump.cores = lambda: workers
                with open(path, "wb") as f:
                    for paddr, length in stretches:
                        src.copy_to(paddr, length, f)

            return run

        def zlib_alone() -> None:
            decompress = zlib.decompress
            for blob in blobs:
                decompress(blob)

        rows = [
            ("zlib", "zlib alone (one core, no writes)", zlib_alone),
            ("one", "copy_to /dev/null, one thread", copy(os.devnull, 1)),
            ("all", f"copy_to /dev/null, {threads} threads", copy(os.devnull, threads)),
            ("file", f"copy_to a file, {threads} threads", copy(str(Path(tmp) / "guest-ram"), threads)),
        ]
        # interleaved, so that load from elsewhere falls on every row alike
        times = {name: float("inf") for name, _label, _run in rows}
        for _ in range(args.repeat):
            for name, _label, run in rows:
                times[name] = min(times[name], best(1, run))
    mib = total / 2**20
    print(
        f"{args.workload} on {args.kernel}: {mib:.0f} MiB of guest RAM, {len(blobs)} zlib pages,"
        f" {cores()} cores, best of {args.repeat}"
    )
    print(f"{'decoder':<34} {'s':>6} {'MiB/s':>7} {'speed vs zlib alone':>20}")
    for name, label, _run in rows:
        print(f"{label:<34} {times[name]:>6.2f} {mib / times[name]:>7.0f} {times['zlib'] / times[name]:>19.2f}x")


if __name__ == "__main__":
    main()
