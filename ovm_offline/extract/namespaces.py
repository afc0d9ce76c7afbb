"""The namespaces a dumped tree lives in, decided as CRIU 3.17 decides them (namespaces.c).

A namespace the tree's root shares with the guest's init is left to the restoring system. One
the root has of its own is saved, and restore makes it anew for the whole tree. A process of
the tree in any other namespace of a kind is "nested": CRIU refuses that for every kind but
mount and network namespaces, and ovm-offline refuses it for every kind. One row per kind says
how the root's own namespace of that kind is saved, or that it cannot be saved yet; a tree
that lives in one is refused by name, never written with ids that name a namespace no image
describes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.objects import Struct
from ..kernel.ns.cgroup import cgroup_ns_root_path, task_cgroup_ns
from ..kernel.ns.nsproxy import NamespaceInodes, task_namespaces, task_user_ns
from ..kernel.ns.uts import task_uts_ns, uts_domainname, uts_nodename
from ..kernel.task.cred import is_init_user_ns, uid_gid_map_extents
from ..state import (
    CgroupNamespaceState,
    IpcNamespaceState,
    MountNamespaceState,
    NetNamespaceState,
    ProcessState,
    SharedMemory,
    TreeNamespaces,
    UserNamespaceState,
    UtsNamespaceState,
)
from .ipc import extract_ipc_namespace, task_ipc_ns
from .mounts import extract_mount_namespace
from .runtimes import RuncContainer, runc_containers, runc_external_mounts

if TYPE_CHECKING:
    from ..kernel.core.memory import Program

__all__ = ["NAMESPACE_KINDS", "NamespaceKind", "NamespaceRefusal", "NotSaved", "tree_namespaces"]


@dataclasses.dataclass(frozen=True)
class NamespaceRefusal:
    """Why the namespaces of process `pid` (global) keep the tree from being saved."""

    pid: int
    comm: str
    why: str


@dataclasses.dataclass
class TreeContext:
    """What a kind's saver reads: the tree (``struct task_struct``, root first) and its
    ProcessStates, and the shmem files already extracted (System V segments share them)."""

    prog: Program
    tree: list[Struct]
    processes: list[ProcessState]
    shmem: dict[int, SharedMemory]
    refusals: list[NamespaceRefusal]
    #: the guest's runc containers (`runc_containers`), searched only when a saver asks
    containers: Callable[[], dict[int, RuncContainer]]

    def refuse(self, proc: ProcessState, why: str) -> None:
        self.refusals.append(NamespaceRefusal(proc.global_pid, proc.comm, f"PID {proc.global_pid} ({proc.comm}) {why}"))

    @functools.cached_property
    def runc_container(self) -> RuncContainer | None:
        """The runc container whose first process is the tree's root, if runc made it."""
        return self.containers().get(self.processes[0].global_pid)


class NotSaved(Exception):
    """Why a kind's saver cannot save the root's namespace of the kind (the end of the refusal)."""


@dataclasses.dataclass(frozen=True)
class NamespaceKind:
    """A kind of namespace: `name` as /proc/PID/ns/NAME and NamespaceInodes call it, the words
    an error uses, and `save`, which reads the root's own namespace of the kind (returning
    what TreeNamespaces keeps of it, or None when the images need nothing more than the ids),
    or None while ovm-offline cannot save one."""

    name: str
    words: str
    save: Callable[[TreeContext], object] | None
    # a process may unshare one for the children it forks next (nsproxy *_for_children)
    for_children: str | None = None
    # saved only when the tree is a container runc made: why, as the refusal of any other
    # tree's namespace of the kind ends
    runc_only: str | None = None


def _root_task_ns(ctx: TreeContext, get, what: str):
    ns = get(ctx.tree[0])
    if ns is None:
        raise GuestDataError(f"PID {ctx.processes[0].global_pid} has no {what} (it is exiting)")
    return ns


def _save_pid(ctx: TreeContext) -> None:
    """The pstree's pids are the root's PID namespace's, and restore makes the root that
    namespace's init: so the root must be it (CRIU: "Can't dump a pid namespace without the
    process init")."""
    root = ctx.processes[0]
    if root.pid != 1:
        ctx.refuse(
            root,
            f"is PID {root.pid} of a PID namespace of its own; only a namespace's init (PID 1) can be dumped with it",
        )


def _save_ipc(ctx: TreeContext) -> IpcNamespaceState:
    return extract_ipc_namespace(ctx.prog, _root_task_ns(ctx, task_ipc_ns, "IPC namespace"), ctx.shmem)


def _text(ctx: TreeContext, value: bytes, what: str) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        ctx.refuse(
            ctx.processes[0], f"has a {what} that is not valid UTF-8 ({value!r}), which CRIU's utsns image cannot hold"
        )
        return ""


def _save_uts(ctx: TreeContext) -> UtsNamespaceState:
    ns = _root_task_ns(ctx, task_uts_ns, "UTS namespace")
    return UtsNamespaceState(
        inum=ns.ns.inum,
        nodename=_text(ctx, uts_nodename(ns), "host name"),
        domainname=_text(ctx, uts_domainname(ns), "domain name"),
    )


#: the one runtime whose checkpoint ovm-offline writes a network and mount namespace for
RUNC_ONLY = "ovm-offline saves one only for a container runc made (runc restore recreates it as runc describes it)"
#: a namespace criu restores on its own, but which only `runc restore` has been seen to restore
#: from our images: another tree in one is refused until a corpus workload restores it
RESTORED_ONLY_BY_RUNC = (
    "ovm-offline saves one only for a container runc made (the one kind of tree restored from such images yet)"
)


def _save_net(ctx: TreeContext) -> NetNamespaceState:
    """runc checkpoints with `criu --empty-ns network` and makes the network namespace afresh
    from its config at restore, so a runc container's is saved as its id alone."""
    inum = task_namespaces(ctx.tree[0]).net
    assert inum is not None  # the tree's root is in a network namespace other than init's
    return NetNamespaceState(inum=inum)


def _cgroup_root(ctx: TreeContext) -> str:
    return cgroup_ns_root_path(_root_task_ns(ctx, task_cgroup_ns, "cgroup namespace"))


def _save_mnt(ctx: TreeContext) -> MountNamespaceState:
    """Saved for a runc container, whose state in the guest names the mounts runc binds in
    at restore (the external mounts criu's images leave to it)."""
    container = ctx.runc_container
    assert container is not None  # a runc_only kind
    try:
        return extract_mount_namespace(
            ctx.tree[0], lambda mounts: runc_external_mounts(container, mounts), _cgroup_root(ctx)
        )
    except UnsupportedError as e:  # a tmpfs file it cannot archive
        root = ctx.processes[0]
        raise UnsupportedError(f"PID {root.global_pid} ({root.comm}) is in a mount namespace whose {e}") from None


def _save_user(ctx: TreeContext) -> UserNamespaceState:
    """The root's user namespace, one level below the guest's (criu saves no deeper)."""
    ns = _root_task_ns(ctx, task_user_ns, "user namespace")
    if not is_init_user_ns(ctx.prog, ns.parent):
        raise NotSaved("it is nested in another user namespace, which ovm-offline cannot save")
    return UserNamespaceState(
        inum=int(ns.ns.inum),
        uid_map=uid_gid_map_extents(ns.uid_map),
        gid_map=uid_gid_map_extents(ns.gid_map),
    )


def _save_cgroup(ctx: TreeContext) -> CgroupNamespaceState:
    ns = _root_task_ns(ctx, task_cgroup_ns, "cgroup namespace")
    return CgroupNamespaceState(inum=int(ns.ns.inum), root=cgroup_ns_root_path(ns))


#: in CRIU's order (NS_ORDER), which numbers the namespaces in the images
NAMESPACE_KINDS = (
    NamespaceKind("pid", "PID namespace", _save_pid, for_children="pid_for_children"),
    NamespaceKind(
        "net", "network namespace", _save_net, runc_only=f"{RUNC_ONLY}; ovm-offline cannot save network namespaces yet"
    ),
    NamespaceKind("ipc", "IPC namespace", _save_ipc),
    NamespaceKind("uts", "UTS namespace", _save_uts),
    NamespaceKind("time", "time namespace", None, for_children="time_for_children"),
    NamespaceKind(
        "mnt",
        "mount namespace",
        _save_mnt,
        runc_only=f"{RUNC_ONLY}, whose state names the mounts it binds in at restore",
    ),
    NamespaceKind("user", "user namespace", _save_user, runc_only=RESTORED_ONLY_BY_RUNC),
    NamespaceKind("cgroup", "cgroup namespace", _save_cgroup, runc_only=RESTORED_ONLY_BY_RUNC),
)


def tree_namespaces(
    prog: Program,
    tree: list[Struct],
    processes: list[ProcessState],
    shmem: dict[int, SharedMemory],
    containers: Callable[[], dict[int, RuncContainer]] | None = None,
) -> tuple[TreeNamespaces, list[NamespaceRefusal]]:
    """The namespaces of its own tree `tree` (``struct task_struct`` list, root first, with
    their ProcessStates) lives in, as the images save them, and every refusal: a namespace of
    the root's that ovm-offline cannot save, a process in another namespace than the root's
    (nested), a process that unshared a PID or time namespace for children it has not forked.
    `containers()` gives the guest's runc containers (`runc_containers`), read only when a
    namespace needs them."""
    init = task_namespaces(prog["init_task"])
    inodes: list[NamespaceInodes] = [task_namespaces(t) for t in tree]
    ctx = TreeContext(prog, tree, processes, shmem, [], containers or (lambda: runc_containers(prog)))
    saved = TreeNamespaces()
    for proc, ns in zip(processes, inodes):
        if ns.mnt is None:  # every kernel has mount namespaces: it dropped its nsproxy
            ctx.refuse(proc, "is exiting: it has left its namespaces")
    if ctx.refusals:
        return saved, ctx.refusals
    for kind in NAMESPACE_KINDS:
        root_inum = getattr(inodes[0], kind.name)
        for proc, ns in zip(processes[1:], inodes[1:]):
            inum = getattr(ns, kind.name)
            if inum != root_inum:
                ctx.refuse(
                    proc,
                    f"is in another {kind.words} ({kind.name}:[{inum}]) than the dumped tree's root"
                    f" PID {processes[0].global_pid} ({kind.name}:[{root_inum}]): nested {kind.words}s cannot be saved",
                )
        if kind.for_children is not None:
            for proc, ns in zip(processes, inodes):
                later = getattr(ns, kind.for_children)
                if later is not None and later != getattr(ns, kind.name):
                    ctx.refuse(
                        proc,
                        f"has unshared a {kind.words} ({kind.name}:[{later}]) for the children it forks next;"
                        f" ovm-offline cannot save that",
                    )
        if root_inum == getattr(init, kind.name):
            continue
        try:
            if kind.save is None:
                raise NotSaved(f"ovm-offline cannot save {kind.words}s yet")
            if kind.runc_only is not None and ctx.runc_container is None:
                raise NotSaved(kind.runc_only)
            value = kind.save(ctx)
        except NotSaved as e:
            ctx.refuse(processes[0], f"is in a {kind.words} of its own ({kind.name}:[{root_inum}]); {e}")
            continue
        except UnsupportedError as e:  # what the namespace holds (IPC message queues, ...)
            ctx.refusals.append(NamespaceRefusal(processes[0].global_pid, processes[0].comm, str(e)))
            continue
        if value is not None:
            setattr(saved, kind.name, value)
    return saved, ctx.refusals
