"""Compare the kernel's views of its tasks (`views.py`): every task any view holds must be on
each view the kernel links such a task into, with the pid, tgid and parents a kernel gives it.

What each view must hold follows copy_process() (kernel/fork.c), which links a new task into
all of them at once, and __unhash_process() (kernel/exit.c), which unlinks it from all of them
at once, both under ``tasklist_lock`` held for writing:

* a thread-group leader: the task list both ways, its real parent's children list, the pid
  idr, its own thread list;
* any other thread: the pid idr and its leader's thread list;
* a task released (EXIT_DEAD) or dead (TASK_DEAD, switching away for the last time) may be on
  none: a CPU may still run it, a pidfd may still hold its pid;
* the idle tasks (pid 0: init_task and each CPU's ``rq->idle``) are on none.

A snapshot taken while ``tasklist_lock`` was held for writing may catch the lists half changed:
`CrossView.moment` says so, and its disagreements are of that moment, not proof of a forgery."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import GuestDataError, SymbolError, UnreadablePageError
from ..core.invariants import INVARIANTS
from ..core.objects import Struct
from ..cpu.percpu import nr_cpu_ids, per_cpu_address
from ..locking.rwlock import rwlock_is_write_locked
from ..task.tasks import task_comm, task_state_value
from .views import View, read_views

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = ["CrossView", "Disagreement", "TaskSighting", "cross_view"]

_UNREAD = (GuestDataError, UnreadablePageError)
#: include/linux/sched.h
EXIT_DEAD = 0x10
TASK_DEAD = 0x80

LEADER_VIEWS = ("tasks", "tasks-prev", "children", "pid-idr", "threads")
THREAD_VIEWS = ("pid-idr", "threads")
#: for each view a task is missing from, the invariant that says it must be there
MISSING_BREAKS = {
    "tasks": "init_task.tasks",
    "tasks-prev": "init_task.tasks",
    "children": "task_struct.children",
    "pid-idr": "pid idr",
    "threads": "signal_struct.thread_head",
}


@dataclasses.dataclass(frozen=True)
class TaskSighting:
    """One task as the views saw it."""

    address: int  # of its struct task_struct
    pid: int | None  # None where it cannot be read
    tgid: int | None
    comm: str
    leader: bool
    leader_address: int | None
    parent: int | None  # the task_struct address of its real parent's leader, where readable
    views: tuple[str, ...]  # the views that hold it, in `VIEWS` order


@dataclasses.dataclass(frozen=True)
class Disagreement:
    """One inconsistency between the views, or inside one, about the task at `task` (0: about
    a view as a whole)."""

    task: int
    pid: int | None
    comm: str
    text: str
    invariant: str  # the name of the kernel's invariant it breaks (core/invariants.py)

    def __str__(self) -> str:
        who = f"PID {self.pid} ({self.comm}, task_struct 0x{self.task:x})" if self.task else "the task views"
        return f"{who}: {self.text}, which breaks the kernel's invariant {self.invariant}: {INVARIANTS[self.invariant].rule}"


@dataclasses.dataclass(frozen=True)
class CrossView:
    tasks: dict[int, TaskSighting]  # every task any view holds but the idle tasks
    disagreements: list[Disagreement]
    views: tuple[str, ...]  # the views read
    unavailable: dict[str, str]  # view -> why this kernel's ISF does not let it be read
    moment: str | None  # why disagreements may be of the moment (tasklist_lock held for writing)

    def subtree(self, root: int) -> set[int]:
        """The task at `root`, every task whose chain of real parents passes through it, and
        the threads of all those, by what the tasks themselves say (hidden ones included)."""
        children: dict[int, list[int]] = {}
        for s in self.tasks.values():
            if s.leader and s.parent is not None:
                children.setdefault(s.parent, []).append(s.address)
        found, queue = {root}, [root]
        while queue:
            for child in children.get(queue.pop(), []):
                if child not in found:
                    found.add(child)
                    queue.append(child)
        leaders = set(found)
        found |= {s.address for s in self.tasks.values() if s.leader_address in leaders}
        return found

    def about(self, addresses: set[int]) -> list[Disagreement]:
        """The disagreements about the tasks at `addresses`, and those about the views whole."""
        return [d for d in self.disagreements if d.task in addresses or d.task == 0]


def cross_view(prog: Program) -> CrossView:
    """Read every view of the guest's tasks and name each disagreement."""
    views = read_views(prog)
    idle = _idle_tasks(prog)
    everything: dict[int, Struct] = {}
    for view in views:
        for address, task in view.tasks.items():
            if address not in idle:
                everything.setdefault(address, task)
    sightings = {a: _sighting(t, views) for a, t in everything.items()}
    found: list[Disagreement] = []
    for view in views:
        if view.unread is not None:
            text = f"the view {view.name} cannot be read whole: {view.unread}"
            found.append(Disagreement(0, None, "", text, _VIEW_RULE[view.name]))
        for f in view.findings:
            s = sightings.get(f.task)
            found.append(Disagreement(f.task, s.pid if s else None, s.comm if s else "?", f.text, f.invariant))
    unread = {v.name for v in views if v.unread is not None or v.unavailable is not None}
    for address, task in everything.items():
        found += _missing(task, sightings[address], sightings, unread)
    found += _pid_rules(everything, sightings)
    found += _parent_chains(prog, everything, sightings)
    unavailable = {v.name: v.unavailable for v in views if v.unavailable is not None}
    return CrossView(sightings, found, tuple(v.name for v in views), unavailable, _moment(prog))


#: for each view, the invariant a view that cannot be read whole breaks
_VIEW_RULE = {**MISSING_BREAKS, **dict.fromkeys(("cpus", "runqueues", "files"), "task views")}


def _idle_tasks(prog: Program) -> set[int]:
    idle = {prog.symbol_address("init_task")}
    try:
        for cpu in range(nr_cpu_ids(prog)):
            idle.add(int(prog.struct("rq", per_cpu_address(prog, "runqueues", cpu)).idle))
    except (*_UNREAD, SymbolError):
        pass  # an idle task not known is then named as a task on no list
    return idle


def _sighting(task: Struct, views: list[View]) -> TaskSighting:
    def read(fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except _UNREAD:
            return default

    return TaskSighting(
        address=task.address_,
        pid=read(lambda: task.pid, None),
        tgid=read(lambda: task.tgid, None),
        comm=read(lambda: task_comm(task), "?"),
        leader=read(lambda: int(task.group_leader) == task.address_, True),
        leader_address=read(lambda: int(task.group_leader), None),
        parent=read(lambda: int(task.real_parent.group_leader), None),
        views=tuple(v.name for v in views if task.address_ in v.tasks),
    )


def _released(task: Struct) -> bool:
    """Released (EXIT_DEAD) or dead (TASK_DEAD): legally on no list any more."""
    try:
        return bool(task.exit_state & EXIT_DEAD or task_state_value(task) & TASK_DEAD)
    except _UNREAD:
        return False


def _missing(
    task: Struct, seen: TaskSighting, sightings: dict[int, TaskSighting], unread: set[str]
) -> list[Disagreement]:
    if _released(task):
        return []
    required = LEADER_VIEWS if seen.leader else THREAD_VIEWS
    missing = [v for v in required if v not in seen.views and v not in unread]
    return [
        Disagreement(
            seen.address,
            seen.pid,
            seen.comm,
            f"held by {', '.join(seen.views)} but not by {view}: {_why_missing(task, view, sightings)}",
            MISSING_BREAKS[view],
        )
        for view in missing
    ]


def _why_missing(task: Struct, view: str, sightings: dict[int, TaskSighting]) -> str:
    """Which structure leaves the task out of `view`, as far as its own links say."""
    prog = task.prog_

    init_task = prog.symbol_address("init_task")

    def name(address: int) -> str:
        s = sightings.get(address)
        return f"PID {s.pid}" if s else "init_task" if address == init_task else f"task_struct 0x{address:x}"

    offset = prog.member_offset("task_struct", "tasks")
    try:
        if view in ("tasks", "tasks-prev"):
            node = task.address_ + offset
            prev, nxt = prog.read_u64(node + 8), prog.read_u64(node)
            if view == "tasks":
                return f"its prev, {name(prev - offset)}, links next to {name(prog.read_u64(prev) - offset)}, not to it"
            return f"its next, {name(nxt - offset)}, links prev to {name(prog.read_u64(nxt + 8) - offset)}, not to it"
        if view == "children":
            return f"its real_parent ({name(int(task.real_parent))}) does not list it among its children"
        if view == "threads":
            return f"its leader ({name(int(task.group_leader))})'s thread list does not hold it"
        return "no pid namespace's idr gives this task for its pid"
    except _UNREAD as e:
        return f"its links cannot be read: {e}"


def _pid_rules(everything: dict[int, Struct], sightings: dict[int, TaskSighting]) -> list[Disagreement]:
    found = []
    by_pid: dict[int, list[int]] = {}
    for address, s in sightings.items():
        if s.pid is None:
            continue
        if s.pid <= 0:
            found.append(Disagreement(address, s.pid, s.comm, f"its pid is {s.pid}", "task_struct.pid"))
        by_pid.setdefault(s.pid, []).append(address)
        leader = s if s.leader else _leader_sighting(everything[address], sightings)
        if leader is not None and s.tgid != leader.pid:
            found.append(
                Disagreement(
                    address, s.pid, s.comm, f"its tgid is {s.tgid}, its leader's pid {leader.pid}", "task_struct.tgid"
                )
            )
    for pid, holders in by_pid.items():
        if len(holders) > 1 and pid > 0:
            for address in holders:
                others = ", ".join(f"0x{a:x}" for a in holders if a != address)
                s = sightings[address]
                found.append(
                    Disagreement(
                        address, pid, s.comm, f"its pid is also that of task_struct {others}", "task_struct.pid unique"
                    )
                )
    return found


def _leader_sighting(task: Struct, sightings: dict[int, TaskSighting]) -> TaskSighting | None:
    try:
        return sightings.get(int(task.group_leader))
    except _UNREAD:
        return None


def _parent_chains(
    prog: Program, everything: dict[int, Struct], sightings: dict[int, TaskSighting]
) -> list[Disagreement]:
    """Each leader's real_parent chain must end at init_task: a task that is its own parent, or
    parents in a cycle, is a forged tree."""
    init_task = prog.symbol_address("init_task")
    parent_of: dict[int, int] = {}
    for address, task in everything.items():
        if sightings[address].leader and not _released(task):
            try:
                parent_of[address] = int(task.real_parent)
            except _UNREAD:
                continue
    found, ends_well = [], {init_task}
    for start in parent_of:
        chain: list[int] = []
        on_chain: set[int] = set()
        at = start
        while at not in ends_well and at in parent_of and at not in on_chain:
            chain.append(at)
            on_chain.add(at)
            at = _leader_of(everything, parent_of[at])
        if at in on_chain:
            s = sightings[start]
            loop = chain[chain.index(at) :]
            text = (
                "it is its own parent"
                if len(loop) == 1
                else "its parents form a cycle: " + " -> ".join(f"PID {sightings[a].pid}" for a in loop)
            )
            found.append(Disagreement(start, s.pid, s.comm, text, "task_struct.real_parent"))
        else:
            ends_well.update(chain)
    return found


def _leader_of(everything: dict[int, Struct], address: int) -> int:
    """The group leader of the task at `address` (a real_parent is a thread, whose process is
    its leader's)."""
    task = everything.get(address)
    if task is None:
        return address
    try:
        return int(task.group_leader)
    except _UNREAD:
        return address


def _moment(prog: Program) -> str | None:
    try:
        if rwlock_is_write_locked(prog["tasklist_lock"]):
            return "tasklist_lock was held for writing at the pause: the task lists were being changed"
    except (*_UNREAD, SymbolError):
        pass  # not known to be held: disagreements stand as found
    return None
