"""Looking a path up in the dcache, as fs/namei.c does when every component is cached: the
children of a ``struct dentry`` (``d_subdirs`` through ``d_child`` before 6.8, the hlist
``d_children`` through ``d_sib`` since) and the mounts on a dentry (``struct mount``'s
``mnt_mounts`` through ``mnt_child``).

Nothing here reads a disk: a name the dcache does not hold is "not found", which says "not
cached", not "does not exist". tmpfs and ramfs keep every name they hold in the dcache, so on
those a miss is a true miss. Every walk is bounded (children per directory, mounts crossed,
mounts searched); past a bound the walk is GuestDataError naming it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...errors import GuestDataError
from ..core.objects import Struct
from ..ds.list import hlist_for_each_entry, list_for_each_entry
from .dcache import NAME_MAX, dentry_name

__all__ = ["dentry_children", "follow_mounts", "lookup_cached", "mount_children", "mount_subtree"]

#: more entries than a directory walked here holds (a runtime's state directory, /run)
MAX_CHILDREN = 1 << 16
#: more mounts on one mount than any real system has
MAX_CHILD_MOUNTS = 1 << 12
#: more mounts stacked on one dentry, or searched below one mount, than a real system has
MAX_MOUNTS = 1 << 12


def dentry_children(dentry: Struct) -> Iterator[Struct]:
    """The child ``struct dentry``s of a ``struct dentry`` that have an inode (negative
    dentries and readdir cursors have none)."""
    prog = dentry.prog_
    if dentry.has_member_("d_children"):  # 6.8 and later
        children = hlist_for_each_entry(prog, "dentry", dentry.d_children.address_of_(), "d_sib", limit=MAX_CHILDREN)
    else:
        children = list_for_each_entry(prog, "dentry", dentry.d_subdirs.address_of_(), "d_child", limit=MAX_CHILDREN)
    for child in children:
        if child.d_inode:
            yield child


def mount_children(mount: Struct) -> Iterator[Struct]:
    """The ``struct mount``s mounted on dentries of a ``struct mount`` (its ``mnt_mounts``)."""
    return list_for_each_entry(
        mount.prog_, "mount", mount.mnt_mounts.address_of_(), "mnt_child", limit=MAX_CHILD_MOUNTS
    )


def _mounted_on(mount: Struct, dentry: Struct) -> Struct | None:
    """The mount on `dentry` of `mount`, the latest if more than one (attach_mnt adds it last,
    and lookup_mnt finds the latest first)."""
    found = None
    for child in mount_children(mount):
        if int(child.mnt_mountpoint) == dentry.address_:
            found = child
    return found


def follow_mounts(mount: Struct, dentry: Struct) -> tuple[Struct, Struct]:
    """(``struct mount``, ``struct dentry``) a path walk stands on at `dentry` of `mount`:
    the root of the topmost mount stacked there, or the same pair if none is."""
    for _ in range(MAX_MOUNTS):
        child = _mounted_on(mount, dentry)
        if child is None:
            return mount, dentry
        mount, dentry = child, child.mnt.mnt_root.deref()
    raise GuestDataError(f"more than {MAX_MOUNTS} mounts stacked on dentry 0x{dentry.address_:x}")


def _child_named(dentry: Struct, name: bytes) -> Struct | None:
    for child in dentry_children(dentry):
        if dentry_name(child) == name:
            return child
    return None


def lookup_cached(mount: Struct, dentry: Struct, path: str) -> tuple[Struct, Struct] | None:
    """(``struct mount``, ``struct dentry``) of the relative `path` from `dentry` of `mount`,
    crossing mounts as a path walk does; None where a component is not in the dcache. No
    ".." and no symlinks: a component naming either is not found."""
    mount, dentry = follow_mounts(mount, dentry)
    for name in path.encode().split(b"/"):
        if not name or name == b".":
            continue
        if name == b".." or len(name) > NAME_MAX:
            return None
        child = _child_named(dentry, name)
        if child is None:
            return None
        mount, dentry = follow_mounts(mount, child)
    return mount, dentry


def mount_subtree(mount: Struct) -> Iterator[Struct]:
    """A ``struct mount`` and every mount below it, breadth first, at most MAX_MOUNTS."""
    queue, seen = [mount], set[int]()
    while queue:
        current = queue.pop(0)
        if current.address_ in seen:
            raise GuestDataError(f"mount 0x{current.address_:x} is below itself")
        if len(seen) >= MAX_MOUNTS:
            raise GuestDataError(f"more than {MAX_MOUNTS} mounts below mount 0x{mount.address_:x}")
        seen.add(current.address_)
        yield current
        queue.extend(mount_children(current))
