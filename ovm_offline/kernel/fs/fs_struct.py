"""A task's file-system context (``struct fs_struct``): root, working directory, umask.

``task->fs`` is shared between tasks created with CLONE_FS (threads, usually); its
``root`` and ``pwd`` are ``struct path`` (mount + dentry), what /proc/PID/root and
/proc/PID/cwd resolve to.
"""

from __future__ import annotations

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct

__all__ = ["fs_pwd", "fs_root", "fs_umask", "task_fs"]


#: umask is masked with S_IRWXUGO wherever it is set (kernel/sys.c: umask()).
S_IRWXUGO = 0o777


def task_fs(task: Struct) -> Pointer | None:
    """``task->fs`` (``struct fs_struct *``) of a ``struct task_struct``; None once the
    task has exited (exit_fs clears it) and for kernel threads that dropped it."""
    fs = task.fs
    return fs if fs else None


def _fs(fs: Pointer | Struct) -> Struct:
    if isinstance(fs, Pointer):
        if not fs:
            raise GuestDataError("NULL fs_struct")
        return fs.deref()
    return fs


def fs_root(fs: Pointer | Struct) -> Struct:
    """The root directory (``struct path``) of a ``struct fs_struct``."""
    return _fs(fs).root  # its NULL members are refused as read (invariants.NEVER_NULL)


def fs_pwd(fs: Pointer | Struct) -> Struct:
    """The working directory (``struct path``) of a ``struct fs_struct``."""
    return _fs(fs).pwd


def fs_umask(fs: Pointer | Struct) -> int:
    """The file mode creation mask of a ``struct fs_struct``."""
    f = _fs(fs)
    umask = f.umask
    if umask & ~S_IRWXUGO:
        raise GuestDataError(f"fs_struct at 0x{f.address_:x} has impossible umask 0o{umask & 0xFFFFFFFF:o}")
    return umask
