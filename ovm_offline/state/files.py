"""Open files (the common part of every kind; each kind's own state is in
ovm_offline.filekinds) and the file-system context."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Literal

from .mm import FileIdentity

__all__ = ["OFFSET_MAX", "Owner", "FileKindName", "FileLock", "FileLockKind", "FileState", "OpenFile", "Fd", "FsState"]


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
    "nsfs",
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
    locks: list[FileLock] = field(default_factory=list)  # taken through this file, by anyone


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


FileLockKind = Literal["posix", "ofd", "flock", "lease"]
#: include/linux/fs.h OFFSET_MAX: a lock's end when it runs to the end of the file ("EOF")
OFFSET_MAX = (1 << 63) - 1


@dataclasses.dataclass(frozen=True)
class FileLock:
    """One lock or lease on an inode, as /proc/locks shows it: `type` F_RDLCK (0) or F_WRLCK
    (1), bytes `start`..`end` inclusive (end OFFSET_MAX: to the end of the file); `file_key`
    the ``struct file`` it was taken through and `owner_key` its owner (the files_struct of a
    POSIX lock's process, else the file itself), both by address."""

    kind: FileLockKind
    type: int
    start: int
    end: int
    pid: int
    file_key: int
    owner_key: int
    breaking: bool = False  # a lease someone's open is breaking (FL_UNLOCK_PENDING/FL_DOWNGRADE_PENDING)
