"""Background snapshots (sources/background.py) of a real, kernel-less QEMU whose RAM is on
tmpfs: the snapshot is guest RAM at the moment we stopped the guest, the guest runs again
whatever happens, and what QEMU cannot protect is refused before the guest is stopped."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ovm_offline.errors import SourceError
from ovm_offline.sources import open_source
from ovm_offline.sources.background import CAPABILITY, background_snapshot
from tests.test_sources_live import QEMU, Qemu, _wait_for_firmware, qemu  # noqa: F401  (the fixture)


@pytest.fixture
def qemu_on_tmpfs(tmp_path):
    if QEMU is None:
        pytest.skip("qemu-system-x86_64 not installed")
    ram_dir = Path(tempfile.mkdtemp(prefix="ovm-test-ram-", dir="/dev/shm"))
    vm = Qemu(tmp_path, ram_dir=ram_dir)
    try:
        yield vm
    finally:
        vm.kill()
        shutil.rmtree(ram_dir, ignore_errors=True)


def _snapshot_dir(tmp_path: Path) -> Path:
    d = tmp_path / "snapshot"
    d.mkdir()
    return d


def _settings(vm: Qemu) -> tuple[dict, bool]:
    capabilities = {c["capability"]: c["state"] for c in vm.cmd("query-migrate-capabilities")}
    return vm.cmd("query-migrate-parameters"), capabilities[CAPABILITY]


def test_the_snapshot_is_guest_ram_at_the_stop_and_the_guest_runs_on(qemu_on_tmpfs, tmp_path):
    vm = qemu_on_tmpfs
    _wait_for_firmware(vm)
    before = _settings(vm)
    at_stop = tmp_path / "ram-at-stop"
    seen: list[dict] = []

    def paused(execute):
        seen.append(execute("query-status"))
        allocated.append(vm.ram.stat().st_blocks * 512)
        shutil.copyfile(vm.ram, at_stop)

    allocated: list[int] = []
    holes_before = vm.ram.stat().st_blocks * 512 < 64 << 20
    snap = _snapshot_dir(tmp_path)
    report = background_snapshot(vm.qmp_path, snap, vm.ram, on_paused=paused)
    # QEMU reads each page before it protects RAM, inside the pause: no hole is left for it to fill
    assert holes_before and allocated == [64 << 20]
    assert seen and not seen[0]["running"], "on_paused ran while the guest ran"
    assert (snap / "guest-ram").read_bytes() == at_stop.read_bytes()
    assert any(at_stop.read_bytes()[:0x100000]), "firmware left no trace in RAM; the comparison proved nothing"
    assert vm.status()["running"]
    assert 0 < report.paused_seconds < 30 and report.ram.block == "ram0"
    assert report.ram.pages + report.ram.zero_pages == (64 << 20) // 4096 and report.ram.resent == 0
    assert "background snapshot: guest paused for" in report.line()
    assert _settings(vm) == before, "the migration settings were not given back"
    with open_source(snap) as src:  # a recorded live snapshot like any other
        assert src.read(0xF0000, 0x10000) == at_stop.read_bytes()[0xF0000:0x100000]
        assert len(src.vcpus()) == 1


def test_a_guest_paused_before_is_refused_and_left_paused(qemu_on_tmpfs, tmp_path):
    vm = qemu_on_tmpfs
    assert not vm.status()["running"]
    snap = _snapshot_dir(tmp_path)
    with pytest.raises(SourceError, match="the guest is paused, and QEMU starts a guest when its background"):
        background_snapshot(vm.qmp_path, snap, vm.ram)
    assert not vm.status()["running"] and not any(snap.iterdir())


@pytest.mark.parametrize("exc_type", [RuntimeError, KeyboardInterrupt])
def test_the_guest_runs_again_after_an_error_at_the_stop(qemu_on_tmpfs, tmp_path, exc_type):
    vm = qemu_on_tmpfs
    _wait_for_firmware(vm)

    def paused(execute):
        raise exc_type("boom")

    before = _settings(vm)
    with pytest.raises(exc_type):
        background_snapshot(vm.qmp_path, _snapshot_dir(tmp_path), vm.ram, on_paused=paused)
    assert vm.status()["running"]
    assert _settings(vm) == before
    assert vm.cmd("query-migrate").get("status") in (None, "none")


def test_ram_on_a_disk_file_system_is_refused_without_stopping_the_guest(qemu, tmp_path):  # noqa: F811
    _wait_for_firmware(qemu)
    before = _settings(qemu)
    with pytest.raises(SourceError, match=r"its RAM must be a memory-backend-file on tmpfs .* use --precopy") as e:
        background_snapshot(qemu.qmp_path, _snapshot_dir(tmp_path), qemu.ram)
    assert "\n" not in str(e.value) and "not compatible with guest memory configuration" in str(e.value)
    assert qemu.status()["running"] and _settings(qemu) == before


@pytest.mark.parametrize(
    "args,said",
    [
        (["--background", "guest.elf"], "--background takes --live --qmp SOCKET --mem FILE"),
        (["--live", "--qmp", "q", "--mem", "m", "--background", "--precopy"], "give --precopy or --background"),
    ],
)
def test_background_usage(args, said):
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "dump", *args, "-t", "1", "-D", "/nonexistent/x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and said in result.stderr


def test_a_full_disk_while_streaming_is_one_line_and_the_guest_runs_on(qemu_on_tmpfs, tmp_path, monkeypatch):
    """The guest runs while RAM streams, its writes waiting for pages not sent yet: a reader
    that fails must neither stall it (the reader drains the stream) nor leave it stopped."""
    import errno
    import os

    from ovm_offline.errors import OutputError

    vm = qemu_on_tmpfs
    _wait_for_firmware(vm)
    before = _settings(vm)
    real_pwrite = os.pwrite
    writes = []

    def filling(fd, data, offset):
        writes.append(offset)
        if len(writes) > 10:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", filling)
    with pytest.raises(OutputError, match=r"cannot write .*guest-ram: No space left on device \(.* MiB free on") as e:
        background_snapshot(vm.qmp_path, _snapshot_dir(tmp_path), vm.ram)
    assert "\n" not in str(e.value)
    assert vm.status()["running"]
    assert _settings(vm) == before
    assert vm.cmd("query-migrate")["status"] in ("cancelled", "cancelling", "failed", "completed")


def test_a_memory_file_that_is_not_this_guests_ram_is_refused_before_the_guest_stops(qemu_on_tmpfs, tmp_path):
    vm = qemu_on_tmpfs
    _wait_for_firmware(vm)
    copy = tmp_path / "copy-of-ram"
    shutil.copyfile(vm.ram, copy)
    snap = _snapshot_dir(tmp_path)
    with pytest.raises(SourceError, match=r"copy-of-ram: is not the mem-path of any memory backend of this QEMU"):
        background_snapshot(vm.qmp_path, snap, copy)
    assert vm.status()["running"]
    assert "status" not in vm.cmd("query-migrate"), "a migration was started"
    assert not (snap / "guest-ram").exists()
