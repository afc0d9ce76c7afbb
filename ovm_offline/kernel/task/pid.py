"""PIDs and PID namespaces (``struct pid``, ``struct upid``, ``struct pid_namespace``).

A ``struct pid`` has one ``upid`` per namespace level it is visible in:
``numbers[0]`` is the global (init_pid_ns) number, ``numbers[pid->level]`` the
number in the namespace the task lives in.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError, LayoutError, SymbolError
from ..core.invariants import broken
from ..core.ktypes import StructType
from ..core.objects import Array, Pointer, Struct
from ..ds.xarray import xa_for_each

__all__ = [
    "PROC_PID_INIT_INO",
    "pid_nr_ns",
    "pid_ns_at_level",
    "pid_ns_for_each_pid",
    "pid_task",
    "pid_upid_nr",
    "pid_ns_inum",
    "pid_ns_level",
    "pid_type",
    "task_active_pid_ns",
    "task_ns_pid",
    "task_pgid",
    "task_pid_ptr",
    "task_sid",
    "task_tgid_ptr",
]


if TYPE_CHECKING:
    from ..core.memory import Program

#: include/linux/pid_namespace.h: MAX_PID_NS_LEVEL; a larger level is garbage.
MAX_PID_NS_LEVEL = 32
#: include/linux/proc_ns.h: PROC_PID_INIT_INO, the inode of init_pid_ns.
PROC_PID_INIT_INO = 0xEFFFFFFC

# enum pid_type defaults (stable since 4.19; read from the ISF when present).
_PIDTYPE_DEFAULTS = {"PIDTYPE_PID": 0, "PIDTYPE_TGID": 1, "PIDTYPE_PGID": 2, "PIDTYPE_SID": 3}


def pid_type(prog: Program, name: str) -> int:
    """The value of enum pid_type constant `name` (e.g. "PIDTYPE_PGID")."""
    return prog.symbols.enum_value("pid_type", name, _PIDTYPE_DEFAULTS[name])


def pid_level(pid: Pointer) -> int:
    """``pid->level`` of a ``struct pid *``, checked against MAX_PID_NS_LEVEL."""
    level = pid.level
    if not 0 <= level <= MAX_PID_NS_LEVEL:
        raise broken("pid.level", f"struct pid at 0x{int(pid):x}", f"its level is {level}")
    return level


def pid_ns_level(ns: Pointer | Struct) -> int:
    """``ns->level`` of a ``struct pid_namespace``, checked against MAX_PID_NS_LEVEL
    (create_pid_namespace refuses to nest deeper)."""
    level: int = ns.level
    if not 0 <= level <= MAX_PID_NS_LEVEL:
        address = int(ns) if isinstance(ns, Pointer) else ns.address_
        raise broken("pid_namespace.level", f"struct pid_namespace at 0x{address:x}", f"its level is {level}")
    return level


def _pid_upid(pid: Pointer, level: int) -> Struct:
    """``pid->numbers[level]`` (a ``struct upid``). An ISF whose ``numbers`` is anything but
    an array of structs describes another kernel: one SymbolError, not an exception later."""
    numbers = pid.numbers
    if not isinstance(numbers, Array) or not isinstance(numbers.type_.element, StructType):
        raise SymbolError(
            f"struct pid.numbers is {numbers.type_.describe() if hasattr(numbers, 'type_') else type(numbers).__name__}, not an array of struct upid, in this ISF"
        )
    upid: Struct = numbers.trailing_(level)  # level is bounded by pid_level
    return upid


#: the kernel's PID_MAX_LIMIT on 64-bit: no PID is above it, none negative (0 is init_struct_pid's,
#: the session and process group of the kernel's own threads)
PID_MAX_LIMIT = 4 * 1024 * 1024


def _upid_nr(upid: Struct) -> int:
    """``upid->nr``, which the kernel keeps within 0..PID_MAX_LIMIT."""
    nr: int = upid.nr
    if not 0 <= nr <= PID_MAX_LIMIT:
        raise GuestDataError(f"struct upid at 0x{upid.address_:x} holds PID {nr}, outside 0..{PID_MAX_LIMIT}")
    return nr


def pid_nr(pid: Pointer) -> int:
    """The global number of a ``struct pid *`` (0 for NULL)."""
    if not pid:
        return 0
    return _upid_nr(_pid_upid(pid, 0))


def ns_of_pid(pid: Pointer) -> Pointer | None:
    """The ``struct pid_namespace *`` a ``struct pid *`` was allocated in (None for NULL)."""
    if not pid:
        return None
    return _pid_upid(pid, pid_level(pid)).ns


def pid_nr_ns(pid: Pointer, ns: Pointer | Struct) -> int:
    """The number of ``struct pid *`` as seen from ``struct pid_namespace`` `ns`; 0 if
    the pid is not visible there (kernel's pid_nr_ns)."""
    if not pid:
        return 0
    ns_addr = int(ns) if isinstance(ns, Pointer) else ns.address_
    level = pid_ns_level(ns)
    if level > pid_level(pid):
        return 0
    upid = _pid_upid(pid, level)
    return _upid_nr(upid) if int(upid.ns) == ns_addr else 0


def task_pid_ptr(task: Struct) -> Pointer:
    """The ``struct pid *`` of a ``struct task_struct`` (thread_pid; pids[] before 4.19)."""
    if task.has_member_("thread_pid"):
        return task.thread_pid
    return task.pids[pid_type(task.prog_, "PIDTYPE_PID")].pid


def task_tgid_ptr(task: Struct) -> Pointer:
    """The ``struct pid *`` of the thread group (the leader's pid)."""
    return task.signal.pids[pid_type(task.prog_, "PIDTYPE_TGID")]


def task_pgrp_ptr(task: Struct) -> Pointer:
    """The ``struct pid *`` of the task's process group."""
    return task.signal.pids[pid_type(task.prog_, "PIDTYPE_PGID")]


def task_session_ptr(task: Struct) -> Pointer:
    """The ``struct pid *`` of the task's session."""
    return task.signal.pids[pid_type(task.prog_, "PIDTYPE_SID")]


def task_active_pid_ns(task: Struct) -> Pointer | None:
    """The ``struct pid_namespace *`` a ``struct task_struct`` lives in (None if its pid
    is already detached)."""
    return ns_of_pid(task_pid_ptr(task))


def pid_ns_inum(ns: Pointer | Struct) -> int:
    """The inode number (/proc/PID/ns/pid) of a ``struct pid_namespace``."""
    return ns.ns.inum


def task_ns_pid(task: Struct) -> int:
    """The task's PID inside its own PID namespace (what getpid() returns there)."""
    pid = task_pid_ptr(task)
    if not pid:
        return 0
    return _upid_nr(_pid_upid(pid, pid_level(pid)))


def task_pgid(task: Struct, ns: Pointer | Struct | None = None) -> int:
    """Process group id, global or as seen from `ns`."""
    p = task_pgrp_ptr(task)
    return pid_nr(p) if ns is None else pid_nr_ns(p, ns)


def task_sid(task: Struct, ns: Pointer | Struct | None = None) -> int:
    """Session id, global or as seen from `ns`."""
    p = task_session_ptr(task)
    return pid_nr(p) if ns is None else pid_nr_ns(p, ns)


def pid_ns_at_level(task: Struct, level: int) -> Pointer | None:
    """The task's PID namespace ancestor at `level` (0 = init_pid_ns), or None if the
    task lives above that level."""
    pid = task_pid_ptr(task)
    if not pid or level > pid_level(pid):
        return None
    return _pid_upid(pid, level).ns


def pid_task(pid: Pointer, type_name: str = "PIDTYPE_PID") -> Struct | None:
    """The first ``struct task_struct`` attached to ``struct pid *`` `pid` as `type_name` (the
    kernel's pid_task): for PIDTYPE_PID the task whose own pid it is; None when none is (the
    task has been released, or the pid is still being set up by fork)."""
    if not pid:
        return None
    prog = pid.prog_
    kind = pid_type(prog, type_name)
    first = pid.tasks[kind].first
    if not first:
        return None
    task_type = prog.struct_type("task_struct")
    if not task_type.has_member("pid_links"):
        raise LayoutError("task_struct has no pid_links (a kernel before 4.19): a layout not supported")
    node_size = prog.struct_type("hlist_node").size
    return prog.struct("task_struct", int(first) - task_type.member("pid_links").offset - kind * node_size)


def pid_ns_for_each_pid(ns: Pointer | Struct, *, limit: int = PID_MAX_LIMIT) -> Iterator[tuple[int, Pointer]]:
    """(number, ``struct pid *``) of every pid allocated in ``struct pid_namespace`` `ns`, from
    its idr (what find_pid_ns looks up), in number order. A number fork has reserved but not
    yet filled (alloc_pid stores NULL first) is left out."""
    prog = ns.prog_
    idr = ns.idr
    base = idr.idr_base
    for index, _span, entry in xa_for_each(prog, idr.idr_rt, PID_MAX_LIMIT, limit=limit):
        if entry & 3:  # a value entry: the idr keeps only pointers
            raise GuestDataError(f"the pid idr of pid namespace 0x{_address(ns):x} holds 0x{entry:x} at {index}")
        yield index + base, prog.pointer("pid", entry)


def _address(obj: Pointer | Struct) -> int:
    return int(obj) if isinstance(obj, Pointer) else obj.address_


def pid_upid_nr(pid: Pointer, level: int) -> tuple[int, int]:
    """(``struct pid_namespace`` address, number) of ``struct pid *`` `pid` at `level` (at most
    its own level), the number checked as every reader of it is."""
    upid = _pid_upid(pid, level)
    return int(upid.ns), _upid_nr(upid)
