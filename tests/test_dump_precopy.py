"""`dump --live --precopy` of a guest nobody stopped anything in: guest RAM streams while the
workload runs on, and the images are exactly those of a one-pause dump of the moment QEMU
stopped the guest (a dump-guest-memory taken right there gives byte-identical images); they
restore in a fresh guest and the workload's checks pass."""

from __future__ import annotations

import shutil

import pytest

from corpus import kernels
from corpus.recorder import record_with_live_dump
from corpus.restore import restore
from ovm_offline.errors import ExitCode
from ovm_offline.sources.precopy import precopy_snapshot
from tests.support.cli import MOMENTS, dump_from, ovm, tree_digest
from tests.support.corpus_cases import skip_unless_live

KERNELS = list(kernels.KERNELS)
# threads on the vCPUs at the stop (their registers come from the stop), a tree asleep in calls, and
# memory rewritten while it streams (1% of 64 MiB a second, each page with its next generation)
WORKLOADS = ["spinners", "pipetree-asis", "memhog-writer"]
pytestmark = [pytest.mark.guest, pytest.mark.slow]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_precopy_images_are_those_of_the_stop_and_restore(tmp_path, kernel, workload):
    skip_unless_live(kernel, workload)
    snapshot, at_stop, images = tmp_path / "snapshot", tmp_path / "at-stop.elf", tmp_path / "images"
    from_snapshot = tmp_path / "from-snapshot"
    said: list[str] = []

    def dump_live(guest, root):
        def paused(execute):
            execute("dump-guest-memory", {"paging": False, "protocol": f"file:{at_stop}"})

        for _ in range(MOMENTS):  # a thread caught mid-way (exit 8): the test's snapshot takes another moment
            shutil.rmtree(snapshot, ignore_errors=True)
            at_stop.unlink(missing_ok=True)
            snapshot.mkdir()
            report = precopy_snapshot(guest.qmp_tool_path, snapshot, guest.memory_file, on_paused=paused)
            assert report.paused_seconds is not None and report.ram.pages > 0
            first = ovm("dump", str(snapshot), "--pid", str(root), "-D", str(from_snapshot))
            if first.returncode != ExitCode.MOMENT:
                break
        assert first.returncode == 0, first.stderr
        result = ovm(
            "dump", "--live", "--precopy", "--qmp", str(guest.qmp_tool_path),  # its RAM found through QMP
            "--pid", str(root), "-D", str(images), "--attempts", str(MOMENTS),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        said.append(result.stderr)

    rec = record_with_live_dump(kernel, workload, tmp_path / "rec", dump_live, log=lambda m: None)
    root = rec.manifest["root_pid"]
    assert "pre-copy: guest paused for" in said[0] and f"dumped pid {root}" in said[0]
    assert said[0].count("pre-copy: guest paused for") == said[0].count(" refused: ") + 1, said[0]
    assert not list(tmp_path.glob(".images.partial-*")), "the pre-copy snapshot was left behind"
    one_pause = dump_from(at_stop, root, tmp_path / "from-elf", "--vcpu-state", str(snapshot / "registers.txt"))
    assert tree_digest(from_snapshot) == tree_digest(one_pause)
    result = restore(rec, images, log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
