"""Background snapshots (sources/background.py) of a real, kernel-less QEMU whose RAM is on
tmpfs: the snapshot is guest RAM at the moment the guest stopped, its vCPUs as QEMU saved them
at its own stop (sources/vmstate.py), the guest runs again whatever happens, and what QEMU cannot
protect is refused before the guest is stopped."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ovm_offline.errors import SourceError
from ovm_offline.sources import open_source
from ovm_offline.sources import qmp as qmp_module
from ovm_offline.sources.background import CAPABILITY, background_snapshot
from ovm_offline.sources.hmp_registers import parse_registers
from ovm_offline.sources.vmstate import MAX_VMSTATE_BYTES, vcpus_from_vmstate
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
        (["--background", "guest.elf"], "--background takes --live --qmp SOCKET (and no SOURCE)"),
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
    with pytest.raises(SourceError, match=r"copy-of-ram: is not the memory of any memory backend of this QEMU"):
        background_snapshot(vm.qmp_path, snap, copy)
    assert vm.status()["running"]
    assert "status" not in vm.cmd("query-migrate"), "a migration was started"
    assert not (snap / "guest-ram").exists()


def _hmp_vcpus(vm: Qemu):
    return parse_registers(vm.cmd("human-monitor-command", **{"command-line": "info registers -a"}))


def _wait_for_halted_firmware(vm: Qemu) -> None:
    """SeaBIOS halts once it finds nothing to boot; under load that takes longer than any fixed
    wait, so wait until five samples 0.1 s apart agree."""
    _wait_for_firmware(vm)
    deadline = time.monotonic() + 60
    samples = [_hmp_vcpus(vm)]
    while time.monotonic() < deadline:
        time.sleep(0.1)
        samples = [*samples[-4:], _hmp_vcpus(vm)]
        if len(samples) == 5 and all(s == samples[0] for s in samples):
            return
    pytest.fail(f"the firmware did not halt in 60 s: {samples[-1]}")


def test_the_vcpus_are_those_qemu_saved_at_its_own_stop_with_no_stop_of_ours(qemu_on_tmpfs, tmp_path, monkeypatch):
    """QEMU stops the guest itself, once RAM is ready to protect; our own stop before it held
    QEMU's preparation (every page of RAM read) inside the pause. The firmware's vCPU is halted,
    so HMP's registers before and after are those QEMU saved at its stop."""
    vm = qemu_on_tmpfs
    _wait_for_halted_firmware(vm)
    commands: list[str] = []
    real_execute = qmp_module.QmpSession.execute

    def execute(self, command, arguments=None):
        commands.append(" ".join([command, *(arguments or {}).get("command-line", "").split()[:2]]))
        return real_execute(self, command, arguments)

    before = _hmp_vcpus(vm)
    monkeypatch.setattr(qmp_module.QmpSession, "execute", execute)
    snap = _snapshot_dir(tmp_path)
    report = background_snapshot(vm.qmp_path, snap, vm.ram)
    monkeypatch.undo()
    assert "migrate" in commands and not {"stop", "human-monitor-command info registers"} & set(commands), commands
    assert sorted(p.name for p in snap.iterdir()) == ["guest-ram", "mtree.txt", "vmstate"]
    assert report.paused_seconds is not None and vm.status()["running"]
    assert _hmp_vcpus(vm) == before, "the halted firmware moved: the comparison would prove nothing"
    with open_source(snap) as src:
        vcpus = src.vcpus()
    # HMP prints no MSR_KERNEL_GS_BASE; QEMU's device state has it
    assert [dataclasses.replace(v, kernel_gs_base=None) for v in vcpus] == before
    assert len(vcpus) == 1 and vcpus[0].kernel_gs_base == 0 and vcpus[0].rip


def _split(vmstate: bytes) -> tuple[bytes, dict]:
    at = vmstate.rfind(b'{"page_size"')
    return vmstate[: at - 6], json.loads(vmstate[at:])


def _joined(sections: bytes, desc: dict) -> bytes:
    text = json.dumps(desc).encode()
    return sections + b"\x00\x06" + struct.pack(">I", len(text)) + text


def _cpu(desc: dict) -> dict:
    return next(d for d in desc["devices"] if d["name"] == "cpu")


def _renamed_cpu(desc: dict) -> dict:
    _cpu(desc)["name"] = "cpu-renamed"
    return desc


def _absurd_array(desc: dict) -> dict:
    _cpu(desc)["fields"][0]["array_len"] = 10**9
    return desc


def _made_up_subsection(desc: dict, where: int) -> dict:
    _cpu(desc).setdefault("subsections", []).insert(where, {"vmsd_name": "cpu/made-up", "fields": []})
    return desc


def _no_regs(desc: dict) -> dict:
    _cpu(desc)["fields"][0]["name"] = "env.not_regs"
    return desc


@pytest.mark.parametrize(
    "mutate,said",
    [
        (lambda s, d: s[: len(s) // 2], "QEMU sent no description of its device state"),
        (lambda s, d: _joined(s[: len(s) // 2], d), "QEMU's device state is not as its description says"),
        (lambda s, d: _joined(s, _renamed_cpu(d)), "section 'cpu' 0 has no description"),
        (lambda s, d: _joined(s, _absurd_array(d)), "QEMU's device state is not as its description says"),
        (lambda s, d: _joined(s, _made_up_subsection(d, 99)), "subsection 'cpu/made-up' is not where it was sent"),
        (lambda s, d: _joined(s, _made_up_subsection(d, 0)), "subsection 'cpu/poll_control_msr' where 'cpu/made-up'"),
        (lambda s, d: _joined(s, _no_regs(d)), "vCPU 0: QEMU's x86 vCPU state has no field env.regs of 16"),
        (lambda s, d: _joined(s, {"devices": []}), "section 'timer' 0 has no description"),
        (lambda s, d: _joined(b"", d), 'no x86 vCPU (no "cpu" section)'),
        (lambda s, d: _joined(s, d) + bytes(MAX_VMSTATE_BYTES), "than 64 MiB"),
    ],
)
def test_a_device_state_not_as_described_is_refused_in_one_line(qemu_on_tmpfs, tmp_path, mutate, said):
    vm = qemu_on_tmpfs
    _wait_for_firmware(vm)
    snap = _snapshot_dir(tmp_path)
    background_snapshot(vm.qmp_path, snap, vm.ram)
    vmstate = (snap / "vmstate").read_bytes()
    assert vcpus_from_vmstate(_joined(*_split(vmstate)), "x") == vcpus_from_vmstate(vmstate, "x")
    broken = mutate(*_split(vmstate))
    with pytest.raises(SourceError, match=re.escape(said)) as e:
        vcpus_from_vmstate(broken, "snap/vmstate")
    assert "\n" not in str(e.value)
    (snap / "vmstate").write_bytes(broken)
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "ps", str(snap)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and said in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_a_machine_that_suppresses_its_vmdesc_is_refused_before_the_guest_stops(tmp_path):
    """Without the description of its device state, the vCPUs' registers cannot be read from the
    stream: refused before anything of the guest changes."""
    if QEMU is None:
        pytest.skip("qemu-system-x86_64 not installed")
    ram_dir = Path(tempfile.mkdtemp(prefix="ovm-test-ram-", dir="/dev/shm"))
    memory = [
        "-machine",
        "pc,accel=tcg,memory-backend=ram0,suppress-vmdesc=on",
        "-object",
        f"memory-backend-file,id=ram0,size=64M,mem-path={ram_dir / 'ram'},share=on",
        "-m",
        "64M",
    ]
    vm = Qemu(tmp_path, ram_dir=ram_dir, memory=memory)
    try:
        _wait_for_firmware(vm)
        before = _settings(vm)
        snap = _snapshot_dir(tmp_path)
        with pytest.raises(SourceError, match=r"sends no description of its device state \(suppress-vmdesc=on\)"):
            background_snapshot(vm.qmp_path, snap, ram_dir / "ram")
        assert vm.status()["running"] and _settings(vm) == before and not any(snap.iterdir())
        assert "status" not in vm.cmd("query-migrate"), "a migration was started"
    finally:
        vm.kill()
        shutil.rmtree(ram_dir, ignore_errors=True)
