"""Namespaces: the ids CRIU gives kernel objects and namespaces (ids-PID.img, the
inventory's root_ids), the tree's own IPC namespace (ipcns-var, ipcns-shm), UTS namespace
(utsns), mount namespace (mnt.py) and network namespace (its id alone, as runc checkpoints
one), and the time namespace's clocks (timens)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...state import (
    IpcNamespaceState,
    NamespaceIds,
    NetNamespaceState,
    ProcessState,
    UserNamespaceState,
    UtsNamespaceState,
)
from .. import images
from .common import N, NamespaceOut, T
from .mnt import write_mount_namespace

__all__ = [
    "NAMESPACE_WRITERS",
    "NS_ORDER",
    "ObjectIds",
    "timens_entry",
    "utsns_entry",
    "write_ipc_namespace",
]

#: the order criu collects its own namespaces in, which numbers them
NS_ORDER = ("pid", "net", "ipc", "uts", "time", "mnt", "user", "cgroup")
NSEC_PER_SEC = 10**9


class ObjectIds:
    """CRIU's ids of kernel objects (mm, files table, fs, sighand) and namespaces: criu's
    own objects are 1 and its namespaces 1..8 in NS_ORDER (the inventory's root_ids); the
    dumped tree's get the next numbers in the order met."""

    def __init__(self, root_namespaces: NamespaceIds) -> None:
        self.root_namespaces = root_namespaces
        self._root_ns = {name: i for i, name in enumerate(NS_ORDER, start=1)}
        self._ids: dict[tuple[str, int | None], int] = {}

    def kobj(self, kind: str, key: int) -> int:
        # 1 is criu's own object in a real dump: the inventory's root_ids say so
        return self._ids.setdefault((kind, key), len([k for k in self._ids if k[0] == kind]) + 2)

    def ns(self, kind: str, inum: int | None) -> int:
        if inum == getattr(self.root_namespaces, kind):
            return self._root_ns[kind]
        key = (f"ns-{kind}", inum)
        if key not in self._ids:
            self._ids[key] = len(NS_ORDER) + 1 + len([k for k in self._ids if k[0].startswith("ns-")])
        return self._ids[key]

    def root_ids(self) -> T.task_kobj_ids_entry:
        """The inventory's root_ids: criu's own objects and namespaces."""
        ids = T.task_kobj_ids_entry(vm_id=1, files_id=1, fs_id=1, sighand_id=1)
        for name in NS_ORDER:
            setattr(ids, f"{name}_ns_id", self._root_ns[name])
        return ids

    def task_ids(self, proc: ProcessState) -> T.task_kobj_ids_entry:
        """ids-PID.img of a process."""
        ids = T.task_kobj_ids_entry(
            vm_id=self.kobj("vm", proc.mm_key),
            files_id=self.kobj("files", proc.files_key),
            fs_id=self.kobj("fs", proc.fs_key),
            sighand_id=self.kobj("sighand", proc.sighand_key),
        )
        for name in NS_ORDER:
            setattr(ids, f"{name}_ns_id", self.ns(name, getattr(proc.namespaces, name)))
        return ids


def timens_entry(monotonic_ns: int, boottime_ns: int) -> N.timens_entry:
    """timens-0.img: the clocks at dump time, from which restore derives the offsets."""
    return N.timens_entry(
        monotonic=N.timespec(tv_sec=monotonic_ns // NSEC_PER_SEC, tv_nsec=monotonic_ns % NSEC_PER_SEC),
        boottime=N.timespec(tv_sec=boottime_ns // NSEC_PER_SEC, tv_nsec=boottime_ns % NSEC_PER_SEC),
    )


def utsns_entry(ns: UtsNamespaceState) -> N.utsns_entry:
    """utsns-N.img (uts_ns.c dump_uts_ns): what uname(2) reports in the tree's namespace."""
    return N.utsns_entry(nodename=ns.nodename, domainname=ns.domainname)


def write_ipc_namespace(ns: IpcNamespaceState, ns_image_id: int, out: NamespaceOut) -> None:
    """ipc_ns.c dump_ipc_ns, run after every task is dumped: ipcns-var (the sysctls),
    ipcns-shm (one entry per segment, in_pagemaps) and each segment's contents as
    pagemap-shmem-<shmid>.img, taking the next pages-N numbers. No message queues or
    semaphore sets (extraction refuses them), so, like CRIU, no ipcns-msg/ipcns-sem."""
    var = N.ipc_var_entry(
        sem_ctls=ns.sem_ctls,
        msg_ctlmax=ns.msg_ctlmax,
        msg_ctlmnb=ns.msg_ctlmnb,
        msg_ctlmni=ns.msg_ctlmni,
        auto_msgmni=0,  # kernel.auto_msgmni is a no-op since 4.x and always reads 0
        shm_ctlmax=ns.shm_ctlmax,
        shm_ctlall=ns.shm_ctlall,
        shm_ctlmni=ns.shm_ctlmni,
        shm_rmid_forced=ns.shm_rmid_forced,
        mq_queues_max=ns.mq_queues_max,
        mq_msg_max=ns.mq_msg_max,
        mq_msgsize_max=ns.mq_msgsize_max,
        mq_msg_default=ns.mq_msg_default,
        mq_msgsize_default=ns.mq_msgsize_default,
    )
    for name in ("msg_next_id", "sem_next_id", "shm_next_id"):
        if getattr(ns, name) is not None:
            setattr(var, name, getattr(ns, name))
    out.put(images.IPCNS_VAR, [var], ns_image_id)
    if not ns.shm_segments:
        return  # CRIU opens its images lazily: no segment, no ipcns-shm
    entries = []
    for seg in ns.shm_segments:
        entries.append(
            N.ipc_shm_entry(
                desc=N.ipc_desc_entry(
                    key=seg.key, uid=seg.uid, gid=seg.gid, cuid=seg.cuid, cgid=seg.cgid, mode=seg.mode, id=seg.id
                ),
                size=seg.size,
                in_pagemaps=True,
            )
        )
        # dump_one_sysv_shmem scans round_up(shm_segsz, PAGE_SIZE) bytes
        out.shmem.write_contents(seg.contents)
    out.put(images.IPCNS_SHM, entries, ns_image_id)


def write_uts_namespace(ns: UtsNamespaceState, ns_image_id: int, out: NamespaceOut) -> None:
    """uts_ns.c dump_uts_ns: one utsns-N.img."""
    out.put(images.UTSNS, [utsns_entry(ns)], ns_image_id)


def write_net_namespace(ns: NetNamespaceState, ns_image_id: int, out: NamespaceOut) -> None:
    """Nothing: a network namespace is saved only as `criu --empty-ns network` saves it, its
    id in ids-N.img, for its runtime to make anew at restore."""


def write_user_namespace(ns: UserNamespaceState, ns_image_id: int, out: NamespaceOut) -> None:
    """userns.c dump_user_ns: userns-N.img, the maps as /proc/PID/uid_map shows them."""
    entry = N.userns_entry(
        uid_map=[N.uid_gid_extent(first=f, lower_first=lo, count=c) for f, lo, c in ns.uid_map],
        gid_map=[N.uid_gid_extent(first=f, lower_first=lo, count=c) for f, lo, c in ns.gid_map],
    )
    out.put(images.USERNS, [entry], ns_image_id)


#: the images of each namespace the tree has of its own (extract/namespaces.py saves its
#: state), by TreeNamespaces field, in the order CRIU writes them after the tasks; the
#: cgroup namespace is cgroup.img's prefix (cgroup.py)
NAMESPACE_WRITERS: dict[str, Callable[[Any, int, NamespaceOut], None]] = {
    "net": write_net_namespace,
    "uts": write_uts_namespace,
    "ipc": write_ipc_namespace,
    "mnt": write_mount_namespace,
    "user": write_user_namespace,
}
