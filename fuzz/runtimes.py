"""Family `runtimes`: what `ps` reads to name a container as its runtime does (every mount
under the guest's root, and the dentries and inodes on the way to runc's state files below
each), one member rewritten in guest memory; `ps` alone runs, since that is where the name
shows. On the `runc` workload the path reaches the container's state.json; on any other it
stops where the guest has no runc state, which is the search every `ps` makes."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ovm_offline import inventory, sources
from ovm_offline.extract.runtimes import RUNC_ROOTS
from ovm_offline.kernel.fs.dcache import real_mount
from ovm_offline.kernel.fs.namei import WalkBudget, dentry_children, lookup_cached, mount_tree
from ovm_offline.kernel.task.tasks import find_task
from tests.support.mutate import PatchedSource

from .structures import Structures, Target, _members


def _steps(root: str) -> list[str]:
    """ "run", "run/runc", ...: every prefix of a state root, shortest first."""
    parts = root.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def runtime_objects(prog) -> list[Target]:
    """The mounts, dentries and inodes the runc search of `ps` reads, each once."""
    budget = WalkBudget()
    top = real_mount(find_task(prog, 1).fs.root.mnt)
    tree = mount_tree(top, budget)
    found = {m.address_: Target(f"mount {i}", m.address_, m.type_) for i, m in enumerate(tree.mounts)}

    def add(what: str, dentry) -> None:
        found.setdefault(dentry.address_, Target(f"dentry {what}", dentry.address_, dentry.type_))
        inode = dentry.d_inode.deref()
        found.setdefault(inode.address_, Target(f"inode {what}", inode.address_, inode.type_))

    for i, mount in enumerate(tree.mounts):
        for root in RUNC_ROOTS:
            for step in _steps(root):
                hit = lookup_cached(tree, mount, mount.mnt.mnt_root.deref(), step, budget)
                if hit is None:
                    break
                add(f"{step} of mount {i}", hit[1])
            else:
                for container in dentry_children(hit[1], budget):
                    add(f"{root}/* of mount {i}", container)
                    for state in dentry_children(container, budget):
                        add(f"{root}/*/* of mount {i}", state)
    return list(found.values())


class Runtimes(Structures):
    family = "runtimes"

    def __init__(self, rec, work) -> None:  # noqa: ARG002 - `ps` writes nothing
        self.pid = rec.manifest["root_pid"]
        self.path = rec.elf
        with sources.open_source(self.path) as source:
            self.targets = runtime_objects(inventory.open_kernel(source))
            self.members = {id(t): _members(t.type) for t in self.targets}
        self.source: PatchedSource | None = None

    def operation(self) -> str:
        source = self.source or PatchedSource(sources.open_source(self.path))
        try:
            listed = inventory.list_processes(inventory.open_kernel(source))
        finally:
            source.base.close()
        table = json.dumps([dataclasses.asdict(p) for p in listed], sort_keys=True, default=str)
        return hashlib.sha256(table.encode()).hexdigest()[:16]
