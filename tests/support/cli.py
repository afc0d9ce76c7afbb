"""Running `ovm-offline` as a user does, and what tests compare its output with."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path


def ovm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`ovm-offline ARGS` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "ovm_offline.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def dump_from(source, pid: int, out: Path) -> Path:
    """`ovm-offline dump` of `pid` into `out`, which must succeed and say what it dumped."""
    result = ovm("dump", str(source), "--pid", str(pid), "-D", str(out))
    assert result.returncode == 0, result.stderr
    assert f"dumped pid {pid}" in result.stderr and "pages" in result.stderr, result.stderr
    return out


def tree_digest(directory: Path) -> dict[str, str]:
    """File name -> sha256 of every file in `directory`."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}
