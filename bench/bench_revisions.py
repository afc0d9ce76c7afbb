#!/usr/bin/env python3
"""Compare two revisions of ovm-offline on the same recordings, in one run: the ratio of this
tree's time to a baseline revision's, for `ps`, `dump` and the pages phase.

    python bench/bench_revisions.py --baseline 6540aef [--kernel 6.1] [--repeat 7]
        [--workloads memhog-0,memhog-64,ipc] [--ps-all] [--no-dump]

The baseline is checked out into a temporary `git worktree`; both trees run the same commands
in fresh interpreters, interleaved (baseline, this tree, baseline, ...) so that load on the
machine hits both alike, and the best of --repeat runs of each is compared. The symbol cache is
warmed first, so this is the warm path a user sees after the first run. A ratio above 1.00
means this tree is slower.
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
sys.path.insert(0, str(REPO))
from corpus.recorder import record  # noqa: E402


def run_once(tree: Path, args: list[str]) -> float:
    """Wall seconds of `python -m ovm_offline ARGS` (what the `ovm-offline` script runs) with the code of `tree`."""
    # as an installed copy runs: with its modules' bytecode cached (this machine sets
    # PYTHONDONTWRITEBYTECODE, which makes every run compile ~200 modules, 0.1 s)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    # a symbol cache of its own: revisions of another cache format would prune each other's
    env["OVM_CACHE_DIR"] = str(tree / ".bench-cache") if tree != REPO else env.get("OVM_CACHE_DIR", "")
    if not env["OVM_CACHE_DIR"]:
        del env["OVM_CACHE_DIR"]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ovm_offline", *args], cwd=tree, env=env, capture_output=True, text=True
    )
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: ovm-offline {' '.join(args)} failed: {proc.stderr.strip()[-400:]}")
    return elapsed


def compare(name: str, trees: dict[str, Path], make_args, repeat: int) -> tuple[float, float]:
    """Best times of the baseline and this tree for one command, interleaved."""
    best = {label: float("inf") for label in trees}
    for label, tree in trees.items():
        run_once(tree, make_args(label))  # warm the page cache and the symbol cache
    for _ in range(repeat):
        for label, tree in trees.items():
            best[label] = min(best[label], run_once(tree, make_args(label)))
    base, ours = best["baseline"], best["this tree"]
    print(f"{name:<28} {base:>9.3f} {ours:>9.3f} {ours / base:>7.2f}", flush=True)
    return base, ours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision to compare against")
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--workloads", default="memhog-0,memhog-64,ipc")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--ps-all", action="store_true", help="time ps on every workload, not only the first")
    ap.add_argument("--no-dump", action="store_true", help="time only ps")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ovm-bench-rev-") as tmp_name:
        tmp = Path(tmp_name)
        base_tree = tmp / "baseline"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(base_tree), args.baseline], cwd=REPO, check=True
        )
        try:
            trees = {"baseline": base_tree, "this tree": REPO}
            print(f"baseline {args.baseline} vs this tree, best of {args.repeat}, seconds")
            print(f"{'command':<28} {'baseline':>9} {'this':>9} {'ratio':>7}")
            for workload in args.workloads.split(","):
                rec = record(args.kernel, workload, log=lambda m: print(m, file=sys.stderr))
                pid = str(rec.manifest["root_pid"])
                # ps: the fixed cost of opening a source (a kdump's is indexing its records)
                if workload == args.workloads.split(",")[0] or args.ps_all:
                    for source, label in ((rec.elf, "ELF"), (rec.root / "dump.kdump-zlib", "kdump")):
                        ps_args = ["ps", str(source)]
                        compare(f"ps {workload} ({label})", trees, lambda _label, a=ps_args: a, args.repeat)
                for source, label in (
                    () if args.no_dump else ((rec.elf, "ELF"), (rec.root / "dump.kdump-zlib", "kdump"))
                ):

                    def dump_args(tree_label: str, source: Path = source, pid: str = pid) -> list[str]:
                        out = tmp / f"out-{tree_label.replace(' ', '-')}"
                        shutil.rmtree(out, ignore_errors=True)
                        return ["dump", str(source), "--pid", pid, "-D", str(out), "-q"]

                    compare(f"dump {workload} ({label})", trees, dump_args, args.repeat)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=REPO, check=False)


if __name__ == "__main__":
    main()
