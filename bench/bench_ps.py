#!/usr/bin/env python3
"""Time listing processes: ovm-offline's kernel layer vs Volatility 3's linux.pslist.

    python bench/bench_ps.py corpus/cache/recordings/6.1-counter-*/dump.elf corpus/cache/recordings/6.12-counter-*/dump.elf

For each dump, each tool runs in a fresh interpreter (wall time includes start-up
and imports, as a user sees it):

* cold: an empty cache directory (ours: OVM_CACHE_DIR; vol: --cache-path), so ISF
  parsing is included;
* warm: the same cache directory again, best of --repeat runs.

Volatility's cold run rebuilds its identifier cache and takes a minute or more per
dump; --skip-vol-cold leaves it out.  Ratios are vol time / our time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OURS = """
import sys, time
t0 = time.perf_counter()
from ovm_offline.sources import open_source
from ovm_offline.inventory import open_kernel, list_processes
t1 = time.perf_counter()
src = open_source(sys.argv[1])
prog = open_kernel(src, sys.argv[2:])
t2 = time.perf_counter()
procs = list_processes(prog)
t3 = time.perf_counter()
print(len(procs), f"{t1 - t0:.4f}", f"{t2 - t1:.4f}", f"{t3 - t2:.4f}")
"""


def run_ours(dump: str, cache: Path, symbols: list[str]) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    env.update(OVM_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", OURS, dump, *symbols], env=env, cwd=REPO, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - t
    if out.returncode != 0:
        sys.exit(f"ovm-offline failed on {dump}: {out.stderr.strip().splitlines()[-1:]}")
    n, imp, kern, ps = out.stdout.split()
    ms = [f"{float(x) * 1000:.0f} ms" for x in (imp, kern, ps)]
    return elapsed, f"{n} procs; import {ms[0]}, open_kernel {ms[1]}, list {ms[2]}"


def run_vol(dump: str, cache: Path, symbols: list[str]) -> tuple[float | None, str]:
    vol = shutil.which("vol")
    cmd = [vol] if vol else [sys.executable, "-m", "volatility3.cli"]
    sym_args = ["-s", str(REPO / "symbols"), *[a for s in symbols for a in ("-s", s)]]
    t = time.perf_counter()
    out = subprocess.run(
        cmd + ["-q", "--offline", "--cache-path", str(cache), "-r", "json", "-f", dump, *sym_args, "linux.pslist"],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t
    if out.returncode != 0:
        return None, "failed: " + (out.stderr.strip().splitlines() or ["?"])[-1][:200]
    procs = out.stdout.count('"PID"')
    return elapsed, f"{procs} procs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dumps", nargs="+", help="ELF or kdump files of guests")
    ap.add_argument("--symbols", action="append", default=[], help="extra ISF directory")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs per tool (best is reported)")
    ap.add_argument("--skip-vol-cold", action="store_true", help="skip Volatility's (slow) cold run")
    args = ap.parse_args()

    for dump in args.dumps:
        print(f"== {dump}")
        with tempfile.TemporaryDirectory(prefix="bench-ps-") as tmp:
            ours_cache, vol_cache = Path(tmp) / "ovm", Path(tmp) / "vol"
            vol_cache.mkdir()  # vol expects its cache directory to exist
            ours_cold, info = run_ours(dump, ours_cache, args.symbols)
            print(f"ours cold: {ours_cold:7.3f} s  ({info})")
            ours_warm = min(run_ours(dump, ours_cache, args.symbols)[0] for _ in range(args.repeat))
            print(f"ours warm: {ours_warm:7.3f} s  ({run_ours(dump, ours_cache, args.symbols)[1]})")
            vol_cold = None
            if not args.skip_vol_cold:
                vol_cold, info = run_vol(dump, vol_cache, args.symbols)
                print(f"vol  cold: {vol_cold:7.3f} s  ({info})" if vol_cold else f"vol  cold: {info}")
            else:
                run_vol(dump, vol_cache, args.symbols)  # still warms vol's cache
            warm = [run_vol(dump, vol_cache, args.symbols) for _ in range(args.repeat)]
            times = [t for t, _ in warm if t is not None]
            if not times:
                print(f"vol  warm: {warm[0][1]}")  # e.g. vol has no layer for kdump files
                continue
            vol_warm = min(times)
            print(f"vol  warm: {vol_warm:7.3f} s")
            if vol_cold is not None:
                print(f"ratio cold (vol/ours): {vol_cold / ours_cold:6.1f}x")
            print(f"ratio warm (vol/ours): {vol_warm / ours_warm:6.1f}x")


if __name__ == "__main__":
    main()
