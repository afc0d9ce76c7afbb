"""``struct rw_semaphore``: whether a writer holds it, and which task.

Two layouts, told apart by the struct's members:

* the usual build (kernel/locking/rwsem.c): ``count`` with RWSEM_WRITER_LOCKED in bit 0, and
  ``owner``, the writer's task_struct with flag bits in its low three bits;
* PREEMPT_RT (kernel/locking/rwbase_rt.c): ``rwbase``, a ``struct rwbase_rt``. Its
  ``readers`` is WRITER_BIAS exactly while a writer is inside, and the writer holds
  ``rtmutex`` all the while, whose ``owner`` is that task (bit 0: RT_MUTEX_HAS_WAITERS).
"""

from __future__ import annotations

from ...errors import LayoutError
from ..core.objects import Struct

__all__ = ["rwsem_write_owner"]

# kernel/locking/rwsem.c
RWSEM_WRITER_LOCKED = 1 << 0
RWSEM_OWNER_FLAGS_MASK = 0x7
# include/linux/rwbase_rt.h, kernel/locking/rtmutex_common.h
READER_BIAS, WRITER_BIAS = 1 << 31, 1 << 30
RT_MUTEX_HAS_WAITERS = 1
ULONG_MAX = (1 << 64) - 1
UINT_MAX = (1 << 32) - 1


def rwsem_write_owner(sem: Struct) -> Struct | None:
    """The ``struct task_struct`` holding a ``struct rw_semaphore`` for write, or None when
    no writer holds it (readers may)."""
    if sem.has_member_("rwbase"):
        rwbase = sem.rwbase
        if int(rwbase.readers.counter) & UINT_MAX != WRITER_BIAS:
            return None
        owner = int(rwbase.rtmutex.owner) & ~RT_MUTEX_HAS_WAITERS
    elif sem.has_member_("count") and sem.has_member_("owner"):
        if not sem.count.counter & RWSEM_WRITER_LOCKED:
            return None
        owner = (sem.owner.counter & ULONG_MAX) & ~RWSEM_OWNER_FLAGS_MASK
    else:
        raise LayoutError("struct rw_semaphore has neither rwbase nor count and owner: a layout not supported")
    return sem.prog_.struct("task_struct", owner) if owner else None
