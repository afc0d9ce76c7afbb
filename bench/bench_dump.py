"""Benchmark `ovm-offline dump`, as ratios against baselines measured in the same run.

    python bench/bench_dump.py [--kernel 6.1] [--workloads memhog-0,memhog-64,memhog-1024,runc]
                               [--sources elf,kdump,live] [--repeat 3] [--no-vol]

For each memhog recording (recorded on first use; memhog-1024 needs a ~3 GiB guest, and
memhog-N of other sizes, e.g. memhog-4096, is recorded without golden images) and each source
of it (the ELF dump, the kdump-zlib dump, the recorded live snapshot):
  * whole dump (fresh process, warm symbol cache) vs `cp` of a file as large as pages-1.img,
    each the best of --repeat runs, taken in turn so that the host's writeback falls on both;
  * peak RSS of the dumping process (it must not grow with the process's size);
and for memhog-64 the whole dump vs Volatility's `linux.proc.Maps --dump` of the same process.
memhog-0 gives the fixed cost of dumping a process with almost no memory. The `runc` workload
is dumped as a user names a container, `--container runc:ID`: its line against memhog-0's is
what a container's namespaces, mounts and tmpfs archives, and finding it by its runtime's id,
add (`cp` copies as many bytes as all its pages-N.img).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus.recorder import record  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], **kw) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a child process."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-500:]}")
    return elapsed, usage.ru_maxrss


def source_of(rec, name: str) -> Path:
    if name == "elf":
        return rec.elf
    if name == "kdump":
        return rec.kdumps["kdump-zlib"]
    if name == "live":
        return rec.live_dir
    raise SystemExit(f"unknown source {name!r}: elf, kdump or live")


def dump_target(rec) -> list[str]:
    """How `dump` is told what to save: a runc container by its runtime id, else the root's PID."""
    ready = rec.manifest.get("ready", "")
    if "container_init=" in ready and " id=" in ready:
        return ["--container", "runc:" + ready.split(" id=", 1)[1].split()[0]]
    return ["--pid", str(rec.manifest["root_pid"])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--workloads", default="memhog-0,memhog-64,memhog-1024")
    ap.add_argument("--sources", default="elf")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-vol", action="store_true", help="skip the Volatility comparison")
    args = ap.parse_args()
    print(
        f"{'workload':<12} {'source':<6} {'pages MiB':>9} {'dump s':>7} {'cp s':>6} {'dump/cp':>8} {'peak RSS MiB':>12}"
    )
    with tempfile.TemporaryDirectory(prefix="ovm-bench-", dir=REPO / "corpus" / "cache") as tmp:
        tmp = Path(tmp)
        for name in args.workloads.split(","):
            rec = record(args.kernel, name, log=lambda m: print(m, file=sys.stderr))
            pid = rec.manifest["root_pid"]  # Volatility's
            out = tmp / f"{name}-images"
            for source in args.sources.split(","):
                cmd = [sys.executable, "-m", "ovm_offline", "dump", str(source_of(rec, source))]
                cmd += [*dump_target(rec), "-D", str(out), "-q"]
                shutil.rmtree(out, ignore_errors=True)
                timed(cmd)  # warm the symbol cache and the page cache of the dump
                copy_src = tmp / "cp-src"
                with open(copy_src, "wb") as copy:
                    for pages in sorted(out.glob("pages-*.img")):
                        # never the pages in this process: a child's peak RSS counts what the
                        # parent had mapped when it forked
                        with open(pages, "rb") as src:
                            shutil.copyfileobj(src, copy, 1 << 20)
                size = copy_src.stat().st_size
                dump_runs, cp_runs, rss = [], [], 0
                for _ in range(args.repeat):
                    shutil.rmtree(out)  # both write new files: no --force removal in the time
                    dump_s, peak = timed(cmd)
                    dump_runs.append(dump_s)
                    rss = max(rss, peak)
                    (tmp / "cp-dst").unlink(missing_ok=True)
                    cp_runs.append(timed(["cp", str(copy_src), str(tmp / "cp-dst")])[0])
                for p in (copy_src, tmp / "cp-dst"):
                    p.unlink(missing_ok=True)
                dump_s, cp_s = min(dump_runs), min(cp_runs)
                print(
                    f"{name:<12} {source:<6} {size / 2**20:>9.1f} {dump_s:>7.3f} {cp_s:>6.3f}"
                    f" {dump_s / max(cp_s, 1e-3):>8.1f} {rss / 1024:>12.1f}",
                    flush=True,
                )
            if name == "memhog-64" and not args.no_vol and shutil.which("vol"):
                vol_dir = tmp / "vol"
                vol_dir.mkdir()
                vol_cmd = [
                    "vol",
                    "-q",
                    "-s",
                    str(REPO / "symbols"),
                    "-o",
                    str(vol_dir),
                    "-f",
                    str(rec.elf),
                    "linux.proc.Maps",
                    "--pid",
                    str(pid),
                    "--dump",
                ]
                timed(vol_cmd)  # Volatility's own cache warm-up
                shutil.rmtree(vol_dir)
                vol_dir.mkdir()
                vol_s, vol_rss = timed(vol_cmd)
                print(
                    f"  vs vol linux.proc.Maps --dump: {vol_s:.2f} s (peak RSS {vol_rss / 1024:.0f} MiB): "
                    f"ovm-offline dump is {vol_s / dump_s:.1f}x faster"
                )
            shutil.rmtree(out)
    print(f"(resource limits: {resource.getrlimit(resource.RLIMIT_AS)})", file=sys.stderr)


if __name__ == "__main__":
    main()
