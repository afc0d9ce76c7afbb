"""Benchmark how long `dump --live` stops a running guest: one pause, `--precopy`, `--background`.

    python bench/bench_live.py [--kernel 6.1] [--sizes 0,64,1024]

For each size, a guest runs memhog of that many MiB (not stopped: as a user's VM runs) and is
dumped live three times, one after the other: the one-pause dump (stopped for the whole dump,
page copy included), the pre-copy dump (guest RAM streams while it runs; stopped only for QEMU's
last round, our check and our register read) and the background dump (stopped for our register
read while QEMU write-protects RAM, which then streams while it runs). The pause of each comes
from the tool's own report: the one-pause dump times its stop..cont, the others read QEMU's STOP
and RESUME events. Guest RAM is a file on /dev/shm (tmpfs), as a background snapshot needs.
memhog rewrites --permille of its pages each second (default 10: 1%), the rate the pre-copy
pause must hold at; --permille 0 leaves its memory still after it is filled.
A guest gets 1.25x the size plus 512 MiB of RAM (no criu runs in it: no golden images).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import initramfs, kernels, recorder  # noqa: E402
from corpus.workloads import get_workload  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _memhog(mib: int, permille: int):
    base = get_workload(f"memhog-{mib}") if mib in (0, 64, 1024) else get_workload("memhog-64")
    return dataclasses.replace(
        base,
        name=f"memhog-{mib}-live",
        args=(str(mib), "write", str(permille)) if permille else (str(mib),),
        ram_mib=512 + mib + mib // 4,  # no golden images: criu's in-guest copy needs no room
        moment="as-is",
        golden=False,
    )


def _ovm(*args: str) -> tuple[float, str]:
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "ovm_offline", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"ovm-offline {' '.join(args)} failed: {result.stderr[-800:]}")
    return time.monotonic() - start, result.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--sizes", default="0,64,1024")
    ap.add_argument("--permille", type=int, default=10, help="pages memhog rewrites each second (10: 1%%)")
    args = ap.parse_args()
    kernel = kernels.unpack(kernels.get_kernel(args.kernel))
    image = initramfs.build(kernel)
    print(
        f"{'memhog MiB':>10} {'one-pause stop ms':>17} {'pre-copy stop ms':>16} {'QEMU downtime ms':>16}"
        f" {'check ms':>8} {'rounds':>6} {'re-sent pages':>13} {'background stop ms':>18} {'bg downtime ms':>14}"
        f" {'one-pause s':>11} {'pre-copy s':>10} {'background s':>12}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="ovm-bench-live-", dir=REPO / "corpus" / "cache") as tmp,
        tempfile.TemporaryDirectory(prefix="ovm-bench-ram-", dir="/dev/shm") as ram_dir,
    ):
        for mib in (int(s) for s in args.sizes.split(",")):
            work = Path(tmp) / str(mib)
            row: dict[str, str] = {}

            def dump_live(guest, root, work=work, row=row):
                plain_s, said = _ovm(
                    "dump", "--live", "--qmp", str(guest.qmp_tool_path), "--mem", str(guest.memory_file),
                    "--pid", str(root), "-D", str(work / "one-pause"),
                )  # fmt: skip
                stop = re.search(r"guest was paused for ([\d.]+) s", said)
                pre_s, said = _ovm(
                    "dump", "--live", "--precopy", "--qmp", str(guest.qmp_tool_path), "--mem", str(guest.memory_file),
                    "--pid", str(root), "-D", str(work / "pre-copy"),
                )  # fmt: skip
                pre = re.search(
                    r"paused for (\d+) ms \(QEMU downtime (\d+) ms\) after (\d+) rounds .*?(\d+) of them re-sent"
                    r".*? by a check of (\d+) ms",
                    said,
                )
                bg_s, said_bg = _ovm(
                    "dump", "--live", "--background", "--qmp", str(guest.qmp_tool_path), "--mem",
                    str(guest.memory_file), "--pid", str(root), "-D", str(work / "background"),
                )  # fmt: skip
                bg = re.search(r"background snapshot: guest paused for (\d+) ms \(QEMU downtime (\d+) ms\)", said_bg)
                if not (stop and pre and bg):
                    raise SystemExit(f"no pause reported: {said[-500:]} {said_bg[-500:]}")
                row.update(
                    plain=f"{float(stop.group(1)) * 1000:.0f}",
                    pre=pre.group(1),
                    downtime=pre.group(2),
                    rounds=pre.group(3),
                    resent=pre.group(4),
                    check=pre.group(5),
                    bg=bg.group(1),
                    bg_downtime=bg.group(2),
                    plain_s=f"{plain_s:.2f}",
                    pre_s=f"{pre_s:.2f}",
                    bg_s=f"{bg_s:.2f}",
                )

            recorder._record_into(
                work / "rec",
                args.kernel,
                kernel,
                image,
                _memhog(mib, args.permille),
                lambda m: print(m, file=sys.stderr),
                0,
                dump_live,
                Path(ram_dir),
            )
            (Path(ram_dir) / "guest-ram").unlink()  # the next size's guest makes its own
            print(
                f"{mib:>10} {row['plain']:>17} {row['pre']:>16} {row['downtime']:>16} {row['check']:>8} {row['rounds']:>6}"
                f" {row['resent']:>13} {row['bg']:>18} {row['bg_downtime']:>14} {row['plain_s']:>11} {row['pre_s']:>10}"
                f" {row['bg_s']:>12}",
                flush=True,
            )


if __name__ == "__main__":
    main()
