"""File locks and leases on an inode (``inode->i_flctx``, a ``struct file_lock_context``).

The context keeps three lists: ``flc_posix`` (POSIX record locks, and OFD locks, which carry
FL_OFDLCK), ``flc_flock`` (flock(2)) and ``flc_lease`` (leases). Each entry is a
``struct file_lock``; since 6.9 its common part is a ``struct file_lock_core`` at ``c``
(members ``flc_*``), leases are ``struct file_lease``, and the list member is
``c.flc_list``. Before, the members are ``fl_*`` of ``struct file_lock`` itself. Which
layout a kernel has is read from the ISF (`_layout`), never from its version.

Who holds a lock: ``fl_owner`` is the ``struct files_struct`` of the process that took a
POSIX lock, and the ``struct file`` itself for flock, OFD locks and leases (fs/locks.c).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ...state import OFFSET_MAX, FileLock, FileLockKind
from ..core.objects import Pointer, Struct
from ..ds.list import list_for_each_entry

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = [
    "FL_DOWNGRADE_PENDING",
    "FL_FLOCK",
    "FL_LEASE",
    "FL_OFDLCK",
    "FL_POSIX",
    "FL_UNLOCK_PENDING",
    "file_locks",
]

# include/linux/filelock.h (include/linux/fs.h before 6.9)
FL_POSIX = 1
FL_FLOCK = 2
FL_LEASE = 32
FL_DOWNGRADE_PENDING = 256  # a lease being broken to a read lease
FL_UNLOCK_PENDING = 512  # a lease being broken altogether
FL_OFDLCK = 1024
#: far more locks than one inode has on a real system (each is a slab object a process asked for)
MAX_LOCKS_PER_LIST = 1 << 16


@dataclasses.dataclass(frozen=True)
class _Layout:
    lock_type: str  # the struct on flc_posix and flc_flock
    lease_type: str  # the struct on flc_lease
    prefix: str  # "c.flc_" or "fl_": how the common members are reached


def _layout(prog: Program) -> _Layout:
    lock = prog.struct_type("file_lock")
    if lock.has_member("c"):
        lease = "file_lease" if prog.symbols.has_type("file_lease") else "file_lock"
        return _Layout("file_lock", lease, "c.flc_")
    if lock.has_member("fl_list") and lock.has_member("fl_owner"):
        return _Layout("file_lock", "file_lock", "fl_")
    raise GuestDataError("struct file_lock has neither fl_list nor a file_lock_core: a layout not known here")


def _core(lock: Struct, layout: _Layout, name: str) -> int:
    obj = lock.c if layout.prefix == "c.flc_" else lock
    return int(getattr(obj, layout.prefix.rsplit(".", 1)[-1] + name))


_LIST_KINDS: dict[str, FileLockKind] = {"posix": "posix", "flock": "flock", "lease": "lease"}


def _lock(lock: Struct, layout: _Layout, list_kind: str) -> FileLock:
    flags = _core(lock, layout, "flags")
    kind: FileLockKind = _LIST_KINDS[list_kind]
    if kind == "posix" and flags & FL_OFDLCK:
        kind = "ofd"
    # a struct file_lease (6.9+) has no range: a lease covers the whole file
    start, end = (int(lock.fl_start), int(lock.fl_end)) if lock.has_member_("fl_start") else (0, OFFSET_MAX)
    return FileLock(
        kind=kind,
        type=_core(lock, layout, "type"),
        start=start,
        end=end,
        pid=_core(lock, layout, "pid"),
        file_key=_core(lock, layout, "file"),
        owner_key=_core(lock, layout, "owner"),
        breaking=kind == "lease" and bool(flags & (FL_UNLOCK_PENDING | FL_DOWNGRADE_PENDING)),
    )


def inode_file_locks(inode: Pointer | Struct) -> Iterator[FileLock]:
    """Every lock and lease on a ``struct inode`` (its ``i_flctx`` lists: flock, then POSIX and
    OFD, then leases), each walk bounded."""
    node = inode.deref() if isinstance(inode, Pointer) else inode
    if not node.has_member_("i_flctx"):
        return
    ctx = node.i_flctx
    if not ctx:
        return
    prog = node.prog_
    layout = _layout(prog)
    ctx_struct = ctx.deref()
    member = layout.prefix + "list"
    # fdinfo's order (fs/locks.c show_fd_locks), which CRIU's images follow
    for list_name, kind_of_list, type_name in (
        ("flc_flock", "flock", layout.lock_type),
        ("flc_posix", "posix", layout.lock_type),
        ("flc_lease", "lease", layout.lease_type),
    ):
        head = ctx_struct.member_address_(list_name)
        name = f"{list_name} of file_lock_context 0x{ctx_struct.address_:x}"
        for lock in list_for_each_entry(
            prog, type_name, head, member, name=name, limit=MAX_LOCKS_PER_LIST, check_prev=True
        ):
            yield _lock(lock, layout, kind_of_list)


def file_locks(file: Pointer | Struct) -> list[FileLock]:
    """The locks and leases taken through one ``struct file`` (those whose ``fl_file`` it is,
    as fdinfo's "lock:" lines list them, whoever owns them)."""
    f = file.deref() if isinstance(file, Pointer) else file
    inode = f.f_inode
    if not inode:
        return []
    return [lock for lock in inode_file_locks(inode) if lock.file_key == f.address_]
