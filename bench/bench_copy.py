#!/usr/bin/env python3
"""How the bulk path should move a dump's bytes into pages-1.img: the ways Linux offers, timed
in turns on the same file, as ratios to ours (`copy_pieces`: preadv into one reused buffer).

    python bench/bench_copy.py [--mib 256] [--repeat 5] [--dir DIR] [--source-dir DIR]

The source is a file of --mib MiB of random bytes in --source-dir (default --dir; /dev/shm
is where a live guest's RAM is), read from two offsets: 0x150c, where QEMU's ELF dumps put
their first PT_LOAD (so no page of a guest is block-aligned in the file), and 0x2000
(aligned, as a live guest's memory file is). Each way writes a new file in --dir (default: a
directory beside this repository, on the disk the images would go to), page cache warm; best
of --repeat. `cp` copies a file of the same size as the baseline of the dump benches does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ovm_offline.sources._files import copy_pieces  # noqa: E402

CHUNK = 8 << 20  # per call of the kernel-side copies, as the bulk path used to ask


def kernel_copy(call: Callable[[int, int, int, int], int]) -> Callable[[int, int, int, int], None]:
    def run(src: int, out: int, offset: int, length: int) -> None:
        done = 0
        while done < length:
            moved = call(src, out, min(CHUNK, length - done), offset + done)
            if moved <= 0:
                raise SystemExit(f"copy stopped at {done} of {length} bytes")
            done += moved

    return run


WAYS: dict[str, Callable[[int, int, int, int], None]] = {
    "copy_pieces (ours)": lambda src, out, offset, length: copy_pieces(src, [(offset, length)], out, "source"),
    "copy_file_range": kernel_copy(lambda src, out, n, at: os.copy_file_range(src, out, n, at)),
    "sendfile": kernel_copy(lambda src, out, n, at: os.sendfile(out, src, at, n)),
}


def best_of(repeat: int, run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent.parent / "corpus" / "cache")
    parser.add_argument("--source-dir", type=Path)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    length = args.mib << 20
    with (
        tempfile.TemporaryDirectory(dir=args.dir, prefix="ovm-bench-copy-") as out_dir,
        tempfile.TemporaryDirectory(dir=args.source_dir or args.dir, prefix="ovm-bench-copy-") as src_dir,
    ):
        source = Path(src_dir) / "source"
        with open(source, "wb") as f:
            for _ in range(args.mib + 1):
                f.write(os.urandom(1 << 20))
        plain = Path(src_dir) / "plain"  # what cp copies: the same number of bytes, from offset 0
        with open(plain, "wb") as f:
            f.write(os.urandom(length))
        target = Path(out_dir) / "out"

        def into_new_file(way: Callable[[int, int, int, int], None], offset: int) -> Callable[[], None]:
            def run() -> None:
                src = os.open(source, os.O_RDONLY)
                out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    way(src, out, offset, length)
                finally:
                    os.close(out)
                    os.close(src)
                    target.unlink()

            return run

        def cp() -> None:
            subprocess.run(["cp", str(plain), str(target)], check=True)
            target.unlink()

        print(f"{args.mib} MiB from {source.parent} into {out_dir}, best of {args.repeat}, in turns")
        print(f"{'way':22} {'offset':>8} {'ms':>8} {'vs ours':>8}")
        for offset in (0x150C, 0x2000):
            times = {name: float("inf") for name in WAYS}
            for _ in range(args.repeat):  # in turns, so drifts of the machine hit every way alike
                for name, way in WAYS.items():
                    try:
                        times[name] = min(times[name], best_of(1, into_new_file(way, offset)))
                    except OSError as exc:  # copy_file_range between two file systems: EXDEV
                        times[name] = float("nan")
                        print(f"{name:22} {offset:#8x} {exc.strerror}")
            for name, seconds in times.items():
                if seconds == seconds:
                    ratio = seconds / times["copy_pieces (ours)"]
                    print(f"{name:22} {offset:#8x} {seconds * 1000:8.1f} {ratio:8.2f}")
        seconds = best_of(args.repeat, cp)
        print(f"{'cp (same size)':22} {'':>8} {seconds * 1000:8.1f} {seconds / times['copy_pieces (ours)']:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
