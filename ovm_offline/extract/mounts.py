"""The tree's own mount namespace as CRIU saves it: the mounts its root sees (mountpoints-N)
and the files of each tmpfs among them (tmpfs-dev-N.tar.gz), as criu's dump_mnt_ns does.

criu archives a tmpfs when a mount shows its whole file system (root "/") and no one names
the mount external, once per super block; a bind of part of one (a container's root on a
host tmpfs) is not archived.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..errors import GuestDataError
from ..kernel.core.objects import Struct
from ..kernel.fs.fs_struct import fs_root, task_fs
from ..kernel.fs.mounts import mnt_namespace_mounts, mount_info, task_mnt_ns
from ..kernel.fs.namei import WalkBudget
from ..kernel.fs.tmpfs import ByteBudget, tmpfs_files
from ..kernel.ns.nsproxy import task_user_ns
from ..kernel.task.cred import from_kid_munged, is_init_user_ns
from ..state import MountInfo, MountNamespaceState, TmpfsContents

__all__ = ["extract_mount_namespace"]


def _ids_in(ns, options: str | None) -> str | None:
    """A file system's options with their uid= and gid= as user namespace `ns` sees them
    (criu writes a container's mounts so)."""
    if options is None or ns is None:
        return options
    out = []
    for option in options.split(","):
        name, _, value = option.partition("=")
        if name in ("uid", "gid") and value.isdigit():
            option = f"{name}={from_kid_munged(ns, int(value), name)}"
        out.append(option)
    return ",".join(out)


def extract_mount_namespace(
    task: Struct, external_of: Callable[[list[MountInfo]], dict[str, str]], cgroup_root: str
) -> MountNamespaceState:
    """The mount namespace of ``struct task_struct`` `task` as its root sees it;
    `external_of(mounts)` names the mounts its runtime binds in at restore
    ({mount point: key}); `cgroup_root` is the root of the task's cgroup namespace."""
    ns = task_mnt_ns(task)
    fs = task_fs(task)
    if ns is None or fs is None:
        raise GuestDataError(f"PID {task.pid} has no mount namespace or fs_struct (it is exiting)")
    root = fs_root(fs)
    user_ns = task_user_ns(task)
    user_ns = None if user_ns is None or is_init_user_ns(task.prog_, user_ns) else user_ns
    visible = [
        (mount, dataclasses.replace(info, fs_options=_ids_in(user_ns, info.fs_options)))
        for mount in mnt_namespace_mounts(ns)
        if (info := mount_info(mount, root)).mount_point
    ]
    # (mountinfo leaves out the mounts the root does not reach, and so does criu)
    mounts = [info for _, info in visible]
    external = external_of(mounts)
    budget, data_budget = WalkBudget(), ByteBudget()
    archived: dict[int, TmpfsContents] = {}
    for mount, info in visible:
        if info.fstype != "tmpfs" or info.root != "/" or info.mount_point in external or info.dev in archived:
            continue
        where = f"tmpfs on {info.mount_point}"
        files = tmpfs_files(mount.mnt.mnt_root.deref(), where, budget, data_budget)
        if user_ns is not None:  # owners as the container's user namespace sees them, as criu's tar
            for file in files:
                file.uid = from_kid_munged(user_ns, file.uid, "uid")
                file.gid = from_kid_munged(user_ns, file.gid, "gid")
        archived[info.dev] = TmpfsContents(info.dev, info.mount_point or "", files)
    return MountNamespaceState(int(ns.ns.inum), mounts, external, cgroup_root, list(archived.values()))
