"""`ovm-offline dump`: a process (and the tree below it) from guest memory to CRIU images.

Kernel side: find the tree, extract the state of every process (ovm_offline.extract, and each
open file by its kind: ovm_offline.filekinds), collecting every refusal as data. Then decide:
one error naming every refusal that stands, before anything is written. CRIU side: write the
images (ovm_offline.criu.build) into a temporary directory that replaces the target only when
complete.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import filekinds
from .criu import build
from .criu.page_server import PageServer
from .criu.parent import DIGESTS_FILE, PARENT_LINK, PageDigests, ParentImages
from .errors import GuestDataError, ImageError, MomentError, NoSuchProcess, UnsupportedError
from .extract.buildid import attach_build_ids
from .extract.cgroups import task_cgroup_dir
from .extract.files import extract_files, extract_fs
from .extract.ghost import DEFAULT_GHOST_LIMIT, Ghosts
from .extract.mm import extract_mm
from .extract.namespaces import tree_namespaces
from .extract.pages import PagesStats, place_user_writes
from .extract.runtimes import RuncContainer, runc_containers, runc_descriptors
from .extract.task import extract_task_common
from .kernel.core.memory import Program
from .kernel.core.objects import Pointer, Struct
from .kernel.crossview.check import cross_view
from .kernel.ns.cgroup import task_cgroup_path
from .kernel.ns.nsproxy import task_namespaces
from .kernel.task import timekeeping
from .kernel.task.pid import task_active_pid_ns
from .kernel.task.tasks import PF_EXITING, find_process, is_kthread, process_tree, task_comm
from .output import atomic_directory
from .page_output import LazyMemory, page_writers
from .refusals import (
    Refusal,
    decide,
    file_lock_refusals,
    mount_namespace_refusals,
    taken_dead_pid_refusals,
    unencodable_text,
)
from .sources.base import PhysicalSource
from .state import CgroupDir, Fd, FileKindName, NamespaceIds, OpenFile, ProcessState, SharedMemory, TreeNamespaces

__all__ = ["classify"]


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
    inconsistent: tuple[str, ...] = ()  # disagreements between the task views, taken anyway
    parent_pages: int = 0  # unchanged since the parent dump (--prev-images-dir): not written
    pre_dump: bool = False  # memory only (--pre-dump)
    page_server: str | None = None  # where the pagemaps and pages went, and the layout spoken
    lazy_pages: int = 0  # left out of the pages files (--lazy-pages), served on request

    def lines(self) -> list[str]:
        return (
            [
                f"{'pre-dumped (memory only)' if self.pre_dump else 'dumped'} pid {self.pid} ({self.comm}):"
                f" {self.processes} process(es), {self.threads} thread(s)",
                f"wrote {self.images} images to {self.directory}: {self.pages} pages ({self.page_bytes / 2**20:.1f} MiB), "
                f"{self.files} file entries, in {self.seconds:.2f} s",
            ]
            + (
                [f"the pagemaps and pages went to the page server {self.page_server}, not to {self.directory}"]
                if self.page_server
                else []
            )
            + ([f"{self.lazy_pages} lazy pages left out of the pages files, to be served"] if self.lazy_pages else [])
            + ([f"{self.parent_pages} pages unchanged since the parent dump, not written"] if self.parent_pages else [])
            + (
                [f"warning: {self.swapped_pages} pages were swapped out and are not in memory; they are not saved"]
                if self.swapped_pages
                else []
            )
            + [f"warning: left out {what}" for what in self.skipped]
            + [f"warning: the kernel's views of its tasks disagree: {what}" for what in self.inconsistent]
        )


def container_root(prog: Program, container: str) -> int:
    """The global PID of the one process of `container` (an id as `ovm-offline ps` shows it)
    whose parent is outside it: dumping it saves the container's process tree."""
    from .inventory import list_processes, matches_container

    procs = list_processes(prog)
    members = {p.pid for p in procs if matches_container(p, container)}
    if not members:
        known = sorted({p.runtime_id or p.container for p in procs if p.container})
        raise NoSuchProcess(f"no container {container!r} in the guest (containers: {', '.join(known) or 'none'})")
    matched = sorted({p.runtime_id or p.container for p in procs if p.pid in members if p.container})
    if len(matched) > 1:
        raise NoSuchProcess(f"{container!r} names more than one container ({', '.join(matched)}); give more of the id")
    roots = sorted(p.pid for p in procs if p.pid in members and p.ppid not in members)
    if len(roots) != 1:
        raise UnsupportedError(
            f"container {container!r} has {len(roots)} process trees (roots: "
            f"{', '.join(map(str, roots))}); dump each with --pid"
        )
    return roots[0]


#: where a dump taken with --accept-inconsistent-views names what was inconsistent (criu reads
#: only the images it knows, so the file travels with them unread)
INCONSISTENT_VIEWS_FILE = "ovm-offline-inconsistent-views.txt"
ACCEPT_INCONSISTENT_VIEWS = "--accept-inconsistent-views"


def tree_view_disagreements(prog: Program, pid: int, accept: bool) -> tuple[Struct, list[str]]:
    """The leader with global PID `pid` (on the task list, or only on another of the kernel's
    views of its tasks: a hidden process) and the disagreements between those views about its
    tree (hidden tasks whose parents are in it included): refused, by name, unless `accept`,
    since its images would be of a forged tree; MomentError when tasklist_lock was held for
    writing at the pause."""
    views = cross_view(prog)
    root = find_process(prog, pid)
    if root is None:
        hidden = [s.address for s in views.tasks.values() if s.leader and s.pid == pid]
        if len(hidden) != 1:
            raise NoSuchProcess(f"no process with PID {pid} in the guest (see `ovm-offline ps`)")
        root = prog.struct("task_struct", hidden[0])
    found = [str(d) for d in views.about(views.subtree(root.address_))]
    if found and not accept:
        why = f"the kernel's views of its tasks disagree about this tree: {'; '.join(found)}"
        if views.moment:
            raise MomentError(f"{why}; but {views.moment}: another moment of the guest may agree")
        raise GuestDataError(f"{why} ({ACCEPT_INCONSISTENT_VIEWS} dumps it anyway)")
    return root, found


def find_task(prog: Program, pid: int) -> Struct:
    """The thread-group leader ``struct task_struct`` with global PID `pid`."""
    task = find_process(prog, pid)
    if task is None:
        raise NoSuchProcess(f"no process with PID {pid} in the guest (see `ovm-offline ps`)")
    return task


def dumpable_refusal(task: Struct) -> Refusal | None:
    """Why a ``struct task_struct`` cannot be dumped at all, or None."""
    pid, comm = task.pid, task_comm(task)
    if is_kthread(task):
        why = f"PID {pid} ({comm}) is a kernel thread; only user processes can be dumped"
    elif task.exit_state & EXIT_DEAD:
        # of the moment: another finds it gone
        why = f"PID {pid} ({comm}) is being reaped by its parent; it has no state left to save"
        return Refusal(pid, comm, why, moment=True)
    elif task.exit_state & EXIT_ZOMBIE:
        if task.signal.live.counter:
            # the leader of a thread group whose other threads run on: /proc says Z, and criu's
            # seize refuses it as a zombie with threads
            why = f"PID {pid} ({comm}) is a thread-group leader that has exited while its other threads run"
        else:
            return None  # saved as criu saves a zombie: its exit status, for its parent to wait for
    elif not task.mm:
        why = f"PID {pid} ({comm}) has no memory map"
        if task.flags & PF_EXITING:  # exit_mm() let it go: another moment finds a zombie, or nothing
            return Refusal(pid, comm, f"{why}: it is exiting", moment=True)
    else:
        return None
    return Refusal(pid, comm, why)


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


@dataclasses.dataclass
class TreeObjects:
    """Kernel objects several processes of one dump may share, each extracted once: open
    files by address, the state each file kind keeps per object (filekinds' caches), shmem
    files by inode address, files with no name left by inode."""

    files: dict[int, OpenFile] = dataclasses.field(default_factory=dict)
    kinds: dict[str, dict[int, Any]] = dataclasses.field(default_factory=dict)
    shmem: dict[int, SharedMemory] = dataclasses.field(default_factory=dict)  # one per shmem file
    ghosts: Ghosts = dataclasses.field(default_factory=Ghosts)  # files with no name left, one per inode


def classify(file: Pointer) -> FileKindName:
    return filekinds.classify(file).name


def process_fds(
    prog: Program, task: Struct, pid_ns: Pointer | Struct, comm: str, shared: TreeObjects, refusals: list[Refusal]
) -> list[Fd]:
    """The open files of thread-group leader `task` with their kinds' state; those that cannot
    be saved are left out and described in `refusals`."""
    fds = extract_files(prog, task, pid_ns, classify, cache=shared.files)
    ctx = filekinds.ExtractContext(
        prog, task, pid_ns, task.pid, comm, shared.kinds, shmem=shared.shmem, ghosts=shared.ghosts
    )
    return filekinds.attach_file_states(ctx, fds, refusals)


def extract_zombie(prog: Program, task: Struct, pid_ns: Pointer | Struct, parent: ProcessState) -> ProcessState:
    """A ProcessState of a zombie: what criu saves of one (its comm and exit status), with its
    parent's namespaces and cgroup, where restore makes it (it has left its own)."""
    common = extract_task_common(prog, task, pid_ns)
    return ProcessState(
        **common.as_kwargs(), mm=None, fds=[], fs=None, namespaces=parent.namespaces, cgroup=parent.cgroup
    )


def extract_process(
    prog: Program, task: Struct, pid_ns: Pointer | Struct, shared: TreeObjects, refusals: list[Refusal]
) -> ProcessState:
    """A ProcessState of thread-group leader `task`. Open files that cannot be saved are left
    out and described in `refusals`; anything else that cannot be saved raises UnsupportedError."""
    try:
        common = extract_task_common(prog, task, pid_ns)
    except MomentError:
        # another moment may save the threads, but not a file that cannot be saved: say that
        # too, so that the refusal is not taken for the moment's alone
        process_fds(prog, task, pid_ns, task_comm(task), shared, refusals)
        raise
    mm = extract_mm(
        prog, task, thread_sps=[t.regs.sp for t in common.threads], shmem_cache=shared.shmem, ghosts=shared.ghosts
    )
    mm.user_writes = place_user_writes(mm, (w for t in common.threads for w in t.user_writes), f"pid {task.pid}")
    fds = process_fds(prog, task, pid_ns, common.comm, shared, refusals)
    proc = ProcessState(
        **common.as_kwargs(),
        mm=mm,
        fds=fds,
        fs=extract_fs(prog, task, shared.ghosts),
        namespaces=namespace_ids(task),
        cgroup=task_cgroup_path(task) or "/",
        mm_key=int(task.mm),
        files_key=int(task.files),
        fs_key=int(task.fs),
    )
    attach_build_ids(prog, task, proc)
    return proc


def cgroup_dirs(
    prog: Program,
    tree: list[Struct],
    processes: list[ProcessState],
) -> dict[str, CgroupDir]:
    """The cgroup directories CRIU would save for the tree: the subtree of every cgroup a
    process is in, unless it is criu's own (build.CRIU_CGROUP). Processes in a cgroup
    namespace of their own are refused with the tree's namespaces (extract/namespaces.py)."""
    dirs: dict[str, CgroupDir] = {}
    for task, proc in zip(tree, processes):
        if proc.cgroup == build.CRIU_CGROUP or proc.cgroup in dirs or proc.task_state == "zombie":
            continue
        d = task_cgroup_dir(prog, task)
        if d is not None:
            dirs[proc.cgroup] = d
    return dirs


def runtime_descriptors(
    containers: Callable[[], dict[int, RuncContainer]], root: ProcessState, namespaces: TreeNamespaces
) -> list[str] | None:
    """descriptors.json for `runc restore` when the tree is a runc container whose mount
    namespace is saved (only a runc container's is)."""
    if namespaces.mnt is None:
        return None
    container = containers().get(root.global_pid)
    return runc_descriptors(container) if container is not None else None


@dataclasses.dataclass
class Extraction:
    """Everything a dump writes, extracted, with the refusals met on the way."""

    tree: list[Struct]
    processes: list[ProcessState]
    shared: TreeObjects
    dump_set: build.DumpSet | None
    refusals: list[Refusal]


def extract_tree(
    prog: Program, root: Struct, *, save_locks: bool = False, ghost_limit: int = DEFAULT_GHOST_LIMIT
) -> Extraction:
    """The state of `root` and its descendants, and every refusal among them: processes that
    cannot be dumped, open files that cannot be saved, and what the tree as a whole cannot (its
    file locks too, unless `save_locks`; a file with no name left over `ghost_limit` bytes)."""
    tree = process_tree(prog, root)
    refusals = [r for r in map(dumpable_refusal, tree) if r is not None]
    pid_ns = task_active_pid_ns(root)
    if pid_ns is None:
        raise GuestDataError(f"PID {root.pid} has no PID namespace (it is exiting)")
    shared = TreeObjects(ghosts=Ghosts(ghost_limit, pid_ns))
    processes: list[ProcessState] = []
    if tree[0].exit_state & (EXIT_ZOMBIE | EXIT_DEAD):
        refusals.append(Refusal(root.pid, task_comm(root), f"PID {root.pid} ({task_comm(root)}) has exited"))
    by_pid: dict[int, ProcessState] = {}
    for task in tree:
        if any(r.pid == task.pid for r in refusals):
            continue
        try:
            if task.exit_state & EXIT_ZOMBIE:
                parent = by_pid.get(int(task.real_parent.deref().tgid))
                if parent is None:
                    raise GuestDataError(f"zombie PID {task.pid}'s parent is not in the dumped tree")
                proc = extract_zombie(prog, task, pid_ns, parent)
            else:
                proc = extract_process(prog, task, pid_ns, shared, refusals)
            processes.append(proc)
            by_pid[task.pid] = proc
        except UnsupportedError as e:
            refusals.append(Refusal(task.pid, task_comm(task), str(e), moment=isinstance(e, MomentError)))
    if len(processes) < len(tree):
        return Extraction(tree, processes, shared, None, refusals)
    refusals += unencodable_text(processes)
    filekinds.leave_out_dangling_files(processes, refusals)
    refusals += file_lock_refusals(processes, save_locks) + taken_dead_pid_refusals(processes, shared.ghosts.dead_pids)
    root_namespaces = namespace_ids(prog["init_task"])
    containers = functools.cache(lambda: runc_containers(prog))  # searched once, if at all
    # zombies have left their namespaces: they are restored in their parents'
    living = [(t, p) for t, p in zip(tree, processes) if p.task_state != "zombie"]
    namespaces, ns_refusals = tree_namespaces(
        prog, [t for t, _ in living], [p for _, p in living], shared.shmem, containers
    )
    before_namespaces = len(refusals)
    refusals += [Refusal(r.pid, r.comm, r.why) for r in ns_refusals]
    refusals += mount_namespace_refusals(processes[0], namespaces.mnt)
    if len(refusals) > before_namespaces:
        return Extraction(tree, processes, shared, None, refusals)
    cgroups = cgroup_dirs(prog, tree, processes)
    processes[0].ppid = 0  # the dumped tree's root has no parent in the images
    dump_set = build.DumpSet(
        processes=processes,
        root_namespaces=root_namespaces,
        monotonic_ns=timekeeping.ktime_get_ns(prog),
        boottime_ns=timekeeping.ktime_get_boottime_ns(prog),
        cgroups=cgroups,
        namespaces=namespaces,
        runtime_descriptors=runtime_descriptors(containers, processes[0], namespaces),
    )
    return Extraction(tree, processes, shared, dump_set, refusals)


def dump(
    source: PhysicalSource,
    prog: Program,
    pid: int,
    directory: str | Path,
    *,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
    skip_unsupported: bool = False,
    network_lock: str = "iptables",
    file_locks: bool = False,
    ghost_limit: int = DEFAULT_GHOST_LIMIT,
    accept_inconsistent_views: bool = False,
    prev_images_dir: str | None = None,
    pre_dump: bool = False,
    page_server: PageServer | None = None,
    lazy: LazyMemory | None = None,
) -> DumpSummary:
    """Save process `pid` (global PID) and its descendants as CRIU images in `directory`.
    Every refusal is decided before anything is written: open files that cannot be saved yet
    make it fail, naming them all, unless `skip_unsupported` (then they are left out and listed
    in the summary); anything else that cannot be saved fails it, named too. `network_lock` is
    criu's --network-lock for the restore of TCP connections ("iptables" or "nftables");
    `file_locks` saves the tree's file locks and leases (criu's --file-locks, which its restore
    needs too), refused otherwise; `ghost_limit` is criu's --ghost-limit, the most bytes a file
    with no name left (unlinked while open) may hold to be saved as a ghost file.
    `accept_inconsistent_views`: dump a tree the kernel's views of its tasks disagree about
    (refused otherwise), naming each disagreement in the images directory's
    INCONSISTENT_VIEWS_FILE. `prev_images_dir`: criu's --prev-images-dir, a dump of the same
    tree (relative paths from `directory`) whose unchanged pages this one names, not writes.
    `pre_dump`: write the tree's memory only, as `criu pre-dump` does (a parent for later dumps).
    `page_server`: send the pagemaps and pages there (criu's --page-server), not to `directory`.
    `lazy`: write as `criu dump --lazy-pages` does, the lazy pages kept in `lazy` to be served."""
    if lazy is not None and (pre_dump or prev_images_dir is not None):
        raise ValueError("a lazy dump has no parent and is not a pre-dump")
    started, digests = time.monotonic(), PageDigests()
    parent = parent_images(directory, prev_images_dir, pid, page_server is not None) if prev_images_dir else None
    root, inconsistent = tree_view_disagreements(prog, pid, accept_inconsistent_views)
    extraction = extract_tree(prog, root, save_locks=file_locks, ghost_limit=ghost_limit)
    skipped = decide(extraction.refusals, skip_unsupported)
    assert extraction.dump_set is not None  # decide() raised if a process or a namespace could not be saved
    extraction.dump_set.network_lock = network_lock
    if parent is not None:
        for proc in extraction.processes:
            parent.pages(proc.pid)  # each pagemap checked before anything is written
    stats = PagesStats()
    writers = page_writers(source, parent, page_server or lazy, stats, progress, digests)
    with atomic_directory(directory, force) as tmp:
        written = _write_images(extraction.dump_set, tmp, writers, pre_dump, pagemaps_here=page_server is None)
        if inconsistent:
            (tmp / INCONSISTENT_VIEWS_FILE).write_text("".join(f"{line}\n" for line in inconsistent))
        if prev_images_dir is not None:
            os.symlink(prev_images_dir, tmp / PARENT_LINK)  # as criu links it: the path as given
        if page_server is not None:
            page_server.finish()  # inside: without the server's status, -D is not kept
            digests.write(tmp / DIGESTS_FILE)
    return _summary(
        pid, extraction, written, stats, started, Path(directory), skipped, inconsistent, pre_dump=pre_dump,
        page_server=page_server.describe() if page_server else None, lazy_pages=lazy.pages if lazy else 0,
    )  # fmt: skip


def _write_images(dump_set: build.DumpSet, tmp: Path, writers, pre_dump: bool, pagemaps_here: bool) -> build.Written:
    pages_writer, shmem_pages_writer = writers
    if pre_dump:
        return build.write_pre_dump(dump_set, tmp, pages_writer, pagemaps_here)
    return build.write_dump(
        dump_set, tmp, pages_writer, filekinds.new_writers(), shmem_pages_writer, pagemaps_here=pagemaps_here
    )


def parent_path(directory: str | Path, prev_images_dir: str) -> Path:
    """Where the `parent` link of images directory `directory` (which need not exist yet) will
    lead: `prev_images_dir` relative to it (an absolute one stays itself). `directory` is made
    as a real directory, so ".." after it is its parent's real path."""
    target = Path(directory).absolute()
    target = target.parent.resolve() / target.name
    parent = Path(os.path.normpath(target / prev_images_dir))
    if parent == target or target in parent.parents:
        raise ImageError(f"{parent}: a dump's parent cannot be its own images directory or inside it")
    return parent


def parent_images(directory: str | Path, prev_images_dir: str, pid: int | None, to_page_server: bool) -> ParentImages:
    """The parent dump of a dump into `directory`, refused unless it is a dump of the same tree
    (`pid`, where it is known) and, for a dump to a page server, one whose pages went to one."""
    parent = ParentImages(parent_path(directory, prev_images_dir))
    if to_page_server and parent.digests is None:
        raise ImageError(
            f"{parent.directory}: has no page digests: a dump to a page server builds only on one whose pages"
            " went to a page server too"
        )
    leader = parent.root_pid()
    if leader is not None and pid is not None and leader != pid:
        raise ImageError(
            f"{parent.directory}: is a dump of the tree of PID {leader}, not of PID {pid}: a parent dump must be of the same tree"
        )
    return parent


def _summary(pid, extraction, written, stats, started, directory, skipped, inconsistent, **more) -> DumpSummary:
    processes, shared = extraction.processes, extraction.shared
    return DumpSummary(
        pid=pid,
        comm=processes[0].comm,
        processes=len(processes),
        threads=sum(len(p.threads) for p in processes),
        images=written.images,
        pages=stats.pages,
        page_bytes=stats.bytes,
        files=written.files,
        swapped_pages=sum(p.mm.swapped_pages for p in processes if p.mm)
        + sum(shm.swapped_pages for shm in shared.shmem.values()),
        zero_pages=sum(p.mm.zero_pages for p in processes if p.mm),
        seconds=time.monotonic() - started,
        directory=directory,
        skipped=tuple(str(r) for r in skipped),
        inconsistent=tuple(inconsistent),
        parent_pages=stats.parent_pages,
        **more,
    )
