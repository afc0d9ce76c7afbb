"""Running one case: a forked child applies a mutation and runs what a user runs; the parent
times it, measures its memory and checks the host afterwards.

A case ends as one of OUTCOMES. `ok` and `refused` are fine; `changed` (a plain value was
mutated and the result followed it) and `warned` (the result changed and a warning said why)
too. Everything else fails the gate: `hang` (no end within the time limit), `internal error`
(an exception that is no OvmError, or a signal), `silently different` (a mutation that breaks
a structural invariant changed a successful result without a word), `partial output`,
`host damage` (a file outside the target changed)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ovm_offline.errors import OvmError

FINE = ("ok", "refused", "changed", "warned")
BAD = ("hang", "internal error", "silently different", "partial output", "host damage", "too much memory")
OUTCOMES = FINE + BAD

#: a case that runs longer is a hang (the issue's gate)
CASE_TIMEOUT = 60.0
#: peak RSS a single case may reach (the issue's gate)
MAX_RSS_MIB = 300


@dataclass
class Mutation:
    """What a case changed: `structural` if it breaks an invariant a reader can check
    (alignment, range, type tag, a list that must close), not a plain value."""

    family: str
    what: str
    structural: bool
    apply: Callable[[], object] = field(repr=False, default=lambda: None)


@dataclass
class Result:
    """What the child saw: the outcome of the operation and a fingerprint of what it made."""

    outcome: str
    detail: str = ""
    fingerprint: str = ""
    warnings: int = 0
    growth_mib: float = 0.0  # how far the child's resident set rose above where it began


@dataclass
class Case:
    index: int
    mutation: str
    structural: bool
    outcome: str
    detail: str
    seconds: float
    rss_mib: float


class _CountWarnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def digest_tree(directory: Path) -> str:
    """A hash of every file's name and bytes under `directory`."""
    h = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        h.update(str(path.relative_to(directory)).encode())
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def run_in_child(
    operation: Callable[[], str], mutation: Mutation, timeout: float = CASE_TIMEOUT
) -> tuple[Result, float, float]:
    """Fork; the child applies `mutation` and runs `operation` (which returns a fingerprint of
    its result); returns the child's Result, its wall time and how much its resident set
    grew at its peak (MiB)."""
    read_end, write_end = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        code = 0
        try:
            warned = _CountWarnings()
            logging.getLogger("ovm_offline").addHandler(warned)
            # the peak a forked child reports starts at its parent's: reset it, start counting
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")
            start = _status_mib("VmRSS")
            try:
                mutation.apply()
                result = Result("ok", fingerprint=operation())
            except OvmError as exc:
                result = Result("refused", f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                result = Result("internal error", f"{type(exc).__name__}: {exc} at {tb.filename}:{tb.lineno}")
            result.warnings = warned.count
            result.growth_mib = max(0.0, _status_mib("VmHWM") - start)
            os.write(write_end, json.dumps(result.__dict__).encode()[:60000])
        except BaseException:  # noqa: BLE001
            code = 70
        finally:
            os._exit(code)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = started + timeout
    hung = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            hung = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([read_end], [], [], left)
        if ready:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - started
    if hung:
        return Result("hang", f"no end within {timeout:.0f} s"), seconds, 0.0
    if not chunks:
        return Result("internal error", f"child died: wait status {status:#x}"), seconds, 0.0
    result = Result(**json.loads(b"".join(chunks)))
    return result, seconds, result.growth_mib


def classify(result: Result, mutation: Mutation, baseline: str, rss_mib: float, max_rss_mib: float | None) -> Result:
    """The case's outcome against the unmutated run's fingerprint `baseline`."""
    if result.outcome == "ok" and result.fingerprint != baseline:
        if result.warnings:
            result.outcome = "warned"
        elif mutation.structural:
            result.outcome = "silently different"
        else:
            result.outcome = "changed"
    if result.outcome in FINE and max_rss_mib is not None and rss_mib > max_rss_mib:
        result = Result("too much memory", f"peak RSS {rss_mib:.0f} MiB", result.fingerprint)
    return result


def _status_mib(field: str) -> float:
    """A size from /proc/self/status (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def fresh_process_mib() -> float:
    """Peak RSS of a fresh interpreter that has imported ovm-offline's CLI (MiB)."""
    import subprocess
    import sys

    code = "import resource, ovm_offline.cli; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout) / 1024


def leftovers(directory: Path) -> list[str]:
    """Partial outputs a run left in `directory`: temporary image directories or dump files."""
    return sorted(p.name for p in directory.iterdir() if ".partial-" in p.name or p.name.endswith(".tmp"))


@dataclass
class Report:
    family: str
    kernel: str
    seed: int
    cases: list[Case] = field(default_factory=list)

    def add(self, case: Case) -> None:
        self.cases.append(case)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(OUTCOMES, 0)
        for case in self.cases:
            counts[case.outcome] += 1
        return counts

    def failures(self) -> list[Case]:
        return [c for c in self.cases if c.outcome in BAD]

    def summary(self) -> dict[str, object]:
        seconds = [c.seconds for c in self.cases] or [0.0]
        return {
            "family": self.family,
            "kernel": self.kernel,
            "seed": self.seed,
            "cases": len(self.cases),
            "outcomes": self.counts(),
            "max_seconds": round(max(seconds), 2),
            "max_rss_mib": round(max((c.rss_mib for c in self.cases), default=0.0), 1),
            "failures": [c.__dict__ for c in self.failures()[:50]],
        }
