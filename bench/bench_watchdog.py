"""Benchmark what the watchdog (sources/watchdog.py) costs a live read's stop of the guest.

    python bench/bench_watchdog.py [--rounds 20]

A kernel-less QEMU runs its firmware (RAM in a memory-backend-file, two QMP sockets); a live
read opens it (query-status, stop, the mtree and registers it reads, the memory file mapped) and
closes it (cont) again and again, alternately with the watchdog and with it stubbed out, in the
same invocation. The stop is the source's own measure, stop..cont. The watchdog is started and
told before the stop and released after the cont, so the two should not differ.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ovm_offline.sources import live  # noqa: E402


class _NoWatchdog:
    def __init__(self, qmp_socket: str) -> None:
        pass

    def hold(self, **_: object) -> None:
        pass

    def release(self) -> None:
        pass


def _qemu(work: Path) -> tuple[subprocess.Popen, Path, Path]:
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise SystemExit("qemu-system-x86_64 is not installed")
    ram, sock = work / "ram", work / "qmp.sock"
    proc = subprocess.Popen(
        [qemu, "-machine", "pc,accel=tcg,memory-backend=ram0", "-object",
         f"memory-backend-file,id=ram0,size=64M,mem-path={ram},share=on", "-m", "64M", "-display", "none",
         "-qmp", f"unix:{sock},server=on,wait=off"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("QEMU did not start")
        time.sleep(0.05)
    time.sleep(1.0)  # the firmware runs, and QMP listens
    return proc, sock, ram


def _stop_ms(sock: Path, ram: Path) -> float:
    with live.LiveSource(sock, ram) as src:
        pass
    return src.paused_seconds * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ovm-bench-watchdog-") as tmp:
        proc, sock, ram = _qemu(Path(tmp))
        try:
            real = live.Watchdog
            with_ms, without_ms = [], []
            for _ in range(args.rounds):
                live.Watchdog = _NoWatchdog  # type: ignore[misc,assignment]
                without_ms.append(_stop_ms(sock, ram))
                live.Watchdog = real  # type: ignore[misc]
                with_ms.append(_stop_ms(sock, ram))
        finally:
            proc.kill()
            proc.wait()
    med_with, med_without = statistics.median(with_ms), statistics.median(without_ms)
    print(f"{'stop ms':>8} {'median':>8} {'min':>8} {'max':>8}   ({args.rounds} rounds each, alternating)")
    for name, values in (("without", without_ms), ("with", with_ms)):
        print(f"{name:>8} {statistics.median(values):8.2f} {min(values):8.2f} {max(values):8.2f}")
    print(f"the watchdog adds {med_with - med_without:+.2f} ms to the median stop ({med_with / med_without:.2f}x)")


if __name__ == "__main__":
    main()
