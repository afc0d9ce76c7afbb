"""Benchmark how long the first `ps --live` of a guest stops it, against the looks after it.

    python bench/bench_first_look.py [--kernel 6.1] [--sizes 1024,5120] [--looks 4] [--rounds 3]

For each size (the guest's RAM in MiB), a guest boots with its RAM in a file on /dev/shm (a pc
machine; above 2.75 GiB a q35, whose RAM is split around the PCI hole and reaches above 4 GiB)
and runs memhog over 70% of it, rewriting 1% of its pages each second, as the user who
reported it ran a 3.5 GiB process in a 5 GiB guest. Then `ps --live --qmp` looks at it
`--looks` times a round, one after the other: the first with an empty user cache (a first look
ever: its ISF parsed, its kernel searched for), the others as later looks; `--rounds` rounds,
each with a cache of its own. Each look's stop is the tool's own report ("guest was paused for
S s", to the ms), its wall time the host's clock. The ratio is the median first look's stop
over the median later one's (the issue's gate: at most 1.1).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import initramfs, jobs, kernels  # noqa: E402
from corpus.guest import Guest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _look(qmp: Path, mem: Path, cache: Path) -> tuple[float, float]:
    """(stop seconds, wall seconds) of one `ps --live` with its user cache in `cache`. --mem is
    given, so that revisions before --mem was optional can be measured the same way."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "ps", "--live", "--qmp", str(qmp), "--mem", str(mem)],
        capture_output=True,
        text=True,
        env={**os.environ, "OVM_CACHE_DIR": str(cache)},
    )
    wall = time.monotonic() - started
    stop = re.search(r"guest was paused for ([\d.]+) s", result.stderr)
    if result.returncode != 0 or not stop or "memhog" not in result.stdout:
        raise SystemExit(f"ps --live failed: {result.stderr[-800:]}")
    return float(stop.group(1)), wall


def _one_size(kernel, image: Path, mib: int, looks: int, rounds: int, tmp: Path, ram_dir: Path) -> str:
    hog = mib * 7 // 10
    job = f"""/bin/memhog {hog} write 10 </dev/null >/run/ovm/memhog.log 2>&1 &
i=0; until grep -q '^READY' /run/ovm/memhog.log; do i=$((i + 1)); [ $i -gt 6000 ] && break; sleep 0.1; done
echo "UP $(head -c 200 /run/ovm/memhog.log | tr '\\n' ' ')" > /dev/ttyS1; sleep 3600
""".encode()
    work = tmp / str(mib)
    work.mkdir()
    jobs.write_input_disk(work / "in.img", {"job.sh": job})
    layout = "q35-high" if mib > 2816 else "file"
    with Guest(work, kernel.vmlinuz, image, mib, [work / "in.img"], memory_dir=ram_dir, memory_layout=layout) as guest:
        guest.expect("UP", 900, f"memhog {hog} MiB filling a {mib} MiB guest")
        firsts, laters = [], []
        for round_ in range(rounds):  # each round a first look ever: a user cache of its own
            cache = work / f"user-cache-{round_}"
            looked = [_look(guest.qmp_tool_path, guest.memory_file, cache) for _ in range(looks)]
            firsts.append(looked[0])
            laters += looked[1:]
    (ram_dir / "guest-ram").unlink(missing_ok=True)  # the next size's guest makes its own
    first, later = statistics.median(s for s, _ in firsts), statistics.median(s for s, _ in laters)
    return (
        f"{mib:>9} {layout:>8} {first * 1000:>14.1f} {later * 1000:>15.1f} {first / later:>6.2f}"
        f" {statistics.median(w for _, w in firsts):>12.2f} {statistics.median(w for _, w in laters):>13.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--sizes", default="1024,5120")
    ap.add_argument("--looks", type=int, default=4, help="looks per round: a first one and later ones")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each with a first look ever (a fresh user cache)")
    args = ap.parse_args()
    if args.looks < 2:
        raise SystemExit("--looks: at least 2 (a first look and a later one)")
    kernel = kernels.unpack(kernels.get_kernel(args.kernel))
    image = initramfs.build(kernel)
    print(
        f"{'guest MiB':>9} {'machine':>8} {'first stop ms':>14} {'later stop ms':>15} {'ratio':>6} {'first wall s':>12} {'later wall s':>13}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="ovm-bench-look-", dir=REPO / "corpus" / "cache") as tmp,
        tempfile.TemporaryDirectory(prefix="ovm-bench-ram-", dir="/dev/shm") as ram_dir,
    ):
        for mib in (int(s) for s in args.sizes.split(",")):
            print(_one_size(kernel, image, mib, args.looks, args.rounds, Path(tmp), Path(ram_dir)), flush=True)


if __name__ == "__main__":
    main()
