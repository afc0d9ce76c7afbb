"""`ovm-offline dump`: a process (and the tree below it) from guest memory to CRIU images.

Kernel side: find the task, check it can be saved, extract its state (ovm_offline.extract).
CRIU side: write the images (ovm_offline.criu.build) into a temporary directory that replaces
the target only when complete.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from .criu import build
from .errors import GuestDataError, NoSuchProcess, UnsupportedError
from .extract.anonfds import attach_anon_fds
from .extract.buildid import attach_build_ids
from .extract.cgroups import task_cgroup_dir
from .extract.files import extract_files, extract_fs
from .extract.mm import extract_mm
from .extract.pages import PagesStats, write_page_runs, write_pages
from .extract.pipes import attach_pipes
from .extract.shmem import tree_ipc_namespace
from .extract.sockets import attach_unix_sockets
from .extract.task import extract_task_common
from .kernel.core.memory import Program
from .kernel.ds.list import list_for_each_entry
from .kernel.ns.cgroup import task_cgroup_path
from .kernel.ns.nsproxy import task_namespaces
from .kernel.task import timekeeping
from .kernel.task.pid import task_active_pid_ns
from .kernel.task.tasks import for_each_process, for_each_thread, is_kthread, task_comm
from .output import atomic_directory
from .sources.base import PhysicalSource
from .state import CgroupDir, NamespaceIds, ProcessState, SharedMemory

MAX_TREE = 4096  # processes in one dump: a hostile children list must not run forever
EXIT_ZOMBIE, EXIT_DEAD = 0x20, 0x10


@dataclasses.dataclass
class DumpSummary:
    pid: int
    comm: str
    processes: int
    threads: int
    images: int
    pages: int
    page_bytes: int
    files: int
    swapped_pages: int
    zero_pages: int
    seconds: float
    directory: Path
    skipped: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        return (
            [
                f"dumped pid {self.pid} ({self.comm}): {self.processes} process(es), {self.threads} thread(s)",
                f"wrote {self.images} images to {self.directory}: {self.pages} pages ({self.page_bytes / 2**20:.1f} MiB), "
                f"{self.files} file entries, in {self.seconds:.2f} s",
            ]
            + (
                [f"warning: {self.swapped_pages} pages were swapped out and are not in memory; they are not saved"]
                if self.swapped_pages
                else []
            )
            + [f"warning: left out {what}" for what in self.skipped]
        )


def find_task(prog: Program, pid: int):
    """The thread-group leader ``struct task_struct`` with global PID `pid`."""
    for task in for_each_process(prog):
        if task.pid == pid:
            return task
    raise NoSuchProcess(f"no process with PID {pid} in the guest (see `ovm-offline ps`)")


def container_root(prog: Program, container: str) -> int:
    """The global PID of the one process of `container` (an id as `ovm-offline ps` shows it)
    whose parent is outside it: dumping it saves the container's process tree."""
    from .inventory import list_processes

    procs = list_processes(prog)
    members = {p.pid for p in procs if p.container == container}
    if not members:
        known = sorted({p.container for p in procs if p.container})
        raise NoSuchProcess(f"no container {container!r} in the guest (containers: {', '.join(known) or 'none'})")
    roots = sorted(p.pid for p in procs if p.pid in members and p.ppid not in members)
    if len(roots) != 1:
        raise UnsupportedError(
            f"container {container!r} has {len(roots)} process trees (roots: "
            f"{', '.join(map(str, roots))}); dump each with --pid"
        )
    return roots[0]


def check_dumpable(task) -> None:
    pid, comm = task.pid, task_comm(task)
    if is_kthread(task):
        raise UnsupportedError(f"PID {pid} ({comm}) is a kernel thread; only user processes can be dumped")
    if task.exit_state & (EXIT_ZOMBIE | EXIT_DEAD):
        raise UnsupportedError(f"PID {pid} ({comm}) is a zombie; there is nothing left to restore")
    if not task.mm:
        raise UnsupportedError(f"PID {pid} ({comm}) has no memory map")


def process_tree(prog: Program, root) -> list:
    """`root` and its descendants, depth first with parents before children: the order
    CRIU's pstree walk dumps them in. A process's children are those of each of its
    threads (``task_struct.children``, oldest first), thread by thread, as CRIU reads
    /proc/PID/task/TID/children."""
    order, stack, seen = [], [root], set()
    while stack:
        task = stack.pop()
        if task.address_ in seen:
            raise GuestDataError(f"process tree below PID {root.pid} loops at PID {task.pid}")
        seen.add(task.address_)
        order.append(task)
        if len(order) > MAX_TREE:
            raise GuestDataError(f"process tree below PID {root.pid} has more than {MAX_TREE} processes")
        children: list = []
        for thread in for_each_thread(task):
            children.extend(
                list_for_each_entry(
                    prog,
                    "task_struct",
                    thread.children.address_of_(),
                    "sibling",
                    name=f"children of TID {thread.pid}",
                    limit=MAX_TREE + 1,
                )
            )
            if len(children) > MAX_TREE:
                raise GuestDataError(f"PID {task.pid} has more than {MAX_TREE} children")
        stack.extend(reversed(children))
    return order


def namespace_ids(task) -> NamespaceIds:
    ns = task_namespaces(task)
    return NamespaceIds(
        pid=ns.pid_for_children or ns.pid,
        net=ns.net,
        ipc=ns.ipc,
        uts=ns.uts,
        mnt=ns.mnt,
        user=ns.user,
        cgroup=ns.cgroup,
        time=ns.time,
    )


SAVED_FD_KINDS = ("reg", "tty", "pipe", "fifo", "unix", "eventfd", "signalfd", "timerfd", "eventpoll")


#: how refusals name the kinds of open files ovm-offline cannot save yet
KIND_DESCRIPTIONS = {
    "inet": "an IPv4/IPv6 socket",
    "netlink": "a netlink socket",
    "packet": "a packet socket",
    "socket": "a socket",
    "inotify": "an inotify instance",
    "fanotify": "a fanotify instance",
    "pidfd": "a pidfd",
    "userfaultfd": "a userfaultfd",
    "io_uring": "an io_uring instance",
    "bpf-map": "a BPF map",
    "bpf-prog": "a BPF program",
    "perf": "a perf event",
    "memfd": "a memfd",
    "memfd-secret": "a memfd_secret area",
    "anon": "an anonymous-inode file",
}


def unsupported_reason(fd) -> str | None:
    """Why ovm-offline cannot save this open file yet, or None if it can."""
    kind, tty = fd.file.kind, fd.file.tty
    if kind not in SAVED_FD_KINDS:
        return f"{KIND_DESCRIPTIONS.get(kind, 'a ' + kind)} ({fd.file.identity.path})"
    if kind == "tty" and (tty is None or tty.driver not in ("pty-master", "pty-slave")):
        return f"a {tty.driver if tty is not None else 'tty'} terminal ({fd.file.identity.path}), not a pseudo-terminal"
    return None


@dataclasses.dataclass
class TreeObjects:
    """Kernel objects several processes of one dump may share, each extracted once: open
    files and pipes and UNIX sockets by address, shmem files by inode address."""

    files: dict = dataclasses.field(default_factory=dict)
    pipes: dict = dataclasses.field(default_factory=dict)
    sockets: dict = dataclasses.field(default_factory=dict)
    shmem: dict = dataclasses.field(default_factory=dict)  # -> SharedMemory, one per shmem file


def extract_process(prog: Program, task, pid_ns, shared: TreeObjects, unsupported: list[str]) -> ProcessState:
    """A ProcessState of thread-group leader `task`. Open files ovm-offline cannot save are
    left out and described in `unsupported`."""
    common = extract_task_common(prog, task, pid_ns)
    mm = extract_mm(prog, task, thread_sps=[t.regs.sp for t in common.threads], shmem_cache=shared.shmem)
    fds = []
    for fd in extract_files(prog, task, pid_ns, cache=shared.files):
        reason = unsupported_reason(fd)
        if reason is None and fd.file.kind == "unix":
            try:
                attach_unix_sockets(prog, [fd], pid=common.global_pid, comm=common.comm, cache=shared.sockets)
            except UnsupportedError as e:
                reason = str(e)
        if reason is None:
            fds.append(fd)
        else:
            unsupported.append(f"PID {common.global_pid} ({common.comm}) fd {fd.fd}: {reason}")
    attach_pipes(prog, fds, pid=common.global_pid, comm=common.comm, cache=shared.pipes)
    attach_anon_fds(prog, fds, pid=common.global_pid, comm=common.comm, unsupported=unsupported)
    proc = ProcessState(
        **common.as_kwargs(),
        mm=mm,
        fds=fds,
        fs=extract_fs(prog, task),
        namespaces=namespace_ids(task),
        cgroup=task_cgroup_path(task) or "/",
        mm_key=int(task.mm),
        files_key=int(task.files),
        fs_key=int(task.fs),
    )
    attach_build_ids(prog, task, proc)
    return proc


def leave_out_dangling_files(processes: list[ProcessState], unsupported: list[str]) -> None:
    """Take out UNIX sockets connected to a socket no dumped process holds (CRIU needs both
    ends, or --ext-unix-sk), and epolls watching an fd that is left out (CRIU's restore
    re-adds targets by fd number), describing them in `unsupported`; repeated, because
    leaving a file out can leave a peer or another epoll dangling."""
    while True:
        held = {fd.file.unix.ino for p in processes for fd in p.fds if fd.file.unix is not None}
        outside = []
        for p in processes:
            saved = {fd.fd for fd in p.fds}
            for fd in p.fds:
                u, ep = fd.file.unix, fd.file.epoll
                if u is not None and u.peer and u.peer not in held:
                    outside.append(
                        (
                            p,
                            fd,
                            f"a UNIX socket (socket:[{u.ino}]) connected to socket:[{u.peer}], "
                            "which no dumped process holds",
                        )
                    )
                elif ep is not None and (gone := [t.fd for t in ep.targets if t.fd not in saved]):
                    outside.append((p, fd, f"an epoll watching fd {gone[0]}, which is left out"))
        if not outside:
            return
        for p, fd, reason in outside:
            unsupported.append(f"PID {p.global_pid} ({p.comm}) fd {fd.fd}: {reason}")
            p.fds.remove(fd)


def cgroup_dirs(
    prog: Program, tree: list, processes: list[ProcessState], root_namespaces: NamespaceIds
) -> dict[str, CgroupDir]:
    """The cgroup directories CRIU would save for the tree: the subtree of every cgroup a
    process is in, unless it is criu's own (build.CRIU_CGROUP). Processes in a cgroup
    namespace of their own are refused: CRIU records their namespace prefix, we cannot yet."""
    dirs: dict[str, CgroupDir] = {}
    for task, proc in zip(tree, processes):
        if proc.namespaces.cgroup != root_namespaces.cgroup:
            raise UnsupportedError(
                f"PID {proc.global_pid} ({proc.comm}) is in a cgroup namespace of its own; "
                "ovm-offline cannot save those yet"
            )
        if proc.cgroup == build.CRIU_CGROUP or proc.cgroup in dirs:
            continue
        d = task_cgroup_dir(prog, task)
        if d is not None:
            dirs[proc.cgroup] = d
    return dirs


def dump(
    source: PhysicalSource,
    prog: Program,
    pid: int,
    directory: str | Path,
    *,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
    skip_unsupported: bool = False,
) -> DumpSummary:
    """Save process `pid` (global PID) and its descendants as CRIU images in `directory`.
    Open files that cannot be saved yet make it fail, naming them all, unless
    `skip_unsupported` (then they are left out and listed in the summary)."""
    started = time.monotonic()
    root = find_task(prog, pid)
    tree = process_tree(prog, root)
    for task in tree:
        check_dumpable(task)
    pid_ns = task_active_pid_ns(root)
    root_namespaces = namespace_ids(prog["init_task"])
    unsupported: list[str] = []
    shared = TreeObjects()
    processes = [extract_process(prog, task, pid_ns, shared, unsupported) for task in tree]
    leave_out_dangling_files(processes, unsupported)
    if unsupported and not skip_unsupported:
        raise UnsupportedError(
            f"cannot save {len(unsupported)} open file(s) yet: "
            + "; ".join(unsupported)
            + " (--skip-unsupported leaves them out)"
        )
    processes[0].ppid = 0  # the dumped tree's root has no parent in the images
    dump_set = build.DumpSet(
        processes=processes,
        root_namespaces=root_namespaces,
        monotonic_ns=timekeeping.ktime_get_ns(prog),
        boottime_ns=timekeeping.ktime_get_boottime_ns(prog),
        cgroups=cgroup_dirs(prog, tree, processes, root_namespaces),
        ipc_namespace=tree_ipc_namespace(prog, tree, processes, root_namespaces.ipc, shared.shmem),
    )
    stats = PagesStats()

    def pages_writer(proc: ProcessState, path: Path) -> list[tuple[int, int, int]]:
        with open(path, "wb") as out:
            runs = write_pages(source, proc.mm, out, stats)
        if progress:
            progress(stats.bytes)
        return [(r.vaddr, r.nr_pages, r.flags) for r in runs]

    def shmem_pages_writer(shm: SharedMemory, path: Path) -> list[tuple[int, int, int]]:
        with open(path, "wb") as out:
            runs = write_page_runs(source, shm.pages, out, stats)
        return [(r.vaddr, r.nr_pages, r.flags) for r in runs]

    with atomic_directory(directory, force) as tmp:
        written = build.write_dump(dump_set, tmp, pages_writer, shmem_pages_writer)
    return DumpSummary(
        pid=pid,
        comm=processes[0].comm,
        processes=len(processes),
        threads=sum(len(p.threads) for p in processes),
        images=written.images,
        pages=stats.pages,
        page_bytes=stats.bytes,
        files=written.files,
        swapped_pages=sum(p.mm.swapped_pages for p in processes)
        + sum(shm.swapped_pages for shm in shared.shmem.values()),
        zero_pages=sum(p.mm.zero_pages for p in processes),
        seconds=time.monotonic() - started,
        directory=Path(directory),
        skipped=tuple(unsupported),
    )
