"""Family `nulls`: a pointer that no live kernel object holds NULL (`invariants.NEVER_NULL`)
set to NULL in an object that `ps` and a dump of the root read: the task, its creds,
namespaces, signal structures, pids, mm, fd table, files, paths, dentries, inodes and mounts.

Every case is structural: the kernel never holds such a NULL, so a result that changed must
be a refusal (or a warning), never a successful dump that took the NULL for "absent"."""

from __future__ import annotations

import random

from ovm_offline import inventory, sources
from ovm_offline.kernel.core.invariants import NEVER_NULL
from ovm_offline.kernel.core.ktypes import ArrayType, PointerType, StructType
from ovm_offline.kernel.fs.dcache import real_mount
from ovm_offline.kernel.fs.fdtable import for_each_file, task_files
from ovm_offline.kernel.mm.mmap import for_each_vma
from ovm_offline.kernel.task.tasks import find_task, process_tree
from tests.support.mutate import PatchedSource

from .harness import Mutation
from .structures import Target, kernel_objects
from .targets import PatchedMemoryFamily


def never_null_members(struct: StructType) -> list[tuple[str, int, tuple[str, str]]]:
    """(name, offset, NEVER_NULL row) of each member of `struct`, or of a struct embedded in
    it (an array's first element included), that `NEVER_NULL` lists."""
    out = listed_members(struct)
    for m in struct.members():
        inner, suffix = m.type, ""
        if isinstance(inner, ArrayType) and isinstance(inner.element, StructType):
            inner, suffix = inner.element, "[0]"
        if isinstance(inner, StructType) and inner.name != struct.name:
            out += [(f"{m.name}{suffix}.{name}", m.offset + offset, row) for name, offset, row in listed_members(inner)]
    return out


def listed_members(struct: StructType) -> list[tuple[str, int, tuple[str, str]]]:
    """(name, offset, NEVER_NULL row) of the members of `struct` itself that `NEVER_NULL` lists."""
    return [
        (member, struct.member(member).offset, (owner, member))
        for (owner, member) in NEVER_NULL
        if owner == struct.name and struct.has_member(member) and isinstance(struct.member(member).type, PointerType)
    ]


def mounts_read(prog, root_pid: int) -> list[Target]:
    """The mounts of the files the tree has open or mapped (each a `struct mount`)."""
    found: dict[int, Target] = {}
    for task in process_tree(prog, find_task(prog, root_pid)):
        files = [vma.vm_file for vma in for_each_vma(task.mm) if vma.vm_file] if task.mm else []
        if task_files(task):
            files += [f for _, f in for_each_file(task_files(task))]
        for f in files:
            mount = real_mount(f.f_path.mnt)
            found.setdefault(mount.address_, Target(f"mount of PID {int(task.pid)}", mount.address_, mount.type_))
    return list(found.values())


class Nulls(PatchedMemoryFamily):
    family = "nulls"

    def __init__(self, rec, work) -> None:
        super().__init__(rec, work)
        with sources.open_source(self.path) as source:
            prog = inventory.open_kernel(source)
            targets = kernel_objects(prog, self.pid) + mounts_read(prog, self.pid)
        self.cases = [(t, name, t.address + offset) for t in targets for name, offset, _ in never_null_members(t.type)]

    def mutation(self, rng: random.Random) -> Mutation:
        target, name, address = rng.choice(self.cases)

        def apply() -> None:
            source = PatchedSource(sources.open_source(self.path))
            source.patch_virtual(inventory.open_kernel(source), address, bytes(8))
            self.source = source

        return Mutation(self.family, f"{target.what}: {target.type.name}.{name} NULL", True, apply)
