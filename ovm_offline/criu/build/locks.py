"""filelocks.img: the file locks and leases a dumped tree holds, as `criu dump --file-locks`
writes them (criu/file-lock.c).

CRIU finds locks in each fd's fdinfo ("lock:" lines: the locks taken through that open file
and owned by the process's fd table or by the file itself) and keeps them only for the first
fd of each open file it meets, processes in pstree order and fds ascending: a later fd of the
same file drops its locks as duplicates (discard_dup_locks_tail). `criu restore --file-locks`
takes each lock again through that fd, in the process that holds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from ...state import OFFSET_MAX, FileLock, ProcessState
from .common import F

__all__ = ["HeldLock", "file_lock_entries", "held_locks"]

#: criu/include/file-lock.h: the entry's flag per kind of lock
CRIU_LOCK_FLAGS = {"posix": 1, "flock": 2, "ofd": 4, "lease": 8}


@dataclasses.dataclass(frozen=True)
class HeldLock:
    """A lock of the dumped tree and the fd CRIU restores it through."""

    pid: int  # in the dumped tree's PID namespace
    global_pid: int
    comm: str
    fd: int
    path: str
    lock: FileLock


def held_locks(processes: Sequence[ProcessState]) -> Iterator[HeldLock]:
    """Every lock the processes hold, each with the fd CRIU's images name for it."""
    seen_files: set[int] = set()
    seen_tables: set[int] = set()
    for proc in processes:
        if proc.files_key in seen_tables:
            continue  # a thread group sharing another's fd table: its fds were met there
        seen_tables.add(proc.files_key)
        for fd in proc.fds:
            if fd.file.key in seen_files:
                continue
            seen_files.add(fd.file.key)
            for lock in fd.file.locks:
                if lock.owner_key in (proc.files_key, fd.file.key):
                    yield HeldLock(proc.pid, proc.global_pid, proc.comm, fd.fd, fd.file.identity.path, lock)


def file_lock_entry(held: HeldLock) -> F.file_lock_entry:
    lock = held.lock
    length = 0 if lock.end == OFFSET_MAX else lock.end - lock.start + 1
    return F.file_lock_entry(
        flag=CRIU_LOCK_FLAGS[lock.kind], type=lock.type, pid=held.pid, fd=held.fd, start=lock.start, len=length
    )


def file_lock_entries(processes: Sequence[ProcessState]) -> list[F.file_lock_entry]:
    return [file_lock_entry(h) for h in held_locks(processes)]
