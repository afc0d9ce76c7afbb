#!/usr/bin/env python3
"""What a kernel costs: `ps` and `dump` of the same workload recorded on each pinned kernel, as
the ratio of its time to 6.1's, measured in one run.

    python bench/bench_kernels.py [--baseline 6.1] [--repeat 7] [--workloads counter,pipetree,ipc,runc,memhog-64]

Every command runs in a fresh interpreter, the kernels interleaved (6.1, 5.10, 6.12, 6.1, ...)
so that load on the machine hits them alike, and the best of --repeat runs is compared. The
symbol cache and the page cache are warmed first: the warm path a user sees after the first
run. A ratio above 1.00 means that kernel's guest costs more. Workloads are the ones every
pinned kernel records in CI (corpus/matrix.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from corpus import kernels, matrix  # noqa: E402
from corpus.recorder import record  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from bench_revisions import run_once  # noqa: E402  (one way to time a command, with this tree's code)


def best_times(commands: dict[str, list[str]], out: Path, repeat: int) -> dict[str, float]:
    """Best time of each kernel's command, the kernels interleaved."""
    best = {k: float("inf") for k in commands}
    for rnd in range(repeat + 1):  # round 0 warms the caches and is not counted
        for kernel, args in commands.items():
            shutil.rmtree(out, ignore_errors=True)
            seconds = run_once(REPO, args)
            if rnd:
                best[kernel] = min(best[kernel], seconds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="6.1")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--workloads", default="counter,pipetree,ipc,runc,memhog-64")
    args = parser.parse_args()
    names = [k for k in kernels.KERNELS if k != args.baseline]
    print(f"{'command':<22} {args.baseline:>8}" + "".join(f" {k:>8} {'ratio':>6}" for k in names))
    with tempfile.TemporaryDirectory(prefix="bench-kernels-") as tmp:
        out = Path(tmp) / "images"
        for workload in args.workloads.split(","):
            recs = {}
            for kernel in [args.baseline, *names]:
                if not matrix.covers(kernel, workload):
                    raise SystemExit(f"{workload} is not recorded on {kernel} in this run's matrix")
                recs[kernel] = record(kernel, workload, log=lambda m: print(m, file=sys.stderr))
            for name, make in (
                ("ps", lambda r: ["ps", str(r.elf)]),
                ("dump", lambda r: ["dump", str(r.elf), "--pid", str(r.manifest["root_pid"]), "-D", str(out), "-q"]),
            ):
                best = best_times({k: make(r) for k, r in recs.items()}, out, args.repeat)
                base = best[args.baseline]
                cells = "".join(f" {best[k]:>8.3f} {best[k] / base:>6.2f}" for k in names)
                print(f"{name + ' ' + workload:<22} {base:>8.3f}{cells}", flush=True)


if __name__ == "__main__":
    main()
