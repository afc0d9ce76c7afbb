"""The watchdog (issue 38): ovm-offline killed with SIGKILL while it holds a live guest (stopped
for a --live read, or in a --precopy or --background snapshot's migration) leaves it as it found
it within a second: running again if it ran, the migration cancelled, the migration settings
given back. A guest someone else paused stays paused, and no watchdog process outlives its
session. Each case runs the library in a process of its own, on a kernel-less QEMU, and kills
that process at a chosen moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ovm_offline.sources.watchdog import FORKED_NAME
from tests.test_sources_live import QEMU, Qemu, _wait_for_firmware, qemu  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def qemu_on_tmpfs(tmp_path):
    if QEMU is None:
        pytest.skip("qemu-system-x86_64 not installed")
    ram_dir = Path("/dev/shm") / f"ovm-watchdog-{os.getpid()}-{tmp_path.name}"
    ram_dir.mkdir()
    vm = Qemu(tmp_path, ram_dir=ram_dir)
    try:
        yield vm
    finally:
        vm.kill()
        for f in ram_dir.iterdir():
            f.unlink()
        ram_dir.rmdir()


def _ended(pid: str) -> bool:
    """A zombie: it has exited, and its parent (this test, for a watchdog forked in it) has not
    yet asked how; a subprocess's watchdog is reaped at the next Popen."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _watchdogs(socket: Path) -> list[str]:
    """The watchdog processes of `socket` still alive: started as a module of their own, or
    forked (named so, with the command line of the process that forked them: this test's, or a
    script's that names the socket)."""
    out = subprocess.run(["pgrep", "-f", f"ovm_offline.sources.watchdog {socket}"], capture_output=True, text=True)
    started = out.stdout.split()
    named = subprocess.run(["pgrep", "-x", FORKED_NAME], capture_output=True, text=True).stdout.split()
    ours = subprocess.run(["pgrep", "-x", "-P", str(os.getpid()), FORKED_NAME], capture_output=True, text=True)
    forked = ours.stdout.split()
    for pid in set(named) - set(forked):
        try:
            if str(socket).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                forked.append(pid)
        except OSError:
            continue  # ended meanwhile
    return started + [pid for pid in forked if not _ended(pid)]


def _held_then_killed(script: str, until: str, tmp_path: Path, sig: int = signal.SIGKILL) -> float:
    """Run `script` (Python, its own process) until it prints `until`, kill it with `sig`; the
    time of the kill."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if line.strip() == until:
            break
        assert time.monotonic() < deadline, "the script never reached its moment"
    else:
        pytest.fail(f"the script ended before {until}: {proc.stderr.read() if proc.stderr else ''}")
    killed = time.monotonic()
    proc.send_signal(sig)
    proc.wait(10)
    return killed


def _running_within(vm: Qemu, killed: float, seconds: float = 1.0) -> float:
    while not vm.status()["running"]:
        assert time.monotonic() - killed < seconds, f"the guest is still paused {seconds} s after the kill"
        time.sleep(0.01)
    return time.monotonic() - killed


def _gone(socket: Path) -> None:
    deadline = time.monotonic() + 5
    while _watchdogs(socket):
        assert time.monotonic() < deadline, f"a watchdog is left: {_watchdogs(socket)}"
        time.sleep(0.05)


def _migration_settings(vm: Qemu) -> tuple[dict, dict]:
    params = vm.cmd("query-migrate-parameters")
    caps = {c["capability"]: c["state"] for c in vm.cmd("query-migrate-capabilities")}
    return {k: params[k] for k in ("max-bandwidth", "downtime-limit")}, caps


LIVE = """
from ovm_offline.sources.live import LiveSource
import time
src = LiveSource({qmp!r}, {ram!r})
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_live_read_killed_while_the_guest_is_stopped_lets_it_run_within_a_second(qemu, tmp_path, sig):  # noqa: F811
    _wait_for_firmware(qemu)
    killed = _held_then_killed(LIVE.format(qmp=str(qemu.qmp_path), ram=str(qemu.ram)), "held", tmp_path, sig)
    _running_within(qemu, killed)
    _gone(qemu.qmp_path)


def test_a_guest_someone_else_paused_stays_paused_when_the_read_is_killed(qemu, tmp_path):  # noqa: F811
    _wait_for_firmware(qemu)
    qemu.cmd("stop")
    _held_then_killed(LIVE.format(qmp=str(qemu.qmp_path), ram=str(qemu.ram)), "held", tmp_path)
    time.sleep(1.5)
    assert not qemu.status()["running"]
    _gone(qemu.qmp_path)


def test_a_normal_end_and_an_error_leave_no_watchdog(qemu, tmp_path):  # noqa: F811
    from ovm_offline.sources.live import LiveSource

    _wait_for_firmware(qemu)
    with LiveSource(qemu.qmp_path, qemu.ram):
        assert len(_watchdogs(qemu.qmp_path)) == 1
    assert qemu.status()["running"]
    _gone(qemu.qmp_path)
    with pytest.raises(RuntimeError), LiveSource(qemu.qmp_path, qemu.ram):
        raise RuntimeError("boom")
    assert qemu.status()["running"]
    _gone(qemu.qmp_path)


PRECOPY = """
from ovm_offline.sources import precopy
import time
moment = {moment!r}
if moment == "streaming":
    follow = precopy._Precopy.follow_migration
    def stalled(self, max_seconds, each_poll):
        print("streaming", flush=True)
        time.sleep(60)
    precopy._Precopy.follow_migration = stalled

def at_stop(execute):
    print("stopped", flush=True)
    time.sleep(60)

precopy.precopy_snapshot({qmp!r}, {out!r}, {ram!r}, on_paused=at_stop)
"""


@pytest.mark.parametrize("moment", ["streaming", "stopped"])
def test_a_precopy_killed_while_streaming_or_stopped_puts_the_guest_back(qemu, tmp_path, moment):  # noqa: F811
    _wait_for_firmware(qemu)
    before = _migration_settings(qemu)
    out = tmp_path / "snap"
    out.mkdir()
    script = PRECOPY.format(moment=moment, qmp=str(qemu.qmp_path), out=str(out), ram=str(qemu.ram))
    killed = _held_then_killed(script, moment, tmp_path)
    _running_within(qemu, killed)
    deadline = time.monotonic() + 5
    while qemu.cmd("query-migrate").get("status") in ("setup", "active", "cancelling", "device"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    _gone(qemu.qmp_path)
    assert _migration_settings(qemu) == before


BACKGROUND = """
from ovm_offline.sources import background
import time
if {moment!r} == "streaming":
    def stalled(self, max_seconds, each_poll):
        print("streaming", flush=True)
        time.sleep(60)
    background._Background.follow_migration = stalled

def at_stop(execute):
    if {moment!r} == "stopped":
        print("stopped", flush=True)
        time.sleep(60)

# a stop of our own only where the test holds us in it: otherwise the stop is QEMU's
background.background_snapshot({qmp!r}, {out!r}, {ram!r}, on_paused=at_stop if {moment!r} == "stopped" else None)
"""


@pytest.mark.parametrize("moment", ["stopped", "streaming"])
def test_a_background_snapshot_killed_at_its_stop_or_streaming_puts_the_guest_back(qemu_on_tmpfs, tmp_path, moment):
    _wait_for_firmware(qemu_on_tmpfs)
    before = _migration_settings(qemu_on_tmpfs)
    out = tmp_path / "snap"
    out.mkdir()
    script = BACKGROUND.format(moment=moment, qmp=str(qemu_on_tmpfs.qmp_path), out=str(out), ram=str(qemu_on_tmpfs.ram))
    killed = _held_then_killed(script, moment, tmp_path)
    _running_within(qemu_on_tmpfs, killed)
    _gone(qemu_on_tmpfs.qmp_path)
    assert _migration_settings(qemu_on_tmpfs) == before
    assert qemu_on_tmpfs.cmd("query-migrate").get("status") not in ("setup", "active", "cancelling", "device")
