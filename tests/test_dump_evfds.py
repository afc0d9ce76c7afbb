"""`ovm-offline dump` of eventfds, a signalfd, timerfds and an epoll set (the evfds workload):
the values the images hold are those the workload set; the epoll tree walk and the anon-fd
readers must survive hostile memory with one-line errors. The general gates (diff against
criu's images, byte-identical from every source, crit, criu restore) run in tests/test_dump.py
for every workload."""

from __future__ import annotations

import signal

import pytest

from corpus import kernels
from ovm_offline.dump import classify
from ovm_offline.errors import UnsupportedError
from ovm_offline.extract.files import extract_files
from ovm_offline.kernel import open_kernel
from ovm_offline.kernel.fs.anonfds import (
    eventpoll_items,
    rb_inorder,
    signalfd_mask,
    timerfd_remaining_ns,
)
from ovm_offline.kernel.task.pid import task_active_pid_ns
from ovm_offline.kernel.task.tasks import for_each_process
from ovm_offline.sources import open_source
from ovm_offline.state import Fd, FileIdentity, OpenFile
from tests.support.checks import assert_one_line_error
from tests.support.dumped_files import process_files
from tests.support.filekinds import attach_or_refuse, attach_states
from tests.support.memory import FAKE_POB, FakeKernelMemory

KERNELS = list(kernels.KERNELS)

# include/uapi/asm-generic/fcntl.h, include/uapi/linux/eventpoll.h, the workload's clocks
O_RDWR, O_NONBLOCK = 0o2, 0o4000
EPOLLIN, EPOLLERR, EPOLLHUP, EPOLLONESHOT, EPOLLET = 0x1, 0x8, 0x10, 1 << 30, 1 << 31
CLOCK_REALTIME, CLOCK_MONOTONIC = 0, 1
TFD_TIMER_ABSTIME = 1
FD_CLOEXEC = 1
NSEC = 10**9
# the workload's fd numbers (corpus/workloads/evfds.c opens them in this order after 0-2)
EFD, THREE, SFD, IDLE, FIRED, ABS, EP, PIPE_R = 3, 4, 5, 6, 7, 8, 9, 10


def _files_by_fd(directory) -> tuple[dict[int, object], dict[int, object]]:
    """(fd -> files.img entry, fd -> fdinfo entry) of the one process in `directory`."""
    files, fdinfo = process_files(directory)
    return {fd: files[e.id] for fd, e in fdinfo.items()}, fdinfo


def _remaining_ns(entry) -> int:
    return entry.tfd.vsec * NSEC + entry.tfd.vnsec


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_eventfds_and_signalfd_hold_what_the_workload_put_there(dumped, kernel):
    files, fdinfo = _files_by_fd(dumped(kernel, "evfds"))
    assert files[EFD].efd.counter == 5 and files[THREE].efd.counter == 3
    # EFD_CLOEXEC is per fd (fdinfo), not in the file's flags
    assert files[EFD].efd.flags == files[THREE].efd.flags == O_RDWR | O_NONBLOCK
    assert (fdinfo[EFD].flags, fdinfo[THREE].flags) == (0, FD_CLOEXEC)
    usr2, rt2 = signal.SIGUSR2, 34 + 2  # glibc's SIGRTMIN is 34 (it keeps 32 and 33)
    assert files[SFD].sgfd.sigmask == 1 << (usr2 - 1) | 1 << (rt2 - 1)
    assert files[SFD].sgfd.flags == O_RDWR | O_NONBLOCK


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_timerfds_hold_their_clocks_intervals_and_time_left(recording, dumped, kernel):
    files, fdinfo = _files_by_fd(dumped(kernel, "evfds"))
    idle, fired, absolute = files[IDLE].tfd, files[FIRED].tfd, files[ABS].tfd
    assert (idle.clockid, idle.ticks, idle.settime_flags, idle.isec, idle.insec) == (CLOCK_MONOTONIC, 0, 0, 2, 0)
    assert 0 < _remaining_ns(files[IDLE]) <= 600 * NSEC
    # fired once and not read since: one tick, parked at its old expiry, so nothing left
    assert (fired.clockid, fired.ticks, fired.vsec, fired.vnsec, fired.isec) == (CLOCK_MONOTONIC, 1, 0, 0, 300)
    assert (absolute.clockid, absolute.settime_flags, absolute.isec) == (CLOCK_REALTIME, TFD_TIMER_ABSTIME, 7)
    assert 3000 * NSEC < _remaining_ns(files[ABS]) <= 3600 * NSEC
    assert absolute.flags == O_RDWR and fdinfo[FIRED].flags == FD_CLOEXEC
    # criu dumped the same timers a little later: both show the same lag (our snapshot came
    # first), to within the milliseconds between criu's reads of the two fdinfo files
    golden, _ = _files_by_fd(recording(kernel, "evfds").golden)
    lag_idle = _remaining_ns(files[IDLE]) - _remaining_ns(golden[IDLE])
    lag_abs = _remaining_ns(files[ABS]) - _remaining_ns(golden[ABS])
    assert 0 < lag_idle < 60 * NSEC and abs(lag_idle - lag_abs) < NSEC // 10, (lag_idle, lag_abs)


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_epoll_targets_carry_their_events_and_data_in_kernel_tree_order(recording, dumped, kernel):
    files, fdinfo = _files_by_fd(dumped(kernel, "evfds"))
    ep = files[EP].epfd
    assert ep.flags == O_RDWR and fdinfo[EP].flags == FD_CLOEXEC
    base = EPOLLIN | EPOLLERR | EPOLLHUP
    assert {t.tfd: (t.events, t.data) for t in ep.tfd} == {
        EFD: (base, 0x1111),
        SFD: (base, 0x2222),
        PIPE_R: (base | EPOLLET, 0x3333),
        IDLE: (base | EPOLLONESHOT, 0x4444),
        FIRED: (base, 0x5555),
    }
    assert all(t.id == 0 and t.pos == 0 for t in ep.tfd)
    # the pipe's target names its pipefs inode, the anon files their shared anon inode
    pipe = next(t for t in ep.tfd if t.tfd == PIPE_R)
    assert pipe.inode == files[PIPE_R].pipe.pipe_id
    assert len({(t.dev, t.inode) for t in ep.tfd if t.tfd != PIPE_R}) == 1
    # the tree is keyed by (struct file address, fd): that is the order fdinfo lists
    src = open_source(str(recording(kernel, "evfds").elf))
    try:
        prog = open_kernel(src)
        task = next(t for t in for_each_process(prog) if t.pid == 10000)
        by_fd = {fd.fd: fd.file.key for fd in extract_files(prog, task, task_active_pid_ns(task), classify)}
    finally:
        src.close()
    assert [t.tfd for t in ep.tfd] == sorted((t.tfd for t in ep.tfd), key=lambda fd: (by_fd[fd], fd))


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_extracted_state_of_the_workload(recording, kernel):
    src = open_source(str(recording(kernel, "evfds").elf))
    try:
        prog = open_kernel(src)
        task = next(t for t in for_each_process(prog) if t.pid == 10000)
        fds = extract_files(prog, task, task_active_pid_ns(task), classify)
        fds, refusals = attach_states(prog, fds, pid=10000, comm="evfds", task=task, pid_ns=task_active_pid_ns(task))
    finally:
        src.close()
    assert refusals == []
    by_fd = {fd.fd: fd.file for fd in fds}
    assert [(by_fd[fd].state.count, by_fd[fd].state.semaphore) for fd in (EFD, THREE)] == [(5, False), (3, False)]
    assert {t.fd for t in by_fd[EP].state.targets} == {EFD, SFD, IDLE, FIRED, PIPE_R}
    assert by_fd[ABS].state.settime_flags == TFD_TIMER_ABSTIME
    assert by_fd[FIRED].state.value_ns == 0 and by_fd[IDLE].state.value_ns > 0


# --- epoll trees, timerfds and signalfds in fake memory laid out by the real ISFs ---------


class FakeKernel(FakeKernelMemory):
    """epoll trees, files and anon-fd contexts in fake memory."""

    def alloc(self, size: int | str, align: int = 0x100) -> int:
        return super().alloc(size, align)

    def epitem(self, fd: int, file: int, events: int = EPOLLIN, data: int = 0) -> int:
        """A struct epitem; returns the address of its rb_node."""
        epi = self.alloc("epitem")
        self.set(epi, "epitem", "ffd.fd", fd)
        self.set(epi, "epitem", "ffd.file", file)
        self.set(epi, "epitem", "event.events", events)
        self.set(epi, "epitem", "event.data", data)
        return epi + self.prog.member_offset("epitem", "rbn")

    def link(self, node: int, left: int = 0, right: int = 0) -> None:
        self.set(node, "rb_node", "rb_left", left)
        self.set(node, "rb_node", "rb_right", right)

    def eventpoll(self, root: int) -> object:
        ep = self.alloc("eventpoll")
        self.set(ep, "eventpoll", "rbr.rb_root.rb_node", root)
        return self.prog.pointer("eventpoll", ep)

    def file(self, private_data: int, ino: int = 0, s_dev: int = 0) -> int:
        """A struct file on an inode `ino` of a super_block `s_dev`."""
        sb = self.alloc("super_block")
        self.set(sb, "super_block", "s_dev", s_dev)
        inode = self.alloc("inode")
        self.set(inode, "inode", "i_ino", ino)
        self.set(inode, "inode", "i_sb", sb)
        f = self.alloc("file")
        self.set(f, "file", "f_inode", inode)
        self.set(f, "file", "private_data", private_data)
        return f


@pytest.fixture(params=KERNELS)
def fake(request):
    return FakeKernel(request.param)


def test_epoll_items_come_in_tree_order(fake):
    #        d
    #      b   f
    #     a c e g      (a..g watch fds 0..6)
    a, b, c, d, e, f, g = (fake.epitem(fd, 0x1000 + fd, data=0x100 + fd) for fd in range(7))
    fake.link(b, a, c)
    fake.link(f, e, g)
    fake.link(d, b, f)
    for leaf in (a, c, e, g):
        fake.link(leaf)
    items = eventpoll_items(fake.eventpoll(d))
    assert [(i.ffd.fd, i.event.data) for i in items] == [(fd, 0x100 + fd) for fd in range(7)]


def test_empty_epoll_has_no_items(fake):
    assert eventpoll_items(fake.eventpoll(0)) == []


def test_a_looping_epoll_tree_is_a_one_line_error(fake):
    a, b = fake.epitem(1, 0x1000), fake.epitem(2, 0x2000)
    fake.link(a, right=b)
    fake.link(b, left=a)  # b's left subtree is a again
    assert_one_line_error(lambda: eventpoll_items(fake.eventpoll(a)), "loops")
    fake.link(a, left=a)  # a node that is its own child
    assert_one_line_error(lambda: eventpoll_items(fake.eventpoll(a)), "loops")


def test_a_right_leaning_cycle_is_caught_before_it_runs_away(fake):
    # every node's right child is the next, the last one's is the first: a cycle that an
    # unbounded in-order walk would follow forever, yielding as it goes
    nodes = [fake.epitem(fd, 0x1000 + fd) for fd in range(5)]
    for node, nxt in zip(nodes, nodes[1:] + nodes[:1]):
        fake.link(node, right=nxt)
    before = fake.src.reads
    assert_one_line_error(lambda: eventpoll_items(fake.eventpoll(nodes[0])), "loops")
    assert fake.src.reads - before < 100


def test_too_many_or_too_deep_nodes_are_refused(fake):
    # a chain 25 deep: no red-black tree of up to 1000 nodes is deeper than 2*log2(1001) ~ 20
    chain = [fake.epitem(fd, 0x1000) for fd in range(25)]
    for node, child in zip(chain, chain[1:]):
        fake.link(node, left=child)
    fake.link(chain[-1])
    assert_one_line_error(lambda: eventpoll_items(fake.eventpoll(chain[0]), limit=1000), "deeper than 20 levels")
    # a balanced tree, but with more nodes than allowed
    nodes = [fake.epitem(fd, 0x1000) for fd in range(7)]
    fake.link(nodes[1], nodes[0], nodes[2])
    fake.link(nodes[5], nodes[4], nodes[6])
    fake.link(nodes[3], nodes[1], nodes[5])
    for leaf in nodes[0::2]:
        fake.link(leaf)
    assert_one_line_error(lambda: eventpoll_items(fake.eventpoll(nodes[3]), limit=6), "more than 6 nodes")


def test_an_unreadable_tree_node_is_a_one_line_error(fake):
    a = fake.epitem(1, 0x1000)
    fake.link(a, right=0x0000_DEAD_BEEF_0000)
    assert_one_line_error(lambda: eventpoll_items(fake.eventpoll(a)), "unreadable")
    assert_one_line_error(
        lambda: list(rb_inorder(fake.prog, FAKE_POB + (1 << 40), name="tree", limit=10)), "tree: node"
    )


def test_signalfd_mask_is_the_complement_the_kernel_stores(fake):
    ctx = fake.alloc("signalfd_ctx")
    wanted = 1 << (signal.SIGUSR2 - 1) | 1 << 35
    fake.set(ctx, "signalfd_ctx", "sigmask", ~wanted)
    assert signalfd_mask(fake.prog.pointer("signalfd_ctx", ctx)) == wanted


def test_timerfd_time_left_is_expiry_minus_now_never_negative(fake):
    ctx = fake.alloc("timerfd_ctx")
    fake.set(ctx, "timerfd_ctx", "clockid", CLOCK_MONOTONIC)
    fake.set(ctx, "timerfd_ctx", "t.tmr.node.expires", 50 * NSEC)
    timer = fake.prog.pointer("timerfd_ctx", ctx)
    assert timerfd_remaining_ns(timer, now=20 * NSEC) == 30 * NSEC
    assert timerfd_remaining_ns(timer, now=70 * NSEC) == 0  # fired, parked at its old expiry
    # an alarm timerfd reads the alarm's own expiry; its type picks the clock
    fake.set(ctx, "timerfd_ctx", "clockid", 9)  # CLOCK_BOOTTIME_ALARM
    fake.set(ctx, "timerfd_ctx", "t.alarm.node.expires", 80 * NSEC)
    fake.set(ctx, "timerfd_ctx", "t.alarm.type", 1)
    assert timerfd_remaining_ns(timer, now=20 * NSEC) == 60 * NSEC
    fake.set(ctx, "timerfd_ctx", "t.alarm.type", 77)
    assert_one_line_error(lambda: timerfd_remaining_ns(timer, now=0), "impossible type 77")


def _epoll_process(fake, *, watched_fd: int, open_fd: int, same_file: bool, eventfd_flags: int = 0):
    """A process whose fd 4 is an epoll watching `watched_fd`, and whose fd `open_fd` is an
    eventfd (the watched file, or another one) with eventfd_ctx.flags `eventfd_flags`."""
    ctx = fake.alloc("eventfd_ctx")
    fake.set(ctx, "eventfd_ctx", "count", 7)
    fake.set(ctx, "eventfd_ctx", "flags", eventfd_flags)
    target = fake.file(ctx, ino=1038, s_dev=14)
    other = fake.file(fake.alloc("eventfd_ctx"), ino=1038, s_dev=14)
    ep = fake.eventpoll(fake.epitem(watched_fd, target, EPOLLIN | EPOLLERR | EPOLLHUP, 0x1111))
    fake.link(int(ep.rbr.rb_root.rb_node))
    ep_file = fake.file(int(ep), ino=1038, s_dev=14)

    def open_file(key: int, kind: str) -> OpenFile:
        return OpenFile(
            key=key, kind=kind, identity=FileIdentity(f"anon_inode:[{kind}]", 14, 1038, 0, 0o600), flags=O_RDWR, pos=0
        )

    return [
        Fd(fd=4, file=open_file(ep_file, "eventpoll"), cloexec=False),
        Fd(fd=open_fd, file=open_file(target if same_file else other, "eventfd"), cloexec=False),
    ]


def test_an_epoll_target_is_saved_with_its_inode(fake):
    fds = _epoll_process(fake, watched_fd=7, open_fd=7, same_file=True)
    attach_or_refuse(fake.prog, fds)
    (t,) = fds[0].file.state.targets
    assert (t.fd, t.events, t.data, t.dev, t.ino, t.pos) == (7, 0x19, 0x1111, 14, 1038, 0)
    assert fds[1].file.state.count == 7 and not fds[1].file.state.semaphore


def test_an_epoll_whose_fd_was_closed_names_the_fd_its_file_is_open_at(fake):
    """zdtm epoll01: the fd an epoll was given is closed, its file open at another fd of the
    process: criu's kcmp lookup finds it there, and restore adds that fd."""
    fds = _epoll_process(fake, watched_fd=7, open_fd=8, same_file=True)
    attach_or_refuse(fake.prog, fds)
    (t,) = fds[0].file.state.targets
    assert (t.fd, t.data) == (8, 0x1111)


@pytest.mark.parametrize("open_fd,why", [(8, "not open"), (7, "open on another file")])
def test_an_epoll_watching_a_file_not_saved_is_refused_or_left_out(fake, open_fd, why):
    same_file = False
    fds = _epoll_process(fake, watched_fd=7, open_fd=open_fd, same_file=same_file)
    assert_one_line_error(
        lambda: attach_or_refuse(fake.prog, list(fds)),
        f"PID 42 (x) fd 4: an epoll watching fd 7, which is {why}",
        UnsupportedError,
    )
    kept, refusals = attach_states(fake.prog, list(fds))
    assert [fd.fd for fd in kept] == [open_fd] and len(refusals) == 1 and "fd 4:" in str(refusals[0])


def test_a_semaphore_eventfd_is_refused_and_so_is_an_epoll_watching_it(fake):
    fds = _epoll_process(fake, watched_fd=7, open_fd=7, same_file=True, eventfd_flags=1 | O_NONBLOCK)
    assert_one_line_error(
        lambda: attach_or_refuse(fake.prog, list(fds)),
        "PID 42 (x) fd 7: an eventfd in semaphore mode (EFD_SEMAPHORE)",
        UnsupportedError,
    )
    # left out (--skip-unsupported), it takes the epoll that watches it along
    kept, refusals = attach_states(fake.prog, list(fds))
    assert kept == [] and [str(r).split(":")[0] for r in refusals] == ["PID 42 (x) fd 7", "PID 42 (x) fd 4"]
