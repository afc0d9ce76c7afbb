"""A whole process, as the dump writes it."""

from __future__ import annotations

import dataclasses
from typing import Literal

from .files import Fd, FsState
from .mm import MmState
from .ns import NamespaceIds
from .task import Itimer, PosixTimer, QueuedSignal, SigAction, ThreadState

#: What CRIU records of a process's state (task_core_entry.task_state).
TaskStateName = Literal["alive", "stopped", "zombie", "dead"]

__all__ = ["ProcessState", "TaskStateName"]


@dataclasses.dataclass
class ProcessState:
    pid: int  # inside the dumped tree's PID namespace
    global_pid: int
    ppid: int  # 0 for the dumped tree's root
    pgid: int
    sid: int
    comm: str
    task_state: TaskStateName
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
    threads: list[ThreadState]  # the leader first; none for a zombie
    mm: MmState | None  # None for a zombie, as fs: it has left them
    fds: list[Fd]
    fs: FsState | None
    namespaces: NamespaceIds  # a zombie's are its parent's (it has left its own)
    cgroup: str  # v2 path
    # identities of kernel objects shared between tasks (mm, files, fs, sighand): equal keys
    # mean shared objects; CRIU's ids image numbers them
    mm_key: int = 0
    files_key: int = 0
    fs_key: int = 0
    sighand_key: int = 0
    # the signal that stopped a stopped process (CRIU 4.x sends it again at restore; 3.x SIGSTOP)
    stop_signal: int | None = None
