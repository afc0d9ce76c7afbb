"""procfs (fs/proc/): which process's directory a /proc file is in, whether that process is
gone, and the PID namespace a proc mount shows.

When a process is released, proc_flush_pid() invalidates the dentry of its /proc/PID
directory: a file opened below it, or a cwd in it, keeps the unhashed dentry, and /proc/PID
no longer resolves (unless the number is taken again, by a new ``struct pid``).
"""

from __future__ import annotations

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from .dcache import MAX_COMPONENTS, d_unhashed, dentry_name

__all__ = ["PROC_SUPER_MAGIC", "proc_pid_dir", "proc_pid_dir_gone", "proc_sb_pid_ns", "super_block_is_proc"]

#: include/uapi/linux/magic.h
PROC_SUPER_MAGIC = 0x9FA0


def super_block_is_proc(sb: Pointer) -> bool:
    """Is ``struct super_block *`` `sb` a procfs one?"""
    return bool(sb) and int(sb.s_magic) == PROC_SUPER_MAGIC


def proc_pid_dir(dentry: Pointer | Struct) -> tuple[int, Struct] | None:
    """The number and ``struct dentry`` of the /proc/PID directory that procfs `dentry` is or
    is below; None for a file that is not below one (/proc itself, /proc/meminfo, /proc/sys/...).
    The number is a PID in the mount's namespace (proc_sb_pid_ns)."""
    prog = dentry.prog_
    d = dentry.deref() if isinstance(dentry, Pointer) else dentry
    root = int(d.d_sb.s_root)
    for _ in range(MAX_COMPONENTS):
        if d.address_ == root:
            return None
        parent = d.d_parent
        if not parent:
            raise GuestDataError(f"dentry 0x{d.address_:x} has no parent")
        if int(parent) == root:
            name = dentry_name(d)
            # fs/proc/base.c name_to_int: decimal, no leading zero, fits an unsigned int
            if not name.isdigit() or (len(name) > 1 and name[:1] == b"0") or int(name) > 0xFFFFFFFF:
                return None
            return int(name), prog.struct("dentry", d.address_)
        if int(parent) == d.address_:
            return None  # a disconnected dentry: not reached from the mount's root
        d = parent.deref()
    raise GuestDataError(f"dentry 0x{d.address_:x}: more than {MAX_COMPONENTS} parents (a loop)")


def proc_pid_dir_gone(pid_dir: Struct) -> bool:
    """Has the process of a /proc/PID directory's dentry been released (proc_flush_pid)?"""
    return d_unhashed(pid_dir)


def proc_sb_pid_ns(sb: Pointer) -> Pointer:
    """The ``struct pid_namespace *`` whose PIDs a procfs ``struct super_block`` shows
    (``proc_fs_info.pid_ns``, the layout since 5.8)."""
    info = sb.prog_.struct("proc_fs_info", int(sb.s_fs_info))
    ns = info.pid_ns
    if not ns:
        raise GuestDataError(f"proc super_block 0x{int(sb):x} has no PID namespace")
    return ns
