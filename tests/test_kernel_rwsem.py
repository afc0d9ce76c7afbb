"""Who holds an ``rw_semaphore`` for write (kernel/locking/rwsem.py), in the usual layout and in
PREEMPT_RT's ``rwbase_rt``, on fake memory laid out by each pinned ISF."""

from __future__ import annotations

import pytest

from ovm_offline.errors import LayoutError
from ovm_offline.kernel.core.objects import Struct
from ovm_offline.kernel.locking.rwsem import READER_BIAS, WRITER_BIAS, rwsem_write_owner
from tests.support.memory import FakeKernelMemory
from tests.support.paths import ISF


def _semaphore(fake: FakeKernelMemory, writer: int | None, readers: int = 0) -> Struct:
    """An rw_semaphore in the state a writer `writer` (task address) or `readers` readers left it."""
    sem = fake.alloc("rw_semaphore")
    if fake.prog.struct("rw_semaphore", sem).has_member_("rwbase"):
        count = WRITER_BIAS if writer is not None else READER_BIAS + readers
        fake.set(sem, "rw_semaphore", "rwbase.readers.counter", count)
        if writer is not None:
            fake.set(sem, "rw_semaphore", "rwbase.rtmutex.owner", writer | 1)  # a waiter queued
    else:
        # RWSEM_WRITER_LOCKED, or RWSEM_READER_BIAS (1 << 8) per reader; owner's low bits are flags
        fake.set(sem, "rw_semaphore", "count.counter", 1 if writer is not None else readers << 8)
        fake.set(sem, "rw_semaphore", "owner.counter", (writer or 0) | 0x2)
    return fake.prog.struct("rw_semaphore", sem)


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_the_writer_is_found_in_either_layout(kernel):
    fake = FakeKernelMemory(kernel)
    task = fake.alloc("task_struct")
    owner = rwsem_write_owner(_semaphore(fake, task))
    assert owner is not None and owner.address_ == task
    assert rwsem_write_owner(_semaphore(fake, None, readers=3)) is None
    assert rwsem_write_owner(_semaphore(fake, None)) is None


def test_each_pinned_isf_says_which_layout_it_has():
    rt = {k for k in ISF if FakeKernelMemory(k).prog.struct("rw_semaphore", 0).has_member_("rwbase")}
    assert rt == {"6.1-rt"}


def test_a_writer_still_draining_readers_is_not_yet_inside():
    """rwbase_write_lock() takes the rtmutex and removes READER_BIAS first; the writer is inside
    only when the last reader left and it set WRITER_BIAS."""
    fake = FakeKernelMemory("6.1-rt")
    sem = fake.alloc("rw_semaphore")
    fake.set(sem, "rw_semaphore", "rwbase.readers.counter", 2)  # two readers still inside
    fake.set(sem, "rw_semaphore", "rwbase.rtmutex.owner", fake.alloc("task_struct"))
    assert rwsem_write_owner(fake.prog.struct("rw_semaphore", sem)) is None


def test_a_layout_of_neither_kind_is_refused_by_name():
    fake = FakeKernelMemory("6.1")
    not_a_semaphore = fake.prog.struct("list_head", fake.alloc(64))
    with pytest.raises(LayoutError, match="struct rw_semaphore has neither rwbase nor count and owner"):
        rwsem_write_owner(not_a_semaphore)
