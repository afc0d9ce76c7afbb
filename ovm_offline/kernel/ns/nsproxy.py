"""Namespaces of a task: the inode numbers /proc/PID/ns/* show.

Every namespace struct embeds a ``struct ns_common ns`` whose ``inum`` is that
inode number.  Most are reached through ``task->nsproxy``; the user namespace
through the task's credentials, the PID namespace through its ``struct pid``
(nsproxy->pid_ns_for_children is only where its *children* go).  An exiting task
has no nsproxy (do_exit clears it): its fields are then None.
"""

from __future__ import annotations

import dataclasses

from ...errors import GuestDataError, LayoutError
from ..core.memory import Program
from ..core.objects import Pointer, Struct
from ..task.cred import cred_user_ns
from ..task.pid import task_active_pid_ns

__all__ = [
    "NS_KINDS_BY_CLONE_FLAG",
    "NamespaceInodes",
    "ns_common_name",
    "ns_common_type",
    "ns_inum",
    "nsfs_file_namespace",
    "task_namespaces",
]


#: /proc/PID/ns name -> nsproxy member
_NSPROXY_MEMBERS = {
    "mnt": "mnt_ns",
    "net": "net_ns",
    "uts": "uts_ns",
    "ipc": "ipc_ns",
    "cgroup": "cgroup_ns",
    "time": "time_ns",
    "time_for_children": "time_ns_for_children",
    "pid_for_children": "pid_ns_for_children",
}


#: the namespaces a kernel may lack (cgroup: before 4.6, time: before 5.6) -> the struct their
#: kernels define: an ISF that has the struct but not the nsproxy member is broken, not old
_OPTIONAL_NAMESPACES = {
    "cgroup": "cgroup_namespace",
    "time": "time_namespace",
    "time_for_children": "time_namespace",
}


@dataclasses.dataclass(frozen=True)
class NamespaceInodes:
    """Inode numbers of a task's namespaces (None: absent in this kernel, or the task
    is exiting and has dropped its nsproxy)."""

    pid: int | None = None
    pid_for_children: int | None = None
    mnt: int | None = None
    net: int | None = None
    uts: int | None = None
    ipc: int | None = None
    user: int | None = None
    cgroup: int | None = None
    time: int | None = None
    time_for_children: int | None = None


def ns_inum(ns: Pointer | Struct | None) -> int | None:
    """The inode number of a namespace struct (``struct X_namespace *`` or ``struct net *``)."""
    if ns is None or (isinstance(ns, Pointer) and not ns):
        return None
    return ns.ns.inum


def task_nsproxy(task: Struct) -> Pointer | None:
    """``task->nsproxy`` (``struct nsproxy *``), None once the task is exiting."""
    p = task.nsproxy
    return p if p else None


def task_user_ns(task: Struct) -> Pointer | None:
    """The ``struct user_namespace *`` of a task (real_cred->user_ns, as /proc/PID/ns/user)."""
    cred = task.real_cred
    return cred_user_ns(cred) if cred else None


def _kernel_predates(prog: Program, field: str) -> bool:
    """Whether the kernel is older than namespace `field` (its nsproxy has no member for it
    and the ISF lacks the namespace's struct too)."""
    struct = _OPTIONAL_NAMESPACES.get(field)
    return struct is not None and not prog.symbols.has_type(struct)


def task_namespaces(task: Struct) -> NamespaceInodes:
    """All namespace inode numbers of a ``struct task_struct``."""
    values: dict[str, int | None] = {}
    pid_ns = task_active_pid_ns(task)
    values["pid"] = ns_inum(pid_ns)
    values["user"] = ns_inum(task_user_ns(task))
    nsp = task_nsproxy(task)
    if nsp is not None:
        nsproxy = nsp.deref()
        for field, member in _NSPROXY_MEMBERS.items():
            # an ISF without the mandatory ones is of no kernel we read: member_ refuses it
            if nsproxy.has_member_(member) or not _kernel_predates(task.prog_, field):
                # a NULL member is refused as it is read (invariants.NEVER_NULL)
                values[field] = ns_inum(nsproxy.member_(member))
    return NamespaceInodes(**values)


#: include/uapi/linux/sched.h: a namespace's CLONE_NEW* flag (proc_ns_operations.type) -> its
#: kind as NamespaceInodes names it
NS_KINDS_BY_CLONE_FLAG = {
    0x00020000: "mnt",
    0x02000000: "cgroup",
    0x04000000: "uts",
    0x08000000: "ipc",
    0x10000000: "user",
    0x20000000: "pid",
    0x40000000: "net",
    0x00000080: "time",
}


def nsfs_file_namespace(file: Pointer | Struct) -> tuple[str, int, int]:
    """(kind, inode number, CLONE_NEW* flag) of the namespace an nsfs ``struct file``
    (/proc/PID/ns/*) is open on: its inode's ``i_private`` is the namespace's ``struct
    ns_common``, whose `ns_common_type` says the kind."""
    f = file.deref() if isinstance(file, Pointer) else file
    prog = f.prog_
    inode = f.f_inode
    private = int(inode.i_private) if inode else 0
    if not private:
        raise GuestDataError(f"nsfs file at 0x{f.address_:x} has no namespace")
    common = prog.struct("ns_common", private)
    flag = ns_common_type(common)
    kind = NS_KINDS_BY_CLONE_FLAG.get(flag)
    if kind is None:
        raise GuestDataError(f"ns_common at 0x{private:x} has namespace type 0x{flag:x}, which is no CLONE_NEW* flag")
    inum = int(common.inum)
    if inum != int(inode.i_ino):
        raise GuestDataError(f"nsfs inode {int(inode.i_ino)} names namespace {inum}")
    return kind, inum, flag


def ns_common_type(common: Struct) -> int:
    """The CLONE_NEW* flag of a ``struct ns_common``: its own ``ns_type`` (6.18+), or its
    ``ops->type`` before."""
    if common.has_member_("ns_type"):
        return int(common.ns_type)
    if not common.has_member_("ops") or not common.prog_.struct_type("proc_ns_operations").has_member("type"):
        raise LayoutError("struct ns_common has neither ns_type nor ops->type: a layout not supported")
    ops = common.ops
    if not ops:
        raise GuestDataError(f"ns_common at 0x{common.address_:x} has no operations")
    return int(ops.deref().type)


def ns_common_name(common: Struct) -> bytes | None:
    """The type name its ``ops->name`` gives a ``struct ns_common`` ("net", "mnt", ...: what
    /proc/PID/ns/* links show), None when it has no operations."""
    ops = common.ops
    return ops.name.string_(64) if ops else None
