#!/usr/bin/env python3
"""What `ps --check` costs against plain `ps` (issue 33's gate: at most 2x on the corpus's
largest guest), on recorded dumps.

    python bench/bench_ps_check.py [--repeat 9] [DUMP ...]

Without DUMPs: every recording in corpus/cache/recordings, and the gate is judged on the one
with the most tasks. Each command runs as a user runs it (`python -m ovm_offline ps DUMP` in a
fresh interpreter, the symbol cache warm), the two interleaved so that load on the machine hits
both alike; the best of --repeat runs of each is compared. Also the listing alone, in one
interpreter (the kernel already open): `read_process_list` against `read_checked_process_list`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ovm_offline import inventory, sources  # noqa: E402


def wall(args: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    env["PYTHONPATH"] = str(REPO)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ovm_offline", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ovm-offline {' '.join(args)} failed: {done.stderr.strip()[-300:]}")
    return time.perf_counter() - started


def in_process(dump: Path, repeat: int) -> tuple[float, float, int]:
    with sources.open_source(dump) as source:
        prog = inventory.open_kernel(source)
        plain, checked = [], []
        for _ in range(repeat):
            t = time.perf_counter()
            inventory.read_process_list(prog)
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            tasks = len(inventory.read_checked_process_list(prog).views.tasks)
            checked.append(time.perf_counter() - t)
    return min(plain), min(checked), tasks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dumps", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    dumps = args.dumps or sorted(REPO.glob("corpus/cache/recordings/*/dump.elf"))
    if not dumps:
        sys.exit("no recordings: record one with `python -m corpus record --kernel 6.1 --workload counter`")
    results = []
    for dump in dumps:
        wall(["ps", str(dump)])  # the symbol cache warm
        plain_runs, check_runs = [], []
        for _ in range(args.repeat):
            plain_runs.append(wall(["ps", str(dump)]))
            check_runs.append(wall(["ps", "--check", str(dump)]))
        listing, checked_listing, tasks = in_process(dump, args.repeat)
        plain, check = min(plain_runs), min(check_runs)
        results.append((tasks, dump))
        print(
            f"{dump.parent.name}: {tasks} tasks; ps {plain:.3f} s, ps --check {check:.3f} s: {check / plain:.2f}x;"
            f" listing alone {listing * 1000:.1f} ms vs {checked_listing * 1000:.1f} ms: {checked_listing / listing:.2f}x"
        )
    largest = max(results)[1]
    print(f"largest guest: {largest.parent.name}")


if __name__ == "__main__":
    main()
