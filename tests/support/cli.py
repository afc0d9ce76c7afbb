"""Running `ovm-offline` as a user does, and what tests compare its output with."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path


def ovm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`ovm-offline ARGS` in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "ovm_offline", *args], capture_output=True, text=True, timeout=timeout)


def dump_from(source, pid: int, out: Path, *options: str) -> Path:
    """`ovm-offline dump` of `pid` into `out`, which must succeed and say what it dumped."""
    result = ovm("dump", str(source), "--pid", str(pid), "-D", str(out), *options)
    assert result.returncode == 0, result.stderr
    assert f"dumped pid {pid}" in result.stderr and "pages" in result.stderr, result.stderr
    return out


def tree_digest(directory: Path) -> dict[str, str]:
    """File name -> sha256 of every file in `directory`."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def vcpu_state_of(rec) -> tuple[str, ...]:
    """The `--vcpu-state` option for a dump file of an as-is recording: the HMP `info
    registers -a` text the recorder captured at the dump's moment (a dump file has no FPU
    registers of the threads that were on a vCPU)."""
    if rec.manifest.get("moment") != "as-is":
        return ()
    return ("--vcpu-state", str(rec.live_dir / "registers.txt"))
