"""The pinned guest kernels: Debian cloud images fetched with apt-get download (or, for a suite
that has moved on, taken from ../shared/kernels/) and unpacked."""

from __future__ import annotations

import dataclasses
import hashlib
import lzma
import subprocess
from pathlib import Path

from . import cache
from .errors import CorpusError

# kernel packages kept beside the repository (../shared/kernels/): their suites move on
SHARED_KERNELS = Path(__file__).resolve().parents[2] / "shared" / "kernels"


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str  # short name used on the command line and in cache keys
    package: str
    version: str  # Debian package version
    release: str  # uname -r, the directory under lib/modules
    # .deb files in SHARED_KERNELS that hold the kernel and its modules; empty: apt-get download
    shared_debs: tuple[str, ...] = ()
    # NAME=VALUE words for the kernel command line, which the kernel hands to init as its
    # environment: what this kernel needs of the guest's userspace (on 5.10, glibc must not
    # register rseq, or Debian 12's criu refuses every process: the kernel lacks get_rseq_conf)
    guest_env: tuple[str, ...] = ()
    # how much of the corpus a CI run covers on this kernel (corpus/matrix.py); None: all of it
    ci: CiShare | None = None
    # the Debian suite whose criu the guest runs (with that suite's libraries, corpus/suite_criu.py),
    # where Debian 12's criu 3.17 does not start; empty: the host's criu 3.17
    criu_suite: str = ""
    # MiB a recording of a 512 MiB guest keeps on disk (recorder.disk_kept_mib): the kernel's
    # own memory is most of it
    recording_mib: int = 305
    # (workload, why): what is known not to work on this kernel yet; its tests skip, saying why
    open_gaps: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return cache.digest(self.package, self.version, *self.guest_env)

    @property
    def cmdline(self) -> str:
        return " ".join(self.guest_env)


@dataclasses.dataclass(frozen=True)
class CiShare:
    """What a CI run covers on a kernel, so that CI stays within its time; `./run test
    --all-kernels` runs the whole corpus on every kernel. A list of workloads that is None
    names every standard workload."""

    # the standard workloads recorded and tested
    workloads: tuple[str, ...] | None
    # recordings of each as-is workload (moments it is paused at), at most the workload's own
    takes: int
    # workloads whose golden images criu restores: the guest's criu works on this kernel (the
    # check is of the corpus, not of our images, whose restores every workload runs)
    golden_restores: tuple[str, ...] | None
    # workloads dumped from every source form: reading a form does not depend on the kernel,
    # but a thread's registers on a vCPU come from each form's own vCPU state
    every_source: tuple[str, ...] | None
    # workloads a test boots a live guest of for dump --live, precopy and background
    live: tuple[str, ...] | None


# every area once at least: tasks and timers, threads, memory, file mappings, a pty, pipes, UNIX
# sockets, event fds, inet sockets, PID namespace and cgroup, runc with TCP, syscalls caught
# as-is, registers on vCPUs, seccomp, files with no name left (inode times)
CI_SUBSET = (
    "counter",
    "threads",
    "memhog-64",
    "filemap",
    "ptyprog",
    "pipetree",
    "ipc",
    "evfds",
    "inet",
    "container",
    "runc",
    "runc-inet",
    "sigstate",
    "seccomp",
    "ghosts",
    "blockers",
    "spinners",
    "runc-inet-stream-asis",
)

# the kernel every workload's checks run on: all of it, but two moments of each as-is workload (the
# third of --all-kernels cost CI 5 minutes: its recording, restore and inet checks)
FULL_SHARE = CiShare(workloads=None, takes=2, golden_restores=None, every_source=None, live=None)

# Debian 12's other pinned kernel: every area, two moments of each as-is workload, and the live
# workloads the migration tests boot
PINNED_SHARE = CiShare(
    workloads=CI_SUBSET,
    takes=2,
    golden_restores=("runc",),
    every_source=("spinners", "runc"),
    live=("spinners", "blockers", "memhog-writer"),
)

# kernels whose layouts differ from 6.1's (older, newer, PREEMPT_RT): every structure family the
# walkers read, once (counter, threads, memhog-64, container and runc-inet add no structure that
# blockers, spinners, filemap, runc and runc-inet-stream-asis do not read)
LAYOUT_SHARE = CiShare(
    workloads=tuple(w for w in CI_SUBSET if w not in ("counter", "threads", "memhog-64", "container", "runc-inet")),
    takes=1,
    golden_restores=("runc",),
    every_source=("spinners",),
    live=("spinners",),
)

KERNELS = {
    k.name: k
    for k in (
        Kernel(
            "5.10",
            "linux-image-5.10.0-32-cloud-amd64",
            "5.10.223-1",
            "5.10.0-32-cloud-amd64",
            shared_debs=("linux-image-5.10.0-32-cloud-amd64_5.10.223-1_amd64.deb",),
            guest_env=("GLIBC_TUNABLES=glibc.pthread.rseq=0",),
            ci=LAYOUT_SHARE,
        ),
        Kernel("6.1", "linux-image-6.1.0-56-cloud-amd64", "6.1.192-2", "6.1.0-56-cloud-amd64", ci=FULL_SHARE),
        # the real-time build of the same 6.1 (PREEMPT_RT: rwsems and mutexes on rt_mutex)
        Kernel(
            "6.1-rt",
            "linux-image-6.1.0-56-rt-amd64",
            "6.1.192-2",
            "6.1.0-56-rt-amd64",
            ci=LAYOUT_SHARE,
        ),
        Kernel(
            "6.12",
            "linux-image-6.12.117+deb12-cloud-amd64",
            "6.12.117-1~deb12u1",
            "6.12.117+deb12-cloud-amd64",
            ci=PINNED_SHARE,
        ),
        Kernel(
            "7.2",
            "linux-image-7.2.13+deb14-cloud-amd64",
            "7.2.13-1",
            "7.2.13+deb14-cloud-amd64",
            shared_debs=tuple(
                f"linux-{part}-7.2.13+deb14-cloud-amd64_7.2.13-1_amd64.deb" for part in ("binary", "modules", "base")
            ),
            ci=LAYOUT_SHARE,
            # unstable's 4.2.1: Debian 13's 4.1.1 fails to dump inet sockets here (getsockopt
            # SO_PASSSEC, which 6.16+ refuses outside UNIX and netlink sockets: EOPNOTSUPP)
            criu_suite="sid",
            recording_mib=340,  # measured: 335-353 MiB
        ),
    )
}


def get_kernel(name: str) -> Kernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise CorpusError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}") from None


@dataclasses.dataclass(frozen=True)
class UnpackedKernel:
    kernel: Kernel
    root: Path

    @property
    def vmlinuz(self) -> Path:
        # Debian 13 and later ship the image beside the modules, not in /boot
        for path in (self.root / "boot" / f"vmlinuz-{self.kernel.release}", self.modules_dir / "vmlinuz"):
            if path.exists():
                return path
        raise CorpusError(f"kernel {self.kernel.name}'s packages hold no vmlinuz")

    @property
    def modules_dir(self) -> Path:
        for base in ("lib", "usr/lib"):
            path = self.root / base / "modules" / self.kernel.release
            if path.exists():
                return path
        raise CorpusError(f"kernel {self.kernel.name}'s packages hold no modules for {self.kernel.release}")

    def module_path(self, name: str) -> Path:
        """The .ko (or .ko.xz) file of a module, by module name (dashes and underscores alike)."""
        wanted = {f"{name}.ko", f"{name}.ko.xz", f"{name.replace('_', '-')}.ko", f"{name.replace('_', '-')}.ko.xz"}
        for path in self.modules_dir.rglob("*.ko*"):
            if path.name in wanted:
                return path
        raise CorpusError(f"kernel {self.kernel.name} has no module {name}")

    def module_bytes(self, name: str) -> bytes:
        """The module as busybox insmod wants it: uncompressed."""
        path = self.module_path(name)
        data = path.read_bytes()
        return lzma.decompress(data) if path.suffix == ".xz" else data

    def module_info(self, name: str) -> list[tuple[str, str]]:
        """The module's .modinfo fields (depends=, softdep=, alias=...), in order."""
        return _modinfo(self.module_bytes(name))

    def module_depends(self, name: str) -> list[str]:
        """What must load first (no modules.dep in the .deb): the .modinfo `depends=` list, and
        the `softdep=pre:` modules that exist, by name or alias. libcrc32c's init, for one,
        asks the crypto API for "crc32c", which a generic build has as a module, and an
        initramfs without modprobe cannot load it on demand."""
        wanted: list[str] = []
        for key, value in self.module_info(name):
            if key == "depends":
                wanted += [d for d in value.split(",") if d]
            elif key == "softdep" and value.startswith("pre:"):
                wanted += [m for m in (self.module_by_alias(a) for a in value[len("pre:") :].split()) if m]
        return wanted

    def module_by_alias(self, alias: str) -> str | None:
        """The module named `alias`, or the first one that declares it an alias (the generic
        crypto modules first: an arch one may need CPU features TCG lacks); None when it is
        built in or absent."""
        builtin = self.modules_dir / "modules.builtin.modinfo"
        if builtin.exists() and f".alias={alias}\0".encode() in builtin.read_bytes():
            return None
        paths = sorted(self.modules_dir.rglob("*.ko*"), key=lambda p: ("/kernel/crypto/" not in str(p), str(p)))
        for path in paths:
            if path.name.split(".ko")[0].replace("-", "_") == alias.replace("-", "_"):
                return alias
        for path in paths:
            data = path.read_bytes()
            if ("alias", alias) in _modinfo(lzma.decompress(data) if path.suffix == ".xz" else data):
                return path.name.split(".ko")[0].replace("-", "_")
        return None

    def modules_in_load_order(self, names: list[str]) -> list[str]:
        """`names` and their dependencies, each after everything it depends on."""
        order: list[str] = []

        def visit(name: str, seen: tuple[str, ...]) -> None:
            if name in order:
                return
            if name in seen:
                raise CorpusError(f"module dependency cycle: {' -> '.join(seen + (name,))}")
            for dep in self.module_depends(name):
                visit(dep, seen + (name,))
            order.append(name)

        for name in names:
            visit(name, ())
        return order


def _modinfo(module: bytes) -> list[tuple[str, str]]:
    fields = []
    for field in module.split(b"\0"):
        key, eq, value = field.partition(b"=")
        if eq and key in (b"depends", b"softdep", b"alias"):
            fields.append((key.decode(), value.decode(errors="replace")))
    return fields


def unpack(kernel: Kernel) -> UnpackedKernel:
    """Fetch the pinned kernel package (apt-get download) and unpack it, once per cache."""
    path = cache.entry("kernels", kernel.name, kernel.key)
    with cache.locked(path):
        return _unpack_locked(kernel, path)


def _unpack_locked(kernel: Kernel, path: Path) -> UnpackedKernel:
    if cache.is_complete(path):
        return UnpackedKernel(kernel, path / "root")
    cache.begin(path)
    debs = _shared_debs(kernel) if kernel.shared_debs else [_apt_download(kernel, path)]
    for deb in debs:
        result = subprocess.run(["dpkg-deb", "-x", str(deb), str(path / "root")], capture_output=True, text=True)
        if result.returncode != 0:
            raise CorpusError(f"dpkg-deb -x {deb.name} failed: {result.stderr.strip()}")
    for deb in path.glob("*.deb"):
        deb.unlink()
    cache.finish(path)
    return UnpackedKernel(kernel, path / "root")


def _apt_download(kernel: Kernel, path: Path) -> Path:
    spec = f"{kernel.package}={kernel.version}"
    result = subprocess.run(["apt-get", "download", spec], cwd=path, capture_output=True, text=True)
    debs = list(path.glob("*.deb"))
    if result.returncode != 0 or not debs:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CorpusError(f"apt-get download {spec} failed: {tail[0]} (run 'apt-get update' first?)")
    return debs[0]


def _shared_debs(kernel: Kernel) -> list[Path]:
    """The kernel's packages from SHARED_KERNELS, each checked against its SHA256SUMS line."""
    try:
        lines = (SHARED_KERNELS / "SHA256SUMS").read_text().split("\n")
    except OSError as e:
        raise CorpusError(
            f"kernel {kernel.name} comes from {SHARED_KERNELS}, which is unreadable: {e.strerror}"
        ) from None
    # sha256sum's lines: DIGEST, then NAME after a space and a mode character
    sums = {name.lstrip("*"): digest for digest, name in (line.split(None, 1) for line in lines if line.strip())}
    debs = []
    for name in kernel.shared_debs:
        deb = SHARED_KERNELS / name
        try:
            digest = hashlib.sha256(deb.read_bytes()).hexdigest()
        except OSError as e:
            raise CorpusError(f"kernel {kernel.name} needs {deb}: {e.strerror}") from None
        if sums.get(name) != digest:
            raise CorpusError(f"{deb} does not match its line in {SHARED_KERNELS / 'SHA256SUMS'}")
        debs.append(deb)
    return debs
