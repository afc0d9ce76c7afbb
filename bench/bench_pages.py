#!/usr/bin/env python3
"""The pages phase (which pages CRIU would save, then pages-1.img) against `cp` of a file of
the same size, measured in the same run, and the process's memory while writing.

    python bench/bench_pages.py [--kernel 6.1] [--workload memhog-64 ...] [--format elf ...]
                                [--repeat 3] [--tmpdir DIR] [--scale 1 16] [--recording DIR ...]

For each recording (taken from the corpus cache, recorded if missing): open the dump,
`extract_mm` of the workload's process (page selection: VMAs, page-table walk, zero
pages), then `write_pages` into a file in --tmpdir. The baseline is `cp` of that output
file to another file in the same directory, page cache warm, best of --repeat. RSS is
sampled from /proc/self/status every 2 ms while write_pages runs: the growth over the RSS
before it must not depend on the size of the process; --scale N writes the same pages
N times over (as a process N times larger would be written) to show that.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus import recorder  # noqa: E402
from ovm_offline.extract.mm import extract_mm  # noqa: E402
from ovm_offline.extract.pages import PagesStats, write_pages  # noqa: E402
from ovm_offline.kernel import open_kernel  # noqa: E402
from ovm_offline.kernel.task.tasks import find_task  # noqa: E402
from ovm_offline.sources import open_source  # noqa: E402
from ovm_offline.state import MmState, PageRun  # noqa: E402


def rss_kib() -> tuple[int, int]:
    """(VmRSS, RssAnon) of this process in KiB. RssAnon is the memory we allocate; VmRSS
    also counts the pages of mmapped dump files we touched (page cache, reclaimable)."""
    rss = anon = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("RssAnon:"):
                anon = int(line.split()[1])
    return rss, anon


class RssSampler:
    """Peak VmRSS and RssAnon of this process while the `with` block runs."""

    def __init__(self, interval: float = 0.002) -> None:
        self.interval = interval
        self.peak = (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        rss, anon = rss_kib()
        self.peak = (max(self.peak[0], rss), max(self.peak[1], anon))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def time_cp(src: Path, tmpdir: str) -> float:
    dst = os.path.join(tmpdir, "cp.out")
    started = time.perf_counter()
    subprocess.run(["cp", str(src), dst], check=True)
    elapsed = time.perf_counter() - started
    os.unlink(dst)
    return elapsed


def scaled(mm: MmState, times: int) -> MmState:
    """`mm` with its page runs repeated `times` times at higher addresses: a process that
    many times larger, read from the same guest pages (to measure growth with size)."""
    if times <= 1:
        return mm
    span = (mm.pages[-1].vaddr + mm.pages[-1].length) if mm.pages else 0
    pages = [PageRun(r.vaddr + k * span, r.paddr, r.length, r.lazy) for k in range(times) for r in mm.pages]
    return dataclasses.replace(mm, pages=pages)


def run_one(dump: Path, pid: int, tmpdir: str, scale: int = 1) -> dict:
    source = open_source(str(dump))
    try:
        prog = open_kernel(source)
        task = find_task(prog, pid)
        if task is None:
            raise SystemExit(f"pid {pid} is not in {dump}")
        t0 = time.perf_counter()
        mm = scaled(extract_mm(prog, task), scale)
        select = time.perf_counter() - t0
        out = Path(tmpdir) / "pages-1.img"
        stats = PagesStats()
        before = rss_kib()
        with RssSampler() as rss, out.open("wb") as f:
            t0 = time.perf_counter()
            entries = write_pages(source, mm, f, stats)
            f.flush()
            write = time.perf_counter() - t0
        return {
            "select": select,
            "write": write,
            "bytes": stats.bytes,
            "entries": len(entries),
            "copies": stats.copies,
            "runs": len(mm.pages),
            "rss_before": before,
            "rss_peak": rss.peak,
            "out": out,
        }
    finally:
        source.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", nargs="+", default=["6.1"])
    parser.add_argument("--workload", nargs="+", default=["memhog-64"])
    parser.add_argument("--format", nargs="+", default=["elf", "kdump-zlib"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tmpdir", default=os.environ.get("TMPDIR", "/tmp"))
    parser.add_argument(
        "--scale",
        type=int,
        nargs="+",
        default=[1],
        help="also write the pages N times over (a process N times larger, same guest pages)",
    )
    parser.add_argument(
        "--recording",
        nargs="+",
        type=Path,
        default=[],
        help="recording directories to use instead of --kernel/--workload",
    )
    args = parser.parse_args()

    header = (
        f"{'recording':22} {'format':10} {'MiB':>6} {'runs':>6} {'copies':>6} {'select s':>8} "
        f"{'write s':>8} {'cp s':>7} {'write/cp':>8} {'total/cp':>8} {'RSS':>6} {'anon':>5} {'+anon':>6}"
    )
    print(header)
    print("-" * len(header))
    if args.recording:
        recs = [recorder.Recording(p.resolve()) for p in args.recording]
    else:
        recs = [
            recorder.record(k, w, log=lambda m: print(m, file=sys.stderr)) for k in args.kernel for w in args.workload
        ]
    for rec in recs:
        pid = rec.manifest["root_pid"]
        name = f"{rec.manifest['kernel']}-{rec.manifest['workload']}"
        for fmt, scale in [(f, x) for f in args.format for x in args.scale]:
            dump = rec.elf if fmt == "elf" else rec.kdumps.get(fmt)
            if dump is None:
                continue
            label = name if scale == 1 else f"{name} x{scale}"
            with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmpdir:
                runs = [run_one(dump, pid, tmpdir, scale) for _ in range(args.repeat)]
                best = min(runs, key=lambda r: r["select"] + r["write"])
                cp = min(time_cp(best["out"], tmpdir) for _ in range(args.repeat))
                total = best["select"] + best["write"]
                growth = max(r["rss_peak"][1] - r["rss_before"][1] for r in runs)
                print(
                    f"{label:22} {fmt:10} {best['bytes'] / 2**20:6.0f} {best['runs']:6} "
                    f"{best['copies']:6} {best['select']:8.3f} {best['write']:8.3f} {cp:7.3f} "
                    f"{best['write'] / cp:7.1f}x {total / cp:7.1f}x {best['rss_peak'][0] / 1024:5.0f}M "
                    f"{best['rss_peak'][1] / 1024:4.0f}M {growth / 1024:5.1f}M"
                )
    print(
        f"\nbest of {args.repeat}, page cache warm. select = extract_mm (VMAs, page-table walk, zero pages);"
        "\nwrite = write_pages (bulk copy_to into pages-1.img); cp = `cp` of the written file in the same"
        "\ndirectory. RSS, anon = peak VmRSS and RssAnon while writing (VmRSS includes touched pages of"
        "\nmmapped dump files); +anon = growth of RssAnon over its value before writing."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
