#!/usr/bin/env python3
"""Physical read throughput of the memory sources against `cat FILE > /dev/null`.

    python bench/bench_sources.py DUMP [DUMP ...] [--repeat N] [--sink devnull|file|both]

Each DUMP is an ELF core, a kdump (flattened or plain) or a recorded live snapshot directory.
For each: copy_to of every run into the sink (/dev/null, a temp file, or both), timed (best of
--repeat, page cache warmed by a first `cat`), next to `cat FILE > SINK` of the same file measured
in the same run; prints the ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ovm_offline.errors import SourceError  # noqa: E402
from ovm_offline.sources import open_source  # noqa: E402
from ovm_offline.sources.live import RECORDED_MEMORY  # noqa: E402


def backing_file(path: Path) -> Path:
    return path / RECORDED_MEMORY if path.is_dir() else path


def time_cat(path: Path, sink: str, tmpdir: str) -> float:
    target = os.devnull if sink == "devnull" else os.path.join(tmpdir, "cat.out")
    started = time.perf_counter()
    subprocess.run(
        f"cat {subprocess.list2cmdline([str(path)])} > {subprocess.list2cmdline([target])}", shell=True, check=True
    )
    elapsed = time.perf_counter() - started
    if sink == "file":
        os.unlink(target)
    return elapsed


def time_copy(path: Path, sink: str, tmpdir: str) -> tuple[float, int, str]:
    with open_source(path) as src:
        total = sum(r.length for r in src.runs())
        target = os.devnull if sink == "devnull" else os.path.join(tmpdir, "copy.out")
        with open(target, "wb") as out:
            started = time.perf_counter()
            for run in src.runs():
                src.copy_to(run.start, run.length, out)
            out.flush()
            elapsed = time.perf_counter() - started
        if sink == "file":
            os.unlink(target)
        return elapsed, total, src.format_name


def measure(path: Path, sink: str, repeat: int, tmpdir: str) -> tuple[float, float, int, str]:
    file = backing_file(path)
    cat = min(time_cat(file, sink, tmpdir) for _ in range(repeat))
    copies = [time_copy(path, sink, tmpdir) for _ in range(repeat)]
    _, total, fmt = copies[0]
    return min(c[0] for c in copies), cat, total, fmt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sink", choices=["devnull", "file", "both"], default="both")
    parser.add_argument("--tmpdir", default=os.environ.get("TMPDIR", "/tmp"), help="where the file sink writes")
    args = parser.parse_args()
    sinks = ["devnull", "file"] if args.sink == "both" else [args.sink]

    header = f"{'source':34} {'format':25} {'sink':8} {'guest MiB':>9} {'file MiB':>8} {'copy_to s':>9} {'MiB/s':>7} {'cat s':>7} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmpdir:
        for path in args.dumps:
            file = backing_file(path)
            try:
                time_cat(file, "devnull", tmpdir)  # warm the page cache for every measurement
                for sink in sinks:
                    copy, cat, total, fmt = measure(path, sink, args.repeat, tmpdir)
                    print(
                        f"{str(path)[-34:]:34} {fmt:25} {sink:8} {total / 2**20:9.0f} {file.stat().st_size / 2**20:8.0f} "
                        f"{copy:9.3f} {total / 2**20 / copy:7.0f} {cat:7.3f} {copy / cat:6.1f}x"
                    )
            except SourceError as exc:
                print(f"{str(path):34} error: {exc}")
    print(
        f"\nbest of {args.repeat}, page cache warm. ratio = copy_to time / time of `cat FILE > SINK` for the same file"
        "\n(sink devnull: cat > /dev/null; sink file: cat > a file in --tmpdir). copy_to of an ELF or live"
        "\nsnapshot reads every byte into one buffer (preadv) and writes it, into /dev/null too."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
