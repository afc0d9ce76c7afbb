"""Tasks (``struct task_struct``): iteration, state, ids and credentials."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError, UnsupportedError
from ..core.invariants import broken
from ..core.objects import Pointer, Struct
from ..core.paging import PAGE_SIZE, NonPresent, PageTables, Translation
from ..ds.list import DEFAULT_LIMIT, list_for_each_entry

__all__ = [
    "task_read_user",
    "find_process",
    "find_task",
    "for_each_process",
    "for_each_task",
    "for_each_thread",
    "is_kthread",
    "process_tree",
    "task_comm",
    "task_egid",
    "task_euid",
    "task_gid",
    "task_page_tables",
    "task_pid",
    "task_ppid",
    "task_robust_list",
    "task_rseq_area",
    "task_start_ticks",
    "task_state",
    "task_uid",
    "thread_group",
]


if TYPE_CHECKING:
    from ..core.memory import Program

#: processes in one tree: a hostile children list must not run forever
MAX_TREE = 4096
#: include/linux/sched.h: PF_KTHREAD (unchanged since 2.6.27); PF_EXITING, set by exit_signals()
PF_KTHREAD = 0x00200000
PF_EXITING = 0x00000004

#: fs/proc/array.c task_state_array, indexed by fls(state & TASK_REPORT)
TASK_STATE_LETTERS = "RSDTtXZPI"
TASK_REPORT = 0x7F  # INTERRUPTIBLE|UNINTERRUPTIBLE|STOPPED|TRACED|EXIT_DEAD|EXIT_ZOMBIE|PARKED
TASK_REPORT_IDLE = 0x80  # TASK_REPORT + 1
TASK_UNINTERRUPTIBLE = 0x2
TASK_NOLOAD = 0x400
TASK_IDLE = TASK_UNINTERRUPTIBLE | TASK_NOLOAD
TASK_RTLOCK_WAIT = 0x1000  # 5.15+
TASK_FROZEN = 0x8000  # 6.1+

#: A thread group cannot exceed the kernel's task limit (PID_MAX_LIMIT, 4M).
MAX_THREADS = 1 << 22


def for_each_process(prog: Program, *, limit: int = DEFAULT_LIMIT) -> Iterator[Struct]:
    """Every thread-group leader (``struct task_struct``) on init_task.tasks, without
    init_task (the idle task, pid 0), like the kernel's for_each_process."""
    init_task = prog.symbol_address("init_task")
    head = init_task + prog.member_offset("task_struct", "tasks")
    yield from list_for_each_entry(prog, "task_struct", head, "tasks", name="init_task.tasks", limit=limit)


def thread_group(task: Struct) -> list[Struct]:
    """Every thread of the thread group that `task` leads, checked against
    ``signal->nr_threads`` (which the kernel changes together with the list): a list cut short
    is GuestDataError, not a process with fewer threads. Each thread's pid must be positive and
    its tgid the leader's pid (the invariants ``task_struct.pid`` and ``task_struct.tgid``)."""
    pid, tgid = task.pid, task.tgid
    _check_task_pid(task)
    if tgid != pid:
        raise broken("task_struct.tgid", f"PID {pid} (task_struct 0x{task.address_:x})", f"leads with tgid {tgid}")
    threads = list(for_each_thread(task))
    for thread in threads:
        _check_task_pid(thread)
        if thread.tgid != tgid:
            raise broken(
                "task_struct.tgid",
                f"TID {thread.pid} (task_struct 0x{thread.address_:x}) on PID {pid}'s thread list",
                f"has tgid {thread.tgid}",
            )
    nr_threads = task.signal.nr_threads
    if nr_threads != len(threads):
        raise GuestDataError(f"PID {pid} has nr_threads {nr_threads} but {len(threads)} threads on its thread list")
    return threads


def _check_unique_pid(seen: dict[int, int], task: Struct) -> None:
    """Add `task` to `seen` (pid -> task_struct address); a pid already there, of another task,
    breaks the invariant ``task_struct.pid unique``."""
    other = seen.setdefault(task.pid, task.address_)
    if other != task.address_:
        raise broken(
            "task_struct.pid unique",
            f"PID {task.pid}",
            f"is the pid of task_structs 0x{other:x} and 0x{task.address_:x}",
        )


def _check_task_pid(task: Struct) -> None:
    if task.pid <= 0:
        raise broken("task_struct.pid", f"task_struct 0x{task.address_:x} on a task list", f"has pid {task.pid}")


def for_each_thread(task: Struct, *, limit: int = MAX_THREADS) -> Iterator[Struct]:
    """Every thread (``struct task_struct``) in the thread group of `task`: the list
    signal->thread_head linked through thread_node (thread_group before 6.7 kernels
    had both; very old ones only thread_group)."""
    prog = task.prog_
    if task.has_member_("thread_node"):
        # never NULL (invariants.NEVER_NULL): exit keeps it until the task is freed
        head = int(task.signal) + prog.member_offset("signal_struct", "thread_head")
        yield from list_for_each_entry(
            prog, "task_struct", head, "thread_node", name=f"thread_head of pid {task.pid}", limit=limit
        )
        return
    # Old kernels: a circular list through every thread, the leader included.
    yield task
    yield from list_for_each_entry(
        prog,
        "task_struct",
        task.member_address_("thread_group"),
        "thread_group",
        name=f"thread_group of pid {task.pid}",
        limit=limit,
    )


def for_each_task(prog: Program, *, limit: int = DEFAULT_LIMIT) -> Iterator[Struct]:
    """Every task (thread) of every process, leaders first within each group."""
    for p in for_each_process(prog, limit=limit):
        yield from for_each_thread(p)


def find_task(prog: Program, pid: int) -> Struct | None:
    """The ``struct task_struct`` with global `pid` (a thread id), or None."""
    for t in for_each_task(prog):
        if t.pid == pid:
            return t
    return None


def find_process(prog: Program, pid: int) -> Struct | None:
    """The thread-group leader ``struct task_struct`` with global `pid`, or None; two of them
    is GuestDataError (which would be the one?)."""
    found = [task for task in for_each_process(prog) if task.pid == pid]
    if len(found) > 1:
        where = ", ".join(f"0x{t.address_:x}" for t in found)
        raise broken("task_struct.pid unique", f"PID {pid}", f"is the pid of {len(found)} processes ({where})")
    return found[0] if found else None


def process_tree(prog: Program, root: Struct) -> list[Struct]:
    """`root` and its descendants, depth first with parents before children: the order
    CRIU's pstree walk dumps them in. A process's children are those of each of its
    threads (``task_struct.children``, oldest first), thread by thread, as CRIU reads
    /proc/PID/task/TID/children."""
    order, stack, seen = [], [root], set()
    tids: dict[int, int] = {}  # pid -> task_struct of every thread in the tree
    while stack:
        task = stack.pop()
        if task.address_ in seen:
            raise GuestDataError(f"process tree below PID {root.pid} loops at PID {task.pid}")
        seen.add(task.address_)
        order.append(task)
        if len(order) > MAX_TREE:
            raise GuestDataError(f"process tree below PID {root.pid} has more than {MAX_TREE} processes")
        children: list[Struct] = []
        for thread in thread_group(task):
            _check_unique_pid(tids, thread)
            kids = list(
                list_for_each_entry(
                    prog,
                    "task_struct",
                    thread.children.address_of_(),
                    "sibling",
                    name=f"children of TID {thread.pid}",
                    limit=MAX_TREE + 1,
                )
            )
            for kid in kids:
                if int(kid.real_parent) != thread.address_:
                    raise GuestDataError(
                        f"TID {thread.pid}'s children list holds PID {kid.pid}, whose parent it is not"
                    )
            children.extend(kids)
            if len(children) > MAX_TREE:
                raise GuestDataError(f"PID {task.pid} has more than {MAX_TREE} children")
        stack.extend(reversed(children))
    _check_no_child_missing(prog, root, seen)
    return order


def _check_no_child_missing(prog: Program, root: Struct, seen: set[int]) -> None:
    """Every process whose parent is in the tree was found through a children list: one
    reached only through the task list means a children list was cut short."""
    leaders: dict[int, int] = {}
    for task in for_each_process(prog):
        _check_unique_pid(leaders, task)
        if task.address_ not in seen and int(task.real_parent.group_leader) in seen and task.address_ != root.address_:
            raise GuestDataError(
                f"PID {task.pid}'s parent PID {task.real_parent.pid} is in the tree below PID {root.pid},"
                " but no children list there holds it"
            )


def task_comm(task: Struct) -> str:
    """The command name (comm, 16 bytes) of a ``struct task_struct``."""
    return task.comm.string_().decode("utf-8", "backslashreplace")


def task_state_value(task: Struct) -> int:
    """The raw scheduler state: ``__state`` (5.14+) or ``state`` (older, a long)."""
    if task.has_member_("__state"):
        return task.member_("__state") & 0xFFFF_FFFF
    return task.member_("state") & 0xFFFF_FFFF_FFFF_FFFF


def task_robust_list(task: Struct) -> int:
    """The ``struct robust_list_head *`` set_robust_list(2) registered: ``robust_list``, or
    ``futex.robust_list`` where the futex state has a struct of its own (7.x)."""
    if task.has_member_("robust_list"):
        return int(task.robust_list)
    return int(task.futex.robust_list)


def task_rseq_area(task: Struct) -> tuple[int, int | None, int]:
    """(user address, registered length or None where the kernel keeps none (before 6.3),
    signature) of rseq(2)'s registration: ``rseq``/``rseq_len``/``rseq_sig``, or the
    ``struct rseq_data`` ``rseq`` holding ``usrptr``/``len``/``sig`` (7.x)."""
    rseq = task.rseq
    if isinstance(rseq, Struct):
        return int(rseq.usrptr), rseq.len, rseq.sig & 0xFFFF_FFFF
    length = task.rseq_len if task.has_member_("rseq_len") else None
    return int(rseq), length, task.rseq_sig & 0xFFFF_FFFF


def task_state(task: Struct) -> str:
    """The state of a ``struct task_struct`` as ps(1) prints it: one of R S D T t X Z P I
    (fs/proc/array.c get_task_state / __task_state_index)."""
    state = task_state_value(task)
    exit_state = task.exit_state & 0xFFFF_FFFF
    report = (state | exit_state) & TASK_REPORT
    if state & TASK_IDLE == TASK_IDLE:
        report = TASK_REPORT_IDLE
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN):
        report = TASK_UNINTERRUPTIBLE
    return TASK_STATE_LETTERS[report.bit_length()]  # fls()


#: include/asm-generic/param.h: the clock ticks /proc reports times in
USER_HZ = 100


def task_start_ticks(task: Struct) -> int:
    """When a ``struct task_struct`` started, in clock ticks since boot (field 22 of
    /proc/PID/stat: nsec_to_clock_t(start_boottime))."""
    return int(task.start_boottime) // (1_000_000_000 // USER_HZ)


def is_kthread(task: Struct) -> bool:
    """Is the ``struct task_struct`` a kernel thread (PF_KTHREAD)?"""
    return bool(task.flags & PF_KTHREAD)


def task_pid(task: Struct) -> int:
    """Global thread id of a ``struct task_struct``."""
    return task.pid


def task_ppid(task: Struct) -> int:
    """Global pid of the parent process (real_parent's tgid, as getppid()); 0 for
    init_task's direct children (pid 1 and 2), since init_task's tgid is 0."""
    parent = task.real_parent
    return parent.tgid if parent else 0


def _cred(task: Struct, real: bool) -> Pointer:
    return task.real_cred if real else task.cred


def task_uid(task: Struct) -> int:
    """Real uid of a ``struct task_struct`` (objective credentials, real_cred: the
    first Uid: value of /proc/PID/status)."""
    return _cred(task, True).uid.val


def task_euid(task: Struct) -> int:
    """Effective uid of a ``struct task_struct`` (real_cred)."""
    return _cred(task, True).euid.val


def task_gid(task: Struct) -> int:
    """Real gid of a ``struct task_struct`` (real_cred)."""
    return _cred(task, True).gid.val


def task_egid(task: Struct) -> int:
    """Effective gid of a ``struct task_struct`` (real_cred)."""
    return _cred(task, True).egid.val


def task_page_tables(task: Struct) -> PageTables | None:
    """The user address space (``task->mm->pgd``) of a ``struct task_struct`` as
    `PageTables` for bulk walks; None for kernel threads (no mm)."""
    mm = task.mm
    if not mm:
        return None
    prog = task.prog_
    return PageTables(prog.source, prog.translate(int(mm.pgd)), prog.pgtable_levels, runs=prog.runs)


def _not_in_memory(entry: NonPresent | None) -> str:
    """Why a user page is not in memory, by its page-table entry."""
    if entry is None:
        return "has no page yet (never touched, no page table entry)"
    if entry.level == 1:
        return "is not in memory (swapped out, or being migrated)"
    if entry.level == 2:  # a PMD migration entry (a transparent huge page moving) reads alike
        return "is not in memory (a huge page being migrated, or a page table outside guest memory)"
    return "has a page table outside guest memory"


def task_read_user(task: Struct, vaddr: int, size: int) -> bytes:
    """`size` bytes of the user address space of a ``struct task_struct`` at `vaddr`, through
    its page tables (as the kernel's access_remote_vm); UnsupportedError when a page is not
    resident, GuestDataError for a task without an address space."""
    pt = task_page_tables(task)
    if pt is None:
        raise GuestDataError(f"pid {task.pid}: no user address space to read 0x{vaddr:x} from")
    source = task.prog_.source
    out = bytearray()
    while len(out) < size:
        n = min(size - len(out), PAGE_SIZE - (vaddr & (PAGE_SIZE - 1)))
        found = pt.lookup(vaddr)
        if not isinstance(found, Translation):
            raise UnsupportedError(f"pid {task.pid}: user page at 0x{vaddr:x} {_not_in_memory(found)}")
        out += source.read(found.paddr, n)
        vaddr += n
    return bytes(out)
