"""A CRIU from another Debian suite, with that suite's own libraries, for guests whose kernel
Debian 12's criu 3.17 does not start on (7.2: "vdso: Unexpected rt vDSO area bounds").

The suite's criu and its dependency closure are downloaded with ../shared/kernels/apt-suite's
package lists (the system's sources untouched, an empty dpkg status so that nothing of the host
counts as installed) and unpacked into a root. The guest gets that root under SUITE_ROOT and a
/usr/sbin/criu that runs the suite's criu through the suite's own dynamic loader, so the suite's
glibc and the host's (which every other guest program uses) never meet in one process."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from . import cache
from .errors import CorpusError
from .kernels import SHARED_KERNELS

#: where the suite's root lies in the guest
SUITE_ROOT = "/opt/criu-suite"
LIBDIR = "usr/lib/x86_64-linux-gnu"
LOADER = f"{LIBDIR}/ld-linux-x86-64.so.2"
CRIU = "usr/sbin/criu"


def apt_options(suite: str) -> list[str]:
    """apt-get options that read `suite`'s package lists (fetched by apt-suite, at most daily),
    and nothing of the host's: its dpkg status would offer the host's own criu as the suite's
    candidate whenever the suite's lists lack it."""
    # one apt-suite at a time: a second one reading the lists while the first replaces them
    # (the daily update) found no criu there (a CI run downloaded "criu 3.17.1-2+deb12u2 from sid")
    with cache.locked(cache.entry("suite-criu", suite, "apt-lists")):
        result = subprocess.run([str(SHARED_KERNELS / "apt-suite"), suite], capture_output=True, text=True)
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise CorpusError(f"apt-suite {suite} failed: {tail[0]}")
    return [*result.stdout.split(), "-o", "Dir::State::status=/dev/null"]


@functools.cache  # once per process: every initramfs key asks
def candidate_version(suite: str, package: str = "criu") -> str:
    result = subprocess.run(
        ["apt-cache", *apt_options(suite), "show", "--no-all-versions", package], capture_output=True, text=True
    )
    match = re.search(r"^Version: (\S+)", result.stdout, re.M)
    if result.returncode != 0 or not match:
        raise CorpusError(f"Debian {suite} has no package {package}")
    return match.group(1)


@functools.cache
def unpack(suite: str) -> Path:
    """The root holding `suite`'s criu and everything it needs, downloaded once per cache and
    version."""
    version = candidate_version(suite)
    path = cache.entry("suite-criu", suite, cache.digest(suite, version))
    with cache.locked(path):
        if not cache.is_complete(path):
            _unpack_into(suite, version, path)
    return path / "root"


def _unpack_into(suite: str, version: str, path: Path) -> None:
    cache.begin(path)
    archives = path / "archives"
    (archives / "partial").mkdir(parents=True)
    cmd = [
        "apt-get",
        *apt_options(suite),
        "-o",
        f"Dir::Cache::archives={archives}",
        "-o",
        "Debug::NoLocking=1",
        "--no-install-recommends",
        "--download-only",
        "-y",
        "install",
        f"criu={version}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    debs = sorted(archives.glob("*.deb"))
    if result.returncode != 0 or not debs:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise CorpusError(f"downloading criu {version} from Debian {suite} failed: {tail[0]}")
    for deb in debs:
        unpacked = subprocess.run(["dpkg-deb", "-x", str(deb), str(path / "root")], capture_output=True, text=True)
        if unpacked.returncode != 0:
            raise CorpusError(f"dpkg-deb -x {deb.name} failed: {unpacked.stderr.strip()}")
        deb.unlink()
    cache.finish(path)
    cache.prune_siblings(path)


def list_command(root: str) -> list[str]:
    """The suite's loader, told to use only the suite's libraries: add a binary to run it, or
    "--list" and a binary to list what it would load (as ldd does)."""
    return [f"{root}/{LOADER}", "--library-path", f"{root}/{LIBDIR}"]


def wrapper() -> bytes:
    """The guest's /usr/sbin/criu: runc and the job scripts find criu there, on PATH."""
    return ("#!/bin/sh\nexec " + " ".join([*list_command(SUITE_ROOT), f"{SUITE_ROOT}/{CRIU}"]) + ' "$@"\n').encode()
