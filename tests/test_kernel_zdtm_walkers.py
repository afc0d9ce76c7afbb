"""The walkers the zdtm state added, over fake memory laid out by the real ISFs of both pinned
kernels: file locks on an inode (two struct layouts: fl_* before 6.9, a file_lock_core after),
a task's seccomp filter chain, and a tty's unread input. A guest is untrusted: a looping or
absurd structure is a one-line error, never a hang or a wrong value."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline.errors import GuestDataError, UnsupportedError
from ovm_offline.kernel.fs.locks import file_locks
from ovm_offline.kernel.fs.tty import tty_read_queue
from ovm_offline.kernel.task.seccomp import task_seccomp_filters
from ovm_offline.state import OFFSET_MAX
from tests.support.checks import assert_one_line_error
from tests.support.memory import FakeKernelMemory

KERNELS = list(kernels.KERNELS)
FL_POSIX, FL_FLOCK, FL_OFDLCK = 1, 2, 1024


class FakeKernel(FakeKernelMemory):
    def core(self, lock: int) -> tuple[str, int, str]:
        """(struct, address, member prefix) of a lock's common part in this kernel's layout."""
        if self.prog.struct_type("file_lock").has_member("c"):
            return "file_lock_core", lock + self.prog.member_offset("file_lock", "c"), "flc_"
        return "file_lock", lock, "fl_"

    def lock(self, file: int, owner: int, flags: int, type_: int, start: int = 0, end: int = OFFSET_MAX) -> int:
        lock = self.alloc("file_lock")
        struct, at, p = self.core(lock)
        self.set(at, struct, p + "file", file)
        self.set(at, struct, p + "owner", owner)
        self.set(at, struct, p + "flags", flags)
        self.set(at, struct, p + "type", type_)
        self.set(at, struct, p + "pid", 10000)
        self.set(lock, "file_lock", "fl_start", start)
        self.set(lock, "file_lock", "fl_end", end)
        return lock

    def list_node(self, lock: int) -> int:
        struct, at, p = self.core(lock)
        return at + self.prog.member_offset(struct, p + "list")

    def link(self, head: int, nodes: list[int], close: bool = True) -> None:
        """A circular list_head list at `head` through `nodes` (`close`: the last points back)."""
        chain = [head, *nodes]
        for a, b in zip(chain, chain[1:] + [head]):
            self.write_u64(a, b if close or b != head else nodes[0])
            self.write_u64(b + 8, a)

    def file_on(self, ctx: int) -> int:
        inode = self.alloc("inode")
        self.set(inode, "inode", "i_flctx", ctx)
        f = self.alloc("file")
        self.set(f, "file", "f_inode", inode)
        return f

    def flctx(self) -> int:
        ctx = self.alloc("file_lock_context")
        for name in ("flc_flock", "flc_posix", "flc_lease"):
            head = ctx + self.prog.member_offset("file_lock_context", name)
            self.write_u64(head, head)
            self.write_u64(head + 8, head)
        return ctx


@pytest.fixture(params=KERNELS)
def fake(request):
    return FakeKernel(request.param)


def test_locks_through_a_file_are_read_in_either_layout(fake):
    ctx = fake.flctx()
    f = fake.file_on(ctx)
    other = 0xFFFF_8880_1234_0000
    posix = fake.lock(f, 0xFFFF_8880_5555_0000, FL_POSIX, 1, 0, 9)
    ofd = fake.lock(f, f, FL_POSIX | FL_OFDLCK, 0)
    elsewhere = fake.lock(other, other, FL_FLOCK, 1)  # through another file: not this one's
    fake.link(
        ctx + fake.prog.member_offset("file_lock_context", "flc_posix"), [fake.list_node(posix), fake.list_node(ofd)]
    )
    fake.link(ctx + fake.prog.member_offset("file_lock_context", "flc_flock"), [fake.list_node(elsewhere)])
    locks = file_locks(fake.prog.pointer("file", f))
    assert [(lk.kind, lk.type, lk.start, lk.end) for lk in locks] == [("posix", 1, 0, 9), ("ofd", 0, 0, OFFSET_MAX)]
    assert locks[1].owner_key == f


def test_a_looping_lock_list_is_a_one_line_error(fake):
    ctx = fake.flctx()
    f = fake.file_on(ctx)
    a, b = fake.lock(f, f, FL_FLOCK, 1), fake.lock(f, f, FL_FLOCK, 0)
    head = ctx + fake.prog.member_offset("file_lock_context", "flc_flock")
    na, nb = fake.list_node(a), fake.list_node(b)
    fake.write_u64(head, na)
    fake.write_u64(na, nb)
    fake.write_u64(nb, na)  # b leads back to a, never to the head
    assert_one_line_error(lambda: file_locks(fake.prog.pointer("file", f)), "loops")


def _filter(fake: FakeKernel, prev: int, insns: int, keep: bool = True) -> int:
    program = fake.alloc(max(8, insns * 8))
    fprog = fake.alloc("sock_fprog_kern")
    fake.set(fprog, "sock_fprog_kern", "len", insns)
    fake.set(fprog, "sock_fprog_kern", "filter", program)
    prog = fake.alloc("bpf_prog")
    fake.set(prog, "bpf_prog", "orig_prog", fprog if keep else 0)
    flt = fake.alloc("seccomp_filter")
    fake.set(flt, "seccomp_filter", "prev", prev)
    fake.set(flt, "seccomp_filter", "prog", prog)
    return flt


def _task(fake: FakeKernel, filter_: int):
    task = fake.alloc("task_struct")
    fake.set(task, "task_struct", "seccomp.mode", 2)
    fake.set(task, "task_struct", "seccomp.filter", filter_)
    fake.set(task, "task_struct", "pid", 10000)
    return fake.prog.struct("task_struct", task)


def test_a_seccomp_chain_is_read_newest_first(fake):
    old = _filter(fake, 0, 3)
    new = _filter(fake, old, 5)
    assert [(f.key, len(f.program)) for f in task_seccomp_filters(_task(fake, new))] == [(new, 40), (old, 24)]


def test_a_looping_or_absurd_seccomp_chain_is_a_one_line_error(fake):
    a = _filter(fake, 0, 1)
    b = _filter(fake, a, 1)
    fake.set(a, "seccomp_filter", "prev", b)  # a <-> b
    assert_one_line_error(lambda: task_seccomp_filters(_task(fake, b)), "loops")
    for insns in (0, 4097):
        assert_one_line_error(lambda n=insns: task_seccomp_filters(_task(fake, _filter(fake, 0, n))), "instructions")


def test_a_filter_whose_program_was_not_kept_is_refused_by_name(fake):
    assert_one_line_error(
        lambda: task_seccomp_filters(_task(fake, _filter(fake, 0, 2, keep=False))),
        "CONFIG_CHECKPOINT_RESTORE",
        UnsupportedError,
    )


def test_a_looping_tty_buffer_chain_is_a_one_line_error(fake):
    tty = fake.alloc("tty_struct")
    port = fake.alloc("tty_port")
    fake.set(tty, "tty_struct", "port", port)
    ldisc = fake.alloc("tty_ldisc")
    fake.set(ldisc, "tty_ldisc", "ops", fake.prog.symbol_address("n_tty_ops"))
    fake.set(tty, "tty_struct", "ldisc", ldisc)
    a, b = fake.alloc("tty_buffer"), fake.alloc("tty_buffer")
    for buf, nxt in ((a, b), (b, a)):
        fake.set(buf, "tty_buffer", "size", 256)
        fake.set(buf, "tty_buffer", "next", nxt)
    fake.set(port, "tty_port", "buf.head", a)
    assert_one_line_error(lambda: tty_read_queue(fake.prog.struct("tty_struct", tty)), "loops", GuestDataError)
