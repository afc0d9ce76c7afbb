"""Issue 33: a hostile guest cannot hide or forge a process. Real recordings with their task
structures rewritten the way a rootkit rewrites them (tests/support/mutate.py): `ps --check`
names the hidden, forged or cut view, and `dump` refuses the tree by name unless told to take
it; unaltered recordings give no disagreement."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from corpus import matrix
from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.criu.images import ImageDir
from ovm_offline.errors import ExitCode, GuestDataError, OvmError
from ovm_offline.kernel.crossview.check import cross_view
from ovm_offline.kernel.task.tasks import find_task, for_each_thread
from tests.support.checks import assert_one_line_failure
from tests.support.corpus_cases import skip_outside_subset
from tests.support.mutate import PatchedSource, write_patched_elf

pytestmark = pytest.mark.guest

KERNELS = ["6.1", "6.12"]


def _u64(value: int) -> bytes:
    return (value & (1 << 64) - 1).to_bytes(8, "little")


def _unlink(source, prog, node: int) -> None:
    """list_del of the list_head at `node`, as a rootkit unlinks a task: both neighbours
    linked past it, the node's own links left as they were."""
    nxt, prev = prog.read_u64(node), prog.read_u64(node + 8)
    source.patch_virtual(prog, prev, _u64(nxt))
    source.patch_virtual(prog, nxt + 8, _u64(prev))


def _member(prog, task, name: str) -> int:
    return task.address_ + prog.member_offset("task_struct", name)


def hidden_from_the_task_list(source, prog, task):
    _unlink(source, prog, _member(prog, task, "tasks"))
    return "but not by tasks: its prev, PID", "init_task.tasks"


def skipped_by_next_only(source, prog, task):
    node = _member(prog, task, "tasks")
    source.patch_virtual(prog, prog.read_u64(node + 8), _u64(prog.read_u64(node)))
    return "held by tasks-prev, children, pid-idr, threads but not by tasks", "init_task.tasks"


def off_its_parents_children_list(source, prog, task):
    _unlink(source, prog, _member(prog, task, "sibling"))
    return "does not list it among its children", "task_struct.children"


def its_own_parent(source, prog, task):
    source.patch_virtual(prog, _member(prog, task, "real_parent"), _u64(task.address_))
    return "it is its own parent", "task_struct.real_parent"


def parents_in_a_cycle(source, prog, task):
    parent = int(task.real_parent)
    source.patch_virtual(prog, parent + prog.member_offset("task_struct", "real_parent"), _u64(task.address_))
    return "its parents form a cycle", "task_struct.real_parent"


def a_pid_of_another(source, prog, task):
    for name in ("pid", "tgid"):
        source.patch_virtual(prog, _member(prog, task, name), (1).to_bytes(4, "little"))
    return "its pid is 1, but its struct pid's number is", "task_struct.pid of its struct pid"


def a_negative_pid(source, prog, task):
    for name in ("pid", "tgid"):
        source.patch_virtual(prog, _member(prog, task, name), (-5).to_bytes(4, "little", signed=True))
    return "its pid is -5", "task_struct.pid"


def a_tgid_not_its_pid(source, prog, task):
    source.patch_virtual(prog, _member(prog, task, "tgid"), (task.pid + 1).to_bytes(4, "little"))
    return f"its tgid is {task.pid + 1}, its leader's pid {task.pid}", "task_struct.tgid"


def gone_from_its_struct_pid(source, prog, task):
    pid = int(task.thread_pid)
    source.patch_virtual(prog, pid + prog.member_offset("pid", "tasks"), _u64(0))
    return "but not by pid-idr: no pid namespace's idr gives this task", "pid idr"


MUTATIONS = [
    hidden_from_the_task_list,
    skipped_by_next_only,
    off_its_parents_children_list,
    its_own_parent,
    parents_in_a_cycle,
    a_pid_of_another,
    a_negative_pid,
    a_tgid_not_its_pid,
    gone_from_its_struct_pid,
]


def _mutated(rec, mutate, pick=None):
    """A PatchedSource of the recording with `mutate` applied to the root (or to the task `pick`
    chooses), what the disagreement must say, and the root's pid as the mutated guest has it."""
    source = PatchedSource(sources.open_source(rec.elf))
    prog = inventory.open_kernel(source)
    root = find_task(prog, rec.manifest["root_pid"])
    said = mutate(source, prog, pick(root) if pick else root)
    return source, said, inventory.open_kernel(source).struct("task_struct", root.address_).pid


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("mutate", MUTATIONS, ids=[m.__name__ for m in MUTATIONS])
def test_a_forged_task_view_is_named_and_its_tree_refused(recording, tmp_path, kernel, mutate):
    rec = recording(kernel, "counter")
    source, (said, invariant), pid = _mutated(rec, mutate)
    with source:
        views = cross_view(inventory.open_kernel(source))
        lines = [str(d) for d in views.disagreements]
        assert any(said in line and f"invariant {invariant}:" in line for line in lines), lines
        assert views.moment is None
        with pytest.raises(GuestDataError) as refused:
            dumping.dump(source, inventory.open_kernel(source), pid, tmp_path / "images")
        assert "\n" not in str(refused.value)
    assert not (tmp_path / "images").exists()


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_thread_cut_from_its_thread_list_is_named(recording, tmp_path, kernel):
    rec = recording(kernel, "threads")
    pick = lambda root: [t for t in for_each_thread(root) if t.address_ != root.address_][-1]  # noqa: E731

    def cut(source, prog, thread):
        _unlink(source, prog, _member(prog, thread, "thread_node"))
        return f"PID {thread.pid} (", "signal_struct.thread_head"

    source, (said, invariant), _ = _mutated(rec, cut, pick)
    with source:
        checked = inventory.read_checked_process_list(inventory.open_kernel(source))
        (root,) = [p for p in checked.listing.processes if p.pid == rec.manifest["root_pid"]]
        views_of = dict(root.thread_views)
        (cut_tid,) = [tid for tid in views_of if tid not in root.tids]  # the thread its list lost
        assert "threads" not in views_of[cut_tid] and "pid-idr" in views_of[cut_tid]
        lines = [str(d) for d in checked.views.disagreements]
        assert any(said in line and "but not by threads" in line and invariant in line for line in lines), lines
        with pytest.raises(GuestDataError, match="the kernel's views of its tasks disagree about this tree"):
            dumping.dump(source, inventory.open_kernel(source), rec.manifest["root_pid"], tmp_path / "images")
    assert not (tmp_path / "images").exists()


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ovm_offline", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("kernel", KERNELS)
def test_ps_check_shows_a_hidden_process_and_dump_takes_it_only_when_told(recording, tmp_path, kernel):
    """The root unlinked from the task list: plain `ps` does not show it (it reads the task
    list, as the kernel's own /proc does); `ps --check` does, with the views that hold it, names
    the disagreement on a line and exits 4; `dump` refuses, and with --accept-inconsistent-views
    writes the images and the disagreement beside them."""
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]
    source, _, _ = _mutated(rec, hidden_from_the_task_list)
    elf = tmp_path / "hidden.elf"
    with source:
        write_patched_elf(rec.elf, elf, source.patches)
    plain = _run("ps", str(elf), "--json")
    assert plain.returncode == 0, plain.stderr
    assert pid not in [json.loads(line)["pid"] for line in plain.stdout.splitlines()]
    checked = _run("ps", str(elf), "--check", "--json")
    assert checked.returncode == ExitCode.GUEST_DATA, checked.stderr
    (root,) = [p for p in map(json.loads, checked.stdout.splitlines()) if p["pid"] == pid]
    assert root["views"] == ["children", "pid-idr", "threads"]
    assert any("but not by tasks:" in d for d in root["disagreements"])
    check_lines = [line for line in checked.stderr.splitlines() if line.startswith("ovm-offline: check: ")]
    assert len(check_lines) == 2 and all(f"PID {pid} (counter" in line for line in check_lines)
    assert checked.stderr.splitlines()[-1].startswith("ovm-offline: 2 disagreement(s) between the kernel's views")
    table = _run("ps", str(elf), "--check")
    assert "VIEWS" in table.stdout.splitlines()[0] and "children,pid-idr,threads" in table.stdout

    refused = _run("dump", str(elf), "--pid", str(pid), "-D", str(tmp_path / "images"))
    assert_one_line_failure(
        refused, "the kernel's views of its tasks disagree about this tree", "--accept-inconsistent-views"
    )
    assert refused.returncode == ExitCode.GUEST_DATA and not (tmp_path / "images").exists()
    taken = _run("dump", str(elf), "--pid", str(pid), "-D", str(tmp_path / "images"), "--accept-inconsistent-views")
    assert taken.returncode == 0, taken.stderr
    assert "warning: the kernel's views of its tasks disagree" in taken.stdout + taken.stderr
    said = (tmp_path / "images" / dumping.INCONSISTENT_VIEWS_FILE).read_text().splitlines()
    assert len(said) == 2 and all("init_task.tasks" in line for line in said)
    assert ImageDir(tmp_path / "images").load(f"core-{pid}.img").entries


@pytest.mark.parametrize("kernel,workload", matrix.cases(), ids=[f"{k}-{w}" for k, w in matrix.cases()])
def test_real_recordings_show_no_disagreement(recording, kernel, workload):
    """No false alarm on any standard recording (as-is ones included: threads exiting, tasks
    forking, a task on each vCPU): every task any view holds is on every view it must be."""
    skip_outside_subset(kernel, workload)
    rec = recording(kernel, workload)
    vcpu_state = rec.live_dir / "registers.txt" if rec.manifest.get("moment") == "as-is" else None
    with sources.open_source(rec.elf, vcpu_state) as source:
        checked = inventory.read_checked_process_list(inventory.open_kernel(source))
    views = checked.views
    assert not views.disagreements or views.moment, [str(d) for d in views.disagreements]
    assert not views.unavailable, views.unavailable
    listed = inventory.list_processes(inventory.open_kernel(sources.open_source(rec.elf)))
    assert [p.pid for p in checked.listing.processes] == [p.pid for p in listed]
    assert all(
        {"tasks", "tasks-prev", "children", "pid-idr", "threads"} <= set(p.views) for p in checked.listing.processes
    )


def _open_fds_byte(prog, task, fd: int) -> tuple[int, int]:
    """(address, value) of the byte of the root's open_fds bitmap that holds fd `fd`'s bit."""
    fdt = task.files.fdt
    address = int(fdt.open_fds) + fd // 8
    return address, prog.read(address, 1)[0]


@pytest.mark.parametrize("kernel", KERNELS)
def test_an_fd_slot_and_its_open_fds_bit(recording, tmp_path, kernel):
    """A file in a slot whose open_fds bit is clear is one no kernel holds outside do_dup2 (on a
    CPU): refused by name. A bit set over an empty slot is an fd an open in progress reserved
    (alloc_fd before fd_install, where an open of a FIFO sleeps): not open yet, not saved."""
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]

    def clear_fd_1(source, prog, task):
        address, value = _open_fds_byte(prog, task, 1)
        source.patch_virtual(prog, address, bytes([value & ~(1 << 1)]))

    def reserve_fd_5(source, prog, task):
        address, value = _open_fds_byte(prog, task, 5)
        assert not value & (1 << 5)
        source.patch_virtual(prog, address, bytes([value | 1 << 5]))

    source, _, _ = _mutated(rec, lambda s, p, t: clear_fd_1(s, p, t))
    with (
        source,
        pytest.raises(GuestDataError, match="holds a file in fd 1, whose open_fds bit is clear.*fdtable.open_fds"),
    ):
        dumping.dump(source, inventory.open_kernel(source), pid, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    source, _, _ = _mutated(rec, lambda s, p, t: reserve_fd_5(s, p, t))
    with source:
        dumping.dump(source, inventory.open_kernel(source), pid, tmp_path / "images")
    fds = [
        e.fd for e in ImageDir(tmp_path / "images").load(f"fdinfo-{_files_id(tmp_path / 'images', pid)}.img").entries
    ]
    assert 5 not in fds and {0, 1, 2} <= set(fds)


def _files_id(images, pid: int) -> int:
    (ids,) = ImageDir(images).load(f"ids-{pid}.img").entries
    return ids.files_id


@pytest.mark.parametrize("take", [0, 1, 2])
@pytest.mark.parametrize("kernel", KERNELS)
def test_processes_and_threads_half_made_or_half_gone_are_no_disagreement(recording, tmp_path, kernel, take):
    """churn-asis paused as it forks, exits, creates and joins threads without pause: every task
    any view holds is on every view it must be (released and dying ones on none), or the pause
    caught tasklist_lock held for writing and says so. Its dump is written or refused by name,
    never for a disagreement between the views."""
    rec = recording(kernel, "churn-asis", take)
    registers = rec.live_dir / "registers.txt"
    with sources.open_source(rec.elf, registers) as source:
        prog = inventory.open_kernel(source)
        views = cross_view(prog)
        assert not views.disagreements or views.moment, [str(d) for d in views.disagreements]
        assert len([s for s in views.tasks.values() if s.comm == "churn"]) >= 4  # the main thread and its loops
        try:
            dumping.dump(source, prog, rec.manifest["root_pid"], tmp_path / "images")
        except OvmError as refused:
            assert "views of its tasks disagree" not in str(refused) or views.moment, refused
            assert not (tmp_path / "images").exists()
