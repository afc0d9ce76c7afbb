"""Control groups: a task's cgroup on the default (v2) hierarchy and its path.

task->cgroups (``struct css_set *``) ->dfl_cgrp (``struct cgroup *``) ->kn
(``struct kernfs_node *``): the path is the chain of kernfs node names up to the
hierarchy's root node (which has no parent and the name "").

Kernel differences handled: ``kernfs_node.parent`` became ``__parent`` (an RCU
pointer) in 6.13; ``name`` is a ``const char *`` throughout.  Both pinned kernels
(6.1, 6.12) use ``parent``.
"""

from __future__ import annotations

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from ..ds.rbtree import rb_inorder

__all__ = [
    "cgroup_is_threaded",
    "cgroup_limit_text",
    "cgroup_ns_root_path",
    "cgroup_path",
    "cgroup_subtree_control",
    "kernfs_children",
    "kernfs_name",
    "kernfs_path",
    "task_cgroup_ns",
    "task_cgroup_path",
    "task_dfl_cgroup",
]


#: Bounds on hostile data: kernfs names are at most NAME_MAX, paths PATH_MAX.
NAME_MAX = 255
PATH_MAX = 4096
MAX_DEPTH = 1024
#: entries of one kernfs directory walked to find a name: a cgroup's files and child cgroups
MAX_DIR_ENTRIES = 1 << 17
INT_MAX = (1 << 31) - 1


def kernfs_parent(kn: Pointer) -> Pointer:
    """The parent ``struct kernfs_node *`` of a ``struct kernfs_node *``."""
    node = kn.deref()
    if node.has_member_("parent"):
        return node.parent
    return node.member_("__parent")  # 6.13+


def kernfs_name(kn: Pointer) -> str:
    """The name of a ``struct kernfs_node *``."""
    name = kn.name
    if not name:
        return ""
    return name.string_(NAME_MAX + 1).decode("utf-8", "backslashreplace")


def kernfs_path(kn: Pointer) -> str:
    """The path of a ``struct kernfs_node *`` from its root ("/" for the root itself)."""
    parts: list[str] = []
    length = 0
    seen: set[int] = set()
    node = kn
    while node:
        addr = int(node)
        if addr in seen or len(parts) > MAX_DEPTH:
            raise GuestDataError(f"kernfs node 0x{int(kn):x}: parent chain loops or is deeper than {MAX_DEPTH}")
        seen.add(addr)
        parent = kernfs_parent(node)
        if not parent:
            break  # the root's name is not part of the path
        name = kernfs_name(node)
        length += len(name) + 1
        if length > PATH_MAX:
            raise GuestDataError(f"kernfs node 0x{int(kn):x}: path longer than {PATH_MAX}")
        parts.append(name)
        node = parent
    return "/" + "/".join(reversed(parts))


def task_css_set(task: Struct) -> Pointer:
    """``task->cgroups``: the ``struct css_set *`` of a ``struct task_struct``."""
    return task.cgroups


def task_dfl_cgroup(task: Struct) -> Pointer | None:
    """The task's ``struct cgroup *`` on the default (v2) hierarchy."""
    cset = task_css_set(task)
    if not cset:
        return None
    cgrp = cset.dfl_cgrp
    return cgrp if cgrp else None


def cgroup_path(cgrp: Pointer) -> str:
    """The path of a ``struct cgroup *`` within its hierarchy, e.g. "/ovmbox"."""
    kn = cgrp.kn
    if not kn:
        return "/"
    return kernfs_path(kn)


def task_cgroup_path(task: Struct) -> str | None:
    """The v2 cgroup path of a ``struct task_struct`` as /proc/PID/cgroup shows it from
    the initial cgroup namespace ("0::/path"); None if it has no css_set."""
    cgrp = task_dfl_cgroup(task)
    return cgroup_path(cgrp) if cgrp is not None else None


def task_cgroup_ns(task: Struct) -> Pointer | None:
    """The ``struct cgroup_namespace *`` of a ``struct task_struct`` (None once it is exiting)."""
    nsproxy = task.nsproxy
    return nsproxy.cgroup_ns if nsproxy else None


def cgroup_ns_root_path(ns: Pointer) -> str:
    """The v2 path of the root cgroup of a ``struct cgroup_namespace *`` (``root_cset``'s
    default cgroup), as seen from the initial namespace: "/" there, "/ovm-runc" in runc's."""
    cset = ns.root_cset
    if not cset or not cset.dfl_cgrp:
        raise GuestDataError(f"cgroup namespace 0x{int(ns):x} has no root cgroup")
    return cgroup_path(cset.dfl_cgrp)


def kernfs_children(kn: Pointer, names: set[str]) -> dict[str, Pointer]:
    """The children of the directory ``struct kernfs_node *`` `kn` named one of `names`, found
    in one bounded walk of its ``dir.children`` rb-tree (ended once all are found)."""
    prog = kn.prog_
    offset = prog.member_offset("kernfs_node", "rb")
    root = int(kn.dir.children.rb_node)
    found: dict[str, Pointer] = {}
    for node in rb_inorder(prog, root, name=f"children of kernfs node 0x{int(kn):x}", limit=MAX_DIR_ENTRIES):
        child = prog.pointer("kernfs_node", node - offset)
        name = kernfs_name(child)
        if name in names:
            found[name] = child
            if len(found) == len(names):
                break
    return found


def cgroup_subtree_control(cgrp: Pointer) -> str:
    """cgroup.subtree_control of a ``struct cgroup *``: the names of the controllers it enables
    for its children, in subsystem order, space-separated (cgroup_print_ss_mask)."""
    prog = cgrp.prog_
    mask = int(cgrp.subtree_control)
    table = prog.symbol_address("cgroup_subsys")
    names = []
    for ssid in range(mask.bit_length()):
        if not mask >> ssid & 1:
            continue
        ss = prog.pointer("cgroup_subsys", prog.read_u64(table + 8 * ssid))
        if not ss:
            raise GuestDataError(f"cgroup 0x{int(cgrp):x} enables controller {ssid}, which the kernel lacks")
        names.append(ss.name.string_(NAME_MAX + 1).decode("utf-8", "backslashreplace"))
    return " ".join(names)


def cgroup_limit_text(value: int) -> str:
    """cgroup.max.descendants and cgroup.max.depth as the files show an int limit: "max" for
    INT_MAX (no limit), else the number."""
    return "max" if value >= INT_MAX else str(value)


def cgroup_is_threaded(cgrp: Pointer) -> bool:
    """Whether a ``struct cgroup *`` is threaded (cgroup.type "threaded": its domain cgroup is
    another, cgroup_is_threaded)."""
    return int(cgrp.dom_cgrp) != int(cgrp)
