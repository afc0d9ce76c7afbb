"""A recorder stopped from outside (CI's time limit, a developer's kill) leaves no guest behind:
its worker processes and their QEMUs end with it, whatever signal ended it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpus import initramfs, kernels
from corpus.cache import cache_root

pytestmark = pytest.mark.guest

ROOT = Path(__file__).resolve().parents[1]


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _descendants(pid: int) -> set[int]:
    children, found, frontier = _children(), set(), [pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive(pids: set[int]) -> set[int]:
    # a zombie is ended: only its parent's wait is left
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_recorder_ended_by_a_signal_leaves_no_worker_or_guest_running(tmp_path, sig):
    kernel = kernels.unpack(kernels.get_kernel("6.1"))
    initramfs.build(kernel)
    # a cache of its own for the recordings, sharing the unpacked kernel and the initramfs
    cache = tmp_path / "cache"
    cache.mkdir()
    for kind in ("kernels", "initramfs"):
        (cache / kind).symlink_to(cache_root() / kind)
    log = tmp_path / "record.log"
    with open(log, "wb") as err:
        recorder = subprocess.Popen(
            [sys.executable, "-m", "corpus", "record", "--kernel", "6.1", "--workload", "counter"]
            + ["--workload", "threads", "--jobs", "2"],
            cwd=ROOT,
            env={**os.environ, "OVM_CORPUS_CACHE": str(cache)},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    below: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while len([p for p in _descendants(recorder.pid) if _comm(p).startswith("qemu")]) < 2:
            assert recorder.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"two guests did not start:\n{log.read_text()}"
            time.sleep(0.5)
        below = _descendants(recorder.pid)
        os.kill(recorder.pid, sig)
        recorder.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(below) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {pid: _comm(pid) for pid in _alive(below)}
        assert not left, f"still running after the recorder ended: {left}"
    finally:
        below |= _descendants(recorder.pid)
        recorder.kill()
        for pid in _alive(below):
            os.kill(pid, signal.SIGKILL)
