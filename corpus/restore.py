"""The restore harness: `criu restore` of an images directory in a fresh guest of the recorded
kernel, with the workload's files recreated as they were, and the workload's own judgement."""

from __future__ import annotations

import dataclasses
import os
import tarfile
import tempfile
import time
from pathlib import Path

from ovm_offline.criu import images as criu_images

from . import initramfs, jobs, kernels
from .errors import CorpusError, GuestLost
from .guest import Guest
from .recorder import BOOT_TIMEOUT, Recording
from .workloads import Verdict, get_workload

RESTORE_TIMEOUT = 600


@dataclasses.dataclass(frozen=True)
class RestoreResult(Verdict):
    log_after: str = ""
    restore_log: str = ""
    seconds: float = 0.0
    guest_lost: bool = False  # the guest died or hung by itself, not the restore


def _log_at_dump(rec: Recording, log_name: str) -> str:
    with tarfile.open(rec.files_tar) as tar:
        return tar.extractfile(log_name).read().decode(errors="replace")


def _appended_offsets(images: Path) -> dict[str, int]:
    """{path: offset} of each regular file the images hold open."""
    entries = criu_images.read_image(images / criu_images.FILES.filename()).entries
    return {e.reg.name: e.reg.pos for e in entries if e.HasField("reg")}


def files_at_images_moment(rec: Recording, images: Path, work: Path) -> Path:
    """The recording's files.tar with each file its workload only appends to cut to the offset
    `images` hold open (the file as it was when they were taken; files.tar holds it as it
    grew until criu's dump, seconds after an as-is snapshot)."""
    appended = get_workload(rec.manifest["workload"]).appended_files
    if not appended:
        return rec.files_tar
    offsets = _appended_offsets(images)
    cut = work / "files.tar"
    with tarfile.open(rec.files_tar) as src, tarfile.open(cut, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            for image_path, tar_path in appended:
                if member.name == tar_path and image_path in offsets:
                    if offsets[image_path] > member.size:
                        raise CorpusError(
                            f"{image_path} is open at {offsets[image_path]}, past its {member.size} bytes"
                        )
                    member.size = offsets[image_path]
            dst.addfile(member, data)
    return cut


def parent_chain(images: Path) -> dict[str, Path]:
    """The dumps an incremental dump's `parent` links lead to, by their place beside "images"
    on the guest's input disk (where the links, relative as criu makes them, find them)."""
    chain: dict[str, Path] = {}
    place, path = "images", images
    while (path / "parent").is_symlink() and len(chain) < 64:
        link = os.readlink(path / "parent")
        place, path = os.path.normpath(f"{place}/{link}"), Path(os.path.normpath(path / link))
        if place.startswith("..") or os.path.isabs(link):
            raise CorpusError(f"{images}: its chain of parents leaves the images' directory ({link})")
        chain[place] = path
    return chain


def restore(rec: Recording, images: Path, log=print) -> RestoreResult:
    """Boot a fresh guest of the recording's kernel, restore `images` there and judge the run.
    A failed `criu restore` is a failed result, not an exception. A guest lost by itself (QEMU
    exits: under TCG a guest has been seen to reboot during boot; or it hangs before its job)
    is tried once more; the first attempt's serial log is kept in the result."""
    first = _restore_once(rec, images, log)
    if first.ok or not first.guest_lost:
        return first
    log(f"guest lost ({first.detail}); trying once more")
    second = _restore_once(rec, images, log)
    return dataclasses.replace(
        second,
        detail=f"{second.detail} (after a first attempt: {first.detail}; its serial log: {first.restore_log[-600:]!r})",
    )


def _restore_once(rec: Recording, images: Path, log) -> RestoreResult:
    manifest = rec.manifest
    workload = get_workload(manifest["workload"])
    kernel = kernels.unpack(kernels.get_kernel(manifest["kernel"]))
    image = initramfs.build(kernel)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ovm-restore-") as tmp:
        work = Path(tmp)
        script = jobs.job_script(
            "restore-job.sh",
            {
                "W": workload.name,
                "RUN_AFTER_RESTORE": workload.run_after_restore,
                "RESTORE_PREPARE": workload.restore_prepare,
                "CRIU_RESTORE_OPTS": workload.criu_options,
                "GOLDEN_TOOL": workload.golden_tool,
            },
        )
        jobs.write_input_disk(
            work / "in.img",
            {
                "job.sh": script,
                "common.sh": (jobs.GUEST_DIR / "common.sh").read_bytes(),
                "files.tar": files_at_images_moment(rec, images, work),
                "images": images,
                **parent_chain(images),
            },
        )
        jobs.blank_output_disk(work / "out.img", 64)
        with Guest(
            work,
            kernel.vmlinuz,
            image,
            workload.ram_mib,
            [work / "in.img", work / "out.img"],
            cpu=workload.cpu,
            cmdline_extra=kernel.kernel.cmdline,
        ) as guest:
            try:
                guest.wait_for_job(BOOT_TIMEOUT, f"booting {manifest['kernel']} to restore {workload.name}")
                guest.expect("DONE", RESTORE_TIMEOUT, f"restoring {workload.name} on {manifest['kernel']}")
                failure = None
            except Exception as e:  # the job reports its own failures; keep the guest's logs
                failure = e
            guest.wait_exit(60) if failure is None else guest.stop()
        out = work / "out"
        try:
            jobs.read_output_disk(work / "out.img", out)
        except tarfile.TarError:
            pass
        restore_log = (
            (out / "out" / "restore.log").read_text(errors="replace") if (out / "out" / "restore.log").exists() else ""
        )
        after = (out / "out" / "after.log").read_text(errors="replace") if (out / "out" / "after.log").exists() else ""
        seconds = time.monotonic() - t0
        if failure is not None:
            detail = str(failure).splitlines()[0]
            console = getattr(failure, "log_tail", "")
            lost = isinstance(failure, GuestLost)
            return RestoreResult(False, detail, after, restore_log or console, seconds, guest_lost=lost)
        verdict = workload.check(_log_at_dump(rec, workload.log_name), after)
        log(
            f"restore of {workload.name} on {manifest['kernel']}: {'ok' if verdict.ok else 'FAILED'} ({verdict.detail})"
        )
        return RestoreResult(verdict.ok, verdict.detail, after, restore_log, seconds)
