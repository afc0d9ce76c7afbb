"""Turn extracted process state (ovm_offline.state) into CRIU 3.17 image messages and files.

Ids follow CRIU's own numbering, so our images read like `criu dump`'s: kernel objects
(mm, files table, fs, sighand) get ids in the order they are met with 1 reserved for criu's
own (the inventory's root_ids); file entries are numbered as CRIU meets them (the exe file,
mapped files in VMA order, fds in fd order, then cwd and root of each task); namespaces
are numbered in the order criu collects its own (pid, net, ipc, uts, time, mnt, user, cgroup).
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from collections.abc import Callable
from pathlib import Path

from ..state import (
    REGISTER_NAMES,
    CgroupDir,
    FileIdentity,
    FpuState,
    IpcNamespaceState,
    OpenFile,
    PipeState,
    ProcessState,
    SharedMemory,
    ThreadState,
    TtyState,
    Vma,
)
from . import images, pb

T, X, M, F, N = pb.criu_task_pb2, pb.criu_x86_pb2, pb.criu_mm_pb2, pb.criu_files_pb2, pb.criu_ns_pb2
C = pb.criu_common_pb2

TASK_STATES = {"alive": 1, "dead": 2, "stopped": 3, "zombie": 6}
NS_ORDER = ("pid", "net", "ipc", "uts", "time", "mnt", "user", "cgroup")
SIGKILL, SIGSTOP = 9, 19
FD_CLOEXEC = 1
TERMIOS_NCC = 19

# vma_entry.status bits (CRIU's VMA_AREA_*)
VMA_AREA_REGULAR = 0x1
VMA_AREA_STACK = 0x2
VMA_AREA_VSYSCALL = 0x4
VMA_AREA_VDSO = 0x8
VMA_AREA_HEAP = 0x20
VMA_FILE_PRIVATE = 0x40
VMA_FILE_SHARED = 0x80
VMA_ANON_SHARED = 0x100
VMA_ANON_PRIVATE = 0x200
VMA_AREA_VVAR = 0x1000
VMA_AREA_SYSVIPC = 0x400
VMA_AREA_MEMFD = 0x4000

FD_TYPES = {"reg": F.REG, "tty": F.TTY, "pipe": F.PIPE, "fifo": F.FIFO, "unix": F.UNIXSK}
FD_TYPES.update({"eventfd": F.EVENTFD, "signalfd": F.SIGNALFD, "timerfd": F.TIMERFD, "eventpoll": F.EVENTPOLL})
#: The cgroup (v2) criu itself would run in: the root. Its cg_set is 1 (the inventory's
#: root_cg_set) and is not saved; a task there inherits the cgroup of the restoring criu.
CRIU_CGROUP = "/"
CRIU_CG_SET = 1


@dataclasses.dataclass
class DumpSet:
    """Everything one dump writes: the processes (root first) and what the system around them
    looked like (the namespaces and clocks CRIU records for restore)."""

    processes: list[ProcessState]
    root_namespaces: object  # ovm_offline.state.NamespaceIds of the guest's init
    monotonic_ns: int
    boottime_ns: int
    # cgroup path -> its directory subtree, for every cgroup of a process other than CRIU_CGROUP
    cgroups: dict[str, CgroupDir] = dataclasses.field(default_factory=dict)
    # the tree's own IPC namespace (None when it shares the host's, which CRIU does not save)
    ipc_namespace: IpcNamespaceState | None = None


class FileTable:
    """files.img: one entry per struct file (or per mapped file, as CRIU does), ids in the order met."""

    def __init__(self) -> None:
        self.entries: list = []
        self._by_key: dict[tuple, int] = {}
        self.tty_infos: dict[int, tuple[TtyState, FileIdentity]] = {}  # tty_info id -> state, device node
        self.pipe_data: dict[int, PipeState] = {}  # pipe_id -> pipe, in pipes-data.img order
        self.fifo_data: dict[int, PipeState] = {}  # the same for fifo-data.img
        self.unix = UnixSockets(self)
        self._last_id = 0
        #: net namespace inode -> its id in the dump (set by write_dump)
        self.net_ns_id: Callable[[int], int] = lambda inum: 0

    def _next_id(self) -> int:
        # ids are handed out when a file is met; some entries are written later (CRIU writes
        # a FIFO's path before the FIFO, and a UNIX socket once its peer is met), so an id is
        # not an index into `entries`
        self._last_id += 1
        return self._last_id

    def reserve(self) -> tuple[int, int]:
        """A new file id and the index of a placeholder in `entries` for its entry, to be
        filled once the entries it refers to (a tty's path, a memfd's inode) are made."""
        self.entries.append(None)
        return self._next_id(), len(self.entries) - 1

    def regular(
        self,
        identity: FileIdentity,
        flags: int = 0,
        pos: int = 0,
        key: tuple | None = None,
        owner=None,
        build_id: bytes | None = None,
    ) -> int:
        key = key or ("path", identity.path, flags, pos)
        if key in self._by_key:
            return self._by_key[key]
        fid = self._next_id()
        build_id = build_id or identity.build_id
        reg = F.reg_file_entry(id=fid, flags=flags, pos=pos, fown=_fown(owner), name=identity.path, mode=identity.mode)
        if _has_size(identity, flags):
            reg.size = identity.size
        if build_id:
            reg.build_id.extend(struct.unpack(f"<{len(build_id) // 4}I", build_id[: len(build_id) // 4 * 4]))
        self.entries.append(F.file_entry(type=F.REG, id=fid, reg=reg))
        self._by_key[key] = fid
        return fid

    def open_file(self, f: OpenFile) -> int:
        key = ("file", f.key)
        if key in self._by_key:
            return self._by_key[key]
        if f.kind == "tty" and f.tty is not None:
            fid, slot = self.reserve()  # keep CRIU's order: the tty's entry, then its path's
            self._by_key[key] = fid
            regf = self.regular(f.identity, f.flags, f.pos, key=("tty-path", f.key))
            info_id = self._tty_info_id(f.tty, f.identity)
            self.entries[slot] = F.file_entry(
                type=F.TTY,
                id=fid,
                tty=F.tty_file_entry(id=fid, tty_info_id=info_id, flags=f.flags, fown=_fown(f.owner), regf_id=regf),
            )
            return fid
        if f.kind == "pipe" and f.pipe is not None:
            fid = self._next_id()
            self.entries.append(
                F.file_entry(
                    type=F.PIPE,
                    id=fid,
                    pipe=F.pipe_entry(id=fid, pipe_id=f.pipe.pipe_id, flags=f.flags, fown=_fown(f.owner)),
                )
            )
            self._by_key[key] = fid
            self._pipe_data(f, f.pipe)
            return fid
        if f.kind == "fifo" and f.pipe is not None:
            fid = self._next_id()
            self._by_key[key] = fid
            # CRIU writes the FIFO's path entry first, then the FIFO naming it
            regf = self.regular(f.identity, f.flags, f.pos, key=("fifo-path", f.key))
            self.entries.append(
                F.file_entry(type=F.FIFO, id=fid, fifo=F.fifo_entry(id=fid, pipe_id=f.pipe.pipe_id, regf_id=regf))
            )
            if (f.flags & O_ACCMODE) != O_WRONLY:
                self.fifo_data.setdefault(f.pipe.pipe_id, f.pipe)
            return fid
        if f.kind == "unix" and f.unix is not None:
            fid = self._next_id()
            self._by_key[key] = fid
            self.unix.met(fid, f)
            return fid
        # ids are consumed when handed out, so only files of these kinds may take one here
        anon = anon_file_entry(f, self._next_id()) if f.kind in ANON_FILE_KINDS else None
        if anon is not None:
            self.entries.append(anon)
            self._by_key[key] = anon.id
            return anon.id
        if f.kind != "reg":
            from ..errors import UnsupportedError

            raise UnsupportedError(f"cannot save open files of kind {f.kind!r} yet ({f.identity.path})")
        return self.regular(f.identity, f.flags, f.pos, key=key, owner=f.owner, build_id=f.build_id)

    def _pipe_data(self, f: OpenFile, pipe: PipeState) -> None:
        """CRIU's dump_one_pipe_data(): a pipe's data is saved once, when the pipe is first
        met through an end that can read (its data could not be read through a write-only one)."""
        if (f.flags & O_ACCMODE) == O_WRONLY or pipe.pipe_id in self.pipe_data:
            return
        self.pipe_data[pipe.pipe_id] = pipe

    def _tty_info_id(self, tty: TtyState, node: FileIdentity) -> int:
        # CRIU's tty_gen_id(): index << 1, plus 1 for a pty master
        info_id = tty.index << 1 | (tty.driver == "pty-master")
        self.tty_infos.setdefault(info_id, (tty, node))
        return info_id


O_ACCMODE, O_WRONLY, O_APPEND = 0o3, 0o1, 0o2000


def _has_size(identity: FileIdentity, flags: int) -> bool:
    """CRIU records (and restore checks) the size of regular files, except those opened
    write-only for appending: logs may legitimately grow (CRIU's should_check_size)."""
    if (identity.mode & 0o170000) != 0o100000:
        return False
    return not ((flags & O_ACCMODE) == O_WRONLY and flags & O_APPEND)


def _fown(owner) -> C.fown_entry:
    if owner is None:
        return C.fown_entry(uid=0, euid=0, signum=0, pid_type=0, pid=0)
    return C.fown_entry(uid=owner.uid, euid=owner.euid, signum=owner.signum, pid_type=owner.pid_type, pid=owner.pid)


NSEC_PER_SEC = 10**9
#: open-file kinds anon_file_entry() writes
ANON_FILE_KINDS = ("eventfd", "signalfd", "timerfd", "eventpoll")


def anon_file_entry(f: OpenFile, fid: int) -> F.file_entry | None:
    """The files.img entry CRIU writes for an eventfd, signalfd, timerfd or epoll file (the
    values its fdinfo parser reads), or None for another kind or one without its state."""
    fown = _fown(f.owner)
    if f.kind == "eventfd" and f.eventfd is not None:
        # no field for EFD_SEMAPHORE in CRIU 3.17: extraction refuses semaphore eventfds
        return F.file_entry(
            type=F.EVENTFD, id=fid, efd=F.eventfd_file_entry(id=fid, flags=f.flags, fown=fown, counter=f.eventfd.count)
        )
    if f.kind == "signalfd" and f.signalfd is not None:
        return F.file_entry(
            type=F.SIGNALFD, id=fid, sgfd=F.signalfd_entry(id=fid, flags=f.flags, fown=fown, sigmask=f.signalfd.sigmask)
        )
    if f.kind == "timerfd" and f.timerfd is not None:
        t = f.timerfd
        return F.file_entry(
            type=F.TIMERFD,
            id=fid,
            tfd=F.timerfd_entry(
                id=fid,
                flags=f.flags,
                fown=fown,
                clockid=t.clock_id,
                ticks=t.ticks,
                settime_flags=t.settime_flags,
                vsec=t.value_ns // NSEC_PER_SEC,
                vnsec=t.value_ns % NSEC_PER_SEC,
                isec=t.interval_ns // NSEC_PER_SEC,
                insec=t.interval_ns % NSEC_PER_SEC,
            ),
        )
    if f.kind == "eventpoll" and f.epoll is not None:
        # each target's own id stays 0: CRIU 3.17 embeds them in the epoll's entry and never sets it
        return F.file_entry(
            type=F.EVENTPOLL,
            id=fid,
            epfd=F.eventpoll_file_entry(
                id=fid,
                flags=f.flags,
                fown=fown,
                tfd=[
                    F.eventpoll_tfd_entry(
                        id=0, tfd=t.fd, events=t.events, data=t.data, dev=t.dev, inode=t.ino, pos=t.pos
                    )
                    for t in f.epoll.targets
                ],
            ),
        )
    return None


# --- per-task messages ------------------------------------------------------------------------


def gpregs(thread: ThreadState) -> X.user_x86_regs_entry:
    regs = X.user_x86_regs_entry(mode=X.NATIVE)
    for name in REGISTER_NAMES:
        setattr(regs, name, getattr(thread.regs, name) & (2**64 - 1))
    return regs


def fpregs(fpu: FpuState) -> X.user_x86_fpregs_entry:
    fx = fpu.fxsave
    cwd, swd, twd, fop, rip, rdp, mxcsr, mxcsr_mask = struct.unpack_from("<HHHHQQII", fx, 0)
    entry = X.user_x86_fpregs_entry(
        cwd=cwd,
        swd=swd,
        twd=twd,
        fop=fop,
        rip=rip,
        rdp=rdp,
        mxcsr=mxcsr,
        mxcsr_mask=mxcsr_mask,
        st_space=struct.unpack_from("<32I", fx, 32),
        xmm_space=struct.unpack_from("<64I", fx, 160),
    )
    if fpu.xstate_bv is not None and fpu.components:
        xsave = X.user_x86_xsave_entry(xstate_bv=fpu.xstate_bv)
        for component, field_name, fmt in (
            (2, "ymmh_space", "<64I"),
            (3, "bndreg_state", "<8Q"),
            (4, "bndcsr_state", "<8Q"),
            (5, "opmask_reg", "<8Q"),
            (6, "zmm_upper", "<64Q"),
            (7, "hi16_zmm", "<128Q"),
            (9, "pkru", "<2I"),
        ):
            data = fpu.components.get(component)
            # CRIU saves a component only when the task's xstate_bv says it is in use
            if data is not None and fpu.xstate_bv >> component & 1:
                getattr(xsave, field_name).extend(struct.unpack_from(fmt, data.ljust(struct.calcsize(fmt), b"\0")))
        entry.xsave.CopyFrom(xsave)
    return entry


def creds(thread: ThreadState) -> T.creds_entry:
    c = thread.creds

    def words(v: int) -> list[int]:
        return [v & 0xFFFFFFFF, v >> 32]

    return T.creds_entry(
        uid=c.uid,
        gid=c.gid,
        euid=c.euid,
        egid=c.egid,
        suid=c.suid,
        sgid=c.sgid,
        fsuid=c.fsuid,
        fsgid=c.fsgid,
        cap_inh=words(c.cap_inh),
        cap_prm=words(c.cap_prm),
        cap_eff=words(c.cap_eff),
        cap_bnd=words(c.cap_bnd),
        secbits=c.secbits,
        groups=c.groups,
    )


def thread_core(thread: ThreadState, leader: bool) -> T.thread_core_entry:
    tcore = T.thread_core_entry(
        futex_rla=thread.robust_list,
        futex_rla_len=thread.robust_list_len,
        sched_nice=thread.sched_nice,
        sched_policy=thread.sched_policy,
        sas=T.thread_sas_entry(ss_sp=thread.sas_sp, ss_size=thread.sas_size, ss_flags=thread.sas_flags),
        creds=creds(thread),
        comm=thread.comm,
    )
    if thread.sched_policy not in (0, 3, 5):  # SCHED_NORMAL, BATCH, IDLE have no static priority
        tcore.sched_prio = thread.sched_prio
    tcore.signals_p.SetInParent()
    for sig in thread.pending:
        tcore.signals_p.signals.add(siginfo=sig.siginfo)
    if not leader:
        tcore.blk_sigset = thread.blocked
    if thread.rseq is not None:
        tcore.rseq_entry.CopyFrom(
            T.rseq_entry(
                rseq_abi_pointer=thread.rseq.abi_pointer,
                rseq_abi_size=thread.rseq.abi_size,
                signature=thread.rseq.signature,
            )
        )
        if thread.rseq.cs_pointer:
            tcore.rseq_entry.rseq_cs_pointer = thread.rseq.cs_pointer
    if thread.seccomp_mode:
        tcore.seccomp_mode = thread.seccomp_mode
    if thread.pdeath_signal:
        tcore.pdeath_sig = thread.pdeath_signal
    return tcore


def thread_info(thread: ThreadState) -> X.thread_info_x86:
    info = X.thread_info_x86(clear_tid_addr=thread.clear_tid_addr, gpregs=gpregs(thread), fpregs=fpregs(thread.fpu))
    for tls in thread.tls:
        info.tls.add(
            entry_number=tls.entry_number,
            base_addr=tls.base_addr,
            limit=tls.limit,
            seg_32bit=tls.seg_32bit,
            contents_h=bool(tls.contents & 2),
            contents_l=bool(tls.contents & 1),
            read_exec_only=tls.read_exec_only,
            limit_in_pages=tls.limit_in_pages,
            seg_not_present=tls.seg_not_present,
            usable=tls.usable,
        )
    return info


def task_core(proc: ProcessState, cg_set: int = CRIU_CG_SET) -> T.task_core_entry:
    leader = proc.threads[0]
    tc = T.task_core_entry(
        task_state=TASK_STATES[proc.task_state],
        exit_code=proc.exit_code,
        personality=proc.personality,
        flags=proc.flags,
        blk_sigset=leader.blocked,
        comm=proc.comm,
        cg_set=cg_set,
        loginuid=proc.loginuid & 0xFFFFFFFF,
        oom_score_adj=proc.oom_score_adj,
        child_subreaper=proc.child_subreaper,
    )
    timers = tc.timers
    for name in ("real", "virt", "prof"):
        it = proc.itimers[name]
        getattr(timers, name).CopyFrom(
            T.itimer_entry(
                isec=it.interval_us // 10**6,
                iusec=it.interval_us % 10**6,
                vsec=it.value_us // 10**6,
                vusec=it.value_us % 10**6,
            )
        )
    for pt in proc.posix_timers:
        timers.posix.add(
            it_id=pt.timer_id,
            clock_id=pt.clock_id,
            si_signo=pt.signal,
            it_sigev_notify=pt.notify,
            sival_ptr=pt.sival_ptr,
            overrun=pt.overrun,
            isec=pt.interval_ns // 10**9,
            insec=pt.interval_ns % 10**9,
            vsec=pt.value_ns // 10**9,
            vnsec=pt.value_ns % 10**9,
            notify_thread_id=pt.notify_thread_id,
        )
    for cur, max_ in proc.rlimits:
        tc.rlimits.rlimits.add(cur=cur, max=max_)
    tc.signals_s.SetInParent()
    for sig in proc.shared_pending:
        tc.signals_s.signals.add(siginfo=sig.siginfo)
    for signo, action in enumerate(proc.sigactions, start=1):
        if signo in (SIGKILL, SIGSTOP):
            continue
        tc.sigactions.add(
            sigaction=action.handler,
            flags=action.flags,
            restorer=action.restorer,
            mask=action.mask,
            compat_sigaction=False,
        )
    return tc


def core(proc: ProcessState, thread: ThreadState, cg_set: int = CRIU_CG_SET) -> T.core_entry:
    leader = thread is proc.threads[0]
    entry = T.core_entry(
        mtype=T.core_entry.X86_64, thread_info=thread_info(thread), thread_core=thread_core(thread, leader)
    )
    if leader:
        entry.tc.CopyFrom(task_core(proc, cg_set))
    return entry


# --- cgroups ----------------------------------------------------------------------------------


class CgroupSets:
    """CRIU's cg_sets: one per distinct set of cgroups a task is in (with cgroup v2 only,
    one path), numbered as met; criu's own comes first as CRIU_CG_SET."""

    def __init__(self, dump: DumpSet) -> None:
        self.dump = dump
        self.ids: dict[str, int] = {CRIU_CGROUP: CRIU_CG_SET}
        self.heads: list[_CgDir] = []  # CRIU's cg_controller heads of the v2 hierarchy

    def set_of(self, proc: ProcessState) -> int:
        path = proc.cgroup or CRIU_CGROUP
        if path not in self.ids:
            self.ids[path] = len(self.ids) + 1
            if path in self.dump.cgroups:
                self._collect(self.dump.cgroups[path])
        return self.ids[path]

    def _collect(self, top: CgroupDir) -> None:
        """CRIU's collect_cgroups(): ftw below the set's cgroup, each directory put under the
        deepest collected one its path starts with (a plain string prefix, as CRIU does),
        those already collected skipped."""
        stack = [top]
        while stack:
            d = stack.pop()
            stack.extend(reversed(d.children))
            where, match = _find_dir(d.path, self.heads)
            if where == "exact":
                continue
            siblings = match.children if where == "parent" and match is not None else self.heads
            siblings.append(_CgDir(d))

    def image(self, root_set: int) -> N.cgroup_entry | None:
        """cgroup.img, or None when every task is in criu's set (CRIU writes nothing then)."""
        if root_set == CRIU_CG_SET and len(self.ids) == 1:
            return None
        entry = N.cgroup_entry()
        for path, sid in self.ids.items():
            if sid != CRIU_CG_SET:
                entry.sets.add(id=sid, ctls=[N.cg_member_entry(name="", path=path)])
        ctl = entry.controllers.add(cnames=[""])
        ctl.dirs.extend(_cg_dir_entry(h, 0) for h in self.heads)
        return entry


@dataclasses.dataclass
class _CgDir:
    dir: CgroupDir
    children: list[_CgDir] = dataclasses.field(default_factory=list)


def _find_dir(path: str, dirs: list[_CgDir]) -> tuple[str, _CgDir | None]:
    for d in dirs:
        if d.dir.path == path:
            return "exact", d
        if path.startswith(d.dir.path):
            where, match = _find_dir(path, d.children)
            return ("parent", d) if where == "none" else (where, match)
    return "none", None


def _perms(p) -> N.cgroup_perms:
    return N.cgroup_perms(mode=p.mode, uid=p.uid, gid=p.gid)


def _cg_dir_entry(node: _CgDir, poff: int) -> N.cgroup_dir_entry:
    path = node.dir.path
    # CRIU's dump_cg_dirs(): the name is the path after the parent's, without the "/"
    name = path[poff:] if poff == 1 else path[poff + 1 :]
    entry = N.cgroup_dir_entry(dir_name=name, dir_perms=_perms(node.dir.perms))
    for prop in node.dir.properties:
        p = entry.properties.add(name=prop.name, value=prop.value)
        if prop.perms is not None:
            p.perms.CopyFrom(_perms(prop.perms))
    entry.children.extend(_cg_dir_entry(c, len(path)) for c in node.children)
    return entry


def vma_status(v: Vma) -> int:
    """The vma_entry.status CRIU 3.17 gives a VMA of this kind: anon 0x201, heap 0x221, private
    file 0x41, vdso 0x209, vvar 0x1201, vsyscall 0x204. CRIU sets no VMA_AREA_STACK for
    [stack]: it is plain anonymous memory there."""
    if v.kind == "vsyscall":
        return VMA_AREA_VSYSCALL | VMA_ANON_PRIVATE
    status = VMA_AREA_REGULAR
    if v.shmem is not None and v.shmem.sysv:
        return status | VMA_ANON_SHARED | VMA_AREA_SYSVIPC
    if v.kind == "file":
        # CRIU 3.17 handle_vma: every file of its shmem device (shared anonymous memory too)
        # is mapped as a memfd
        memfd = VMA_AREA_MEMFD if v.shmem is not None else 0
        return status | memfd | (VMA_FILE_SHARED if v.shared else VMA_FILE_PRIVATE)
    status |= VMA_ANON_SHARED if v.shared else VMA_ANON_PRIVATE
    if v.kind == "heap":
        status |= VMA_AREA_HEAP
    elif v.kind == "vdso":
        status |= VMA_AREA_VDSO
    elif v.kind == "vvar":
        status |= VMA_AREA_VVAR
    return status


# --- the dump ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Written:
    images: int = 0
    pages: int = 0
    page_bytes: int = 0
    files: int = 0


def write_dump(
    dump: DumpSet,
    directory: Path,
    write_pages: Callable[[ProcessState, Path], list],
    write_shmem_pages: Callable[[SharedMemory, Path], list] | None = None,
) -> Written:
    """Write every image of `dump` into `directory` (which must exist and be empty).
    `write_pages(proc, pages_path)` writes pages-N.img for a process and returns its pagemap
    entries (vaddr, nr_pages, flags); `write_shmem_pages(shm, pages_path)` does the same for
    the contents of a shmem file (needed when a VMA maps one)."""
    written = Written()
    files = FileTable()
    ns_ids = {name: i for i, name in enumerate(NS_ORDER, start=1)}
    kobj_ids: dict[tuple[str, int], int] = {}

    def kobj(kind: str, key: int) -> int:
        # 1 is criu's own object in a real dump: the inventory's root_ids say so
        return kobj_ids.setdefault((kind, key), len([k for k in kobj_ids if k[0] == kind]) + 2)

    def ns_id(kind: str, inum: int) -> int:
        if inum == getattr(dump.root_namespaces, kind):
            return ns_ids[kind]
        key = (f"ns-{kind}", inum)
        if key not in kobj_ids:
            kobj_ids[key] = len(NS_ORDER) + 1 + len([k for k in kobj_ids if k[0].startswith("ns-")])
        return kobj_ids[key]

    def put(kind: images.ImageKind, entries: list, image_id: int | None = None) -> None:
        images.write_image(directory / kind.filename(image_id), kind, entries)
        written.images += 1

    root_ids = T.task_kobj_ids_entry(vm_id=1, files_id=1, fs_id=1, sighand_id=1)
    for name in NS_ORDER:
        setattr(root_ids, f"{name}_ns_id", ns_ids[name])
    put(
        images.INVENTORY,
        [
            T.inventory_entry(
                img_version=2,
                fdinfo_per_id=True,
                root_ids=root_ids,
                ns_per_id=True,
                root_cg_set=1,
                lsmtype=T.NO_LSM,
                network_lock_method=0,
            )
        ],
    )
    put(
        images.PSTREE,
        [
            T.pstree_entry(pid=p.pid, ppid=p.ppid, pgid=p.pgid, sid=p.sid, threads=[t.tid for t in p.threads])
            for p in dump.processes
        ],
    )

    files.net_ns_id = lambda inum: ns_id("net", inum)
    cg_sets = CgroupSets(dump)
    next_pages_id = itertools.count(1).__next__  # pages-N.img numbers, shared with the shmem dumps
    shmem = ShmemImages(directory, files, next_pages_id, write_shmem_pages, written)
    for proc in dump.processes:
        cg_set = cg_sets.set_of(proc)
        ids = T.task_kobj_ids_entry(
            vm_id=kobj("vm", proc.mm_key),
            files_id=kobj("files", proc.files_key),
            fs_id=kobj("fs", proc.fs_key),
            sighand_id=kobj("sighand", proc.sighand_key),
        )
        for name in NS_ORDER:
            setattr(ids, f"{name}_ns_id", ns_id(name, getattr(proc.namespaces, name)))
        put(images.IDS, [ids], proc.pid)
        for thread in proc.threads:
            put(images.CORE, [core(proc, thread, cg_set)], thread.tid)

        mm = proc.mm
        mm_entry = M.mm_entry(
            mm_start_code=mm.start_code,
            mm_end_code=mm.end_code,
            mm_start_data=mm.start_data,
            mm_end_data=mm.end_data,
            mm_start_stack=mm.start_stack,
            mm_start_brk=mm.start_brk,
            mm_brk=mm.brk,
            mm_arg_start=mm.arg_start,
            mm_arg_end=mm.arg_end,
            mm_env_start=mm.env_start,
            mm_env_end=mm.env_end,
            mm_saved_auxv=mm.auxv,
            dumpable=mm.dumpable,
            thp_disabled=mm.thp_disabled,
        )
        if mm.exe_file is not None:
            mm_entry.exe_file_id = files.regular(mm.exe_file)
        for vma in mm.vmas:
            v = mm_entry.vmas.add(
                start=vma.start,
                end=vma.end,
                pgoff=vma.pgoff,
                shmid=0,
                prot=vma.prot,
                flags=vma.flags,
                status=vma_status(vma),
                fd=-1,
            )
            if vma.shmem is not None:
                shmem.map(vma, v)
            elif vma.file is not None:
                # dump_filemap leaves fd_parms.flags 0; the open mode is the VMA's fdflags
                v.shmid = files.regular(vma.file)
                v.fdflags = vma.file_flags
            if vma.madvise:
                v.madv = vma.madvise
        put(images.MM, [mm_entry], proc.pid)

        pages_id = next_pages_id()
        pagemap = write_pages(proc, directory / images.PAGES.filename(pages_id))
        head = M.pagemap_head(pages_id=pages_id)
        entries = [M.pagemap_entry(vaddr=vaddr, nr_pages=nr, flags=flags) for vaddr, nr, flags in pagemap]
        put(images.PAGEMAP, [head, *entries], proc.pid)
        written.pages += sum(nr for _, nr, _ in pagemap)

        fdinfo = []
        for fd in proc.fds:
            fid = files.open_file(fd.file)
            fdinfo.append(
                F.fdinfo_entry(
                    id=fid, flags=FD_CLOEXEC if fd.cloexec else 0, type=FD_TYPES.get(fd.file.kind, F.REG), fd=fd.fd
                )
            )
        files_id = kobj("files", proc.files_key)
        if not (directory / images.FDINFO.filename(files_id)).exists():
            put(images.FDINFO, fdinfo, files_id)
        cwd = files.regular(proc.fs.cwd, key=("dir", proc.fs.cwd.path, proc.pid, "cwd"))
        root = files.regular(proc.fs.root, key=("dir", proc.fs.root.path, proc.pid, "root"))
        put(images.FS, [F.fs_entry(cwd_id=cwd, root_id=root, umask=proc.fs.umask)], proc.pid)

    files.unix.check_complete()
    put(images.FILES, files.entries)
    written.files = len(files.entries)
    if shmem.inodes:
        put(images.MEMFD_INODE, shmem.inode_entries())
    if files.tty_infos:
        put(images.TTY_INFO, [tty_info(i, *t) for i, t in sorted(files.tty_infos.items(), reverse=True)])
    # images whose entries are each followed by raw bytes: pipe and FIFO data, socket queues
    with_data = [
        (kind, [(F.pipe_data_entry(pipe_id=p.pipe_id, bytes=len(p.data), size=p.size), p.data) for p in pipes.values()])
        for kind, pipes in ((images.PIPES_DATA, files.pipe_data), (images.FIFO_DATA, files.fifo_data))
    ]
    with_data.append((images.SK_QUEUES, files.unix.queues))
    for kind, entries in with_data:
        if entries:
            images.write_image(directory / kind.filename(), kind, [e for e, _ in entries], [d for _, d in entries])
            written.images += 1
    cgroup = cg_sets.image(cg_sets.set_of(dump.processes[0]))
    if cgroup is not None:
        put(images.CGROUP, [cgroup])
    if dump.ipc_namespace is not None:
        write_ipc_namespace(dump.ipc_namespace, ns_id("ipc", dump.ipc_namespace.inum), shmem, put)
    put(images.SECCOMP, [T.seccomp_entry()])
    put(
        images.TIMENS,
        [
            N.timens_entry(
                monotonic=N.timespec(tv_sec=dump.monotonic_ns // 10**9, tv_nsec=dump.monotonic_ns % 10**9),
                boottime=N.timespec(tv_sec=dump.boottime_ns // 10**9, tv_nsec=dump.boottime_ns % 10**9),
            )
        ],
        0,
    )
    written.page_bytes = written.pages * 4096
    return written


def new_encode_dev(dev: int) -> int:
    """stat()'s encoding of a kernel dev_t (major << 20 | minor), as CRIU records devices."""
    major, minor = dev >> 20, dev & 0xFFFFF
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


def tty_info(info_id: int, tty: TtyState, node: FileIdentity) -> F.tty_info_entry:
    def termios(flags: list[int], cc: bytes) -> F.termios_entry:
        # CRIU memcpy()s the NCCS=19 c_cc bytes into the front of its 19-word array; the words
        # after the fifth are whatever its stack held (the diff ignores them)
        packed = list(struct.unpack("<5I", cc[:TERMIOS_NCC].ljust(20, b"\0")))
        # CRIU's TCGETS fills glibc's struct termios, whose speed fields stay 0
        return F.termios_entry(
            c_iflag=flags[0],
            c_oflag=flags[1],
            c_cflag=flags[2],
            c_lflag=flags[3],
            c_line=flags[4],
            c_ispeed=0,
            c_ospeed=0,
            c_cc=packed + [0] * (TERMIOS_NCC - len(packed)),
        )

    entry = F.tty_info_entry(
        id=info_id,
        type=F.PTY,
        locked=tty.locked,
        exclusive=tty.exclusive,
        packet_mode=tty.packet_mode,
        sid=tty.sid,
        pgrp=tty.pgrp,
        rdev=new_encode_dev(tty.rdev),
        termios=termios(tty.termios, tty.cc),
        termios_locked=termios(tty.termios_locked, tty.cc_locked),
        winsize=F.winsize_entry(
            ws_row=tty.winsize[0], ws_col=tty.winsize[1], ws_xpixel=tty.winsize[2], ws_ypixel=tty.winsize[3]
        ),
    )
    entry.pty.index = tty.index
    entry.dev, entry.uid, entry.gid = new_encode_dev(node.dev), tty.uid, tty.gid
    return entry


# --- UNIX sockets -----------------------------------------------------------------------------

from .pb import criu_net_pb2 as NET  # noqa: E402  (kept next to the class that uses it)


class UnixSockets:
    """files.img entries and sk-queues.img of UNIX sockets, in CRIU's order. A socket gets
    its file id when met; its entry is written then unless its peer has not been met yet,
    in which case it waits and is written right after that peer (CRIU's postponed
    sockets). Queued bytes are saved when a socket is met."""

    def __init__(self, table: FileTable) -> None:
        self._table = table
        self._seen: set[int] = set()  # socket inodes met
        self._waiting: dict[int, list] = {}  # peer inode -> entries waiting for it
        self.queues: list[tuple[NET.sk_packet_entry, bytes]] = []

    def met(self, fid: int, f: OpenFile) -> None:
        u = f.unix
        entry = F.file_entry(type=F.UNIXSK, id=fid, usk=self._entry(fid, f))
        self._seen.add(u.ino)
        self.queues += [(NET.sk_packet_entry(id_for=fid, length=len(p.data)), p.data) for p in u.queue]
        if u.peer and u.peer not in self._seen:
            self._waiting.setdefault(u.peer, []).append(entry)
            return
        self._table.entries.append(entry)
        self._table.entries.extend(self._waiting.pop(u.ino, []))

    def check_complete(self) -> None:
        """Every postponed socket found its peer (else a connection leaves the dump)."""
        if self._waiting:
            from ..errors import UnsupportedError

            peers = ", ".join(f"socket:[{ino}]" for ino in sorted(self._waiting))
            raise UnsupportedError(f"UNIX sockets are connected to sockets outside the dumped processes ({peers})")

    def _entry(self, fid: int, f: OpenFile) -> NET.unix_sk_entry:
        u, o = f.unix, f.unix.options
        opts = NET.sk_opts_entry(
            so_sndbuf=o.sndbuf,
            so_rcvbuf=o.rcvbuf,
            so_snd_tmo_sec=o.snd_timeout[0],
            so_snd_tmo_usec=o.snd_timeout[1],
            so_rcv_tmo_sec=o.rcv_timeout[0],
            so_rcv_tmo_usec=o.rcv_timeout[1],
            reuseaddr=o.reuseaddr,
            so_priority=o.priority,
            so_rcvlowat=o.rcvlowat,
            so_mark=o.mark,
            so_passcred=o.passcred,
            so_passsec=o.passsec,
            so_dontroute=o.dontroute,
            so_no_check=o.no_check,
            so_reuseport=o.reuseport,
            so_broadcast=o.broadcast,
            so_keepalive=o.keepalive,
            so_oobinline=int(o.oobinline),
            so_buf_lock=o.buf_lock,
        )
        entry = NET.unix_sk_entry(
            id=fid,
            ino=u.ino,
            type=u.type,
            state=u.state,
            flags=f.flags,
            uflags=0,
            backlog=u.backlog,
            peer=u.peer,
            fown=_fown(f.owner),
            opts=opts,
            name=u.name,
            ns_id=self._table.net_ns_id(u.net_ns),
        )
        if u.shutdown:
            entry.shutdown = u.shutdown  # RCV_SHUTDOWN 1 | SEND_SHUTDOWN 2, as sk_shutdown's values
        if u.bound is not None:
            entry.file_perms.mode, entry.file_perms.uid, entry.file_perms.gid = u.bound
        if u.name_deleted:
            entry.deleted = True
        return entry


# --- shared memory ----------------------------------------------------------------------------


class ShmemImages:
    """What CRIU 3.17's memfd.c writes for VMAs mapping files of its shmem device (shared
    anonymous memory and memfds): one MEMFD file entry per inode (files.img; the VMAs' shmid),
    memfd.img with the inodes in the order met, and each inode's contents as
    pagemap-shmem-<ino>.img plus a pages-N.img. CRIU dumps an inode when it collects the
    mappings of the first process mapping it, before that process's own pages, so its
    contents take the next pages-N number there."""

    def __init__(
        self,
        directory: Path,
        files: FileTable,
        next_pages_id: Callable[[], int],
        write_pages: Callable[[SharedMemory, Path], list] | None,
        written: Written,
    ) -> None:
        self.directory = directory
        self.files = files
        self.next_pages_id = next_pages_id
        self.write_pages = write_pages
        self.written = written
        self.inodes: dict[int, tuple[int, SharedMemory]] = {}  # ino -> (memfd inode_id, shmem)
        self.file_ids: dict[int, int] = {}  # ino -> MEMFD file entry id

    def map(self, vma: Vma, entry: M.vma_entry) -> None:
        """Fill in the vma_entry of a VMA mapping a shmem file: its memfd file id and open
        mode; System V segments are named by their shmid (the inode number) instead."""
        shm = vma.shmem
        assert shm is not None
        entry.shmid = shm.ino if shm.sysv else self.memfd_file_id(shm)
        entry.fdflags = vma.file_flags

    def memfd_file_id(self, shm: SharedMemory) -> int:
        """dump_one_memfd_cond: one file entry per inode (fd_id_generate_special keys VMA
        files by device and inode), flags and pos 0 as dump_filemap leaves them."""
        fid = self.file_ids.get(shm.ino)
        if fid is not None:
            return fid
        fid, slot = self.files.reserve()  # the entry comes before what dumping the inode writes
        inode_id = self.dump_inode(shm)
        self.files.entries[slot] = F.file_entry(
            type=F.MEMFD, id=fid, memfd=F.memfd_file_entry(id=fid, flags=0, pos=0, fown=_fown(None), inode_id=inode_id)
        )
        self.file_ids[shm.ino] = fid
        return fid

    def dump_inode(self, shm: SharedMemory) -> int:
        """dump_unique_memfd_inode: inode ids count from 1; dump_one_memfd_shmem writes no
        pagemap for an empty file."""
        known = self.inodes.get(shm.ino)
        if known is not None:
            return known[0]
        inode_id = len(self.inodes) + 1
        self.inodes[shm.ino] = (inode_id, shm)
        if shm.size > 0:
            self.write_contents(shm)
        return inode_id

    def write_contents(self, shm: SharedMemory) -> None:
        if self.write_pages is None:
            raise ValueError("write_dump needs write_shmem_pages to save shared memory")
        pages_id = self.next_pages_id()
        runs = self.write_pages(shm, self.directory / images.PAGES.filename(pages_id))
        entries = [M.pagemap_entry(vaddr=vaddr, nr_pages=nr, flags=flags) for vaddr, nr, flags in runs]
        images.write_image(
            self.directory / images.SHMEM_PAGEMAP.filename(shm.ino),
            images.SHMEM_PAGEMAP,
            [M.pagemap_head(pages_id=pages_id), *entries],
        )
        self.written.images += 1
        self.written.pages += sum(nr for _, nr, _ in runs)

    def inode_entries(self) -> list:
        """memfd.img: the inodes in the order they were met."""
        return [
            F.memfd_inode_entry(
                name=shm.name,
                uid=shm.uid,
                gid=shm.gid,
                size=shm.size,
                shmid=shm.ino,
                seals=shm.seals,
                inode_id=inode_id,
            )
            for inode_id, shm in sorted(self.inodes.values(), key=lambda t: t[0])
        ]


def write_ipc_namespace(ns: IpcNamespaceState, ns_image_id: int, shmem: ShmemImages, put: Callable[..., None]) -> None:
    """ipc_ns.c dump_ipc_ns, run after every task is dumped: ipcns-var (the sysctls),
    ipcns-shm (one entry per segment, in_pagemaps) and each segment's contents as
    pagemap-shmem-<shmid>.img, taking the next pages-N numbers. No message queues or
    semaphore sets (extraction refuses them), so, like CRIU, no ipcns-msg/ipcns-sem."""
    var = N.ipc_var_entry(
        sem_ctls=ns.sem_ctls,
        msg_ctlmax=ns.msg_ctlmax,
        msg_ctlmnb=ns.msg_ctlmnb,
        msg_ctlmni=ns.msg_ctlmni,
        auto_msgmni=0,  # kernel.auto_msgmni is a no-op since 4.x and always reads 0
        shm_ctlmax=ns.shm_ctlmax,
        shm_ctlall=ns.shm_ctlall,
        shm_ctlmni=ns.shm_ctlmni,
        shm_rmid_forced=ns.shm_rmid_forced,
        mq_queues_max=ns.mq_queues_max,
        mq_msg_max=ns.mq_msg_max,
        mq_msgsize_max=ns.mq_msgsize_max,
        mq_msg_default=ns.mq_msg_default,
        mq_msgsize_default=ns.mq_msgsize_default,
    )
    for name in ("msg_next_id", "sem_next_id", "shm_next_id"):
        if getattr(ns, name) is not None:
            setattr(var, name, getattr(ns, name))
    put(images.IPCNS_VAR, [var], ns_image_id)
    if not ns.shm_segments:
        return  # CRIU opens its images lazily: no segment, no ipcns-shm
    entries = []
    for seg in ns.shm_segments:
        entries.append(
            N.ipc_shm_entry(
                desc=N.ipc_desc_entry(
                    key=seg.key, uid=seg.uid, gid=seg.gid, cuid=seg.cuid, cgid=seg.cgid, mode=seg.mode, id=seg.id
                ),
                size=seg.size,
                in_pagemaps=True,
            )
        )
        # dump_one_sysv_shmem scans round_up(shm_segsz, PAGE_SIZE) bytes
        shmem.write_contents(seg.contents)
    put(images.IPCNS_SHM, entries, ns_image_id)
