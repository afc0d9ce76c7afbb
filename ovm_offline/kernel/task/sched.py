"""Scheduling parameters of a task, as sched_getscheduler(2), sched_getparam(2) and
getpriority(2) report them (kernel/sched/core.c, kernel/sys.c)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ..core.objects import Struct
from ..cpu.percpu import per_cpu_address
from ..ds.list import list_for_each
from ..ds.rbtree import rb_inorder

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = ["rq_queued_tasks", "task_nice", "task_policy", "task_rt_priority"]


#: include/uapi/linux/sched.h
SCHED_EXT = 7
SCHED_RESET_ON_FORK = 0x40000000
#: include/linux/sched/prio.h
MAX_RT_PRIO = 100
NICE_WIDTH = 40
DEFAULT_PRIO = MAX_RT_PRIO + NICE_WIDTH // 2  # 120, nice 0


def task_policy(task: Struct) -> int:
    """The scheduling policy of a ``struct task_struct`` as sched_getscheduler() returns
    it: ``policy``, with SCHED_RESET_ON_FORK when ``sched_reset_on_fork`` is set."""
    policy = task.policy
    if not 0 <= policy <= SCHED_EXT:
        raise GuestDataError(f"pid {task.pid}: impossible scheduling policy {policy}")
    if task.has_member_("sched_reset_on_fork") and task.sched_reset_on_fork:
        policy |= SCHED_RESET_ON_FORK
    return policy


def task_nice(task: Struct) -> int:
    """The nice value (-20..19) of a ``struct task_struct``: PRIO_TO_NICE(static_prio)."""
    nice = task.static_prio - DEFAULT_PRIO
    if not -20 <= nice <= 19:
        raise GuestDataError(f"pid {task.pid}: impossible static_prio {task.static_prio}")
    return nice


def task_rt_priority(task: Struct) -> int:
    """``rt_priority`` (sched_getparam's sched_priority; 0 for non-real-time policies)."""
    prio = task.rt_priority
    if not 0 <= prio < MAX_RT_PRIO:
        raise GuestDataError(f"pid {task.pid}: impossible rt_priority {prio}")
    return prio


#: tasks on one CPU's run queues: more than the kernel's task limit is a hostile tree
MAX_QUEUED = 1 << 22


def rq_queued_tasks(prog: Program, cpu: int) -> list[Struct]:
    """Every ``struct task_struct`` queued to run on `cpu` (``struct rq`` runqueues): the fair
    class's entities (``cfs_rq.tasks_timeline`` and its ``curr``, a group's entity opening its
    own ``my_q``), the real-time class's priority lists and the deadline class's tree. The task
    running there is its ``rq->curr``, which the fair class keeps out of its tree."""
    rq = prog.struct("rq", per_cpu_address(prog, "runqueues", cpu))
    found: list[Struct] = []
    _fair_tasks(prog, rq.cfs, found, f"cpu {cpu}")
    rt_offset = prog.member_offset("task_struct", "rt") + prog.member_offset("sched_rt_entity", "run_list")
    for i, queue in enumerate(rq.rt.active.queue):
        for node in list_for_each(prog, queue.address_, name=f"rt queue {i} of cpu {cpu}", limit=MAX_QUEUED):
            found.append(prog.struct("task_struct", node - rt_offset))
    dl_offset = prog.member_offset("task_struct", "dl") + prog.member_offset("sched_dl_entity", "rb_node")
    dl_root = int(rq.dl.root.rb_root.rb_node)
    for node in rb_inorder(prog, dl_root, name=f"deadline tree of cpu {cpu}", limit=MAX_QUEUED):
        found.append(prog.struct("task_struct", node - dl_offset))
    if len(found) > MAX_QUEUED:
        raise GuestDataError(f"cpu {cpu}'s run queues hold more than {MAX_QUEUED} tasks")
    return found


def _fair_tasks(prog: Program, cfs_rq: Struct, found: list[Struct], where: str) -> None:
    """The tasks of a ``struct cfs_rq`` and of the group run queues below it (iteratively, and
    each run queue once: a hostile entity naming its own queue cannot loop)."""
    node_offset = prog.member_offset("sched_entity", "run_node")
    se_offset = prog.member_offset("task_struct", "se")
    has_groups = prog.struct_type("sched_entity").has_member("my_q")
    queues, seen = [cfs_rq], {cfs_rq.address_}
    while queues:
        queue = queues.pop()
        entities = [
            node - node_offset
            for node in rb_inorder(
                prog, int(queue.tasks_timeline.rb_root.rb_node), name=f"fair tree of {where}", limit=MAX_QUEUED
            )
        ]
        if queue.curr and int(queue.curr) not in entities:
            entities.append(int(queue.curr))
        for address in entities:
            se = prog.struct("sched_entity", address)
            group = int(se.my_q) if has_groups else 0
            if not group:
                found.append(prog.struct("task_struct", address - se_offset))
            elif group not in seen:
                if len(seen) >= MAX_QUEUED:
                    raise GuestDataError(f"the fair run queues of {where} nest past {MAX_QUEUED}")
                seen.add(group)
                queues.append(prog.struct("cfs_rq", group))
