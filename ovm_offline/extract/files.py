"""Open files and file-system context of a process, as CRIU sees them.

`extract_files` walks the task's fd table into `Fd`s; fds that share one ``struct
file`` (dup, fork) share one `OpenFile`, keyed by the file's address. Pass the same
`cache` dict for every process of a tree to share them across processes too.
`extract_fs` reads ``task->fs``.

What is recorded, and where it differs from the raw kernel value on purpose:

* `OpenFile.flags` is ``f_flags`` without O_CLOEXEC: close-on-exec is per fd
  (`Fd.cloexec`, from the fdtable's close_on_exec bitmap), as CRIU keeps it.
* `OpenFile.owner` is F_GETOWN_EX's view: ``pid_type`` is F_OWNER_TID/PID/PGRP, ``pid``
  is the owner's number in the dumped tree's PID namespace; all zero when no owner is
  set (as CRIU's parasite reports it). ``signum`` is the kernel's (CRIU leaves it 0).
* `OpenFile.kind` comes from the classifier the caller passes (ovm_offline.filekinds);
  each kind's own state is extracted by its kind, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs import dcache
from ..kernel.fs.fdtable import (
    O_CLOEXEC,
    cloexec_fds,
    file_flags,
    file_owner,
    file_pos,
    files_fdtable,
    for_each_file,
    task_files,
)
from ..kernel.fs.fs_struct import fs_pwd, fs_root, fs_umask, task_fs
from ..kernel.fs.locks import file_locks
from ..kernel.task.pid import pid_nr_ns, pid_type
from ..kernel.task.tasks import task_comm, task_pid
from ..state import Fd, FileIdentity, FileKindName, FsState, OpenFile, Owner
from .ghost import Ghosts

__all__ = ["F_OWNER_PGRP", "F_OWNER_PID", "extract_files", "extract_fs", "file_owner_state"]


if TYPE_CHECKING:
    from ..kernel.core.memory import Program

# include/uapi/asm-generic/fcntl.h: struct f_owner_ex types
F_OWNER_TID = 0
F_OWNER_PID = 1
F_OWNER_PGRP = 2


#: tells the kind of a ``struct file`` (ovm_offline.filekinds.classify, by name)
Classifier = Callable[[Pointer], FileKindName]


def extract_files(
    prog: Program,
    task: Struct,
    pid_ns: Pointer | Struct,
    classify: Classifier,
    *,
    cache: dict[int, OpenFile] | None = None,
) -> list[Fd]:
    """The open fds of a ``struct task_struct`` (its files_struct, shared by its threads),
    ascending, each with the common fields of its file and the kind `classify` gives it.
    `pid_ns` is the dumped tree's ``struct pid_namespace``: owner numbers are given as seen
    there. `cache` maps file addresses to OpenFiles already made (for other processes of
    the same tree) and is extended."""
    files = task_files(task)
    if files is None:
        return []
    fdt = files_fdtable(files)
    cloexec = cloexec_fds(fdt)
    if cache is None:
        cache = {}
    out: list[Fd] = []
    for fd, file in for_each_file(files):
        key = int(file)
        of = cache.get(key)
        if of is None:
            of = open_file(file, task, pid_ns, classify)
            cache[key] = of
        out.append(Fd(fd=fd, file=of, cloexec=fd in cloexec))
    return out


def open_file(file: Pointer, task: Struct, pid_ns: Pointer | Struct, classify: Classifier) -> OpenFile:
    """The `OpenFile` of one ``struct file *`` held by `task`, its kind's own state not yet read."""
    try:
        kind = classify(file)
        identity = dcache.file_identity(file)
        of = OpenFile(
            key=int(file),
            kind=kind,
            identity=identity,
            flags=file_flags(file) & ~O_CLOEXEC,
            pos=file_pos(file),
            owner=file_owner_state(file, pid_ns),
            locks=file_locks(file),
        )
    except GuestDataError as e:
        # Name the process and file: the kernel-side message alone does not say whose.
        raise GuestDataError(f"pid {task_pid(task)}: struct file at 0x{int(file):x}: {e}") from None
    return of


def file_owner_state(file: Pointer, pid_ns: Pointer | Struct) -> Owner:
    """F_GETOWN_EX / F_GETOWNER_UIDS state of a ``struct file``: zeros when no owner is
    set or the owner is not visible in `pid_ns`."""
    fown = file_owner(file)
    if fown is None:
        return Owner()
    pid = pid_nr_ns(fown.pid, pid_ns) if fown.pid else 0
    if not pid:
        return Owner()
    prog = file.prog_
    ptype = fown.pid_type
    f_owner_type = {
        pid_type(prog, "PIDTYPE_PID"): F_OWNER_TID,
        pid_type(prog, "PIDTYPE_TGID"): F_OWNER_PID,
        pid_type(prog, "PIDTYPE_PGID"): F_OWNER_PGRP,
    }.get(ptype)
    if f_owner_type is None:
        raise GuestDataError(f"fown_struct at 0x{fown.address_:x} has impossible pid_type {ptype}")
    return Owner(uid=fown.uid.val, euid=fown.euid.val, signum=fown.signum, pid_type=f_owner_type, pid=pid)


def path_identity(path: Struct) -> FileIdentity:
    """The `FileIdentity` of a ``struct path`` (a directory such as cwd or root)."""
    info = dcache.d_path_info(path)
    dcache.refuse_escaped(info, int(path.dentry))
    dentry = path.dentry
    inode = dentry.d_inode
    if not inode:
        raise GuestDataError(f"struct path at 0x{path.address_:x}: dentry 0x{int(dentry):x} has no inode")
    return FileIdentity(
        path=info.path,
        dev=dcache.inode_sb_dev(inode),
        ino=dcache.inode_ino(inode),
        size=dcache.inode_size(inode),
        mode=dcache.inode_mode(inode),
        deleted=info.unlinked,
        mnt_id=int(dcache.real_mount(path.mnt).mnt_id),
    )


def _directory(path: Struct, identity: FileIdentity, which: str, ghosts: Ghosts) -> FileIdentity:
    """The identity of a cwd or root directory as CRIU saves it: a removed one with its ghost
    directory, one in an exited process's /proc directory remapped to that PID."""
    try:
        return ghosts.named(identity, path)
    except UnsupportedError as e:
        raise UnsupportedError(f"its {which}: {e}") from None


def extract_fs(prog: Program, task: Struct, ghosts: Ghosts | None = None) -> FsState:
    """cwd, root and umask of a ``struct task_struct`` (its fs_struct), a removed directory
    with its ghost (pass one `ghosts` for a dump). UnsupportedError when either directory has
    no path to reopen and cannot be saved as a ghost."""
    fs = task_fs(task)
    if fs is None:
        raise GuestDataError(f"pid {task_pid(task)} has no fs_struct (it has exited)")
    ghosts = Ghosts() if ghosts is None else ghosts
    try:
        pwd, root = fs_pwd(fs), fs_root(fs)
        cwd = _directory(pwd, path_identity(pwd), "current directory", ghosts)
        state = FsState(
            cwd=cwd, root=_directory(root, path_identity(root), "root directory", ghosts), umask=fs_umask(fs)
        )
    except GuestDataError as e:
        raise GuestDataError(f"pid {task_pid(task)}: fs_struct at 0x{int(fs):x}: {e}") from None
    except UnsupportedError as e:
        raise UnsupportedError(f"PID {task_pid(task)} ({task_comm(task)}): {e}") from None
    return state
