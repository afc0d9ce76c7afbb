"""Family `views`: a task's links rewritten the way a rootkit hides or forges a process (direct
kernel-object manipulation): unlinked from the task list (both ways, or by ``next`` alone),
from its parent's children list or its leader's thread list, its struct pid emptied, its
``real_parent`` pointed at itself or at another task, its pid or tgid rewritten. Any task of
the guest, in the dumped tree or not.

The case runs `ps --check` (each disagreement a warning, as the CLI prints it) and the dump
of the root. Every case is structural: a result that changed must say so."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import shutil

from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.kernel.crossview.check import cross_view
from tests.support.mutate import PatchedSource

from .harness import Mutation, digest_tree
from .targets import PatchedMemoryFamily

log = logging.getLogger("ovm_offline")


def _u64(value: int) -> bytes:
    return (value & (1 << 64) - 1).to_bytes(8, "little")


def _u32(value: int) -> bytes:
    return (value & (1 << 32) - 1).to_bytes(4, "little")


def _unlink(member: str):
    """list_del of the task's list_head `member`, its own links left as they were."""

    def patch(source, prog, task, others, rng) -> str:
        node = task.address_ + prog.member_offset("task_struct", member)
        nxt, prev = prog.read_u64(node), prog.read_u64(node + 8)
        source.patch_virtual(prog, prev, _u64(nxt))
        source.patch_virtual(prog, nxt + 8, _u64(prev))
        return f"unlinked from its {member} list"

    return patch


def _skip_next(source, prog, task, others, rng) -> str:
    node = task.address_ + prog.member_offset("task_struct", "tasks")
    source.patch_virtual(prog, prog.read_u64(node + 8), _u64(prog.read_u64(node)))
    return "skipped by the task list's next links"


def _parent(source, prog, task, others, rng) -> str:
    parent = rng.choice([task, *others])
    source.patch_virtual(prog, task.address_ + prog.member_offset("task_struct", "real_parent"), _u64(parent.address_))
    return f"real_parent set to task_struct 0x{parent.address_:x}"


def _number(member: str):
    def patch(source, prog, task, others, rng) -> str:
        value = rng.choice([0, -1, -rng.randrange(1, 1 << 31), rng.choice(others).pid, task.pid + 1])
        source.patch_virtual(prog, task.address_ + prog.member_offset("task_struct", member), _u32(value))
        return f"{member} set to {value}"

    return patch


def _struct_pid_emptied(source, prog, task, others, rng) -> str:
    pid = int(task.thread_pid)
    source.patch_virtual(prog, pid + prog.member_offset("pid", "tasks"), _u64(0))
    return "its struct pid's task list emptied"


#: the rewrites a leader can be given, and those any thread can
LEADER_REWRITES = (_unlink("tasks"), _skip_next, _unlink("sibling"), _parent)
TASK_REWRITES = (_unlink("thread_node"), _number("pid"), _number("tgid"), _struct_pid_emptied)


class Views(PatchedMemoryFamily):
    family = "views"

    def __init__(self, rec, work) -> None:
        super().__init__(rec, work)
        with sources.open_source(self.path) as source:
            views = cross_view(inventory.open_kernel(source))
        self.tasks = [(s.address, s.leader) for s in views.tasks.values()]

    def mutation(self, rng: random.Random) -> Mutation:
        address, leader = rng.choice(self.tasks)
        rewrite = rng.choice(TASK_REWRITES + (LEADER_REWRITES if leader else ()))
        said = []
        seed = rng.random()

        def apply() -> None:
            source = PatchedSource(sources.open_source(self.path))
            prog = inventory.open_kernel(source)
            task = prog.struct("task_struct", address)
            others = [prog.struct("task_struct", a) for a, _ in self.tasks if a != address]
            said.append(rewrite(source, prog, task, others, random.Random(seed)))
            self.source = source

        return Mutation(self.family, f"task_struct 0x{address:x}: {rewrite.__name__}", True, apply)

    def operation(self) -> str:
        source = self.source or PatchedSource(sources.open_source(self.path))
        try:
            prog = inventory.open_kernel(source)
            checked = inventory.read_checked_process_list(prog)
            for d in checked.views.disagreements:  # as `ps --check` prints them
                log.warning("check: %s", d)
            table = json.dumps([dataclasses.asdict(p) for p in checked.listing.processes], sort_keys=True, default=str)
            try:
                dumping.dump(source, prog, self.pid, self.out)
                images = digest_tree(self.out)
            finally:
                shutil.rmtree(self.out, ignore_errors=True)
            return hashlib.sha256(table.encode() + images.encode()).hexdigest()[:16]
        finally:
            source.base.close()
