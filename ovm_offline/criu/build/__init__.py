"""Turn extracted process state (ovm_offline.state) into CRIU 3.17 image messages and files,
one module per image family: task (core), mm (mm, pagemap, shared memory), files (files,
fdinfo, tty-info, pipe and FIFO data), net (UNIX sockets, sk-queues), ns (ids, IPC, UTS and
time namespaces), cgroup. `write_dump` writes them all in CRIU's order.

Ids follow CRIU's own numbering, so our images read like `criu dump`'s: kernel objects
(mm, files table, fs, sighand) get ids in the order they are met with 1 reserved for criu's
own (the inventory's root_ids); file entries are numbered as CRIU meets them (the exe file,
mapped files in VMA order, fds in fd order, then cwd and root of each task); namespaces
are numbered in the order criu collects its own (pid, net, ipc, uts, time, mnt, user, cgroup).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from google.protobuf.message import Message

from ...errors import writing_output
from ...state import CgroupDir, NamespaceIds, ProcessState, SharedMemory, TreeNamespaces
from .. import images
from .cgroup import CRIU_CGROUP, CgroupSets
from .common import F, NamespaceOut, T, Written
from .files import FD_CLOEXEC, FileTable, KindWriter
from .locks import file_lock_entries
from .mm import ShmemImages, mm_entry, pagemap_entries
from .ns import NAMESPACE_WRITERS, ObjectIds, timens_entry
from .seccomp import seccomp_plan
from .task import core, zombie_core

__all__ = ["CRIU_CGROUP", "DumpSet", "PagesWriter", "ShmemPagesWriter", "Written", "write_dump"]

#: writes pages-N.img of a process (or a shmem file) at the path given and returns its pagemap
#: entries (vaddr, nr_pages, flags)
PagesWriter = Callable[[ProcessState, Path], list[tuple[int, int, int]]]
ShmemPagesWriter = Callable[[SharedMemory, Path], list[tuple[int, int, int]]]


#: criu's enum NETWORK_LOCK_METHOD (criu/include/cr_options.h)
NETWORK_LOCK_METHODS = {"iptables": 0, "nftables": 1}


@dataclasses.dataclass
class DumpSet:
    """Everything one dump writes: the processes (root first) and what the system around them
    looked like (the namespaces and clocks CRIU records for restore)."""

    processes: list[ProcessState]
    root_namespaces: NamespaceIds  # of the guest's init
    monotonic_ns: int
    boottime_ns: int
    # cgroup path -> its directory subtree, for every cgroup of a process other than CRIU_CGROUP
    cgroups: dict[str, CgroupDir] = dataclasses.field(default_factory=dict)
    # the tree's own namespaces CRIU saves (the IPC and UTS ones it shares with the guest's
    # init, CRIU does not save)
    namespaces: TreeNamespaces = dataclasses.field(default_factory=TreeNamespaces)
    # how `criu restore` keeps restored TCP connections quiet until they are whole: "iptables"
    # (criu's default) or "nftables"; the restoring system needs that tool
    network_lock: str = "iptables"
    # a runc container's stdio as runc started it, for `runc restore` (descriptors.json)
    runtime_descriptors: list[str] | None = None


class _Writer:
    """The state of one write_dump: the directory, the id allocators, the files table."""

    def __init__(
        self,
        dump: DumpSet,
        directory: Path,
        writers: Mapping[str, KindWriter],
        write_shmem_pages: ShmemPagesWriter | None,
        pagemaps_here: bool = True,
    ) -> None:
        self.dump = dump
        self.pagemaps_here = pagemaps_here
        self.directory = directory
        self.written = Written()
        self.ids = ObjectIds(dump.root_namespaces)
        self.files = FileTable(writers)
        self.files.net_ns_id = lambda inum: self.ids.ns("net", inum)
        self.files.ns_id = self.ids.ns
        self.files.mnt_ids = dump.namespaces.mnt is not None
        self.files.inet_ns_ids = dump.namespaces.net is not None
        cgns = dump.namespaces.cgroup
        self.cg_sets = CgroupSets(dump.cgroups, cgns.root if cgns is not None else None)
        self.next_pages_id = itertools.count(1).__next__  # pages-N.img numbers, shared with the shmem dumps
        self.shmem = ShmemImages(
            directory, self.files, self.next_pages_id, write_shmem_pages, self.written, pagemaps_here
        )
        self.files.memfd_inode_id = self.shmem.dump_inode
        self.seccomp = seccomp_plan(dump.processes)

    def put(self, kind: images.ImageKind, entries: Sequence[Message], image_id: int | None = None) -> None:
        images.write_image(self.directory / kind.filename(image_id), kind, list(entries))
        self.written.images += 1

    def put_raw(self, kind: images.ImageKind, data: bytes, image_id: int | None = None) -> None:
        _write_file(self.directory / kind.filename(image_id), data)
        self.written.images += 1

    def head(self) -> None:
        """inventory.img and pstree.img."""
        inventory = T.inventory_entry(
            img_version=2,
            fdinfo_per_id=True,
            root_ids=self.ids.root_ids(),
            ns_per_id=True,
            root_cg_set=1,
            lsmtype=T.NO_LSM,
            network_lock_method=NETWORK_LOCK_METHODS[self.dump.network_lock],
            # CRIU 4.x: the dump used no plugins (absent, 4.x would enable every plugin it has)
            plugins_entry=T.plugins_entry(),
        )
        self.put(images.INVENTORY, [inventory])
        pstree = [
            # a zombie's /proc/PID/task lists its leader alone
            T.pstree_entry(
                pid=p.pid, ppid=p.ppid, pgid=p.pgid, sid=p.sid, threads=[t.tid for t in p.threads] or [p.pid]
            )
            for p in self.dump.processes
        ]
        self.put(images.PSTREE, pstree)

    def process(self, proc: ProcessState, write_pages: PagesWriter) -> None:
        """ids, core of every thread, mm, pagemap and pages, fdinfo and fs of one process; of a
        zombie, only its core (criu's dump_one_zombie)."""
        if proc.mm is None or proc.fs is None:
            self.put(images.CORE, [zombie_core(proc)], proc.pid)
            return
        cg_set = self.cg_sets.set_of(proc)
        self.put(images.IDS, [self.ids.task_ids(proc)], proc.pid)
        for thread in proc.threads:
            self.put(images.CORE, [core(proc, thread, cg_set, self.seccomp.of(thread))], thread.tid)
        self.put(images.MM, [mm_entry(proc.mm, self.files, self.shmem)], proc.pid)

        pages_id = self.next_pages_id()
        pagemap = write_pages(proc, self.directory / images.PAGES.filename(pages_id))
        if self.pagemaps_here:
            self.put(images.PAGEMAP, pagemap_entries(pages_id, pagemap), proc.pid)
        self.written.pages += sum(nr for _, nr, _ in pagemap)

        fdinfo = [
            F.fdinfo_entry(
                id=self.files.open_file(fd.file),
                flags=FD_CLOEXEC if fd.cloexec else 0,
                type=cast(Any, self.files.fd_type(fd.file)),
                fd=fd.fd,
            )
            for fd in proc.fds
        ]
        files_id = self.ids.kobj("files", proc.files_key)
        if not (self.directory / images.FDINFO.filename(files_id)).exists():
            self.put(images.FDINFO, fdinfo, files_id)
        cwd = self.files.regular(proc.fs.cwd, key=("dir", proc.fs.cwd.path, proc.pid, "cwd"))
        root = self.files.regular(proc.fs.root, key=("dir", proc.fs.root.path, proc.pid, "root"))
        self.put(images.FS, [F.fs_entry(cwd_id=cwd, root_id=root, umask=proc.fs.umask)], proc.pid)

    def files_images(self) -> None:
        """files.img, memfd.img and the images of each kind of open file (tty-info, pipes-data,
        fifo-data, sk-queues, ...)."""
        self.put(images.FILES, [e for e in self.files.entries if e is not None])
        self.written.files = len(self.files.entries)
        if self.shmem.inodes:
            self.put(images.MEMFD_INODE, self.shmem.inode_entries())
        for image in self.files.images():
            images.write_image(
                self.directory / image.kind.filename(image.image_id), image.kind, image.entries, image.payloads
            )
            self.written.images += 1

    def tail(self) -> None:
        """What CRIU writes after the tasks: cgroup, IPC namespace, file locks, seccomp, timens."""
        dump = self.dump
        cgroup = self.cg_sets.image(self.cg_sets.set_of(dump.processes[0]))
        if cgroup is not None:
            self.put(images.CGROUP, [cgroup])
        out = NamespaceOut(self.put, self.put_raw, self.shmem)
        for kind, write in NAMESPACE_WRITERS.items():
            state = getattr(dump.namespaces, kind)
            if state is not None:
                write(state, self.ids.ns(kind, state.inum), out)
        locks = file_lock_entries(dump.processes)
        if locks:
            self.put(images.FILE_LOCKS, locks)
        self.put(images.SECCOMP, [T.seccomp_entry(seccomp_filters=self.seccomp.filters)])
        self.put(images.TIMENS, [timens_entry(dump.monotonic_ns, dump.boottime_ns)], 0)
        if dump.runtime_descriptors is not None:
            # runc's own file beside the images (json.Marshal's compact form), not an image
            text = json.dumps(dump.runtime_descriptors, separators=(",", ":"))
            _write_file(self.directory / RUNTIME_DESCRIPTORS, text.encode())


#: the file `runc checkpoint` writes beside the images and `runc restore` reads
RUNTIME_DESCRIPTORS = "descriptors.json"


def _write_file(path: Path, data: bytes) -> None:
    with writing_output(path):
        path.write_bytes(data)


def write_pre_dump(dump: DumpSet, directory: Path, write_pages: PagesWriter, pagemaps_here: bool = True) -> Written:
    """A pre-dump of `dump` into `directory`, as `criu pre-dump` writes one: the process tree's
    memory only (inventory, and each process's pagemap and pages; pstree too, so that a dump
    built on it can check that it is of the same tree). A later dump names its unchanged pages;
    `criu restore` never starts from it."""
    w = _Writer(dump, directory, {}, None)
    w.head()
    for proc in dump.processes:
        if proc.mm is not None:
            pages_id = w.next_pages_id()
            pagemap = write_pages(proc, directory / images.PAGES.filename(pages_id))
            if pagemaps_here:
                w.put(images.PAGEMAP, pagemap_entries(pages_id, pagemap), proc.pid)
            w.written.pages += sum(nr for _, nr, _ in pagemap)
    w.written.page_bytes = w.written.pages * 4096
    return w.written


def write_dump(
    dump: DumpSet,
    directory: Path,
    write_pages: PagesWriter,
    writers: Mapping[str, KindWriter],
    write_shmem_pages: ShmemPagesWriter | None = None,
    pagemaps_here: bool = True,
) -> Written:
    """Write every image of `dump` into `directory` (which must exist and be empty).
    `write_pages(proc, pages_path)` writes pages-N.img for a process and returns its pagemap
    entries (vaddr, nr_pages, flags); `writers` (kind name -> writer, see
    ovm_offline.filekinds.new_writers) write the entries of each kind of open file;
    `write_shmem_pages(shm, pages_path)` does what `write_pages` does for the contents of a
    shmem file (needed when a VMA maps one). `pagemaps_here=False`: the page writers send each
    pagemap with its pages to a page server, which writes both where it runs; none is written here."""
    w = _Writer(dump, directory, writers, write_shmem_pages, pagemaps_here)
    w.head()
    for proc in dump.processes:
        w.process(proc, write_pages)
    w.files_images()
    w.tail()
    w.written.page_bytes = w.written.pages * 4096
    return w.written
