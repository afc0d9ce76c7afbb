"""Real recordings with guest memory rewritten as a hostile (or merely unusual) guest has it:
each case ends in a refusal by name or a faithful image, never an internal error."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

import pytest

from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.criu.images import ImageDir
from ovm_offline.errors import ExitCode, GuestDataError, UnsupportedError
from ovm_offline.kernel.cpu.regs import task_user_regs
from ovm_offline.kernel.fs.fdtable import for_each_file, task_files
from ovm_offline.kernel.mm.mmap import for_each_vma, vma_file
from ovm_offline.kernel.ns.uts import task_uts_ns
from ovm_offline.kernel.task.tasks import find_task, for_each_process, process_tree, task_state, thread_group
from ovm_offline.kernel.task.timers import clock_now, hrtimer_clock_id, task_sleep_hrtimer
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm
from tests.support.mutate import PatchedSource

pytestmark = pytest.mark.guest

#: include/linux/sched.h (5.14+): a task try_to_wake_up is enqueuing
TASK_WAKING = 0x200


def _log_file(prog, pid: int):
    """The struct file of the workload's log (its stdout, fd 1)."""
    return dict(for_each_file(task_files(find_task(prog, pid))))[1]


def _assert_refused(rec, mutate, error: type[Exception], out) -> None:
    """`mutate(source, prog)` rewrites the recording's memory and returns what the refusal
    must say (a regex); the dump of the root then fails with `error` saying it, and writes
    nothing."""
    with PatchedSource(sources.open_source(rec.elf)) as source:
        needle = mutate(source, inventory.open_kernel(source))
        with pytest.raises(error, match=needle):
            dumping.dump(source, inventory.open_kernel(source), rec.manifest["root_pid"], out)
    assert not out.exists()


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_an_open_file_whose_name_is_not_utf8_is_refused_by_name_or_left_out(recording, tmp_path, kernel):
    """Linux names are bytes; CRIU 3.17's images hold them as protobuf strings, which must be
    UTF-8. The log file renamed to b'c\\xffunter.log' (same length) is refused naming PID, fd
    and the bytes; --skip-unsupported leaves its fds out and writes the rest."""
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        qstr = _log_file(prog, pid).f_path.dentry.d_name
        assert prog.read(int(qstr.name), 11) == b"counter.log"
        source.patch_virtual(prog, int(qstr.name), b"c\xffunter.log")
        prog = inventory.open_kernel(source)  # no cached translations or objects of before
        with pytest.raises(UnsupportedError) as refused:
            dumping.dump(source, prog, pid, tmp_path / "images")
        message = str(refused.value)
        assert f"PID {pid} (counter) fd 1: its identity.path b'/run/ovm/c\\xffunter.log' is not valid UTF-8" in message
        assert "fd 2:" in message and "--skip-unsupported" in message and "\n" not in message
        assert not (tmp_path / "images").exists()
        summary = dumping.dump(source, prog, pid, tmp_path / "images", skip_unsupported=True)
        assert len(summary.skipped) == 2 and (tmp_path / "images" / f"core-{pid}.img").exists()


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_file_offset_past_2_63_is_carried_as_criu_stores_it(recording, tmp_path, kernel):
    """f_pos is a signed loff_t, and files with unsigned offsets (/proc/PID/mem) go past
    2**63: CRIU stores lseek's result as a uint64, so f_pos -1 is 2**64-1 in the image, not an
    internal error."""
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        file = _log_file(prog, pid)
        offset = prog.member_offset("file", "f_pos")
        source.patch_virtual(prog, int(file) + offset, (-1).to_bytes(8, "little", signed=True))
        prog = inventory.open_kernel(source)
        dumping.dump(source, prog, pid, tmp_path / "images")
    regs = [e.reg for e in ImageDir(tmp_path / "images").load("files.img").entries if e.HasField("reg")]
    assert [r.pos for r in regs if r.name.endswith("counter.log")] == [(1 << 64) - 1]


def _seccomp_mode_set(pid: int, mode: int, needle: str):
    def mutate(source, prog):
        task = find_task(prog, pid)
        address = task.address_ + prog.member_offset("task_struct", "seccomp") + prog.member_offset("seccomp", "mode")
        source.patch_virtual(prog, address, mode.to_bytes(4, "little", signed=True))
        return re.escape(needle)

    return mutate


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_filter_mode_without_filters_and_an_impossible_mode_are_bad_guest_data(recording, tmp_path, kernel):
    """Filter mode with no filter chain (the kernel sets the mode only with a filter), and a mode
    that is none of 0, 1, 2, are inconsistent guest data, not an internal error or a process
    restored unconfined."""
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]
    for mode, error, needle in (
        (2, GuestDataError, f"task {pid} is in seccomp filter mode with no filter"),
        (-1, GuestDataError, f"task {pid} has seccomp mode -1"),
    ):
        _assert_refused(rec, _seccomp_mode_set(pid, mode, needle), error, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_vma_mapping_past_2_64_is_bad_guest_data(recording, tmp_path, kernel):
    rec = recording(kernel, "counter")

    def pgoff_huge(source, prog):
        vma = next(v for v in for_each_vma(find_task(prog, rec.manifest["root_pid"]).mm) if vma_file(v) is not None)
        address = vma.address_ + prog.member_offset("vm_area_struct", "vm_pgoff")
        source.patch_virtual(prog, address, (1 << 60).to_bytes(8, "little"))
        return f"VMA 0x{int(vma.vm_start):x}-.* past 2\\*\\*64"

    _assert_refused(rec, pgoff_huge, GuestDataError, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_vma_tree_that_lost_its_vmas_is_bad_guest_data_not_an_empty_process(recording, tmp_path, kernel):
    """An emptied mm_mt root, or a VMA pointer with its low bits set, once gave a dump of 0
    VMAs and 0 pages that succeeded; map_count says how many there are."""
    rec = recording(kernel, "counter")

    def ma_root_set(value: int, needle: str):
        def mutate(source, prog):
            mm = find_task(prog, rec.manifest["root_pid"]).mm
            root = int(mm) + prog.member_offset("mm_struct", "mm_mt") + prog.member_offset("maple_tree", "ma_root")
            source.patch_virtual(prog, root, value.to_bytes(8, "little"))
            return needle

        return mutate

    for value, needle in ((0, "but 0 VMAs were found"), (1, "which is no VMA pointer")):
        _assert_refused(rec, ma_root_set(value, needle), GuestDataError, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_task_size_x86_64_never_sets_is_bad_guest_data_not_a_process_without_pages(recording, tmp_path, kernel):
    rec = recording(kernel, "counter")

    def task_size_zeroed(source, prog):
        mm = find_task(prog, rec.manifest["root_pid"]).mm
        source.patch_virtual(prog, int(mm) + prog.member_offset("mm_struct", "task_size"), bytes(8))
        return "has task_size 0x0, which x86-64 never sets"

    _assert_refused(rec, task_size_zeroed, GuestDataError, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_cut_short_thread_and_children_lists_and_a_doubled_pid_are_bad_guest_data(recording, tmp_path, kernel):
    """Lists a hostile guest cut short once dumped as a smaller, plausible tree; a second
    process with the root's PID was silently ignored."""
    rec = recording(kernel, "pipetree")
    pid = rec.manifest["root_pid"]

    def children_emptied(source, prog):
        head = int(find_task(prog, pid).children.address_of_())
        source.patch_virtual(prog, head, head.to_bytes(8, "little") * 2)  # next = prev = head
        return f"but not by children: its real_parent \\(PID {pid}\\) does not list it among its children"

    def nr_threads_raised(source, prog):
        signal = int(find_task(prog, pid).signal)
        offset = prog.member_offset("signal_struct", "nr_threads")
        source.patch_virtual(prog, signal + offset, (2).to_bytes(4, "little"))
        return f"PID {pid} has nr_threads 2 but 1 threads"

    def pid_doubled(source, prog):
        # pid and tgid both, as a forger keeps a leader consistent (a pid alone breaks tgid first)
        other = next(t for t in for_each_process(prog) if t.pid not in (1, pid) and t.mm)
        for member in ("pid", "tgid"):
            source.patch_virtual(prog, other.member_address_(member), pid.to_bytes(4, "little"))
        return f"PID {pid}: is the pid of 2 processes .*, which breaks the kernel's invariant task_struct.pid unique"

    for mutate in (children_emptied, nr_threads_raised, pid_doubled):
        _assert_refused(rec, mutate, GuestDataError, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_queue_of_pending_signals_cut_short_is_refused_not_shortened(recording, tmp_path, kernel):
    """evfds queues SIGRTMIN+2 twice on its process; the first entry's next rewritten to the
    queue's head left one signal, and the dump restored a process that had lost the other."""
    rec = recording(kernel, "evfds")
    pid = rec.manifest["root_pid"]

    def second_signal_unlinked(source, prog):
        head = find_task(prog, pid).signal.shared_pending.member_address_("list")
        first = prog.read_u64(head)
        assert first != head and prog.read_u64(first) != head  # two queued
        source.patch_virtual(prog, first, head.to_bytes(8, "little"))
        return "does not close: it ends after 1 entries"

    _assert_refused(rec, second_signal_unlinked, GuestDataError, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_ps_keeps_a_damaged_process_in_its_list_and_says_what_is_damaged(recording, kernel):
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        task = find_task(prog, pid)
        bogus = (0xFFFF_DEAD_0000_0000).to_bytes(8, "little")
        source.patch_virtual(prog, task.address_ + prog.member_offset("task_struct", "real_cred"), bogus)
        procs = {p.pid: p for p in inventory.list_processes(inventory.open_kernel(source))}
    damaged = procs[pid]
    assert damaged.comm == "counter" and damaged.uid == -1
    assert {p.split(":")[0] for p in damaged.problems} == {"credentials", "namespaces"}  # user ns via cred
    assert all(not p.problems for p in procs.values() if p.pid != pid)


def _sleeper_of(prog, pid: int):
    """A thread of `pid` asleep in clock_nanosleep, and the hrtimer_sleeper of its sleep."""
    for thread in thread_group(find_task(prog, pid)):
        timer = task_sleep_hrtimer(thread)
        if task_state(thread) == "S" and task_user_regs(thread).orig_ax == 230 and timer is not None:
            return thread, timer
    return None, None


def _decoy_sleeper(prog, thread, sleeper: int) -> list[tuple[int, bytes]]:
    """Patches that leave hrtimer_wakeup's address in the live frames of `thread` below its
    real sleeper, where a word of some other frame would look like a sleeper's timer function,
    its clock base a user address: seen once in a CI take of threads-asis on 6.1."""
    decoy = int(thread.thread.sp) + 64  # above inactive_task_frame, in schedule()'s frames
    assert decoy + prog.struct_type("hrtimer_sleeper").size <= sleeper, "no room below the sleeper"
    timer = decoy + prog.member_offset("hrtimer_sleeper", "timer")
    return [
        (
            timer + prog.member_offset("hrtimer", "function"),
            prog.symbol_address("hrtimer_wakeup").to_bytes(8, "little"),
        ),
        (timer + prog.member_offset("hrtimer", "base"), (0x7F29F5857D00).to_bytes(8, "little")),
        (timer + prog.member_offset("hrtimer", "state"), bytes(1)),
        (decoy + prog.member_offset("hrtimer_sleeper", "task"), bytes(8)),
    ]


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_sleeper_woken_by_its_own_timer_returns_0_and_a_stale_one_is_refused(recording, tmp_path, kernel):
    """A VM paused after a sleeper's timer fired but before it ran: the thread is runnable
    inside clock_nanosleep, hrtimer_wakeup has cleared its sleeper's task, and do_nanosleep
    would return 0. Made from a thread really asleep there by rewriting what the wakeup
    rewrites; the same with a timer that fired long ago (a stale sleeper) is refused. A decoy
    (another frame's word equal to hrtimer_wakeup) is passed over in each."""
    rec = recording(kernel, "threads-asis")
    pid = rec.manifest["root_pid"]
    with sources.open_source(rec.live_dir) as plain:  # with its vCPUs' registers
        prog = inventory.open_kernel(plain)
        refusals = dumping.extract_tree(prog, dumping.find_task(prog, pid)).refusals
    if refusals:  # depends on the take's moment
        pytest.skip(f"this take is refused for its own reason: {refusals[0]}")
    # the VM may also be paused while hrtimer_wakeup still runs on another vCPU, between
    # clearing the sleeper's task and enqueuing the thread (TASK_WAKING, the clock base's
    # running timer this one): seen in a recording of pipetree-asis on 6.12
    for fired_ago, outcome, waking in (
        (1_000_000, "returns 0", False),
        (1_000_000, "returns 0 while it wakes", True),
        (5_000_000_000, "refused", False),
    ):
        with PatchedSource(sources.open_source(rec.live_dir)) as source:
            prog = inventory.open_kernel(source)
            thread, timer = _sleeper_of(prog, pid)
            if thread is None:
                pytest.skip("no worker asleep in clock_nanosleep in this take")
            tid, ip = thread.pid, task_user_regs(thread).ip
            sleeper = timer.address_ - prog.member_offset("hrtimer_sleeper", "timer")
            expiry = (clock_now(prog, hrtimer_clock_id(timer)) - fired_ago).to_bytes(8, "little", signed=True)
            task_state_value = TASK_WAKING if waking else 0  # TASK_RUNNING
            patches = [
                (
                    thread.address_ + prog.member_offset("task_struct", "__state"),
                    task_state_value.to_bytes(4, "little"),
                ),
                (sleeper + prog.member_offset("hrtimer_sleeper", "task"), bytes(8)),
                (timer.address_ + prog.member_offset("hrtimer", "state"), bytes(1)),  # HRTIMER_STATE_INACTIVE
                (timer.address_ + prog.member_offset("hrtimer", "_softexpires"), expiry),
            ]
            patches += _decoy_sleeper(prog, thread, sleeper)
            if waking:
                running = int(timer.base) + prog.member_offset("hrtimer_clock_base", "running")
                patches.append((running, timer.address_.to_bytes(8, "little")))
            for address, value in patches:
                source.patch_virtual(prog, address, value)
            out = tmp_path / outcome.replace(" ", "-")
            if outcome == "refused":
                with pytest.raises(UnsupportedError, match=f"thread {tid} is inside clock_nanosleep.*runnable"):
                    dumping.dump(source, inventory.open_kernel(source), pid, out)
                continue
            dumping.dump(source, inventory.open_kernel(source), pid, out)
        core = ImageDir(out).load(f"core-{tid}.img").entries[0]
        regs = core.thread_info.gpregs
        assert (regs.ax, regs.orig_ax, regs.ip) == (0, 230, ip)


@pytest.fixture
def nearly_full_fs(tmp_path):
    """A 2 MiB tmpfs with 64 KiB left: a disk that fills while images are written."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.decode().strip()}")
    try:
        (mount / "filler").write_bytes(bytes((2 << 20) - (64 << 10)))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_disk_that_fills_gives_one_line_naming_the_file_and_the_room_and_leaves_nothing(recording, nearly_full_fs):
    """Disk full while the pages are copied: one line naming the image and what was free, the
    partial directory removed, the target never made; `convert` the same, without its .tmp."""
    rec = recording("6.1", "counter")
    target = nearly_full_fs / "images"
    result = ovm("dump", str(rec.elf), "--pid", str(rec.manifest["root_pid"]), "-D", str(target))
    assert_one_line_failure(
        result,
        f"{target}: cannot write pages-1.img: No space left on device (",
        f"MiB free on {nearly_full_fs}); nothing was written",
    )
    assert result.returncode == ExitCode.FAILED
    assert sorted(p.name for p in nearly_full_fs.iterdir()) == ["filler"]
    elf = nearly_full_fs / "dump.elf"
    result = ovm("convert", str(rec.kdumps["kdump-zlib"]), str(elf))
    assert_one_line_failure(result, f"cannot write {elf}: No space left on device (", f"MiB free on {nearly_full_fs})")
    assert result.returncode == ExitCode.FAILED
    assert sorted(p.name for p in nearly_full_fs.iterdir()) == ["filler"]


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_misaligned_pointers_are_bad_guest_data_not_their_garbage(recording, tmp_path, kernel):
    """Found by the fuzzer: a task's mm, or a struct file's dentry, pointing a byte past its
    object once read shifted fields; and a misaligned open_fds bitmap once shifted the fds.
    Each is now refused naming the pointer."""
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]

    def shift(member_of: Callable, struct: str, member: str, by: int, needle: str):
        def mutate(source, prog):
            obj = member_of(prog)
            address = int(obj) + prog.member_offset(struct, member)
            old = int.from_bytes(prog.read(address, 8), "little")
            source.patch_virtual(prog, address, (old + by).to_bytes(8, "little"))
            return needle.format(old + by)

        return mutate

    task = lambda prog: find_task(prog, pid).address_  # noqa: E731
    fdt = lambda prog: int(task_files(find_task(prog, pid)).fdt)  # noqa: E731
    file = lambda prog: int(_log_file(prog, pid))  # noqa: E731
    for mutate in (
        shift(task, "task_struct", "mm", 1, "misaligned struct mm_struct pointer 0x{:x}"),
        shift(file, "file", "f_path.dentry", 4, "misaligned struct dentry pointer 0x{:x}"),
        shift(fdt, "fdtable", "open_fds", 2, "open_fds bitmap at 0x{:x} is misaligned"),
    ):
        _assert_refused(rec, mutate, GuestDataError, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_pid_number_no_kernel_hands_out_is_bad_guest_data(recording, tmp_path, kernel):
    """Found by the fuzzer: upid.nr -1 once reached the image writer (a ValueError)."""
    rec = recording(kernel, "counter")
    pid = rec.manifest["root_pid"]

    def negative_pid(source, prog):
        upid = int(find_task(prog, pid).thread_pid) + prog.member_offset("pid", "numbers")
        source.patch_virtual(prog, upid + prog.member_offset("upid", "nr"), (-1).to_bytes(4, "little", signed=True))
        return "holds PID -1, outside 0..4194304"

    _assert_refused(rec, negative_pid, GuestDataError, tmp_path / "images")


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_host_name_that_is_not_utf8_is_refused_by_name(recording, tmp_path, kernel):
    """utsns-N.img holds the host name as a protobuf string: a guest's sethostname takes any
    bytes, so b'ovm\\xffox' is refused naming the process and the bytes, never an encoding
    error, and nothing is written."""
    rec = recording(kernel, "container-uts")
    pid = rec.manifest["root_pid"]

    def mutate(source, prog):
        name = task_uts_ns(find_task(prog, pid)).name.nodename
        assert name.string_() == b"ovmbox"
        source.patch_virtual(prog, name.address_, b"ovm\xffox")
        return re.escape(
            f"PID {pid} (container) has a host name that is not valid UTF-8 (b'ovm\\xffox'),"
            " which CRIU's utsns image cannot hold"
        )

    _assert_refused(rec, mutate, UnsupportedError, tmp_path / "images")


#: blockers-partial: the child's one write() and its size, and what it moved into the pipe
WRITE, PARTIAL_BYTES, PARTIAL_MOVED = 1, 1 << 20, 65536


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
@pytest.mark.parametrize(
    "offset,needle",
    [
        (PARTIAL_MOVED - 1, r"inside write\(\): its kernel stack says it moved 65535 of 1048576 bytes, which its pipe"),
        (0, r"inside write\(\): a write of 1048576 bytes \(more than PIPE_BUF\) may already have moved part of them"),
    ],
)
def test_a_partial_write_whose_iterator_the_pipe_belies_is_refused_by_name(recording, tmp_path, kernel, offset, needle):
    """The count a pipe write asleep half-way returns comes from its iov_iter on the kernel
    stack: moved to an offset the pipe does not end with, or back to 0 (nothing on the stack
    then says how much moved), the write is refused by name, never ended with a wrong count."""
    from ovm_offline.kernel.fs.uio import task_ubuf_iters

    rec = recording(kernel, "blockers-partial")

    def iterator_at(source, prog):
        writers = [
            (t, regs)
            for p in process_tree(prog, find_task(prog, rec.manifest["root_pid"]))
            for t in thread_group(p)
            if (regs := task_user_regs(t)).orig_ax == WRITE and regs.dx == PARTIAL_BYTES
        ]
        assert len(writers) == 1, writers
        task, regs = writers[0]
        (moved,) = [it for it in task_ubuf_iters(task, regs.si, PARTIAL_BYTES, True) if it.iov_offset]
        assert moved.iov_offset == PARTIAL_MOVED
        for member, value in (("iov_offset", offset), ("count", PARTIAL_BYTES - offset)):
            source.patch_virtual(
                prog, moved.address_ + prog.member_offset("iov_iter", member), value.to_bytes(8, "little")
            )
        return needle

    _assert_refused(rec, iterator_at, UnsupportedError, tmp_path / "images")
