"""Builds the busybox initramfs every corpus guest boots: busybox, criu 3.17.1 and runc 1.1 with
their shared libraries, the corpus workloads (C programs and shell scripts), runc's bundle
config, the kernel modules CRIU and the harness need, and /init."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from . import cache, cpio, seccomp_profile, suite_criu
from .errors import CorpusError
from .kernels import UnpackedKernel

GUEST_DIR = Path(__file__).resolve().parent / "guest"
WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"

# qemu_fw_cfg: VMCOREINFO reaches QEMU's dump; virtio_*: the data disks; nf_tables and
# nfnetlink: criu's kernel feature probe fails without them; veth: container network namespaces.
# unix_diag, tcp_diag, udp_diag: criu finds UNIX and IPv4/IPv6 sockets through sock_diag
GUEST_MODULES = ["qemu_fw_cfg", "virtio_pci", "virtio_blk", "nf_tables", "veth", "unix_diag", "tcp_diag", "udp_diag"]
# `runc checkpoint` of a container with its own network namespace: criu locks that namespace's
# network with iptables-restore (legacy backend: the CRIU chain on INPUT/OUTPUT, `-m mark`)
GUEST_MODULES += ["x_tables", "ip_tables", "iptable_filter", "ip6_tables", "ip6table_filter", "xt_mark"]
# and, for a network namespace in the dumped tree, every socket kind must be collectable (a missing
# sock_diag module is fatal there, unlike in criu's own namespace): raw, packet and netlink sockets
GUEST_MODULES += ["raw_diag", "af_packet_diag", "netlink_diag"]
# criu dumps a network namespace's conntrack entries and expectations over ctnetlink
GUEST_MODULES += ["nf_conntrack_netlink"]

BUSYBOX = "/bin/busybox"
CRIU = "/usr/sbin/criu"
RUNC = "/usr/sbin/runc"
# iptables (legacy) for criu's network lock of a container's network namespace (runc always passes
# --empty-ns network, so iptables-save is not run for runc checkpoint; the -save names are spare)
XTABLES_MULTI = "/usr/sbin/xtables-legacy-multi"
XTABLES_NAMES = [
    f"{v}tables{s}"
    for v in ("ip", "ip6")
    for s in ("", "-restore", "-save", "-legacy", "-legacy-restore", "-legacy-save")
]
XTABLES_LIBDIR = "/usr/lib/x86_64-linux-gnu/xtables"
XTABLES_EXTENSIONS = ["libxt_standard.so", "libxt_mark.so"]
# other host tools criu runs (looked up on PATH; busybox's lack the options criu uses)
# GNU tar: criu archives a dumped tmpfs (the container's /dev, /dev/shm, masked dirs) with
# `tar --create --gzip --sparse ...`, options busybox's tar lacks
EXTRA_TOOLS = ["/usr/bin/tar"]
# runc-box's bundle config: `runc spec` of the pinned runc, with the corpus's changes
RUNC_CONFIG = GUEST_DIR / "runc-config.json"
#: the user namespace runc-box's `userns` container adds: its root is 100000 outside
RUNC_USERNS_MAPPING = [{"containerID": 0, "hostID": 100000, "size": 65536}]
# the job scripts' own C helpers (/bin/NAME for guest/NAME.c)
GUEST_TOOLS = sorted(GUEST_DIR.glob("*.c"))


def workload_sources() -> list[Path]:
    return sorted(WORKLOADS_DIR.glob("*.c")) + sorted(WORKLOADS_DIR.glob("*.h")) + workload_scripts()


def workload_scripts() -> list[Path]:
    """Workloads written in shell (/bin/NAME for workloads/NAME.sh)."""
    return sorted(WORKLOADS_DIR.glob("*.sh"))


def runc_userns_config() -> bytes:
    """runc-box's config with a user namespace of the container's own (and a host name that
    says so), derived from RUNC_CONFIG rather than kept as a second copy of it."""
    config = json.loads(RUNC_CONFIG.read_text())
    config["hostname"] = "ovm-userns"
    config["linux"]["namespaces"].append({"type": "user"})
    config["linux"]["uidMappings"] = config["linux"]["gidMappings"] = RUNC_USERNS_MAPPING
    return json.dumps(config, indent=1).encode() + b"\n"


#: runc-box's inet containers: the inet workload's mode for each config's name
RUNC_INET_MODES = {"inet-established": "established", "inet-stream": "stream"}
#: an OCI prestart hook that sets the container's loopback up (runc-box.sh writes it)
RUNC_LO_UP_HOOK = "/ovm-lo-up"


def runc_inet_config(mode: str) -> bytes:
    """runc-box's config running the inet workload in `mode` instead of pipetree (without
    pipetree's /data/log), with a prestart hook that sets the container's loopback up, as a
    network hook (CNI's, podman's) sets up a container's network: runc restore runs it once
    criu has made the namespaces (--empty-ns network: runc's own loopback setup is not run),
    before criu reconnects TCP connections over it."""
    config = json.loads(RUNC_CONFIG.read_text())
    config["process"]["args"] = ["/bin/inet", mode]
    config["hooks"] = {"prestart": [{"path": RUNC_LO_UP_HOOK}]}
    return json.dumps(config, indent=1).encode() + b"\n"


def runc_seccomp_config() -> bytes:
    """runc-box's config with a seccomp profile shaped like Docker's default one (what every
    container Docker, Podman or Kubernetes starts runs under), and pipetree told to check that
    the profile still forbids what it forbids."""
    config = json.loads(RUNC_CONFIG.read_text())
    config["process"]["args"] = [*config["process"]["args"], "seccomp"]
    config["linux"]["seccomp"] = seccomp_profile.default_like_profile()
    return json.dumps(config, indent=1).encode() + b"\n"


def build_key(kernel: UnpackedKernel) -> str:
    """Everything that ends up in the image: kernel, init, workload sources, host tool versions."""
    host_tools = [_version_line([BUSYBOX]), _criu_version_line(kernel), _version_line([RUNC, "--version"])]
    host_tools.append(_version_line([XTABLES_MULTI, "iptables", "--version"]))
    inputs = [Path(__file__), Path(seccomp_profile.__file__), GUEST_DIR / "init.sh", RUNC_CONFIG]
    inputs += GUEST_TOOLS + workload_sources()
    return cache.digest(kernel.kernel.key, cache.source_digest(*inputs), *host_tools)


def _criu_version_line(kernel: UnpackedKernel) -> bytes:
    suite = kernel.kernel.criu_suite
    if suite:
        return f"criu {suite_criu.candidate_version(suite)} from Debian {suite}".encode()
    return _version_line([CRIU, "--version"])


def _add_criu(archive: cpio.NewcArchive, kernel: UnpackedKernel) -> list[str]:
    """The guest's criu: the host's (Debian 12's), or the kernel's suite's under its own loader.
    Returns the host libraries it needs."""
    suite = kernel.kernel.criu_suite
    if not suite:
        add_host_path(archive, CRIU)
        return shared_libraries(Path(CRIU))
    root = suite_criu.unpack(suite)
    libs = {
        Path(lib) for lib in shared_libraries(root / suite_criu.CRIU, [*suite_criu.list_command(str(root)), "--list"])
    }
    libs |= {root / suite_criu.LOADER}
    for lib in sorted(libs):
        if not lib.resolve().is_relative_to(root.resolve()):
            raise CorpusError(f"criu of Debian {suite} loads {lib} from outside {root}")
        # by the name the loader looks it up by (a soname is often a symlink to the file)
        archive.file(f"{suite_criu.SUITE_ROOT}/{suite_criu.LIBDIR}/{lib.name}".lstrip("/"), lib.read_bytes(), 0o755)
    archive.file(f"{suite_criu.SUITE_ROOT}/{suite_criu.CRIU}".lstrip("/"), (root / suite_criu.CRIU).read_bytes(), 0o755)
    archive.file(CRIU.lstrip("/"), suite_criu.wrapper(), 0o755)
    return []


def _version_line(cmd: list[str]) -> bytes:
    try:
        return subprocess.run(cmd, capture_output=True).stdout[:200]
    except FileNotFoundError:
        raise CorpusError(f"{cmd[0]} is not installed (apt-get install busybox-static criu runc)") from None


def compile_programs(sources: list[Path], out_dir: Path) -> dict[str, Path]:
    """gcc every NAME.c with the flags on its `/* cflags: ... */` first line."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binaries = {}
    for source in sources:
        first = source.read_text().splitlines()[0] if source.stat().st_size else ""
        match = re.search(r"cflags:(.*?)\*/", first)
        flags = match.group(1).split() if match else []
        binary = out_dir / source.stem
        cmd = ["gcc", "-O2", "-Wall", "-Wextra", "-o", str(binary), str(source), *flags]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise CorpusError(f"compiling {source.name} failed: {result.stderr.strip()[-800:]}")
        binaries[source.stem] = binary
    return binaries


def shared_libraries(binary: Path, lister: Sequence[str] = ("ldd",)) -> list[str]:
    """Absolute paths of the libraries (and the ELF interpreter) `ldd` resolves for a binary,
    or another lister that prints as ldd does (a dynamic loader's --list)."""
    result = subprocess.run([*lister, str(binary)], capture_output=True, text=True)
    if "not a dynamic executable" in result.stdout + result.stderr:
        return []
    if result.returncode != 0:
        raise CorpusError(f"{' '.join(lister)} {binary} failed: {result.stderr.strip()}")
    libs = []
    for line in result.stdout.splitlines():
        match = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if match:
            libs.append(match.group(1))
    return libs


def add_host_path(archive: cpio.NewcArchive, path: str, dest: str | None = None) -> None:
    """Copy a host file into the archive at the same path, recreating every symlink on the way
    (Debian's merged /usr: /lib -> usr/lib), so the dynamic loader finds what ldd found."""
    parts = Path(path).parts[1:]
    current = Path("/")
    for i, part in enumerate(parts):
        current = current / part
        if current.is_symlink():
            target = os.readlink(current)
            archive.symlink(str(current), target)
            rest = Path(*parts[i + 1 :]) if i + 1 < len(parts) else None
            resolved = (current.parent / target).resolve() if not target.startswith("/") else Path(target)
            add_host_path(archive, str(resolved / rest) if rest else str(resolved))
            return
    mode = current.stat().st_mode & 0o777
    archive.file(dest or str(current), current.read_bytes(), mode)


def build(kernel: UnpackedKernel) -> Path:
    """The initramfs for this kernel and the current workloads, built once per cache key."""
    path = cache.entry("initramfs", kernel.kernel.name, build_key(kernel))
    with cache.locked(path):
        if not cache.is_complete(path):
            _build_into(kernel, path)
    return path / "initramfs.cpio.gz"


def _build_into(kernel: UnpackedKernel, path: Path) -> None:
    cache.begin(path)
    binaries = compile_programs(sorted(WORKLOADS_DIR.glob("*.c")) + GUEST_TOOLS, path / "bin")

    archive = cpio.NewcArchive()
    for d in ("dev", "proc", "sys", "run", "tmp", "etc", "root", "mnt", "usr/bin", "usr/sbin", "sbin"):
        archive.directory(d)
    archive.file("bin/busybox", Path(BUSYBOX).read_bytes(), 0o755)
    archive.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    archive.file("etc/group", b"root:x:0:\n")
    archive.file("init", (GUEST_DIR / "init.sh").read_bytes(), 0o755)

    libs = set(_add_criu(archive, kernel))
    for tool in (RUNC, XTABLES_MULTI, *EXTRA_TOOLS):
        add_host_path(archive, tool)
        libs.update(shared_libraries(Path(tool)))
    for name in XTABLES_NAMES:
        archive.symlink(f"usr/sbin/{name}", "xtables-legacy-multi")
    for ext in XTABLES_EXTENSIONS:
        add_host_path(archive, f"{XTABLES_LIBDIR}/{ext}")
        libs.update(shared_libraries(Path(XTABLES_LIBDIR) / ext))
    archive.directory("etc/ovm")
    archive.file("etc/ovm/runc-config.json", RUNC_CONFIG.read_bytes())
    archive.file("etc/ovm/runc-config-userns.json", runc_userns_config())
    archive.file("etc/ovm/runc-config-seccomp.json", runc_seccomp_config())
    for name, mode in RUNC_INET_MODES.items():
        archive.file(f"etc/ovm/runc-config-{name}.json", runc_inet_config(mode))
    for name, binary in binaries.items():
        archive.file(f"bin/{name}", binary.read_bytes(), 0o755)
        libs.update(shared_libraries(binary))
    for script in workload_scripts():
        archive.file(f"bin/{script.stem}", script.read_bytes(), 0o755)
    for lib in sorted(libs):
        add_host_path(archive, lib)

    builtin = (kernel.modules_dir / "modules.builtin").read_text()
    wanted = [m for m in GUEST_MODULES if f"/{m}.ko" not in builtin]
    order = kernel.modules_in_load_order(wanted)
    for module in order:
        archive.file(f"lib/modules/{module}.ko", kernel.module_bytes(module))
    archive.file("lib/modules/load-order", ("\n".join(order) + "\n").encode())

    with open(path / "initramfs.cpio.gz", "wb") as out:
        out.write(gzip.compress(archive.getvalue(), compresslevel=1, mtime=0))
    shutil.rmtree(path / "bin")
    cache.finish(path)
    cache.prune_siblings(path)
