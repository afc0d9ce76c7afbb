"""Family `structures`: kernel objects of the dumped tree, found through the library (task,
mm, VMAs, fd tables, files, dentries, credentials, signal and pid structures, the queues of
pending signals), one member rewritten in a source that lays the patch over the recording's
memory.

A pointer made misaligned or non-canonical, or a list_head made to point at itself, breaks a
structural invariant; any other rewrite (an integer, NULL, another object of the same kind)
is a plain value that may change the result but must not crash or hang."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ovm_offline import inventory, sources
from ovm_offline.kernel.core.ktypes import (
    ArrayType,
    BitfieldType,
    EnumType,
    IntType,
    PointerType,
    StructType,
    alignment_of,
)
from ovm_offline.kernel.core.objects import Pointer
from ovm_offline.kernel.fs.fdtable import for_each_file, task_files
from ovm_offline.kernel.mm.mmap import for_each_vma
from ovm_offline.kernel.task.tasks import find_task, process_tree, thread_group
from tests.support.mutate import PatchedSource

from .harness import Mutation
from .targets import PatchedMemoryFamily


@dataclass
class Target:
    what: str  # e.g. "task_struct of PID 10000"
    address: int
    type: StructType


def kernel_objects(prog, root_pid: int) -> list[Target]:
    """The kernel objects a dump of `root_pid`'s tree reads, each once."""
    found: dict[int, Target] = {}

    def add(what: str, obj) -> None:
        try:
            # a Struct's attributes are its members: hasattr(task, "deref") would read guest memory
            struct = obj.deref() if isinstance(obj, Pointer) else obj
            if struct.address_ not in found:
                found[struct.address_] = Target(what, struct.address_, struct.type_)
        except Exception:  # noqa: BLE001 - an object this kernel lacks or leaves NULL
            pass

    for task in process_tree(prog, find_task(prog, root_pid)):
        pid = int(task.pid)
        for thread in thread_group(task):
            add(f"task_struct of TID {int(thread.pid)}", thread)
            add(f"thread_pid of TID {int(thread.pid)}", thread.thread_pid)
            add(f"pending signals of TID {int(thread.pid)}", thread.pending)
        add(f"shared pending signals of PID {pid}", task.signal.shared_pending)
        add(f"controlling tty of PID {pid}", task.signal.tty)
        for name in ("mm", "files", "fs", "signal", "sighand", "cred", "nsproxy"):
            add(f"{name} of PID {pid}", getattr(task, name))
        if task.mm:
            if task.mm.deref().has_member_("mm_mt"):
                add(f"maple root of PID {pid}", task.mm.mm_mt.ma_root)
            for vma in for_each_vma(task.mm):
                add(f"VMA {int(vma.vm_start):#x} of PID {pid}", vma)
                if vma.vm_file:
                    add(f"file of VMA {int(vma.vm_start):#x} of PID {pid}", vma.vm_file)
        files = task_files(task)
        if files:
            add(f"fdtable of PID {pid}", files.fdt)
            for fd, file in for_each_file(files):
                add(f"file of PID {pid} fd {fd}", file)
                add(f"dentry of PID {pid} fd {fd}", file.f_path.dentry)
                add(f"inode of PID {pid} fd {fd}", file.f_inode)
    return list(found.values())


def _members(struct: StructType) -> list[tuple[str, int, object]]:
    """(name, offset, type) of every scalar or pointer member, one level into embedded structs."""
    out = []
    for m in struct.members():
        t = m.type
        if isinstance(t, StructType):
            for inner in t.members():
                if isinstance(inner.type, (IntType, EnumType, PointerType)):
                    out.append((f"{m.name}.{inner.name}", m.offset + inner.offset, inner.type))
        elif isinstance(t, (IntType, EnumType, PointerType)):
            out.append((m.name, m.offset, t))
        elif isinstance(t, BitfieldType):
            out.append((m.name, m.offset, t.storage))
        elif isinstance(t, ArrayType) and isinstance(t.element, (IntType, PointerType)) and t.count:
            out.append((f"{m.name}[0]", m.offset, t.element))
    return out


class Structures(PatchedMemoryFamily):
    family = "structures"

    def __init__(self, rec, work) -> None:
        super().__init__(rec, work)
        with sources.open_source(self.path) as source:
            prog = inventory.open_kernel(source)
            self.targets = kernel_objects(prog, self.pid)
            self.members = {id(t): _members(t.type) for t in self.targets}

    def mutation(self, rng: random.Random) -> Mutation:
        target = rng.choice(self.targets)
        name, offset, type = rng.choice(self.members[id(target)] or [("(first word)", 0, None)])
        size = getattr(type, "size", 8) or 8
        address = target.address + offset
        structural = False
        if isinstance(type, PointerType):
            how = rng.randrange(5)
            if how == 0:
                # a char * may point anywhere; a pointer to anything wider is aligned by C
                structural, label = alignment_of(type.target) > 1, "misaligned"
                value = lambda old: old + rng.randrange(1, 8)  # noqa: E731
            elif how == 1:
                structural, label = True, "non-canonical"
                value = lambda old: 0xDEAD_0000_0000_0000 | (old & 0xFFFF_FFFF)  # noqa: E731
            elif how == 2 and name.endswith((".next", ".prev")):
                structural, label = True, "list_head at itself"
                value = lambda old: address - (8 if name.endswith(".prev") else 0)  # noqa: E731
            elif how == 3:
                label = "NULL"
                value = lambda old: 0  # noqa: E731
            else:
                other = rng.choice(self.targets)
                label = f"-> {other.what}"
                value = lambda old: other.address  # noqa: E731
        else:
            bits = size * 8
            label = "value"
            choices = [0, 1, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1, rng.randrange(1 << bits)]
            pick = rng.choice(choices)
            value = lambda old: pick  # noqa: E731

        def apply() -> None:
            source = PatchedSource(sources.open_source(self.path))
            prog = inventory.open_kernel(source)
            old = int.from_bytes(prog.read(address, size), "little")
            new = value(old) & ((1 << (size * 8)) - 1)
            source.patch_virtual(prog, address, new.to_bytes(size, "little"))
            self.source = source

        return Mutation(self.family, f"{target.what}: {target.type.name}.{name} {label}", structural, apply)
