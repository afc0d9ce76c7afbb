"""Guests dumped as they are: no SIGSTOP, the VM paused at a random moment while every task
of the workload sleeps inside a system call (read, accept, connect, poll, select, epoll_wait,
nanosleep, futex, wait4, sigtimedwait, ...). The restored program must see each call end as
it would after a handled signal, and check every result itself."""

from __future__ import annotations

import json
import re

import pytest

from corpus import kernels, matrix, workloads
from corpus.restore import restore
from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.criu import images as criu_images
from ovm_offline.criu.diff import diff_dirs
from ovm_offline.errors import ExitCode, MomentError
from ovm_offline.kernel.cpu.percpu import cpu_curr_address, task_cpu
from ovm_offline.kernel.task.tasks import find_task, thread_group
from tests.support.checks import assert_one_line_failure
from tests.support.cli import MomentRefused, dump_from, ovm, tree_digest, vcpu_state_of
from tests.support.corpus_cases import AS_IS
from tests.support.mutate import PatchedSource

KERNELS = list(kernels.KERNELS)
#: every take of every as-is workload that restores, as (workload, take)
TAKES = [(w, t) for w in AS_IS for t in range(workloads.get_workload(w).takes)]
pytestmark = pytest.mark.guest


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(("workload", "take"), TAKES)
def test_a_tree_paused_as_it_runs_restores_and_every_call_ends_right(recording, dumped, kernel, workload, take):
    """Each take is paused at its own moment; blockers checks the result of every blocked
    call (a call resumed with -ENOSYS, a lost or doubled byte, a wrong status fails it). A
    moment that caught a thread mid-way is refused by name (dump_or_moment checks the thread
    and its vCPU), and there is nothing to restore."""
    rec = recording(kernel, workload, take)
    images = dumped(kernel, workload, take)
    if isinstance(images, MomentRefused):
        return
    result = restore(rec, images, log=lambda m: None)
    assert result.ok, (
        f"paused {rec.manifest['pause_delay_seconds']} s after ready: {result.detail}\n{result.restore_log[-3000:]}"
    )


def _time_left_shrank(d) -> bool:
    """A page word that differs only because criu dumped seconds after our snapshot: the time
    left of a timed sleep (nanosleep's rem, select's timeval) that both wrote back. Seconds
    differ by that delay; where the seconds agree, the nanoseconds word differs."""
    ours, theirs = (re.fullmatch(r"\+0x([0-9a-f]+): ([0-9a-f]{16})", str(v)) for v in (d.ours, d.theirs))
    if d.path != "pagemap.pages.data" or not ours or not theirs or ours.group(1) != theirs.group(1):
        return False
    a, b = (int.from_bytes(bytes.fromhex(m.group(2)), "little") for m in (ours, theirs))
    return 0 <= a - b <= 60 or (a < 10**9 and b < 10**9)


@pytest.mark.parametrize("kernel", KERNELS)
def test_blocked_calls_give_the_images_criu_writes(recording, dumped, kernel):
    """blockers stays blocked until it is checked, so criu's own dump of it seconds later
    sees the same calls: ours end each the same way (ip and ax of every thread, its signal
    mask, the time left its timed sleep writes back)."""
    rec = recording(kernel, "blockers")
    images = dumped(kernel, "blockers")
    assert not isinstance(images, MomentRefused), "blockers is recorded once every call has blocked"
    result = diff_dirs(images, rec.golden)
    rest = [d for d in result.differences if not _time_left_shrank(d)]
    assert not rest, result.report()
    assert len(result.differences) - len(rest) <= 5  # nanosleep, clock_nanosleep, select, pselect6, ppoll


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", AS_IS)
def test_every_source_of_a_tree_paused_as_it_runs_gives_the_same_images(recording, dumped, tmp_path, kernel, workload):
    """Dump files with the vCPU state captured beside them, and the live snapshot (whose vCPU
    state is QEMU's own), give the same images: registers of threads on a vCPU included."""
    rec = recording(kernel, workload)
    images = dumped(kernel, workload)
    if isinstance(images, MomentRefused):  # each source refuses that moment, in the same words
        for name, source in [*rec.kdumps.items(), ("live", rec.live_dir)]:
            options = () if name == "live" else vcpu_state_of(rec)
            refused = ovm(
                "dump", str(source), "--pid", str(rec.manifest["root_pid"]), "-D", str(tmp_path / name), *options
            )
            assert refused.returncode == ExitCode.MOMENT, f"{name}: {refused.stderr}"
            assert refused.stderr.strip().splitlines()[-1] == images.message, name
        return
    reference = tree_digest(images)
    for name, source in rec.kdumps.items():
        out = dump_from(source, rec.manifest["root_pid"], tmp_path / name, *vcpu_state_of(rec))
        assert tree_digest(out) == reference, f"{name} differs from the ELF dump's images"
    out = dump_from(rec.live_dir, rec.manifest["root_pid"], tmp_path / "live")
    assert tree_digest(out) == reference, "the live snapshot differs from the ELF dump's images"


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_thread_on_a_vcpu_needs_the_vcpu_state_a_dump_file_lacks(recording, tmp_path, kernel):
    """Busy threads are on the vCPUs: an ELF dump alone has no FPU registers for them, so the
    dump is refused with how to get them; state captured at another moment is refused too."""
    out = tmp_path / "out"
    for take in range(matrix.takes_on(kernel, "spinners")):
        # a take that caught a spinner being switched on its CPU is refused for that first
        rec = recording(kernel, "spinners", take)
        alone = ovm("dump", str(rec.elf), "--pid", str(rec.manifest["root_pid"]), "-D", str(out))
        if alone.returncode != ExitCode.MOMENT:
            break
    assert_one_line_failure(alone, "was running on vCPU", "--vcpu-state")
    assert alone.returncode == ExitCode.UNSUPPORTED and not out.exists()
    other = recording(kernel, "blockers").live_dir / "registers.txt"  # another guest's moment
    wrong = ovm(
        "dump", str(rec.elf), "--vcpu-state", str(other), "--pid", str(rec.manifest["root_pid"]), "-D", str(out)
    )
    assert_one_line_failure(wrong, "was not captured at the dump's moment")
    assert wrong.returncode == ExitCode.SOURCE and not out.exists()


def _on_cpu(source) -> dict[int, int]:
    result = ovm("ps", str(source), "--json")
    assert result.returncode == 0, result.stderr
    return {tid: cpu for line in result.stdout.splitlines() for tid, cpu in json.loads(line)["on_cpu"]}


@pytest.mark.parametrize("kernel", KERNELS)
def test_ps_says_which_threads_were_on_the_vcpus(recording, kernel):
    """Two threads spin on two vCPUs: in some take at least one of them is current on one, at
    most one thread per vCPU, and the dump file and the live snapshot agree."""
    spinning = set()
    for take in range(matrix.takes_on(kernel, "spinners")):
        rec = recording(kernel, "spinners", take)
        on_cpu = _on_cpu(rec.elf)
        assert set(on_cpu.values()) <= {0, 1} and len(set(on_cpu.values())) == len(on_cpu)
        assert _on_cpu(rec.live_dir) == on_cpu
        root = str(rec.manifest["root_pid"])
        spinning |= {t["pid"] for t in rec.manifest["member_details"][root]["tasks"]} & on_cpu.keys()
    assert spinning, "no take of spinners caught a spinning thread on a vCPU"


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_thread_caught_being_switched_onto_its_cpu_is_a_moment_to_try_again(recording, tmp_path, kernel):
    """on_cpu set while the CPU's current task is another: schedule() was switching it on or
    off. That is the moment, not the thread (a precopy test's live dump met it in CI): exit 8,
    so that --live tries another moment, not exit 5."""
    for take in range(matrix.takes_on(kernel, "spinners")):
        rec = recording(kernel, "spinners", take)
        root = rec.manifest["root_pid"]
        with sources.open_source(rec.live_dir) as plain:
            prog = inventory.open_kernel(plain)
            running = [(t.pid, task_cpu(t)) for t in thread_group(find_task(prog, root)) if t.on_cpu]
        if running:
            break
    else:
        pytest.skip("no take of spinners caught a thread of its own on a vCPU")
    tid, cpu = running[0]
    with PatchedSource(sources.open_source(rec.live_dir)) as source:
        prog = inventory.open_kernel(source)
        other = find_task(prog, 1).address_.to_bytes(8, "little")  # init, asleep: not switching anywhere
        source.patch_virtual(prog, cpu_curr_address(prog, cpu), other)
        with pytest.raises(MomentError, match=f"thread {tid} was being switched on or off CPU {cpu}"):
            dumping.dump(source, inventory.open_kernel(source), root, tmp_path / "out")
    assert not (tmp_path / "out").exists()


#: write()'s number (orig_ax), and what blockers-partial's 1 MiB write has moved into its pipe
WRITE, PARTIAL_MOVED = 1, 65536


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_pipe_write_that_moved_part_of_its_data_ends_short_as_criu_ends_it(recording, dumped, kernel):
    """A 1 MiB write into a full pipe nobody reads has moved 64 KiB before it blocked; how
    much is on the writer's kernel stack (its iov_iter). It returns that count, as criu's seize
    makes it return: the images are criu's own (the restore and the writer's loop writing the
    rest are judged with every as-is workload)."""
    rec = recording(kernel, "blockers-partial")
    images = dumped(kernel, "blockers-partial")
    if isinstance(images, MomentRefused):  # checked by dump_or_moment
        return
    ended = [
        core.thread_info.gpregs.ax
        for path in images.glob("core-*.img")
        if (core := criu_images.ImageDir(images).load(path.name).entries[0]).thread_info.gpregs.orig_ax == WRITE
    ]
    assert [ax for ax in ended if ax != WRITE] == [PARTIAL_MOVED], ended  # a restarted write has ax = orig_ax
    result = diff_dirs(images, rec.golden)
    rest = [d for d in result.differences if not _time_left_shrank(d)]
    assert not rest, result.report()


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_call_whose_interruption_is_not_known_is_refused_by_name(recording, tmp_path, kernel):
    """recvmmsg is a real call ovm-offline's table does not model: refused, naming the
    process, the thread and the call, and nothing is written."""
    rec = recording(kernel, "blockers-unknown")
    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--pid", str(rec.manifest["root_pid"]), "-D", str(out))
    assert_one_line_failure(result, "(blockers) thread", "is inside syscall 299()", "does not know how it ends")
    assert result.returncode == ExitCode.UNSUPPORTED
    assert not out.exists()
