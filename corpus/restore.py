"""The restore harness: `criu restore` of an images directory in a fresh guest of the recorded
kernel, with the workload's files recreated as they were, and the workload's own judgement."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ovm_offline.criu import images as criu_images

from . import initramfs, jobs, kernels
from .errors import CorpusError, GuestLost
from .guest import GUEST_SEES_HOST, Guest
from .recorder import BOOT_TIMEOUT, Recording
from .workloads import Verdict, get_workload

RESTORE_TIMEOUT = 600
#: the guest's ports: criu page-server's, and the one the other images come to as a tar; the
#: port criu lazy-pages reaches the host's lazy-pages server at (on GUEST_SEES_HOST)
GUEST_PAGE_SERVER_PORT, GUEST_IMAGES_PORT, GUEST_LAZY_PORT = 27000, 27001, 27002
#: what the guest's network device needs, loaded from the input disk by the restore job alone
#: (the initramfs, a recording's input, stays as it is)
NETWORK_MODULES = ["virtio_net"]


@dataclasses.dataclass(frozen=True)
class PageServerRestore:
    """A restore whose pagemaps and pages come through `criu page-server` in the guest, in
    `rounds` dumps (each round's server has the one before as its parent, as criu's migrations
    chain pre-dumps): `dump(address, round)` runs once that round's server listens at `address`
    (HOST:PORT on this side) and sends the pages there; the last returns the directory of the
    other images, which then go to the guest as a tar. What it raises stops the guest and
    reaches the caller."""

    dump: Callable[[str, int], Path]
    rounds: int = 1


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


def restore(
    rec: Recording,
    images: Path | None,
    log=print,
    page_server: PageServerRestore | None = None,
    lazy_pages_port: int | None = None,
) -> RestoreResult:
    """Boot a fresh guest of the recording's kernel, restore `images` there and judge the run.
    A failed `criu restore` is a failed result, not an exception. A guest lost by itself (QEMU
    exits: under TCG a guest has been seen to reboot during boot; or it hangs before its job)
    is tried once more; the first attempt's serial log is kept in the result. `page_server`: the
    pages come through criu page-server in the guest; `lazy_pages_port`: `criu restore
    --lazy-pages`, its lazy pages from the server listening on that port on this side."""
    sent: list[int] = []  # the rounds whose dump ran: a guest lost after one is not tried again
    if page_server is not None:
        dump = page_server.dump

        def counted(address: str, n: int) -> Path:
            sent.append(n)
            return dump(address, n)

        page_server = dataclasses.replace(page_server, dump=counted)
    network = Network(page_server, lazy_pages_port)
    first = _restore_once(rec, images, log, network)
    # a guest lost while booting (as a 6.12 guest under TCG sometimes is) is tried again, unless
    # a dump was sent to it; a lazy restore's server has served nothing before the restore runs
    if first.ok or not first.guest_lost or sent:
        return first
    log(f"guest lost ({first.detail}); trying once more")
    second = _restore_once(rec, images, log, network)
    return dataclasses.replace(
        second,
        detail=f"{second.detail} (after a first attempt: {first.detail}; its serial log: {first.restore_log[-600:]!r})",
    )


def network_members(kernel: kernels.UnpackedKernel) -> dict[str, bytes | Path]:
    """The input disk's netmods/: the network device's modules this kernel does not build in
    and the initramfs did not load (the initramfs is part of every recording's key: it stays)."""
    builtin = (kernel.modules_dir / "modules.builtin").read_text()

    def load_order(names: list[str]) -> list[str]:
        return kernel.modules_in_load_order([m for m in names if f"/{m}.ko" not in builtin])

    loaded = set(load_order(initramfs.GUEST_MODULES))  # as the initramfs loads them (virtio_ring)
    order = [m for m in load_order(NETWORK_MODULES) if m not in loaded]
    return {
        "net.sh": (jobs.GUEST_DIR / "net.sh").read_bytes(),
        "netmods/load-order": "".join(f"{m}\n" for m in order).encode(),
        **{f"netmods/{m}.ko": kernel.module_bytes(m) for m in order},
    }


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now, for a guest forward."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: Callable, *arguments) -> Exception | None:
    """What the guest's wait raised: the job reports its own failures, and the guest's logs are kept."""
    try:
        what(*arguments)
    except Exception as e:
        return e
    return None


def _send_images(guest: Guest, page_server: PageServerRestore, forwards: dict[int, int]) -> Exception | None:
    """Each round: once the guest's page server listens, the dump; after the last, the other
    images as a tar. What the guest's wait raised is returned; what the dump raises, raised."""
    host_port = {g: h for h, g in forwards.items()}
    for n in range(1, page_server.rounds + 1):
        failure = _wait(guest.expect, "NETWORK-READY", BOOT_TIMEOUT, f"starting criu page-server {n}")
        if failure is not None:
            return failure
        images = page_server.dump(f"127.0.0.1:{host_port[GUEST_PAGE_SERVER_PORT]}", n)
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        archive.add(images, arcname=".")
    with socket.create_connection(("127.0.0.1", host_port[GUEST_IMAGES_PORT]), timeout=60) as sock:
        sock.sendall(tar.getvalue())
    return None


@dataclasses.dataclass(frozen=True)
class Network:
    """What the restore guest's network carries, if anything."""

    page_server: PageServerRestore | None = None
    lazy_pages_port: int | None = None

    @property
    def used(self) -> bool:
        return self.page_server is not None or self.lazy_pages_port is not None

    def forwards(self) -> dict[int, int]:
        return {free_port(): GUEST_PAGE_SERVER_PORT, free_port(): GUEST_IMAGES_PORT} if self.page_server else {}

    def guest_forwards(self) -> dict[int, int]:
        return {GUEST_LAZY_PORT: self.lazy_pages_port} if self.lazy_pages_port else {}


def _restore_once(rec: Recording, images: Path | None, log, network: Network) -> RestoreResult:
    manifest = rec.manifest
    workload = get_workload(manifest["workload"])
    kernel = kernels.unpack(kernels.get_kernel(manifest["kernel"]))
    image = initramfs.build(kernel)
    t0 = time.monotonic()
    page_server, forwards = network.page_server, network.forwards()
    if page_server is not None and workload.appended_files:
        raise CorpusError(f"{workload.name}: its appended files are cut by the images, which come after the boot")
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
                "IMAGES_PORT": str(GUEST_PAGE_SERVER_PORT) if page_server else "",
                "PAGE_SERVER_ROUNDS": page_server.rounds if page_server else 0,
                "TAR_PORT": str(GUEST_IMAGES_PORT),
                "LAZY_PORT": str(GUEST_LAZY_PORT) if network.lazy_pages_port else "",
                "LAZY_ADDRESS": GUEST_SEES_HOST,
            },
        )
        jobs.write_input_disk(
            work / "in.img",
            {
                "job.sh": script,
                "common.sh": (jobs.GUEST_DIR / "common.sh").read_bytes(),
                "files.tar": files_at_images_moment(rec, images, work) if images else rec.files_tar,
                **({"images": images, **parent_chain(images)} if images else {}),
                **(network_members(kernel) if network.used else {}),
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
            forwards=forwards,
            guest_forwards=network.guest_forwards(),
        ) as guest:
            failure = _wait(
                guest.wait_for_job, BOOT_TIMEOUT, f"booting {manifest['kernel']} to restore {workload.name}"
            )
            if failure is None and page_server is not None:
                failure = _send_images(guest, page_server, forwards)
            if failure is None:
                failure = _wait(
                    guest.expect, "DONE", RESTORE_TIMEOUT, f"restoring {workload.name} on {manifest['kernel']}"
                )
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


@dataclasses.dataclass
class PageServerGuest:
    """A guest of a kernel whose criu page-server listens at `address` (HOST:PORT on this side);
    once the dump sent its pages, `images` holds what the server wrote (pagemaps and pages)."""

    address: str
    images: Path


@contextlib.contextmanager
def page_server_guest(kernel_name: str, work: Path) -> Iterator[PageServerGuest]:
    """A destination that only receives: boot a guest of `kernel_name` running `criu page-server`,
    yield once it listens; after the block (the dump done), its images come back into `work`."""
    kernel = kernels.unpack(kernels.get_kernel(kernel_name))
    image = initramfs.build(kernel)
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    script = jobs.job_script("page-server-job.sh", {"W": "page-server", "IMAGES_PORT": GUEST_PAGE_SERVER_PORT})
    members = {"job.sh": script, "common.sh": (jobs.GUEST_DIR / "common.sh").read_bytes(), **network_members(kernel)}
    jobs.write_input_disk(work / "in.img", members)
    jobs.blank_output_disk(work / "out.img", 1024)
    for attempt in (1, 2):  # a guest lost while booting (a 6.12 guest under TCG sometimes is) boots again
        guest = Guest(
            work, kernel.vmlinuz, image, 512, [work / "in.img", work / "out.img"],
            cmdline_extra=kernel.kernel.cmdline, forwards={port: GUEST_PAGE_SERVER_PORT},
        )  # fmt: skip
        guest.start()
        try:
            guest.wait_for_job(BOOT_TIMEOUT, f"booting {kernel_name} for criu page-server")
            guest.expect("NETWORK-READY", BOOT_TIMEOUT, f"starting criu page-server on {kernel_name}")
            break
        except GuestLost:
            guest.stop()
            if attempt == 2:
                raise
        except BaseException:
            guest.stop()
            raise
    try:
        yield PageServerGuest(f"127.0.0.1:{port}", work / "out" / "out" / "net-images")
        guest.expect("DONE", RESTORE_TIMEOUT, f"criu page-server on {kernel_name} writing its images")
        guest.wait_exit(60)
    finally:
        guest.stop()
    jobs.read_output_disk(work / "out.img", work / "out")
