"""The pinned guest kernels: Debian cloud images fetched with apt-get download and unpacked."""

from __future__ import annotations

import dataclasses
import lzma
import subprocess
from pathlib import Path

from . import cache
from .errors import CorpusError


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str  # short name used on the command line and in cache keys
    package: str
    version: str  # Debian package version
    release: str  # uname -r, the directory under lib/modules

    @property
    def key(self) -> str:
        return cache.digest(self.package, self.version)


KERNELS = {
    k.name: k
    for k in (
        Kernel("6.1", "linux-image-6.1.0-56-cloud-amd64", "6.1.192-2", "6.1.0-56-cloud-amd64"),
        Kernel(
            "6.12",
            "linux-image-6.12.117+deb12-cloud-amd64",
            "6.12.117-1~deb12u1",
            "6.12.117+deb12-cloud-amd64",
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
        return self.root / "boot" / f"vmlinuz-{self.kernel.release}"

    @property
    def modules_dir(self) -> Path:
        return self.root / "lib" / "modules" / self.kernel.release

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

    def module_depends(self, name: str) -> list[str]:
        """Dependencies from the module's .modinfo `depends=` string (no modules.dep in the .deb)."""
        for field in self.module_bytes(name).split(b"\0"):
            if field.startswith(b"depends="):
                return [d for d in field[len(b"depends=") :].decode().split(",") if d]
        return []

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


def unpack(kernel: Kernel) -> UnpackedKernel:
    """Fetch the pinned kernel package (apt-get download) and unpack it, once per cache."""
    path = cache.entry("kernels", kernel.name, kernel.key)
    with cache.locked(path):
        return _unpack_locked(kernel, path)


def _unpack_locked(kernel: Kernel, path: Path) -> UnpackedKernel:
    if cache.is_complete(path):
        return UnpackedKernel(kernel, path / "root")
    cache.begin(path)
    spec = f"{kernel.package}={kernel.version}"
    result = subprocess.run(["apt-get", "download", spec], cwd=path, capture_output=True, text=True)
    debs = list(path.glob("*.deb"))
    if result.returncode != 0 or not debs:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CorpusError(f"apt-get download {spec} failed: {tail[0]} (run 'apt-get update' first?)")
    result = subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(path / "root")], capture_output=True, text=True)
    if result.returncode != 0:
        raise CorpusError(f"dpkg-deb -x {debs[0].name} failed: {result.stderr.strip()}")
    debs[0].unlink()
    cache.finish(path)
    return UnpackedKernel(kernel, path / "root")
