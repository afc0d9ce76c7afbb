"""Running `ovm-offline` as a user does, and what tests compare its output with."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from ovm_offline.errors import ExitCode


def ovm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`ovm-offline ARGS` in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "ovm_offline", *args], capture_output=True, text=True, timeout=timeout)


def dump_from(source, pid: int, out: Path, *options: str) -> Path:
    """`ovm-offline dump` of `pid` into `out`, which must succeed and say what it dumped."""
    return _assert_dumped(ovm("dump", str(source), "--pid", str(pid), "-D", str(out), *options), pid, out)


def _assert_dumped(result, pid: int, out: Path) -> Path:
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


@dataclasses.dataclass(frozen=True)
class MomentRefused:
    """A dump refused for the moment of the pause alone (exit 8): what it said."""

    message: str


#: moments a live dump of a running guest may try: a thread caught mid-way through a call, or
#: entering the kernel, is refused by name (exit 8), and another moment is taken
MOMENTS = 8

#: the refusals of a moment: a thread mid-way through a call, entering or leaving the kernel, or
#: being switched on or off a CPU
MOMENT_REFUSAL = re.compile(
    r"thread (\d+) (?:is inside [\w ]+\(\): it (?:was running there on vCPU (\d+)|is runnable there"
    r"|is in uninterruptible sleep)|was entering or leaving the kernel on vCPU (\d+)"
    r"|was being switched on or off CPU \d+)"
)


def dump_or_moment(rec, out: Path) -> Path | MomentRefused:
    """`ovm-offline dump` of an as-is recording's root from its ELF dump: the images, or the
    refusal of the moment the recorder paused at, checked: it names a thread of the workload
    and, where it says so, a vCPU that thread was on; nothing is written."""
    root = rec.manifest["root_pid"]
    result = ovm("dump", str(rec.elf), "--pid", str(root), "-D", str(out), *vcpu_state_of(rec))
    if result.returncode != ExitCode.MOMENT:
        return _assert_dumped(result, root, out)
    message = result.stderr.strip().splitlines()[-1]
    found = MOMENT_REFUSAL.search(message)
    assert found and not out.exists(), message
    tids = {t["pid"] for m in rec.manifest["member_details"].values() for t in m["tasks"]}
    assert int(found.group(1)) in tids, f"{message}: not a thread of {sorted(tids)}"
    vcpu = found.group(2) or found.group(3)
    if vcpu is not None:
        listed = ovm("ps", str(rec.elf), "--json")
        on_cpu = {tid: cpu for line in listed.stdout.splitlines() for tid, cpu in json.loads(line)["on_cpu"]}
        assert on_cpu.get(int(found.group(1))) == int(vcpu), f"{message}: ps says {on_cpu}"
    return MomentRefused(message)
