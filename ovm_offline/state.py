"""Plain dataclasses that carry extracted state from the kernel side to the CRIU side.

The kernel side (ovm_offline.extract, over ovm_offline.kernel) fills them from guest memory;
the CRIU side (ovm_offline.criu) turns them into image messages. Neither side imports the
other. Values are as the guest's kernel holds them unless a field says otherwise; PIDs are
as seen inside the dumped tree's PID namespace unless named `global_*`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Literal

# --- registers and CPU state -----------------------------------------------------------------

REGISTER_NAMES = (
    "r15",
    "r14",
    "r13",
    "r12",
    "bp",
    "bx",
    "r11",
    "r10",
    "r9",
    "r8",
    "ax",
    "cx",
    "dx",
    "si",
    "di",
    "orig_ax",
    "ip",
    "cs",
    "flags",
    "sp",
    "ss",
    "fs_base",
    "gs_base",
    "ds",
    "es",
    "fs",
    "gs",
)


@dataclasses.dataclass
class Registers:
    """User registers in user_regs_struct order (what ptrace GETREGS gives and CRIU stores),
    after the syscall-restart fix-ups CRIU's own dump applies."""

    r15: int = 0
    r14: int = 0
    r13: int = 0
    r12: int = 0
    bp: int = 0
    bx: int = 0
    r11: int = 0
    r10: int = 0
    r9: int = 0
    r8: int = 0
    ax: int = 0
    cx: int = 0
    dx: int = 0
    si: int = 0
    di: int = 0
    orig_ax: int = 0
    ip: int = 0
    cs: int = 0
    flags: int = 0
    sp: int = 0
    ss: int = 0
    fs_base: int = 0
    gs_base: int = 0
    ds: int = 0
    es: int = 0
    fs: int = 0
    gs: int = 0


@dataclasses.dataclass
class FpuState:
    """FPU/SSE/AVX state. `fxsave` is the 512-byte legacy area (cwd, swd, twd, fop, rip, rdp,
    mxcsr, mxcsr_mask, st_space, xmm_space); `xstate_bv` and `components` come from the XSAVE
    header and extended areas (component number -> its bytes in standard, non-compacted form),
    or are None/empty when the task has no XSAVE state beyond the legacy area."""

    fxsave: bytes
    xstate_bv: int | None = None
    components: dict[int, bytes] = field(default_factory=dict)


@dataclasses.dataclass
class TlsEntry:
    """One GDT TLS slot (struct user_desc as CRIU stores it)."""

    entry_number: int
    base_addr: int
    limit: int
    seg_32bit: bool
    contents: int  # 2 bits
    read_exec_only: bool
    limit_in_pages: bool
    seg_not_present: bool
    usable: bool


# --- signals, credentials, timers, limits -----------------------------------------------------


@dataclasses.dataclass
class SigAction:
    handler: int
    flags: int
    restorer: int
    mask: int


@dataclasses.dataclass
class QueuedSignal:
    siginfo: bytes  # 128 bytes, the kernel's siginfo as CRIU stores it


@dataclasses.dataclass
class Credentials:
    uid: int
    gid: int
    euid: int
    egid: int
    suid: int
    sgid: int
    fsuid: int
    fsgid: int
    cap_inh: int
    cap_prm: int
    cap_eff: int
    cap_bnd: int
    secbits: int
    groups: list[int] = field(default_factory=list)


@dataclasses.dataclass
class Itimer:
    """Interval and remaining value, in microseconds (remaining is as of the snapshot)."""

    interval_us: int
    value_us: int


@dataclasses.dataclass
class PosixTimer:
    timer_id: int
    clock_id: int
    signal: int
    notify: int  # sigev_notify
    notify_thread_id: int
    sival_ptr: int
    overrun: int
    interval_ns: int
    value_ns: int  # remaining


@dataclasses.dataclass
class Rseq:
    abi_pointer: int
    abi_size: int
    signature: int
    cs_pointer: int = 0


@dataclasses.dataclass
class ThreadState:
    """What is per thread: registers, FPU, signal mask and queue, stacks, credentials."""

    tid: int  # inside the dumped tree's PID namespace
    global_tid: int
    comm: str
    state: str  # ps letter of the thread: S, T, R, D, ...
    regs: Registers
    fpu: FpuState
    tls: list[TlsEntry]
    clear_tid_addr: int
    blocked: int  # signal mask, bit n-1 = signal n
    pending: list[QueuedSignal]  # per-thread queue
    pending_mask: int
    sas_sp: int
    sas_size: int
    sas_flags: int
    robust_list: int
    robust_list_len: int
    rseq: Rseq | None
    sched_policy: int
    sched_nice: int
    sched_prio: int
    creds: Credentials
    seccomp_mode: int
    syscall_restarted: bool = False  # registers were rewritten so the interrupted syscall restarts
    pdeath_signal: int = 0  # prctl(PR_SET_PDEATHSIG); CRIU stores it only when nonzero


# --- memory ----------------------------------------------------------------------------------


@dataclasses.dataclass
class FileIdentity:
    """What names an open file or mapped file: enough to find it again and to tell two
    struct files (or two inodes) apart."""

    path: str
    dev: int
    ino: int
    size: int
    mode: int
    deleted: bool = False  # unlinked: `path` is where it was (no " (deleted)" suffix)
    build_id: bytes | None = None  # NT_GNU_BUILD_ID of an ELF file, from the page cache


@dataclasses.dataclass
class Vma:
    start: int
    end: int
    pgoff: int  # bytes
    prot: int  # PROT_*
    flags: int  # MAP_*
    kind: str  # "anon", "file", "heap", "stack", "vdso", "vvar", "vsyscall"
    file: FileIdentity | None = None
    file_flags: int = 0  # O_* of the mapped struct file
    madvise: int = 0  # MADV_* bits CRIU records (1 << MADV_x)
    shared: bool = False
    shmem: SharedMemory | None = None  # the file is on the kernel's internal shmem mount


@dataclasses.dataclass
class PageRun:
    """Present user pages to save: `length` bytes at user `vaddr`, guest-physically contiguous
    at `paddr` (so the writer can copy them from the source in one go)."""

    vaddr: int
    paddr: int
    length: int
    lazy: bool = False  # CRIU marks these pages PE_LAZY (anonymous private memory)


@dataclasses.dataclass
class SharedMemory:
    """A file of the kernel's internal shmem mount that a VMA maps: anonymous shared memory
    (MAP_SHARED|MAP_ANONYMOUS, named "/dev/zero"), a memfd, or a System V segment (`sysv`;
    its inode number is the shmid). CRIU 3.17 saves the first two as memfd inodes, the
    contents of all of them as a shmem pagemap named by `ino`."""

    ino: int
    name: str  # the path without " (deleted)" and "/memfd:", as memfd.img names it
    uid: int
    gid: int
    size: int  # i_size in bytes
    seals: int  # F_GET_SEALS
    pages: list[PageRun]  # vaddr = offset in the file: the data pages lseek(SEEK_DATA) finds
    swapped_pages: int = 0  # data pages swapped out: not in memory, not saved
    sysv: bool = False


@dataclasses.dataclass
class MmState:
    start_code: int
    end_code: int
    start_data: int
    end_data: int
    start_stack: int
    start_brk: int
    brk: int
    arg_start: int
    arg_end: int
    env_start: int
    env_end: int
    auxv: list[int]  # (type, value) words up to and including AT_NULL, at most 44 (CRIU's limit)
    exe_file: FileIdentity | None
    vmas: list[Vma]
    dumpable: int
    thp_disabled: bool
    pages: list[PageRun]  # ascending vaddr, only inside private VMAs CRIU dumps
    swapped_pages: int = 0  # present in no dump: counted and reported
    zero_pages: int = 0  # mapped to the zero page: not saved, as CRIU does


# --- files -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Owner:
    """F_SETOWN state (struct fown_struct)."""

    uid: int = 0
    euid: int = 0
    signum: int = 0
    pid_type: int = 0
    pid: int = 0


#: What an open file is, in CRIU's terms (ovm_offline.filekinds has one row per kind).
FileKindName = Literal[
    "reg",
    "tty",
    "pipe",
    "fifo",
    "unix",
    "inet",
    "netlink",
    "packet",
    "socket",
    "eventfd",
    "signalfd",
    "timerfd",
    "eventpoll",
    "inotify",
    "fanotify",
    "pidfd",
    "userfaultfd",
    "io_uring",
    "bpf-map",
    "bpf-prog",
    "perf",
    "memfd",
    "memfd-secret",
    "anon",
]


class FileState:
    """Base of the state a kind of open file carries beyond the common fields (each kind's own
    dataclass, in its ovm_offline.filekinds module): `OpenFile.state` is a tagged union of them."""


@dataclasses.dataclass
class OpenFile:
    """One struct file. Several fds (and processes) may share it: `key` tells (its address).
    `state` is its kind's own state, None until extracted (and for kinds with none of their own:
    regular files, and kinds that are refused)."""

    key: int
    kind: FileKindName
    identity: FileIdentity
    flags: int  # f_flags (O_*)
    pos: int
    owner: Owner = field(default_factory=Owner)
    state: FileState | None = None


@dataclasses.dataclass
class Fd:
    fd: int
    file: OpenFile
    cloexec: bool


@dataclasses.dataclass
class FsState:
    cwd: FileIdentity
    root: FileIdentity
    umask: int


@dataclasses.dataclass
class CgroupPerms:
    """Mode (with the file type bits), owner and group of a cgroup file or directory."""

    mode: int
    uid: int
    gid: int


@dataclasses.dataclass
class CgroupProperty:
    """A file of a cgroup directory CRIU saves (for cgroup.procs only its permissions)."""

    name: str
    value: str
    perms: CgroupPerms | None = None


@dataclasses.dataclass
class CgroupDir:
    """A directory of the cgroup v2 hierarchy: the cgroup of a dumped task, or one below
    it (CRIU saves the whole subtree so that restore can recreate it). `path` is from the
    hierarchy's root ("/ovmbox"); children are in readdir order."""

    path: str
    perms: CgroupPerms
    properties: list[CgroupProperty] = field(default_factory=list)
    children: list[CgroupDir] = field(default_factory=list)


# --- the process -----------------------------------------------------------------------------


@dataclasses.dataclass
class NamespaceIds:
    """Namespace inode numbers (the kernel's ns_common.inum); None for a kind of namespace the
    guest's kernel does not have (time namespaces before 5.6)."""

    pid: int | None
    net: int | None
    ipc: int | None
    uts: int | None
    mnt: int | None
    user: int | None
    cgroup: int | None
    time: int | None


@dataclasses.dataclass
class IpcShmSegment:
    """A System V shared memory segment (``struct shmid_kernel``) as ipcns-shm.img holds it."""

    id: int  # the shmid (IDR index plus sequence number)
    key: int  # the IPC key as an unsigned 32-bit number (IPC_PRIVATE is 0)
    uid: int
    gid: int
    cuid: int
    cgid: int
    mode: int  # permission bits plus SHM_DEST/SHM_LOCKED as the kernel keeps them
    size: int  # shm_segsz in bytes
    contents: SharedMemory  # its shmem file (inode number = id) and the pages to save


@dataclasses.dataclass
class IpcNamespaceState:
    """An IPC namespace of its own around the dumped tree (CRIU saves it only then): the
    sysctls ipcns-var.img holds (kernel.sem, msg*, shm*, fs.mqueue.*; next ids None while
    unset, i.e. -1) and the System V shared memory segments, in id index order."""

    inum: int
    sem_ctls: list[int]  # semmsl, semmns, semopm, semmni
    msg_ctlmax: int
    msg_ctlmnb: int
    msg_ctlmni: int
    shm_ctlmax: int
    shm_ctlall: int
    shm_ctlmni: int
    shm_rmid_forced: int
    mq_queues_max: int
    mq_msg_max: int
    mq_msgsize_max: int
    mq_msg_default: int
    mq_msgsize_default: int
    msg_next_id: int | None = None
    sem_next_id: int | None = None
    shm_next_id: int | None = None
    shm_segments: list[IpcShmSegment] = field(default_factory=list)


@dataclasses.dataclass
class ProcessState:
    pid: int  # inside the dumped tree's PID namespace
    global_pid: int
    ppid: int  # 0 for the dumped tree's root
    pgid: int
    sid: int
    comm: str
    task_state: str  # "alive", "stopped", "zombie", "dead"
    exit_code: int
    personality: int
    flags: int  # PF_*
    sigactions: list[SigAction]  # index n-1 = signal n, all 64
    shared_pending: list[QueuedSignal]
    shared_pending_mask: int
    itimers: dict[str, Itimer]  # "real", "virt", "prof"
    posix_timers: list[PosixTimer]
    rlimits: list[tuple[int, int]]  # (cur, max) per RLIMIT_*, 2**64-1 = unlimited
    oom_score_adj: int
    loginuid: int
    child_subreaper: bool
    threads: list[ThreadState]  # the leader first
    mm: MmState
    fds: list[Fd]
    fs: FsState
    namespaces: NamespaceIds
    cgroup: str  # v2 path
    # identities of kernel objects shared between tasks (mm, files, fs, sighand): equal keys
    # mean shared objects; CRIU's ids image numbers them
    mm_key: int = 0
    files_key: int = 0
    fs_key: int = 0
    sighand_key: int = 0
