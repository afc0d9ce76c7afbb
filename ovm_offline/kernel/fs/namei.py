"""Looking a path up in the dcache, as fs/namei.c does when every component is cached: the
children of a ``struct dentry`` (``d_subdirs`` through ``d_child`` before 6.8, the hlist
``d_children`` through ``d_sib`` since) and the mounts of a mount tree (``struct mount``'s
``mnt_mounts`` through ``mnt_child``, each on its ``mnt_mountpoint``).

Nothing here reads a disk: a name the dcache does not hold is "not found", which says "not
cached", not "does not exist". tmpfs and ramfs keep every name they hold in the dcache, so on
those a miss is a true miss.

A hostile guest can make lists long, shared, looping or cut short, so every walk draws on a
`WalkBudget` of list entries read, shared by all the walks of one search, and a list must
close (its head's ``prev`` the last entry); past the budget, on a loop or a list that does not
close, the search is GuestDataError naming the bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ...errors import GuestDataError
from ..core.objects import Struct
from ..ds.list import hlist_for_each_entry, list_for_each_entry
from .dcache import NAME_MAX, dentry_name

__all__ = ["MountTree", "WalkBudget", "dentry_children", "lookup_cached", "mount_tree"]

#: more mounts than one search goes through on any real system
MAX_MOUNTS = 1 << 12
#: list entries (dentries and mounts) one search may read: a few thousand mounts and the
#: directories looked up on each
DEFAULT_BUDGET = 1 << 18


@dataclass
class WalkBudget:
    """How many more list entries a search may read."""

    left: int = DEFAULT_BUDGET
    total: int = DEFAULT_BUDGET

    def take(self, what: str) -> None:
        self.left -= 1
        if self.left < 0:
            raise GuestDataError(f"{what}: more than {self.total} entries read in one search")


def dentry_children(dentry: Struct, budget: WalkBudget) -> Iterator[Struct]:
    """The child ``struct dentry``s of a ``struct dentry`` that have an inode (negative
    dentries and readdir cursors have none)."""
    prog = dentry.prog_
    if dentry.has_member_("d_children"):  # 6.8 and later
        children = hlist_for_each_entry(prog, "dentry", dentry.d_children.address_of_(), "d_sib", limit=budget.total)
    else:
        head = dentry.d_subdirs.address_of_()
        children = list_for_each_entry(prog, "dentry", head, "d_child", limit=budget.total, check_prev=True)
    for child in children:
        budget.take(f"children of dentry 0x{dentry.address_:x}")
        if child.d_inode:
            yield child


@dataclass
class MountTree:
    """A ``struct mount`` and every mount below it, with which is mounted where."""

    mounts: list[Struct]
    #: (parent mount, dentry of it) -> the mount on that dentry (the latest, as lookup_mnt finds)
    mounted_on: dict[tuple[int, int], Struct] = field(default_factory=dict)

    def follow_mounts(self, mount: Struct, dentry: Struct) -> tuple[Struct, Struct]:
        """(``struct mount``, ``struct dentry``) a path walk stands on at `dentry` of `mount`:
        the root of the topmost mount stacked there, or the same pair if none is."""
        seen: set[int] = set()
        while (child := self.mounted_on.get((mount.address_, dentry.address_))) is not None:
            if child.address_ in seen:
                raise GuestDataError(f"mount 0x{child.address_:x} is stacked on itself")
            seen.add(child.address_)
            mount, dentry = child, child.mnt.mnt_root.deref()
        return mount, dentry


def mount_tree(top: Struct, budget: WalkBudget) -> MountTree:
    """The `MountTree` of a ``struct mount``: it and every mount below, breadth first, at
    most MAX_MOUNTS."""
    tree = MountTree([])
    queue, seen = [top], {top.address_}
    while queue:
        mount = queue.pop(0)
        tree.mounts.append(mount)
        head = mount.mnt_mounts.address_of_()
        children = list_for_each_entry(mount.prog_, "mount", head, "mnt_child", limit=budget.total, check_prev=True)
        for child in children:
            budget.take(f"mounts on mount 0x{mount.address_:x}")
            if child.address_ in seen:
                raise GuestDataError(f"mount 0x{child.address_:x} is below itself")
            if len(seen) >= MAX_MOUNTS:
                raise GuestDataError(f"more than {MAX_MOUNTS} mounts below mount 0x{top.address_:x}")
            seen.add(child.address_)
            tree.mounted_on[(mount.address_, int(child.mnt_mountpoint))] = child  # attach_mnt adds it last
            queue.append(child)
    return tree


def lookup_cached(
    tree: MountTree, mount: Struct, dentry: Struct, path: str, budget: WalkBudget
) -> tuple[Struct, Struct] | None:
    """(``struct mount``, ``struct dentry``) of the relative `path` from `dentry` of `mount`,
    crossing the mounts of `tree` as a path walk does; None where a component is not in the
    dcache. No ".." and no symlinks: a component naming either is not found."""
    mount, dentry = tree.follow_mounts(mount, dentry)
    for name in path.encode().split(b"/"):
        if not name or name == b".":
            continue
        if name == b".." or len(name) > NAME_MAX:
            return None
        child = next((c for c in dentry_children(dentry, budget) if dentry_name(c) == name), None)
        if child is None:
            return None
        mount, dentry = tree.follow_mounts(mount, child)
    return mount, dentry
