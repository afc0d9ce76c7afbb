"""Records one workload on one kernel: dumps of the paused guest (ELF, every kdump format QEMU
offers, a copy of live RAM with what a live reader needs), criu's golden images of the same
stopped tree, and a manifest of in-guest facts."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from . import cache, facts, initramfs, jobs, kernels
from .errors import CorpusError, GuestLost
from .guest import Guest, die_with_parent
from .workloads import Workload, get_workload

HIGH_PID = 10000
BOOT_TIMEOUT = 180
DONE_TIMEOUT = 600
# Bump when the recorder's own code changes what a recording holds (QEMU options, dump
# formats, layout); the job scripts, the facts parser and the initramfs are keyed by content.
RECORDING_FORMAT = 2
RECORDER_FILES = [Path(facts.__file__)]


@dataclasses.dataclass(frozen=True)
class Recording:
    """A finished recording in the cache."""

    root: Path

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())

    @property
    def elf(self) -> Path:
        return self.root / "dump.elf"

    @property
    def kdumps(self) -> dict[str, Path]:
        return {fmt: self.root / f"dump.{fmt}" for fmt in self.manifest["dumps"] if fmt.startswith("kdump")}

    @property
    def live_dir(self) -> Path:
        """guest-ram (a copy of the memory-backend-file), mtree.txt, registers.txt."""
        return self.root / "live"

    @property
    def golden(self) -> Path:
        return self.root / "golden"

    @property
    def files_tar(self) -> Path:
        return self.root / "files.tar"


def on_vcpus(snapshot: Path) -> str:
    """Which tasks were current on which vCPU when the guest was paused, as ovm-offline reads
    the snapshot (the guest cannot say: its own tools ran before the pause)."""
    from ovm_offline import inventory, sources
    from ovm_offline.errors import OvmError

    try:
        with sources.open_source(snapshot) as source:
            procs = inventory.list_processes(inventory.open_kernel(source))
            count = len(source.vcpus())
    except OvmError as e:
        return f"tasks on the vCPUs unknown: {e}"
    running = {cpu: f"{tid} ({p.comm})" for p in procs for tid, cpu in p.on_cpu}
    return ", ".join(f"vCPU {cpu}: {running.get(cpu, 'idle')}" for cpu in range(count))


def recording_key(kernel: kernels.UnpackedKernel, workload: Workload, take: int = 0) -> str:
    # only what shapes a recording (the workload's check function does not)
    shape = (
        (
            workload.name,
            workload.program,
            workload.args,
            workload.ram_mib,
            workload.root_key,
            workload.settle_seconds,
        )
        + ((workload.cpu,) if workload.cpu else ())
        + ((workload.moment, take) if workload.moment != "stopped" else ())
        + ((workload.criu_options,) if workload.criu_options else ())
        + (() if workload.golden else ("no golden",))
        + ((workload.golden_tool,) if workload.golden_tool != "criu" else ())
    )
    return cache.digest(
        str(RECORDING_FORMAT),
        initramfs.build_key(kernel),
        repr(shape),
        cache.source_digest(*RECORDER_FILES, jobs.GUEST_DIR / "record-job.sh", jobs.GUEST_DIR / "common.sh"),
    )


def recording_path(kernel_name: str, kernel: kernels.UnpackedKernel, workload: Workload, take: int) -> Path:
    name = f"{kernel_name}-{workload.name}" + (f"-take{take}" if take else "")
    return cache.entry("recordings", name, recording_key(kernel, workload, take))


def record(kernel_name: str, workload_name: str, force: bool = False, log=print, take: int = 0) -> Recording:
    """The recording of a workload on a kernel, made now unless the cache has it. Takes of an
    as-is workload are separate recordings, each paused at its own moment."""
    workload = get_workload(workload_name)
    if take and workload.moment != "as-is":
        raise CorpusError(f"{workload.name} is recorded stopped: it has only one take")
    kernel = kernels.unpack(kernels.get_kernel(kernel_name))
    image = initramfs.build(kernel)
    path = recording_path(kernel_name, kernel, workload, take)
    with cache.locked(path):
        if cache.is_complete(path) and not force:
            return Recording(path)
        _check_disk_space(path.parent, workload)
        try:
            rec = _record_into(path, kernel_name, kernel, image, workload, log, take)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            shutil.rmtree(path, ignore_errors=True)
            raise CorpusError(f"the disk filled while recording {workload.name} on {kernel_name} in {path}") from None
        except GuestLost as first:
            # the guest itself died or hung before its job (never a failure of the workload or
            # of criu): once more, keeping the first attempt's serial log beside the recording
            log(
                f"guest lost while recording {workload.name} on {kernel_name} ({str(first).splitlines()[0]}); trying once more"
            )
            rec = _record_into(path, kernel_name, kernel, image, workload, log, take)
            (path / "first-attempt.log").write_text(str(first))
        cache.prune_siblings(path)
        return rec


def record_many(wanted: list[tuple[str, str, int]], jobs: int, force: bool = False, log=print) -> Iterator[Path]:
    """Record each (kernel, workload, take), `jobs` guests at a time, yielding their paths in
    the order asked. The kernels and initramfs are made first, once, so that workers only
    record."""
    check_disk_for(wanted, jobs, force)
    if jobs == 1 or len(wanted) < 2:
        for kernel_name, workload_name, take in wanted:
            yield record(kernel_name, workload_name, force=force, log=log, take=take).root
        return
    with concurrent.futures.ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_end_with_recorder, initargs=(os.getpid(),)
    ) as pool:
        futures = [pool.submit(_record_root, k, w, take, force) for k, w, take in wanted]
        try:
            for future in futures:
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _end_with_recorder(recorder_pid: int) -> None:
    """A worker's start: a recorder ended by a signal runs no clean-up, and its workers would go
    on recording, each with its guest; made to get SIGTERM when it ends, a worker ends too, and
    its QEMU with it (which dies with the worker)."""
    die_with_parent(signal.SIGTERM)
    if os.getppid() != recorder_pid:  # the recorder ended before the worker asked
        os.kill(os.getpid(), signal.SIGTERM)


def _record_root(kernel_name: str, workload_name: str, take: int, force: bool) -> Path:
    # a worker's log lines go straight to stderr: a recording's progress shows as it happens
    return record(
        kernel_name, workload_name, force=force, log=lambda m: print(m, file=sys.stderr, flush=True), take=take
    ).root


def disk_needed_mib(workload: Workload) -> int:
    """Disk a recording holds at its peak: the guest's RAM file, the ELF dump and the live copy
    before their zero pages become holes, the output disk, the kdump and the golden images."""
    return 3 * workload.ram_mib + (workload.ram_mib + 256) + 256


def disk_kept_mib(workload: Workload, kernel_name: str) -> int:
    """Disk a finished recording keeps once zero pages are holes. Measured on the standard
    corpus (f875cd7): 285-320 MiB for a 512 MiB guest (250 on 5.10), 420-440 MiB when runc and its container
    are in it too, and the pages a memory workload fills appear in the ELF, the live copy and
    (compressed a little) the kdump."""
    runc = 130 if workload.program == "runc-box" else 0
    return kernels.get_kernel(kernel_name).recording_mib + runc + (workload.ram_mib - 512) * 14 // 10


def check_disk_for(wanted: list[tuple[str, str, int]], jobs: int, force: bool) -> None:
    """Refuse before recording anything when the recordings missing from the cache would not
    fit: a CI run that fills the disk an hour in has wasted the hour. Older recordings of the
    same names are pruned as their successors finish, so their space counts as free."""
    needed = reclaimable = 0
    peaks = []
    for kernel_name in dict.fromkeys(k for k, _, _ in wanted):
        initramfs.build(kernels.unpack(kernels.get_kernel(kernel_name)))
    for kernel_name, workload_name, take in wanted:
        workload = get_workload(workload_name)
        path = recording_path(kernel_name, kernels.unpack(kernels.get_kernel(kernel_name)), workload, take)
        if cache.is_complete(path) and not force:
            continue
        needed += disk_kept_mib(workload, kernel_name)
        peaks.append(disk_needed_mib(workload) - disk_kept_mib(workload, kernel_name))
        reclaimable += sum(_disk_used_mib(old) for old in cache.siblings(path))
    if not peaks:
        return
    needed += sum(sorted(peaks)[-jobs:])
    directory = cache.cache_root() / "recordings"
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free // 2**20 + reclaimable
    if free < needed:
        raise CorpusError(
            f"{free // 1024} GiB free under {directory}; the {len(peaks)} recordings missing from the cache "
            f"need about {needed // 1024 + 1} GiB (set OVM_CORPUS_CACHE to a roomier place)"
        )


def _disk_used_mib(directory: Path) -> int:
    # the blocks allocated, not the sizes: the dumps are sparse
    return sum(f.stat().st_blocks * 512 for f in directory.rglob("*") if f.is_file()) // 2**20


def _check_disk_space(directory: Path, workload: Workload) -> None:
    free_mib = shutil.disk_usage(directory).free // 2**20
    if free_mib < disk_needed_mib(workload):
        raise CorpusError(
            f"{free_mib} MiB free under {directory}; recording {workload.name} needs about "
            f"{disk_needed_mib(workload)} MiB while it runs"
        )


def _dig_holes(*files: Path) -> None:
    for file in files:
        subprocess.run(["fallocate", "--dig-holes", str(file)], check=True)


def record_with_live_dump(
    kernel_name: str,
    workload_name: str,
    path: Path,
    dump_live,
    log=print,
    memory_dir: Path | None = None,
    memory_layout: str = "file",
) -> Recording:
    """Record an as-is workload into `path` (outside the cache), calling ``dump_live(guest,
    root_pid)`` while the workload runs, before the recorder's own pause: a tool reading the
    running guest (``ovm-offline dump --live``) sees it as a user's VM is. `memory_dir`: where
    the guest's RAM file lives, if not in `path`; `memory_layout`: how QEMU is given the guest's
    RAM (guest.MEMORY_LAYOUTS; a live/ snapshot is recorded only of a layout with one file)."""
    workload = get_workload(workload_name)
    if workload.moment != "as-is":
        raise CorpusError(f"{workload.name} is recorded stopped: nothing runs to dump live")
    kernel = kernels.unpack(kernels.get_kernel(kernel_name))
    image = initramfs.build(kernel)
    called = []

    def dump_live_once(guest, root_pid):
        called.append(root_pid)
        return dump_live(guest, root_pid)

    try:
        return _record_into(
            path, kernel_name, kernel, image, workload, log, 0, dump_live_once, memory_dir, memory_layout
        )
    except GuestLost as first:
        if called:  # lost after the tool read the guest: its outcome is the caller's to judge
            raise
        # stuck or died before the job (a 6.12 guest under TCG sometimes dies booting)
        log(
            f"guest lost while recording {workload.name} on {kernel_name} ({str(first).splitlines()[0]}); trying once more"
        )
        return _record_into(path, kernel_name, kernel, image, workload, log, 0, dump_live, memory_dir, memory_layout)


def _golden_job_mode(workload: Workload) -> str:
    """record-job.sh's CRIU_GOLDEN: "yes" (criu dump), "runc" (runc checkpoint) or "no"."""
    if not workload.golden:
        return "no"
    return "yes" if workload.golden_tool == "criu" else workload.golden_tool


def _record_into(
    path: Path,
    kernel_name: str,
    kernel: kernels.UnpackedKernel,
    image: Path,
    workload: Workload,
    log,
    take: int,
    dump_live=None,
    memory_dir: Path | None = None,
    memory_layout: str = "file",
) -> Recording:
    cache.begin(path)
    log(f"recording {workload.name} on {kernel_name} in {path}")
    timings: dict[str, float] = {}
    t0 = time.monotonic()

    script = jobs.job_script(
        "record-job.sh",
        {
            "W": workload.name,
            "PROG": workload.program,
            "ARGS": " ".join(workload.args),
            "ROOT_KEY": workload.root_key or "",
            "HIGH_PID": HIGH_PID,
            "SETTLE": workload.settle_seconds,
            "CRIU_DUMP_OPTS": workload.criu_options,
            "CRIU_GOLDEN": _golden_job_mode(workload),
            "MOMENT": workload.moment,
        },
    )
    work = path / "work"
    work.mkdir()
    jobs.write_input_disk(work / "in.img", {"job.sh": script, "common.sh": (jobs.GUEST_DIR / "common.sh").read_bytes()})
    jobs.blank_output_disk(work / "out.img", workload.ram_mib + 256)
    (path / "live").mkdir()

    disks = [work / "in.img", work / "out.img"]
    with Guest(
        work,
        kernel.vmlinuz,
        image,
        workload.ram_mib,
        disks,
        cpu=workload.cpu,
        cmdline_extra=kernel.kernel.cmdline,
        memory_dir=memory_dir,
        memory_layout=memory_layout,
    ) as guest:
        guest.wait_for_job(BOOT_TIMEOUT, f"booting {kernel_name} for {workload.name}")
        ready = guest.expect("RECORD-READY", 300, f"starting {workload.name} on {kernel_name}")
        timings["boot_and_ready"] = time.monotonic() - t0
        if dump_live is not None:
            dump_live(guest, int(ready.split("root=", 1)[1].split()[0]))

        # The job shell has just written RECORD-READY; let it block in its read of the control
        # port, so no task but the kernel's own is on a vCPU in the snapshot. An as-is workload
        # runs on: pause it at a moment of its life nobody chose
        time.sleep(0.5)
        pause_delay = random.uniform(0.0, 1.0) if workload.moment == "as-is" else 0.0
        time.sleep(pause_delay)
        t = time.monotonic()
        guest.command("stop")
        formats = guest.command("query-dump-guest-memory-capability")["formats"]
        dumps = {"elf": "dump.elf"}
        guest.command("dump-guest-memory", paging=False, protocol=f"file:{path / 'dump.elf'}")
        for fmt in (f for f in formats if f.startswith("kdump")):
            guest.command("dump-guest-memory", paging=False, protocol=f"file:{path / f'dump.{fmt}'}", format=fmt)
            dumps[fmt] = f"dump.{fmt}"
        memory_files = guest.memory_files()
        if len(memory_files) == 1:  # a recorded live snapshot holds one RAM file
            shutil.copyfile(memory_files[0], path / "live" / "guest-ram")
            (path / "live" / "registers.txt").write_text(guest.hmp("info registers -a"))
            (path / "live" / "mtree.txt").write_text(guest.hmp("info mtree -f"))
        status = guest.command("query-status")
        guest.command("cont")
        timings["paused"] = time.monotonic() - t
        for name in dumps.values():
            os.chmod(path / name, 0o644)  # QEMU creates dumps 0400
        # Most of a small guest's RAM is zero: stored as holes, a recording takes a quarter of
        # the disk (a clean CI records every workload on both kernels)
        _dig_holes(path / "dump.elf", *([path / "live" / "guest-ram"] if len(memory_files) == 1 else []))

        guest.send("GO")
        t = time.monotonic()
        guest.expect("DONE", DONE_TIMEOUT, f"criu dump of {workload.name}")
        timings["criu_dump_and_transfer"] = time.monotonic() - t
        guest.wait_exit(60)

    jobs.read_output_disk(work / "out.img", work / "out")
    (work / "out" / "golden").rename(path / "golden")
    (work / "out" / "files.tar").rename(path / "files.tar")
    manifest = facts.build_manifest(work / "out" / "facts", path / "files.tar")
    manifest.update(
        workload=workload.name,
        program=workload.program,
        args=list(workload.args),
        kernel=kernel_name,
        kernel_package=f"{kernel.kernel.package}={kernel.kernel.version}",
        ram_mib=workload.ram_mib,
        moment=workload.moment,
        take=take,
        pause_delay_seconds=round(pause_delay, 3),
        dumps=dumps,
        qemu_dump_formats=formats,
        qemu_status_when_dumped=status.get("status"),
        control_ready_line=ready,
        timings={k: round(v, 2) for k, v in timings.items()},
    )
    (path / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    if workload.moment == "as-is" and (path / "live" / "guest-ram").exists():
        log(f"{workload.name} on {kernel_name} take {take}: {on_vcpus(path / 'live')}")
    shutil.copyfile(work / "console.log", path / "console.log")
    shutil.rmtree(work)
    cache.finish(path)
    log(f"recorded {workload.name} on {kernel_name} in {time.monotonic() - t0:.1f} s")
    return Recording(path)
