"""What runs in the guest: processes, their namespaces, cgroups and containers.

``list_processes(open_kernel(source, symbol_dirs))`` gives one `ProcessInfo` per
thread-group leader (what ``ps -e`` lists), with the threads that were current on a CPU
(the vCPU of the same index) at the snapshot.

Containers: a process belongs to a container when it lives in a non-initial PID
namespace or in a non-root v2 cgroup.  The container id is readable and stable for
one snapshot: ``pidns:<inode> cgroup:<path>`` for processes grouped by their
outermost non-initial PID namespace (the level-1 ancestor, so nested namespaces
stay in their outer container; the cgroup is the deepest cgroup common to all its
processes), or ``cgroup:<path>`` for processes in the initial PID namespace and a
non-root cgroup.  Host processes and kernel threads have ``container = None``.

Where a container runtime named the container's cgroup after the container (docker, podman,
containerd, CRI-O, runc with systemd cgroups, LXC: `RUNTIME_CGROUPS`), the container also has
its runtime id, ``<runtime>:<id>`` (``docker:3f2a…``), which `ps` shows and `dump --container`
accepts.  A cgroup that follows no such convention (runc's cgroupfs default ``/<id>`` among
them: any first-level cgroup looks like it) gives none; a runc container's id then comes from
runc's own state in the guest (ovm_offline.extract.runtimes), where its first process is this
container's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .errors import GuestDataError, SymbolError, UnreadablePageError
from .extract.runtimes import runc_container_ids
from .kernel.core.identify import open_kernel as _open_kernel
from .kernel.core.invariants import broken
from .kernel.core.memory import Program
from .kernel.core.objects import Struct
from .kernel.cpu.percpu import cpu_curr_tasks
from .kernel.ns.cgroup import task_cgroup_path
from .kernel.ns.nsproxy import NamespaceInodes, task_namespaces
from .kernel.task.pid import (
    PROC_PID_INIT_INO,
    pid_ns_at_level,
    pid_ns_inum,
    pid_ns_level,
    task_active_pid_ns,
    task_ns_pid,
    task_pgid,
    task_sid,
)
from .kernel.task.tasks import (
    for_each_process,
    for_each_thread,
    is_kthread,
    task_comm,
    task_egid,
    task_euid,
    task_gid,
    task_ppid,
    task_state,
    task_uid,
    thread_group,
)
from .sources.base import PhysicalSource

if TYPE_CHECKING:
    from .kernel.crossview.check import CrossView

log = logging.getLogger("ovm_offline")

__all__ = [
    "ProcessInfo",
    "RUNTIME_CGROUPS",
    "container_ids",
    "list_processes",
    "matches_container",
    "open_kernel",
    "runtime_id",
]


@dataclasses.dataclass(frozen=True)
class ProcessInfo:
    """One process (thread group) of the guest."""

    pid: int  # global pid of the leader (= tgid)
    tgid: int
    ppid: int  # global pid of real_parent's thread group
    nthreads: int  # threads found on the thread list
    comm: str
    state: str  # ps letter of the leader: R S D T t X Z P I
    uid: int
    euid: int
    gid: int
    egid: int
    pgid: int  # global
    sid: int  # global
    ns_pid: int  # pid inside the process's own PID namespace
    pidns_inum: int | None
    pidns_level: int | None
    namespaces: NamespaceInodes
    cgroup: str | None  # v2 cgroup path, "/" for the root
    container: str | None
    kthread: bool
    task_address: int  # kernel virtual address of the leader's task_struct
    tids: tuple[int, ...] = ()  # global thread ids, leader first
    on_cpu: tuple[tuple[int, int], ...] = ()  # (thread id, CPU = vCPU index) of threads current on a CPU
    problems: tuple[str, ...] = ()  # fields that could not be read (guest data errors)
    runtime_id: str | None = None  # "<runtime>:<id>" where its cgroup or runc's state names it
    views: tuple[str, ...] = ()  # with ps --check: the kernel's views that hold its leader
    thread_views: tuple[
        tuple[int, tuple[str, ...]], ...
    ] = ()  # with ps --check: (TID, views) of each thread any view holds
    disagreements: tuple[str, ...] = ()  # with ps --check: where those views disagree about its tasks

    def cpus_text(self) -> str:
        """The CPUs its threads were current on, as ps shows them: "1", "0,1", or "-"."""
        return ",".join(str(cpu) for cpu in sorted({cpu for _, cpu in self.on_cpu})) or "-"


#: what leaves one detail of a process unread, not the listing: guest data no kernel holds,
#: and a page the dump holds but cannot give as it describes it (named in the problem)
_NOT_READ = (GuestDataError, UnreadablePageError)


def open_kernel(source: PhysicalSource, symbol_dirs: Iterable[str | os.PathLike[str]] = (), **kwargs) -> Program:
    """Identify the guest kernel and its layout; see ovm_offline.kernel.core.identify.open_kernel."""
    return _open_kernel(source, symbol_dirs, **kwargs)


def _process_info(prog: Program, task, current: dict[int, int]) -> tuple[ProcessInfo, int | None]:
    """A ProcessInfo without its container, plus the inode of its level-1 PID namespace.
    `current` maps the task current on each CPU to that CPU."""
    problems: list[str] = []
    pid = task.pid

    def soft(what: str, fn, default=None):
        # Optional details of one process must not hide every other process.
        try:
            return fn()
        except _NOT_READ as e:
            problems.append(f"{what}: {e}")
            return default

    # a thread list that breaks an invariant is shown as it is, with the warning: hiding the
    # process would show the forged view
    threads = soft("threads", lambda: thread_group(task)) or list(for_each_thread(task))
    tids = tuple(t.pid for t in threads)
    on_cpu = tuple((t.pid, current[t.address_]) for t in threads if t.address_ in current)

    pidns = soft("pid namespace", lambda: task_active_pid_ns(task))
    pidns_inum = soft("pid namespace", lambda: pid_ns_inum(pidns)) if pidns is not None else None
    pidns_level = soft("pid namespace", lambda: pid_ns_level(pidns)) if pidns is not None else None
    outer = soft("pid namespace", lambda: pid_ns_at_level(task, 1))
    outer_inum = soft("pid namespace", lambda: pid_ns_inum(outer)) if outer is not None else None
    info = ProcessInfo(
        pid=pid,
        tgid=task.tgid,
        ppid=task_ppid(task),
        nthreads=len(tids),
        comm=task_comm(task),
        state=task_state(task),
        uid=soft("credentials", lambda: task_uid(task), -1),
        euid=soft("credentials", lambda: task_euid(task), -1),
        gid=soft("credentials", lambda: task_gid(task), -1),
        egid=soft("credentials", lambda: task_egid(task), -1),
        pgid=soft("process group", lambda: task_pgid(task), 0),
        sid=soft("session", lambda: task_sid(task), 0),
        ns_pid=soft("pid namespace", lambda: task_ns_pid(task), 0),
        pidns_inum=pidns_inum,
        pidns_level=pidns_level,
        namespaces=soft("namespaces", lambda: task_namespaces(task), NamespaceInodes()),
        cgroup=soft("cgroup", lambda: task_cgroup_path(task)),
        container=None,
        kthread=is_kthread(task),
        task_address=task.address_,
        tids=tids,
        on_cpu=on_cpu,
        problems=tuple(problems),
    )
    return info, outer_inum


def _common_cgroup(paths: list[str]) -> str:
    split = [[c for c in p.split("/") if c] for p in paths]
    common: list[str] = []
    for parts in zip(*split, strict=False):  # stops at the shortest path
        if all(p == parts[0] for p in parts):
            common.append(parts[0])
        else:
            break
    return "/" + "/".join(common)


def container_ids(procs: list[tuple[ProcessInfo, int | None]], init_pidns: int) -> list[str | None]:
    """The container id of each process (see the module docstring)."""
    by_ns: dict[int, list[str]] = {}
    for p, outer in procs:
        if not p.kthread and outer is not None and outer != init_pidns and p.cgroup is not None:
            by_ns.setdefault(outer, []).append(p.cgroup)
    ns_cgroup = {ns: _common_cgroup(paths) for ns, paths in by_ns.items()}
    out: list[str | None] = []
    for p, outer in procs:
        if p.kthread:
            out.append(None)
        elif outer is not None and outer != init_pidns:
            cg = ns_cgroup.get(outer)
            out.append(f"pidns:{outer}" + (f" cgroup:{cg}" if cg and cg != "/" else ""))
        elif p.cgroup not in (None, "/"):
            out.append(f"cgroup:{p.cgroup}")
        else:
            out.append(None)
    return out


_HEX64 = r"([0-9a-f]{64})"
#: cgroup path components container runtimes name after the container (cgroup v2; systemd
#: drivers make scopes, cgroupfs drivers directories), one row per convention
RUNTIME_CGROUPS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (runtime, re.compile(rf"(?:^|/){component}(?:/|$)"))
    for runtime, component in (
        ("docker", rf"docker-{_HEX64}\.scope"),
        ("docker", rf"docker/{_HEX64}"),
        ("podman", rf"libpod-{_HEX64}\.scope"),
        ("podman", rf"libpod_parent/libpod-{_HEX64}"),
        ("containerd", rf"cri-containerd-{_HEX64}\.scope"),
        ("kubepods", rf"kubepods/(?:[a-z]+/)?pod[0-9a-f_-]+/{_HEX64}"),  # any CRI runtime, cgroupfs driver
        ("cri-o", rf"crio-{_HEX64}\.scope"),
        ("runc", r"runc-([A-Za-z0-9][A-Za-z0-9_.+-]*)\.scope"),
        ("lxc", r"lxc\.payload\.([^/]+)"),
        ("lxc", r"lxc/([^/]+)"),
    )
)


def runtime_id(container_cgroup: str | None) -> str | None:
    """``<runtime>:<id>`` of the container whose cgroup is `container_cgroup`, where its
    runtime named the cgroup after it (the outermost match: a container's own sub-cgroups
    keep its id); None otherwise."""
    if not container_cgroup:
        return None
    found = [(m.start(), runtime, m.group(1)) for runtime, rx in RUNTIME_CGROUPS if (m := rx.search(container_cgroup))]
    if not found:
        return None
    _, runtime, ident = min(found)
    return f"{runtime}:{ident}"


def _container_cgroup(container: str | None) -> str | None:
    """The cgroup part of a container id (see the module docstring)."""
    if container is None or "cgroup:" not in container:
        return None
    return container.split("cgroup:", 1)[1]


def matches_container(p: ProcessInfo, wanted: str) -> bool:
    """Whether process `p` is in container `wanted`: its id as `ps` shows it, its runtime id,
    or that id without the runtime's name, whole or its first 12 characters or more (as docker
    abbreviates them)."""
    if p.container is None:
        return False
    if wanted in (p.container, p.runtime_id):
        return True
    if p.runtime_id is None:
        return False
    runtime, ident = p.runtime_id.split(":", 1)
    short = wanted.removeprefix(f"{runtime}:")
    return len(short) >= 12 and ident.startswith(short)


def list_processes(prog: Program) -> list[ProcessInfo]:
    """Every process of the guest (thread-group leaders on init_task.tasks), in list order.

    Raises GuestDataError (or UnreadablePageError) if the task list itself cannot be walked
    to its end or a process on it cannot be read at all; a process whose optional details
    (namespaces, cgroup, credentials, a thread list that breaks an invariant) cannot be read
    is still listed, with the reasons in `problems`."""
    listing = read_process_list(prog)
    for error in (listing.cut, *listing.unread):
        if error is not None:
            raise error
    return listing.processes


@dataclasses.dataclass(frozen=True)
class ProcessListing:
    processes: list[ProcessInfo]  # in task-list order, up to where the walk stopped
    cut: GuestDataError | UnreadablePageError | None  # what stopped it before the list's end
    unread: list[GuestDataError | UnreadablePageError]  # processes on it not shown at all, and why


def read_process_list(prog: Program, hidden: Iterable[Struct] = ()) -> ProcessListing:
    """The processes `list_processes` gives, and when the task list cannot be walked to its
    end (a page of it unreadable, a broken link), those before the break and what broke it:
    what `ps` shows a responder before it names the rest as unread. `hidden`: leaders another
    of the kernel's views holds, listed after those on the task list."""
    try:
        current = cpu_curr_tasks(prog)
    except (*_NOT_READ, SymbolError):
        current = {}  # which task runs where is a detail: the processes are still listed
    raw: list[tuple[ProcessInfo, int | None]] = []
    unread: list[GuestDataError | UnreadablePageError] = []
    cut = None
    walk = for_each_process(prog)
    while True:
        try:
            task = next(walk)
        except StopIteration:
            break
        except _NOT_READ as e:
            after = f"after PID {raw[-1][0].pid} ({raw[-1][0].comm})" if raw else "at its start"
            cut = type(e)(f"the task list is cut {after}: {e}")
            break
        try:  # a process whose own fields or thread list cannot be read hides no other process
            raw.append(_process_info(prog, task, current))
        except _NOT_READ as e:
            unread.append(type(e)(f"the process at task_struct 0x{task.address_:x} could not be read: {e}"))
    for task in hidden:
        try:
            raw.append(_process_info(prog, task, current))
        except _NOT_READ as e:
            unread.append(type(e)(f"the process at task_struct 0x{task.address_:x} could not be read: {e}"))
    raw = _flag_shared_pids(raw)
    try:
        init_pidns = pid_ns_inum(prog["init_pid_ns"])
    except (*_NOT_READ, SymbolError):
        init_pidns = PROC_PID_INIT_INO
    ids = container_ids(raw, init_pidns)
    runc = _runc_ids_by_container(prog, [p.pid for p, _ in raw], ids)
    processes = [
        dataclasses.replace(p, container=c, runtime_id=runtime_id(_container_cgroup(c)) or runc.get(c))
        for (p, _), c in zip(raw, ids, strict=True)
    ]
    return ProcessListing(processes, cut, unread)


def _flag_shared_pids(raw: list[tuple[ProcessInfo, int | None]]) -> list[tuple[ProcessInfo, int | None]]:
    """Each process with a thread whose pid another listed process's thread has gets the broken
    invariant as a problem (which of them is the forged one, the listing cannot tell)."""
    holders: dict[int, list[int]] = {}
    for p, _ in raw:
        for tid in p.tids:
            holders.setdefault(tid, []).append(p.pid)
    out = []
    for p, outer in raw:
        shared = [tid for tid in p.tids if len(holders[tid]) > 1]
        if shared:
            others = sorted({o for tid in shared for o in holders[tid]} - {p.pid}) or [p.pid]
            problem = str(broken("task_struct.pid unique", f"TID {shared[0]}", f"is also a thread of PID {others[0]}"))
            p = dataclasses.replace(p, problems=(*p.problems, problem))
        out.append((p, outer))
    return out


def _runc_ids_by_container(prog: Program, pids: list[int], containers: list[str | None]) -> dict[str | None, str]:
    """``runc:<id>`` of each container whose first process runc's state names."""
    try:
        first = runc_container_ids(prog)
    except (*_NOT_READ, SymbolError) as e:
        log.warning("runc's state not read: %s", e)
        return {}
    return {c: f"runc:{first[pid]}" for pid, c in zip(pids, containers, strict=True) if c and pid in first}


@dataclasses.dataclass(frozen=True)
class CheckedListing:
    listing: ProcessListing  # every process any view holds, each with its views and disagreements
    views: CrossView  # kernel.crossview.check's


def read_checked_process_list(prog: Program) -> CheckedListing:
    """`read_process_list` across every view the kernel keeps of its tasks (`ps --check`): the
    processes on the task list and those only another view holds, each with the views that hold
    it and the disagreements about its tasks."""
    from .kernel.crossview.check import cross_view  # what plain `ps` does not import

    views = cross_view(prog)
    # a leader the task list does not hold (the views read it already; its walk is not repeated)
    hidden = [
        prog.struct("task_struct", s.address) for s in views.tasks.values() if s.leader and "tasks" not in s.views
    ]
    listing = read_process_list(prog, hidden)
    about: dict[int, list[str]] = {}
    for d in views.disagreements:
        s = views.tasks.get(d.task)
        leader = s.leader_address if s is not None and s.leader_address is not None else d.task
        about.setdefault(leader, []).append(str(d))
    threads: dict[int, list[tuple[int, tuple[str, ...]]]] = {}
    for s in views.tasks.values():
        if s.leader_address is not None and s.pid is not None:
            threads.setdefault(s.leader_address, []).append((s.pid, s.views))
    processes = [
        dataclasses.replace(
            p,
            views=views.tasks[p.task_address].views if p.task_address in views.tasks else (),
            thread_views=tuple(sorted(threads.get(p.task_address, ()))),
            disagreements=tuple(about.get(p.task_address, ())),
        )
        for p in listing.processes
    ]
    return CheckedListing(dataclasses.replace(listing, processes=processes), views)
