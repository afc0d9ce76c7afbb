"""Each independent view the kernel keeps of its tasks, read on its own: which ``struct
task_struct``s it holds, and what in its own structure is inconsistent.

A view is one function here and one row of `VIEWS`; `check.py` compares them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ...errors import GuestDataError, SymbolError, UnreadablePageError
from ..core.objects import Pointer, Struct
from ..cpu.percpu import cpu_curr, nr_cpu_ids, rq_curr
from ..ds.list import list_for_each, list_for_each_entry, list_for_each_reverse
from ..fs.fdtable import file_fops_name, file_owner, for_each_file, task_files
from ..task.pid import pid_level, pid_ns_for_each_pid, pid_task, pid_upid_nr, task_pid_ptr
from ..task.sched import rq_queued_tasks
from ..task.tasks import MAX_THREADS, for_each_thread

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = ["VIEWS", "View", "ViewFinding"]

#: what leaves a view unread: guest data no kernel holds, a page the source cannot give
_UNREAD = (GuestDataError, UnreadablePageError)
#: tasks a view may hold (PID_MAX_LIMIT): more is a hostile structure
MAX_TASKS = 1 << 22
#: file_operations of a pidfd (pidfs_file_operations since 6.9)
PIDFD_FOPS = frozenset({"pidfd_fops", "pidfs_file_operations"})


@dataclasses.dataclass(frozen=True)
class ViewFinding:
    """Something inconsistent inside one view, about the task at `task` (0: the view itself)."""

    task: int
    text: str
    invariant: str


@dataclasses.dataclass
class View:
    name: str
    tasks: dict[int, Struct] = dataclasses.field(default_factory=dict)  # task_struct address -> task
    findings: list[ViewFinding] = dataclasses.field(default_factory=list)
    unread: str | None = None  # why the view could not be read to its end
    unavailable: str | None = None  # why this kernel's ISF does not let it be read at all

    def add(self, task: Struct) -> None:
        if len(self.tasks) >= MAX_TASKS:
            raise GuestDataError(f"the view {self.name} holds more than {MAX_TASKS} tasks")
        self.tasks.setdefault(task.address_, task)


def _task_list_head(prog: Program) -> int:
    return prog.symbol_address("init_task") + prog.member_offset("task_struct", "tasks")


def view_task_list(prog: Program, known: dict[int, Struct], view: View) -> None:
    """init_task.tasks by its ``next`` links (for_each_process), each node's ``prev`` checked
    against the node before it."""
    head = _task_list_head(prog)
    offset = prog.member_offset("task_struct", "tasks")
    before = head
    for node in list_for_each(prog, head, name="init_task.tasks"):
        task = prog.struct("task_struct", node - offset)
        view.add(task)
        prev = prog.read_u64(node + 8)
        if prev != before:
            view.findings.append(
                ViewFinding(
                    node - offset,
                    f"init_task.tasks: its prev is 0x{prev:x}, but the node whose next it is is 0x{before:x}",
                    "init_task.tasks",
                )
            )
        before = node


def view_task_list_prev(prog: Program, known: dict[int, Struct], view: View) -> None:
    """init_task.tasks by its ``prev`` links: what a guest that rewrote only ``next`` hid."""
    offset = prog.member_offset("task_struct", "tasks")
    for node in list_for_each_reverse(prog, _task_list_head(prog), name="init_task.tasks"):
        view.add(prog.struct("task_struct", node - offset))


def view_pid_idr(prog: Program, known: dict[int, Struct], view: View) -> None:
    """The task of each pid in the idr of init_pid_ns, where every pid of every namespace has a
    number, and of each other pid namespace a known task lives in; a pid whose number in a
    namespace is not its index in that namespace's idr is a finding."""
    init_ns = prog.symbol_address("init_pid_ns")
    namespaces = {init_ns: prog["init_pid_ns"]}
    for task in known.values():
        try:
            pid = task_pid_ptr(task)
            for level in range(1, pid_level(pid) + 1):
                ns_address, _ = pid_upid_nr(pid, level)
                namespaces.setdefault(ns_address, prog.struct("pid_namespace", ns_address))
        except _UNREAD:
            continue  # its pid is named by the comparison, which needs the same reads
    for address, ns in namespaces.items():
        for nr, pid in pid_ns_for_each_pid(ns, limit=MAX_TASKS):
            found = pid_task(pid)
            if found is None:
                continue  # being forked, or released while a pidfd holds the pid
            task = found
            view.add(task)
            if address == init_ns and task.pid != nr:
                view.findings.append(
                    ViewFinding(
                        task.address_,
                        f"its pid is {task.pid}, but its struct pid's number is {nr}",
                        "task_struct.pid of its struct pid",
                    )
                )
            if (address, nr) not in {pid_upid_nr(pid, i) for i in range(pid_level(pid) + 1)}:
                view.findings.append(
                    ViewFinding(
                        task.address_,
                        f"the pid idr of pid namespace 0x{address:x} holds its struct pid at {nr},"
                        " a number the pid does not have there",
                        "pid idr",
                    )
                )


def view_children(prog: Program, known: dict[int, Struct], view: View) -> None:
    """Every process reached from init_task through the children lists of each thread, each
    child's ``real_parent`` checked against the thread whose list holds it."""
    init_task = prog.struct("task_struct", prog.symbol_address("init_task"))
    queue, seen = [init_task], {init_task.address_}
    while queue:
        parent = queue.pop()
        threads = [parent] if parent.address_ == init_task.address_ else list(_threads_or_leader(parent))
        for thread in threads:
            kids = list_for_each_entry(
                prog,
                "task_struct",
                thread.children.address_of_(),
                "sibling",
                name=f"children of task_struct 0x{thread.address_:x}",
                limit=MAX_TASKS,
            )
            for kid in kids:
                if int(kid.real_parent) != thread.address_:
                    view.findings.append(
                        ViewFinding(
                            kid.address_,
                            f"it is on the children list of task_struct 0x{thread.address_:x},"
                            f" but its real_parent is 0x{int(kid.real_parent):x}",
                            "task_struct.children",
                        )
                    )
                if kid.address_ in seen:
                    continue  # on two lists: the finding above names it
                seen.add(kid.address_)
                view.add(kid)
                queue.append(kid)


def _threads_or_leader(task: Struct) -> Iterable[Struct]:
    try:
        return list(for_each_thread(task))
    except _UNREAD:
        return [task]  # its thread list is the threads view's to name


def view_threads(prog: Program, known: dict[int, Struct], view: View) -> None:
    """The thread list (signal->thread_head) of the leader of each known task."""
    for task in _leaders(prog, known):
        try:
            for thread in for_each_thread(task, limit=MAX_THREADS):
                view.add(thread)
        except _UNREAD as e:
            view.findings.append(
                ViewFinding(task.address_, f"its thread list cannot be read: {e}", "signal_struct.thread_head")
            )


def _leaders(prog: Program, known: dict[int, Struct]) -> list[Struct]:
    """The distinct group leaders of the known tasks (a task whose leader cannot be read is
    left out: the comparison names it)."""
    leaders: dict[int, Struct] = {}
    for task in known.values():
        try:
            address = int(task.group_leader)
            if address not in leaders:
                leaders[address] = task if address == task.address_ else prog.struct("task_struct", address)
        except _UNREAD:
            continue
    return list(leaders.values())


def view_cpus(prog: Program, known: dict[int, Struct], view: View) -> None:
    """The task current on each CPU (per-CPU current_task) and the one its runqueue runs
    (``rq->curr``), idle tasks included (the comparison leaves those out)."""
    for cpu in range(nr_cpu_ids(prog)):
        for address in {cpu_curr(prog, cpu), rq_curr(prog, cpu)}:
            view.add(prog.struct("task_struct", address))


def view_runqueues(prog: Program, known: dict[int, Struct], view: View) -> None:
    """Every task queued to run on a CPU."""
    for cpu in range(nr_cpu_ids(prog)):
        for task in rq_queued_tasks(prog, cpu):
            view.add(task)


def view_files(prog: Program, known: dict[int, Struct], view: View) -> None:
    """The tasks whose pid an open file holds: a pidfd's, and the owner F_SETOWN gave it (the
    task whose own pid it is)."""
    for task in _leaders(prog, known):
        try:
            files = task_files(task)
            if files is None:
                continue  # a zombie's or an exiting task's
            for _fd, file in for_each_file(files):
                for pid in _pids_of_file(prog, file):
                    owner = pid_task(pid)
                    if owner is not None:
                        view.add(owner)
        except _UNREAD:
            continue  # a process's own files are its dump's to read and name


def _pids_of_file(prog: Program, file: Pointer) -> list[Pointer]:
    pids = []
    if file_fops_name(file, PIDFD_FOPS) is not None and int(file.private_data):
        pids.append(prog.pointer("pid", int(file.private_data)))
    owner = file_owner(file)
    if owner is not None and owner.pid:
        pids.append(owner.pid)
    return pids


#: the views in the order they are read: those that start from a root of their own first, then
#: those that start from the tasks the others found
VIEWS: tuple[tuple[str, Callable[[Program, dict[int, Struct], View], None]], ...] = (
    ("tasks", view_task_list),
    ("tasks-prev", view_task_list_prev),
    ("children", view_children),
    ("cpus", view_cpus),
    ("runqueues", view_runqueues),
    ("pid-idr", view_pid_idr),
    ("threads", view_threads),
    ("files", view_files),
)


def read_views(prog: Program) -> list[View]:
    """Every view of `VIEWS`, each read as far as it can be; one cut short says why in
    `unread`."""
    known: dict[int, Struct] = {}
    views = []
    for name, read in VIEWS:
        view = View(name)
        try:
            read(prog, known, view)
        except _UNREAD as e:
            view.unread = str(e)
        except SymbolError as e:  # a LayoutError too: this view is not checked on this kernel
            view.unavailable = str(e)
        for address, task in view.tasks.items():
            known.setdefault(address, task)
        views.append(view)
    return views
