"""`dump --live --background` of a guest nobody stopped anything in, its RAM on tmpfs: QEMU
stops it only to save its device state (the vCPUs' registers among it) and write-protect its RAM,
and RAM then streams while the workload runs on (memhog-writer rewrites its pages meanwhile).

A snapshot taken with a stop of the test's own before QEMU's (`on_paused`) is checked against
what the test sees there: the vCPUs read from QEMU's device state are those HMP prints at that
stop, register for register, FPU and vector registers included, and its images are exactly those
of a one-pause dump of that stop (a dump-guest-memory taken right there gives byte-identical
images). The CLI's snapshot (QEMU's stop alone) restores in a fresh guest and the workload's
checks pass."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from corpus import kernels
from corpus.recorder import record_with_live_dump
from corpus.restore import restore
from ovm_offline.errors import ExitCode
from ovm_offline.sources import open_source
from ovm_offline.sources.background import background_snapshot
from ovm_offline.sources.hmp_registers import parse_registers
from tests.support.cli import MOMENTS, dump_from, ovm, tree_digest
from tests.support.corpus_cases import skip_unless_live

KERNELS = list(kernels.KERNELS)
# threads on the vCPUs at the stop (their registers come from the stop), and memory rewritten
# while it streams (1% of 64 MiB a second, each page with its next generation)
WORKLOADS = ["spinners", "memhog-writer"]
pytestmark = [pytest.mark.guest, pytest.mark.slow]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_background_images_are_those_of_the_stop_and_restore(tmp_path, ram_on_tmpfs, kernel, workload):
    skip_unless_live(kernel, workload)
    snapshot, at_stop, images = tmp_path / "snapshot", tmp_path / "at-stop.elf", tmp_path / "images"
    hmp_registers = tmp_path / "registers-at-stop.txt"
    from_snapshot = tmp_path / "from-snapshot"
    said: list[str] = []

    def dump_live(guest, root):
        def paused(execute):
            execute("dump-guest-memory", {"paging": False, "protocol": f"file:{at_stop}"})
            hmp_registers.write_text(execute("human-monitor-command", {"command-line": "info registers -a"}))

        for _ in range(MOMENTS):  # a thread caught mid-way (exit 8): the test's snapshot takes another moment
            shutil.rmtree(snapshot, ignore_errors=True)
            at_stop.unlink(missing_ok=True)
            snapshot.mkdir()
            report = background_snapshot(guest.qmp_tool_path, snapshot, guest.memory_file, on_paused=paused)
            assert report.ram.pages > 0 and report.ram.resent == 0
            assert guest.command("query-status")["running"]
            first = ovm("dump", str(snapshot), "--pid", str(root), "-D", str(from_snapshot))
            if first.returncode != ExitCode.MOMENT:
                break
        assert first.returncode == 0, first.stderr
        result = ovm(
            "dump", "--live", "--background", "--qmp", str(guest.qmp_tool_path), "--mem", str(guest.memory_file),
            "--pid", str(root), "-D", str(images), "--attempts", str(MOMENTS),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        said.append(result.stderr)

    rec = record_with_live_dump(
        kernel, workload, tmp_path / "rec", dump_live, log=lambda m: None, memory_dir=ram_on_tmpfs
    )
    root = rec.manifest["root_pid"]
    assert "background snapshot: guest paused for" in said[0] and f"dumped pid {root}" in said[0]
    assert said[0].count("background snapshot: guest paused for") == said[0].count(" refused: ") + 1, said[0]
    assert not list(tmp_path.glob(".images.partial-*")), "the background snapshot was left behind"
    with open_source(snapshot) as src:
        from_device_state = src.vcpus()
    printed = parse_registers(hmp_registers.read_text())
    assert len(printed) == 2 and all(v.gprs and v.fpu for v in printed), "no 64-bit vCPU state to compare"
    # HMP prints no MSR_KERNEL_GS_BASE
    assert [dataclasses.replace(v, kernel_gs_base=None) for v in from_device_state] == printed
    one_pause = dump_from(at_stop, root, tmp_path / "from-elf", "--vcpu-state", str(hmp_registers))
    assert tree_digest(from_snapshot) == tree_digest(one_pause)
    result = restore(rec, images, log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
