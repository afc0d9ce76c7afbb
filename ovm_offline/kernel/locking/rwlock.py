"""``rwlock_t``: whether a writer holds it (the task list's ``tasklist_lock``: while it is held
for writing, the kernel's lists of tasks are being changed together and may disagree).

Two layouts, told apart by the struct's members:

* the usual build: ``raw_lock``, a ``struct qrwlock`` whose ``cnts`` low byte is _QW_LOCKED
  (0xff) while a writer holds it (include/asm-generic/qrwlock_types.h);
* PREEMPT_RT: ``rwbase``, a ``struct rwbase_rt`` whose ``readers`` is WRITER_BIAS exactly while
  a writer is inside (kernel/locking/rwbase_rt.c), as for a sleeping rw_semaphore.
"""

from __future__ import annotations

from ...errors import LayoutError
from ..core.objects import Struct
from .rwsem import UINT_MAX, WRITER_BIAS

__all__ = ["rwlock_is_write_locked"]

#: include/asm-generic/qrwlock.h
QW_LOCKED = 0xFF  # the low byte, wlocked; 0x100 (_QW_WAITING) is a writer not yet inside


def rwlock_is_write_locked(lock: Struct) -> bool:
    """Is a ``rwlock_t`` held for writing?"""
    if lock.has_member_("raw_lock"):
        raw = lock.raw_lock
        cnts = lock.prog_.read_u32(raw.address_)  # qrwlock.cnts: first member of its anonymous union
        return cnts & 0xFF == QW_LOCKED
    if lock.has_member_("rwbase"):
        return int(lock.rwbase.readers.counter) & UINT_MAX == WRITER_BIAS
    raise LayoutError("rwlock_t has neither raw_lock nor rwbase: a layout not supported")
