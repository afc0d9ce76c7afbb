"""Family `mountns`: what a dump of a container reads of its mount and cgroup namespaces (the
namespace, every mount with its super block and root dentry, every dentry and inode of the
tmpfs mounts it archives, the cgroup namespace and its root css_set, a user namespace of its
own), one member rewritten in guest memory, then `ps` and `dump` of the container's init. On
the `runc` and `runc-userns` workloads."""

from __future__ import annotations

from ovm_offline import inventory, sources
from ovm_offline.kernel.core.member_kinds import MEMBER_KINDS
from ovm_offline.kernel.core.objects import Pointer
from ovm_offline.kernel.fs.fs_struct import fs_root, task_fs
from ovm_offline.kernel.fs.mounts import mnt_namespace_mounts, mount_info, task_mnt_ns
from ovm_offline.kernel.fs.namei import WalkBudget, dentry_children
from ovm_offline.kernel.ns.cgroup import task_cgroup_ns
from ovm_offline.kernel.ns.nsproxy import task_user_ns
from ovm_offline.kernel.task.cred import is_init_user_ns
from ovm_offline.kernel.task.tasks import find_task

from .structures import Structures, Target, _members


def namespace_objects(prog, root_pid: int) -> list[Target]:
    """The mount and cgroup namespace objects a dump of `root_pid`'s container reads, each once."""
    found: dict[int, Target] = {}

    def add(what: str, obj) -> None:
        struct = obj.deref() if isinstance(obj, Pointer) else obj
        found.setdefault(struct.address_, Target(what, struct.address_, struct.type_))

    task = find_task(prog, root_pid)
    ns = task_mnt_ns(task)
    root = fs_root(task_fs(task))
    add("mnt_namespace", ns)
    budget = WalkBudget()
    for i, mount in enumerate(mnt_namespace_mounts(ns)):
        add(f"mount {i}", mount)
        add(f"super_block of mount {i}", mount.mnt.mnt_sb)
        add(f"root dentry of mount {i}", mount.mnt.mnt_root)
        info = mount_info(mount, root)
        if info.fstype != "tmpfs" or info.root != "/" or not info.mount_point:
            continue  # archived only when the container sees the whole tmpfs (a bind of part is not)
        stack = [mount.mnt.mnt_root.deref()]
        while stack:
            dentry = stack.pop()
            add(f"dentry on mount {i}", dentry)
            add(f"inode on mount {i}", dentry.d_inode)
            stack.extend(dentry_children(dentry, budget))
    cgns = task_cgroup_ns(task)
    add("cgroup_namespace", cgns)
    add("css_set of the cgroup namespace's root", cgns.root_cset)
    user_ns = task_user_ns(task)
    if user_ns and not is_init_user_ns(prog, user_ns):  # runc-userns: its maps and parent
        add("user_namespace", user_ns)
    return list(found.values())


class MountNamespaces(Structures):
    family = "mountns"

    def __init__(self, rec, work) -> None:  # noqa: D107 - as Structures, other targets
        self.pid = rec.manifest["root_pid"]
        self.path = rec.elf
        self.out = work / "images"
        with sources.open_source(self.path) as source:
            self.targets = namespace_objects(inventory.open_kernel(source), self.pid)
            # members the walkers read (by name, as MEMBER_KINDS lists them): most of a mount,
            # a super block or an inode is never read, and a case there would say nothing
            read = {name.rsplit(".", 1)[-1] for name in MEMBER_KINDS}
            self.members = {
                id(t): [m for m in _members(t.type) if m[0].rsplit(".", 1)[-1] in read] for t in self.targets
            }
        self.source = None
