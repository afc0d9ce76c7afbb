"""The options a file system shows for its super block in /proc/PID/mountinfo (after rw/ro
and the generic ones): each file system's ``s_op->show_options``, told apart by its
``super_operations`` symbol, one function per file system.

Only options these functions can state for certain are formatted; a super block with a
setting they do not render (a NUMA policy or quotas on tmpfs, the options of cgroup v1 or of
a disk file system) has options None: unknown, never a shorter string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.objects import Struct
from ..ds.list import hlist_for_each_entry

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = ["sb_fs_options"]

PAGE_SHIFT = 12
# mm/shmem.c: shmem_format_huge
SHMEM_HUGE_NAMES = {1: "always", 2: "within_size", 3: "advise", -1: "deny", -2: "force"}
SHMEM_DEFAULT_MODE = 0o1777
# include/linux/tty_driver.h (devpts max=)
NR_UNIX98_PTY_MAX = 1 << 20
# fs/proc/root.c hidepid2str (enum proc_hidepid)
HIDEPID_NAMES = {1: "noaccess", 2: "invisible", 4: "ptraceable"}
# fs/ramfs/inode.c
RAMFS_DEFAULT_MODE = 0o755
#: kernel/cgroup/cgroup.c cgroup_show_options, in its order: the CGRP_ROOT_* constant and the
#: option. The constants are of an anonymous enum in include/linux/cgroup-defs.h whose values
#: moved (memory_localevents is 1 << 5 on 5.10, 1 << 17 on 6.1), and kernels lack the newer
#: ones: each is read from the ISF, and one it lacks is an option that kernel cannot show.
CGROUP2_OPTIONS = (
    ("CGRP_ROOT_NS_DELEGATE", "nsdelegate"),
    ("CGRP_ROOT_FAVOR_DYNMODS", "favordynmods"),
    ("CGRP_ROOT_MEMORY_LOCAL_EVENTS", "memory_localevents"),
    ("CGRP_ROOT_MEMORY_RECURSIVE_PROT", "memory_recursiveprot"),
    ("CGRP_ROOT_MEMORY_HUGETLB_ACCOUNTING", "memory_hugetlb_accounting"),
    ("CGRP_ROOT_PIDS_LOCAL_EVENTS", "pids_localevents"),
)


class _Unknown(Exception):
    """A setting the file system shows that this module does not render."""


def _fs_info(sb: Struct, type_name: str) -> Struct:
    return sb.prog_.struct(type_name, int(sb.s_fs_info))


def _totalram_pages(prog: Program) -> int:
    return int(prog["_totalram_pages"].counter)


#: include/linux/fs.h: a super block of the kernel's own mount (shm_mnt), made without the
#: defaults a user's mount gets
SB_KERNMOUNT = 1 << 22
#: tmpfs super blocks looked at for the kernel's inode64 default
MAX_TMPFS_SUPERS = 4096


def tmpfs_defaults_to_inode64(prog: Program) -> bool:
    """Whether the kernel was built with CONFIG_TMPFS_INODE64 (Debian 12's kernels are, Debian
    11's 5.10 is not), which no ISF says: with it, every tmpfs a user mounts without `inode32`
    has 64-bit inode numbers (``shmem_sb_info.full_inums``), so one such mount shows it."""
    supers = hlist_for_each_entry(
        prog,
        "super_block",
        prog["shmem_fs_type"].fs_supers,
        "s_instances",
        name="tmpfs super blocks",
        limit=MAX_TMPFS_SUPERS,
    )
    return any(
        not sb.s_flags & SB_KERNMOUNT and prog.struct("shmem_sb_info", int(sb.s_fs_info)).full_inums for sb in supers
    )


def _shmem(sb: Struct) -> list[str]:
    """mm/shmem.c shmem_show_options (x86-64: no highmem). inode64 or inode32 (5.9+) is shown
    for a kernel built with CONFIG_TMPFS_INODE64, for the others only inode64."""
    info = _fs_info(sb, "shmem_sb_info")
    total = _totalram_pages(sb.prog_)
    options = []
    if int(info.max_blocks) != total // 2:
        options.append(f"size={int(info.max_blocks) << (PAGE_SHIFT - 10)}k")
    if int(info.max_inodes) != total // 2:
        options.append(f"nr_inodes={int(info.max_inodes)}")
    if int(info.mode) != SHMEM_DEFAULT_MODE:
        options.append(f"mode={int(info.mode):03o}")
    if int(info.uid.val):
        options.append(f"uid={int(info.uid.val)}")
    if int(info.gid.val):
        options.append(f"gid={int(info.gid.val)}")
    if info.has_member_("full_inums") and (info.full_inums or tmpfs_defaults_to_inode64(sb.prog_)):
        options.append("inode64" if info.full_inums else "inode32")
    if int(info.huge):
        options.append(f"huge={SHMEM_HUGE_NAMES.get(int(info.huge), 'unknown')}")
    if info.mpol:
        raise _Unknown("a NUMA memory policy")
    if info.has_member_("noswap") and info.noswap:
        options.append("noswap")
    if info.has_member_("qlimits") and any(sb.prog_.read(info.qlimits.address_, info.qlimits.type_.size)):
        raise _Unknown("quota limits")
    return options


def _devpts(sb: Struct) -> list[str]:
    """fs/devpts/inode.c devpts_show_options."""
    opts = _fs_info(sb, "pts_fs_info").mount_opts
    options = []
    if opts.setuid:
        options.append(f"uid={int(opts.uid.val)}")
    if opts.setgid:
        options.append(f"gid={int(opts.gid.val)}")
    options += [f"mode={int(opts.mode):03o}", f"ptmxmode={int(opts.ptmxmode):03o}"]
    if int(opts.max) < NR_UNIX98_PTY_MAX:
        options.append(f"max={int(opts.max)}")
    return options


def _proc(sb: Struct) -> list[str]:
    """fs/proc/root.c proc_show_options."""
    info = _fs_info(sb, "proc_fs_info")
    options = []
    if int(info.pid_gid.val):
        options.append(f"gid={int(info.pid_gid.val)}")
    if int(info.hide_pid):
        options.append(f"hidepid={HIDEPID_NAMES.get(int(info.hide_pid), 'unknown')}")
    if int(info.pidonly):
        options.append("subset=pid")
    return options


def _kernfs(sb: Struct) -> list[str]:
    """kernfs_sop_show_options: sysfs shows none, cgroup2 its root's flags (cgroup v1's are
    not rendered here)."""
    fstype = sb.s_type.name.string_(64)
    if fstype == b"sysfs":
        return []
    if fstype != b"cgroup2":
        raise _Unknown(f"the options of {fstype.decode(errors='replace')}")
    flags = int(sb.prog_["cgrp_dfl_root"].flags)
    bits = ((sb.prog_.symbols.enumerator(constant), option) for constant, option in CGROUP2_OPTIONS)
    return [option for bit, option in bits if bit is not None and flags & bit]


def _ramfs(sb: Struct) -> list[str]:
    """fs/ramfs/inode.c ramfs_show_options."""
    mode = int(_fs_info(sb, "ramfs_fs_info").mount_opts.mode)
    return [f"mode={mode:o}"] if mode != RAMFS_DEFAULT_MODE else []


def _none(sb: Struct) -> list[str]:
    return []


#: super_operations symbol -> the options its file system shows
FS_OPTIONS: dict[str, Callable[[Struct], list[str]]] = {
    "shmem_ops": _shmem,
    "devpts_sops": _devpts,
    "proc_sops": _proc,
    "kernfs_sops": _kernfs,
    "ramfs_ops": _ramfs,
    "mqueue_super_ops": _none,
}


def sb_fs_options(sb: Struct) -> str | None:
    """The file system's own options of a ``struct super_block`` as mountinfo shows them
    ("size=65536k,mode=755,inode64"), or None where they are not known."""
    prog = sb.prog_
    s_op = int(sb.s_op)
    show = next(
        (f for name, f in FS_OPTIONS.items() if prog.has_symbol(name) and prog.symbol_address(name) == s_op), None
    )
    if show is None:
        return None
    try:
        return ",".join(show(sb))
    except _Unknown:
        return None
