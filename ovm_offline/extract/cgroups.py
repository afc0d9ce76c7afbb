"""The cgroup v2 directories CRIU saves for a dumped task, from guest memory.

When a task lives in a cgroup other than criu's, CRIU's dump walks (ftw) that cgroup's
directory and every directory below it and records, for each, its mode and owner and some of
its files, so that restore can recreate the directories: 3.17 the permissions of
``cgroup.procs`` (the only property of its list that a v2 cgroup has), 4.x the values and
permissions of cgroup.subtree_control, cgroup.max.descendants, cgroup.max.depth,
cgroup.freeze and cgroup.type instead. Ours hold both, so that either restores them: each
CRIU writes every property it finds, 4.x skipping cgroup.procs's value and any cgroup.type
but "threaded". cgroup.type is saved only when "threaded" (the only value the kernel takes
back: 3.17 writing "domain" would fail). Here the same comes from the kernel objects:

* a directory is a ``struct cgroup``; its ``kn`` (``struct kernfs_node``) holds the mode
  (type bits included) and, once changed with chmod/chown, ``iattr`` holds the owner
  (root otherwise), which is what stat(2) reports on cgroupfs;
* ``cgroup.procs`` is the kernfs node ``cgrp->procs_file.kn``, the other files children of
  ``cgrp->kn`` by name, their values members of the ``struct cgroup``;
* the child cgroups are on ``cgrp->self.children`` (``struct cgroup_subsys_state``
  linked by ``sibling``); readdir, and so ftw, lists kernfs directories in the order of
  their parent's rbtree, sorted by (hash, namespace tag, name); a child whose kernfs
  node is deactivated (being removed) is not listed.

Walks are bounded: MAX_CGROUP_DIRS directories, MAX_CGROUP_DEPTH levels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import GuestDataError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.ds.list import list_for_each_entry
from ..kernel.ns.cgroup import (
    cgroup_is_threaded,
    cgroup_limit_text,
    cgroup_path,
    cgroup_subtree_control,
    kernfs_children,
    kernfs_name,
    task_dfl_cgroup,
)
from ..state import CgroupDir, CgroupPerms, CgroupProperty

__all__ = ["task_cgroup_dir"]


if TYPE_CHECKING:
    from ..kernel.core.memory import Program

MAX_CGROUP_DIRS = 1 << 16
MAX_CGROUP_DEPTH = 1024
S_IFMT, S_IFDIR, S_IFREG = 0o170000, 0o040000, 0o100000

#: CRIU 4.x's properties of a cgroup v2 directory (cgp_global_v2), in its order: each file's
#: name and its value as the file shows it, None where it is not saved
V2_PROPERTIES: tuple[tuple[str, Callable[[Pointer], str | None]], ...] = (
    ("cgroup.subtree_control", cgroup_subtree_control),
    ("cgroup.max.descendants", lambda c: cgroup_limit_text(int(c.max_descendants))),
    ("cgroup.max.depth", lambda c: cgroup_limit_text(int(c.max_depth))),
    ("cgroup.freeze", lambda c: str(int(c.freezer.freeze))),
    ("cgroup.type", lambda c: "threaded" if cgroup_is_threaded(c) else None),
)


def kernfs_active(kn: Pointer) -> bool:
    """Whether a ``struct kernfs_node *`` is active (``active`` >= 0; removal drives it
    negative with KN_DEACTIVATED_BIAS), as kernfs_active() tells readdir."""
    return kn.active.counter >= 0


def kernfs_perms(kn: Pointer, file_type: int) -> CgroupPerms:
    """What stat(2) reports of a ``struct kernfs_node *`` on cgroupfs: ``kn->mode`` and the
    owner in ``kn->iattr`` (root when the node has none); `file_type` is the S_IF* type
    the node must have."""
    mode = kn.mode
    if mode & S_IFMT != file_type:
        raise GuestDataError(f"kernfs node 0x{int(kn):x} has mode 0o{mode:o}, expected a 0o{file_type:o} node")
    iattr = kn.iattr
    uid = gid = 0
    if iattr:
        uid, gid = iattr.ia_uid.val, iattr.ia_gid.val
    return CgroupPerms(mode=mode, uid=uid, gid=gid)


def _kernfs_order(kn: Pointer) -> tuple[int, int, bytes]:
    """The key kernfs sorts a directory's rbtree by (kernfs_name_compare)."""
    return kn.hash, int(kn.ns), kernfs_name(kn).encode("utf-8", "surrogateescape")


def cgroup_children(prog: Program, cgrp: Pointer | Struct) -> list[Pointer]:
    """The live child ``struct cgroup *``s of a cgroup, in readdir order."""
    css = cgrp.self
    children = []
    for child in list_for_each_entry(
        prog,
        "cgroup_subsys_state",
        css.children.address_of_(),
        "sibling",
        name=f"children of cgroup 0x{css.address_:x}",
        limit=MAX_CGROUP_DIRS,
        check_prev=True,  # nothing else counts them: a list cut short must not pass for a shorter one
    ):
        # cgroup->self is the cgroup's own css: the css of a cgroup is at its start
        child = child.cgroup
        if not child:
            raise GuestDataError(f"cgroup_subsys_state at 0x{css.address_:x} has a child without a cgroup")
        kn = child.kn
        if kn and kernfs_active(kn):
            children.append(child)
    return sorted(children, key=lambda c: _kernfs_order(c.kn))


def cgroup_dir(prog: Program, cgrp: Pointer) -> CgroupDir:
    """The `CgroupDir` of a ``struct cgroup *`` and the cgroups below it."""
    count = 0

    def walk(c: Pointer, depth: int) -> CgroupDir:
        nonlocal count
        count += 1
        if count > MAX_CGROUP_DIRS or depth > MAX_CGROUP_DEPTH:
            raise GuestDataError(
                f"cgroup {cgroup_path(cgrp)} has more than {MAX_CGROUP_DIRS} cgroups below it "
                f"or is nested deeper than {MAX_CGROUP_DEPTH}"
            )
        kn = c.kn
        if not kn:
            raise GuestDataError(f"cgroup at 0x{int(c):x} has no kernfs node")
        d = CgroupDir(path=cgroup_path(c), perms=kernfs_perms(kn, S_IFDIR))
        procs = c.procs_file.kn
        if procs:
            d.properties.append(CgroupProperty(name="cgroup.procs", value="", perms=kernfs_perms(procs, S_IFREG)))
        d.properties += cgroup_v2_properties(c)
        d.children = [walk(child, depth + 1) for child in cgroup_children(prog, c)]
        return d

    return walk(cgrp, 0)


def cgroup_v2_properties(cgrp: Pointer) -> list[CgroupProperty]:
    """The `V2_PROPERTIES` a ``struct cgroup *``'s directory has (a root cgroup has none of
    these files), with their values and permissions."""
    values = {name: value for name, value_of in V2_PROPERTIES if (value := value_of(cgrp)) is not None}
    files = kernfs_children(cgrp.kn, set(values))
    props = []
    for name, value in values.items():
        if name in files:
            props.append(CgroupProperty(name=name, value=value, perms=kernfs_perms(files[name], S_IFREG)))
    return props


def task_cgroup_dir(prog: Program, task: Struct) -> CgroupDir | None:
    """The `CgroupDir` of a task's cgroup on the v2 hierarchy (None if it has no css_set)."""
    cgrp = task_dfl_cgroup(task)
    return cgroup_dir(prog, cgrp) if cgrp is not None else None
