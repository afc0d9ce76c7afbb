"""OVmigrate's race (issue 36): saving a process from outside the guest against CRIU inside it,
under OVmigrate's loads in the guest, side by side in one guest.

    python bench/bench_race.py [--kernel 6.1] [--sizes 0,256,1024,4096] [--loads none,cpu,pipe,disk,fs]
                               [--modes live,precopy,background[,live-service,...]] [--repeat N]

For each size and load a guest boots (RAM on /dev/shm, as `--background` needs; --smp vCPUs,
1 by default so that a 2-CPU host keeps a CPU beyond the guest's TCG vCPU threads, as a cloud
host keeps cores beyond a VM's: with none, the host-side save takes its CPU from the guest's
vCPUs, which a cloud host's does not) running memhog of
that many MiB (0: a small idle process) and the load (bench/race_load.c: a spinning thread per
vCPU, a pipe ping-pong, 64 KiB direct writes to a disk, or files created and unlinked on tmpfs),
each counting what it gets done. Then, one after the other, memhog is saved by:
- `ovm-offline dump --live` (one pause), `--live --precopy` and `--live --background`, each timed
  whole by the host's wall clock, start-up included, from the command line to complete images
  (RAM found through QMP, as a user runs it); a mode named with `-service` (`live-service`) is the
  same dump handed by the `ovm-offline` command to a resident `ovm-offline service` the run starts;
- the in-guest baseline, `criu dump --leave-running` of the same process a moment later (the
  options the corpus gives memhog), timed by the guest's clock.

Our images go to /dev/shm by default (--images-on tmpfs), as CRIU's go to the guest's tmpfs: both
sides then write into memory; --images-on disk puts ours on the disk (a 4 GiB pages.img then
waits for the host's writeback, with the guest stopped in the one-pause mode).

Reported per row: the time to complete images, the guest's stop (ovm-offline's own report of it;
for CRIU the time it kept the process frozen), QEMU's downtime where QEMU reports one, the load's
rate during the save as a share of its rate before (OVmigrate's second measure: what the save
costs the other work) and the work it lost, in seconds of its rate before (a short save that
stops the guest can show a low rate and lose less than a long one that slows it), and CRIU's
time over ours. Images are deleted after each save.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import initramfs, jobs, kernels  # noqa: E402
from corpus.guest import Guest  # noqa: E402
from corpus.recorder import BOOT_TIMEOUT  # noqa: E402
from corpus.workloads import get_workload  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOADS = ("none", "cpu", "pipe", "disk", "fs")
MODES = ("live", "precopy", "background")
#: a mode with this suffix runs the same dump through a resident `ovm-offline service`
THROUGH_SERVICE = "-service"
#: how long the load's rate is measured before the saves
BASELINE_SECONDS = 3.0
#: the `ovm-offline` command of this install, which hands a command to a service
OVM_SCRIPT = Path(sys.executable).with_name("ovm-offline")
#: ovm-offline runs as a user's would: from compiled bytecode (compiled at the start of the run)
USER_ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclasses.dataclass
class Save:
    seconds: float
    stop_ms: float | None
    downtime_ms: int | None = None
    load_share: float | None = None  # the load's rate during the save / before it
    load_lost: float | None = None  # seconds of the load's work at its rate before that the save cost it


def _build_load(directory: Path) -> Path:
    binary = directory / "race-load"
    subprocess.run(
        ["gcc", "-O2", "-static", "-pthread", "-o", str(binary), str(HERE / "race_load.c")],
        check=True,
    )
    return binary


def _job(load: str, mib: int) -> bytes:
    variables = {"LOAD": load, "MIB": mib, "CRIU_DUMP_OPTS": get_workload("memhog-64").criu_options}
    header = "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in variables.items())
    return (header + (HERE / "race-job.sh").read_text()).encode()


class Counter:
    """The load's counter, read over the control port, by the host's clock."""

    def __init__(self, guest: Guest, load: str) -> None:
        self.guest, self.active = guest, load != "none"

    def read(self) -> tuple[float, int]:
        if not self.active:
            return time.monotonic(), 0
        self.guest.send("COUNT")
        line = self.guest.expect("COUNT ", 60, "reading the load's counter")
        return time.monotonic(), int(line.split()[1])

    @staticmethod
    def rate(before: tuple[float, int], after: tuple[float, int]) -> float:
        return (after[1] - before[1]) / max(after[0] - before[0], 1e-9)


def _ovm(mode: str, guest: Guest, root: int, out: Path, service: Path | None) -> Save:
    base = mode.removesuffix(THROUGH_SERVICE)
    extra = {"live": [], "precopy": ["--precopy"], "background": ["--background"]}[base]
    env = dict(USER_ENVIRONMENT)
    command = [sys.executable, "-m", "ovm_offline"]
    if mode != base:
        command, env["OVM_OFFLINE_SERVICE"] = [str(OVM_SCRIPT)], str(service)
    argv = [*command, "dump", "--live", *extra, "--qmp", str(guest.qmp_tool_path)]
    argv += ["--pid", str(root), "-D", str(out)]
    start = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"ovm-offline dump --live {' '.join(extra)} failed: {result.stderr[-800:]}")
    said = result.stderr
    if base == "live":
        paused = re.search(r"guest was paused for ([\d.]+) s", said)
        return Save(seconds, float(paused.group(1)) * 1000 if paused else None)
    paused = re.search(r"paused for (\d+) ms \(QEMU downtime (\d+) ms\)", said)
    if paused is None:
        raise SystemExit(f"no pause reported: {said[-500:]}")
    return Save(seconds, float(paused.group(1)), int(paused.group(2)))


def _warm_up(guest: Guest, root: int, images_dir: Path) -> None:
    """One untimed save by each side first. Our first command builds the kernel's ISF cache,
    as only a user's first run with that kernel does; and on a host that is itself a VM (this
    one), memory not touched lately costs a fault to its own host: the first save in a guest,
    ours into /dev/shm and CRIU's into the guest's tmpfs alike, paid it on every page it wrote
    (a 1 GiB dump stopped the guest 2.9 s, the next 0.6 s, whichever mode came first)."""
    _ovm("live", guest, root, images_dir / "warm-up", None)
    shutil.rmtree(images_dir / "warm-up", ignore_errors=True)
    _criu(guest)


def _criu(guest: Guest) -> Save:
    guest.send("CRIU")
    while True:
        line = guest.expect("CRIU", 1800, "criu dump in the guest")
        if line.startswith("CRIU "):
            break
        print(f"  {line}", file=sys.stderr)
    fields = dict(word.split("=", 1) for word in line.split()[1:])
    if fields["rc"] != "0":
        raise SystemExit(f"criu dump in the guest failed: {line}")
    frozen = fields["frozen_us"]
    return Save(int(fields["ns"]) / 1e9, int(frozen) / 1000 if frozen.isdigit() else None)


def _race(
    kernel_name: str,
    load: str,
    mib: int,
    modes: list[str],
    scratch: Path,
    ram_dir: Path,
    loader: Path,
    smp: int,
    images_dir: Path,
    service: Path | None,
    repeat: int,
):
    kernel = kernels.unpack(kernels.get_kernel(kernel_name))
    image = initramfs.build(kernel)
    work = scratch / f"{load}-{mib}"
    work.mkdir()
    in_img, out_img, disk_img = work / "in.img", work / "out.img", work / "disk.img"
    jobs.write_input_disk(
        in_img,
        {"job.sh": _job(load, mib), "common.sh": (jobs.GUEST_DIR / "common.sh").read_bytes(), "race-load": loader},
    )
    jobs.blank_output_disk(out_img, 16)
    jobs.blank_output_disk(disk_img, 300)
    # memhog, criu's images of it on the guest's tmpfs, and room for the rest
    ram_mib = 640 + 2 * mib + mib // 4
    disks = [in_img, out_img, disk_img]
    with Guest(work, kernel.vmlinuz, image, ram_mib, disks, smp=smp, memory_dir=ram_dir) as guest:
        guest.wait_for_job(BOOT_TIMEOUT, f"booting {kernel_name} for the race")
        ready = guest.expect("RACE-READY", 1800, f"starting memhog {mib} and the {load} load")
        root = int(ready.split("root=", 1)[1].split()[0])
        _warm_up(guest, root, images_dir)
        counter = Counter(guest, load)
        before = counter.read()
        time.sleep(BASELINE_SECONDS)
        base_rate = Counter.rate(before, counter.read())
        runs: dict[str, list[Save]] = {}
        for _ in range(repeat):  # round after round, so that no mode always comes first
            for mode in [*modes, "criu"]:
                start = counter.read()
                save = _criu(guest) if mode == "criu" else _ovm(mode, guest, root, images_dir / mode, service)
                end = counter.read()
                if counter.active and base_rate > 0:
                    save.load_share = Counter.rate(start, end) / base_rate
                    save.load_lost = (end[0] - start[0]) - (end[1] - start[1]) / base_rate
                shutil.rmtree(images_dir / mode, ignore_errors=True)
                runs.setdefault(mode, []).append(save)
        # each mode's median run by time to images (its stop and load figures with it)
        saves = {mode: sorted(done, key=lambda save: save.seconds)[len(done) // 2] for mode, done in runs.items()}
        guest.send("QUIT")
        guest.wait_exit(120)
    shutil.rmtree(work, ignore_errors=True)
    return saves


@contextlib.contextmanager
def _service(scratch: Path, wanted: bool) -> Iterator[Path | None]:
    """A resident `ovm-offline service` for the `-service` modes, started once for the run."""
    if not wanted:
        yield None
        return
    path = scratch / "ovm.sock"
    proc = subprocess.Popen(
        [str(OVM_SCRIPT), "service", str(path)], stderr=subprocess.PIPE, text=True, env=USER_ENVIRONMENT
    )
    try:
        if "serving commands at" not in (proc.stderr.readline() if proc.stderr else ""):
            raise SystemExit("ovm-offline service did not start")
        yield path
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _row(load: str, mib: int, mode: str, save: Save, criu: Save) -> str:
    stop = f"{save.stop_ms:.0f}" if save.stop_ms is not None else "-"
    downtime = str(save.downtime_ms) if save.downtime_ms is not None else "-"
    share = f"{100 * save.load_share:.0f}%" if save.load_share is not None else "-"
    lost = f"{save.load_lost:.2f}" if save.load_lost is not None else "-"
    ratio = "" if mode == "criu" else f"{criu.seconds / save.seconds:.1f}x"
    return f"{load:>5} {mib:>5} {mode:>18} {save.seconds:>9.2f} {stop:>8} {downtime:>11} {share:>10} {lost:>11} {ratio:>12}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--sizes", default="0,256,1024,4096", help="memhog MiB, comma-separated")
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every mode and criu per guest; each row is its mode's median (this host's memory makes"
        " single runs vary)",
    )
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--smp",
        type=int,
        default=1,
        help="the guest's vCPUs (1: on a 2-CPU host, one host CPU is left beyond the guest's, as a cloud host has)",
    )
    ap.add_argument(
        "--images-on",
        choices=("tmpfs", "disk"),
        default="tmpfs",
        help="where ovm-offline writes its images: /dev/shm, as CRIU writes its own into the guest's tmpfs"
        " (default), or the disk under corpus/cache",
    )
    args = ap.parse_args()
    loads, modes = args.loads.split(","), args.modes.split(",")
    for name in loads:
        if name not in LOADS:
            raise SystemExit(f"unknown load {name} (known: {', '.join(LOADS)})")
    for name in modes:
        if name.removesuffix(THROUGH_SERVICE) not in MODES:
            raise SystemExit(f"unknown mode {name} (known: {', '.join(MODES)}, each also with {THROUGH_SERVICE})")
    print(
        f"{'load':>5} {'MiB':>5} {'mode':>18} {'images s':>9} {'stop ms':>8} {'downtime ms':>11}"
        f" {'load rate':>10} {'load lost s':>11} {'CRIU / ours':>12}",
        flush=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="ovm-bench-race-", dir=REPO / "corpus" / "cache") as scratch,
        tempfile.TemporaryDirectory(prefix="ovm-bench-race-ram-", dir="/dev/shm") as ram_dir,
        tempfile.TemporaryDirectory(
            prefix="ovm-bench-race-images-", dir="/dev/shm" if args.images_on == "tmpfs" else scratch
        ) as images_dir,
    ):
        loader = _build_load(Path(scratch))
        compileall.compile_dir(REPO / "ovm_offline", quiet=1)
        with _service(Path(scratch), any(m.endswith(THROUGH_SERVICE) for m in modes)) as service:
            for mib in (int(s) for s in args.sizes.split(",")):
                for load in loads:
                    saves = _race(
                        args.kernel,
                        load,
                        mib,
                        modes,
                        Path(scratch),
                        Path(ram_dir),
                        loader,
                        args.smp,
                        Path(images_dir),
                        service,
                        args.repeat,
                    )
                    for mode, save in saves.items():
                        print(_row(load, mib, mode, save, saves["criu"]), flush=True)
                    (Path(ram_dir) / "guest-ram").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
