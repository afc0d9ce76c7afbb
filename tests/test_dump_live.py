"""Live guests dumped as they run: `dump --live` pauses a guest nobody stopped anything in, at a
moment it chooses, reads it from its memory file and QMP, and lets it run on. Apart from
tests/test_dump_asis.py's recorded moments so that pytest-xdist's whole-file workers share the
slowest tests (each boots two guests)."""

from __future__ import annotations

import pytest

from corpus import kernels
from corpus.recorder import record_with_live_dump
from corpus.restore import restore
from ovm_offline.errors import ExitCode
from tests.support.cli import MOMENTS, ovm
from tests.support.corpus_cases import AS_IS, skip_unless_live

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", AS_IS)
def test_dump_live_of_a_running_guest_restores(tmp_path, kernel, workload):
    """`dump --live` pauses a guest nobody stopped anything in, reads it and lets it run on;
    the images restore in a fresh guest and the workload's checks pass."""
    skip_unless_live(kernel, workload)
    gap = dict(kernels.get_kernel(kernel).open_gaps).get(workload)
    if gap:
        pytest.skip(f"{workload} on {kernel}: {gap}")
    images = tmp_path / "images"
    dumped: list[str] = []

    def dump_live(guest, root):
        result = ovm(
            "dump", "--live", "--qmp", str(guest.qmp_tool_path), "--mem", str(guest.memory_file),
            "--pid", str(root), "-D", str(images), "--attempts", str(MOMENTS),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        dumped.append(result.stderr)

    rec = record_with_live_dump(kernel, workload, tmp_path / "rec", dump_live, log=lambda m: None)
    assert dumped and f"dumped pid {rec.manifest['root_pid']}" in dumped[0]
    result = restore(rec, images, log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("refused_moments", [2, 3])
def test_a_live_dump_refused_for_its_moment_pauses_the_guest_again(tmp_path, monkeypatch, refused_moments):
    """A moment refused only for what a thread was doing then (a MomentError, made up here for
    the root process of a real running guest, as test_dump does for other refusals) lets the
    guest run on and pauses it again, up to --attempts; the images of the moment that passed
    restore; when every moment is refused, the last refusal fails with exit 8, nothing written."""
    from click.testing import CliRunner

    from ovm_offline import dump as dump_module
    from ovm_offline.cli import cli
    from ovm_offline.errors import MomentError

    images = tmp_path / "images"
    real, refused, results, roots = dump_module.extract_process, [], [], []

    def refuse_the_first_moments(prog, task, *args):
        if task.pid == roots[0] and len(refused) < refused_moments:
            refused.append(task.pid)
            raise MomentError(f"thread {task.pid} was mid-way through something made up for this test")
        return real(prog, task, *args)

    def dump_live(guest, root):
        roots.append(root)
        monkeypatch.setattr(dump_module, "extract_process", refuse_the_first_moments)
        args = ["--qmp", str(guest.qmp_tool_path), "--mem", str(guest.memory_file), "--pid", str(root)]
        results.append(CliRunner().invoke(cli, ["dump", "--live", *args, "-D", str(images), "--attempts", "3"]))
        monkeypatch.undo()

    rec = record_with_live_dump("6.12", "pipetree-asis", tmp_path / "rec", dump_live, log=lambda m: None)
    result = results[0]
    assert len(refused) == refused_moments
    assert result.stderr.count("guest was paused for") == refused_moments + (refused_moments < 3)
    for n in range(1, min(refused_moments, 2) + 1):
        assert f"moment {n} of 3 refused: thread {roots[0]} was mid-way through something made up" in result.stderr
    if refused_moments == 3:
        assert isinstance(result.exception, MomentError) and result.exception.exit_code == ExitCode.MOMENT
        # the moment's own refusals may be named beside the made-up one (a pipetree thread
        # caught inside read() on a vCPU, as a CI run met once)
        said = str(result.exception)
        assert f"thread {roots[0]} was mid-way through something made up for this test" in said
        assert said.endswith("(the last of 3 moments tried; each was refused for what a thread was doing then)")
        assert not images.exists() and not list(tmp_path.glob(".images*"))
        return
    assert result.exit_code == 0, result.stderr
    assert f"dumped pid {rec.manifest['root_pid']}" in result.stderr
    restored = restore(rec, images, log=lambda m: None)
    assert restored.ok, f"{restored.detail}\n{restored.restore_log[-3000:]}"
