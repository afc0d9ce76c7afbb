"""Scheduling parameters of a task, as sched_getscheduler(2), sched_getparam(2) and
getpriority(2) report them (kernel/sched/core.c, kernel/sys.c)."""

from __future__ import annotations

from ...errors import GuestDataError
from ..core.objects import Struct

__all__ = ["task_nice", "task_policy", "task_rt_priority"]


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
