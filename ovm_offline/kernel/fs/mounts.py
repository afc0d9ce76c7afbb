"""The mounts of a mount namespace (``struct mnt_namespace``, ``struct mount``) and what
/proc/PID/mountinfo says of each (fs/proc_namespace.c show_mountinfo), the options of the file
systems fs_options.py knows included.

A namespace links its mounts into ``ns->list`` through ``mount.mnt_list`` before 6.8 and into
the rbtree ``ns->mounts`` (by ``mnt_id_unique``) through ``mount.mnt_node`` since; either way
the namespace counts them (``mounts``, then ``nr_mounts``), and a walk that finds another
number is refused.
"""

from __future__ import annotations

from ...errors import GuestDataError
from ...state.ns import MountInfo
from ..core.objects import Pointer, Struct
from ..ds.list import list_for_each_entry
from ..ds.rbtree import rb_inorder
from .dcache import dentry_path, kdev_major, kdev_minor, kernel_text, mount_point_path
from .fs_options import sb_fs_options

__all__ = [
    "MountInfo",
    "mnt_namespace_mounts",
    "mount_info",
    "mountinfo_line",
    "path_reaches_mount",
    "path_walk_mount",
    "task_mnt_ns",
]

#: more mounts than a namespace of any real system holds (the kernel's default mount-max is
#: 100000, but containers hold a few dozen)
MAX_NAMESPACE_MOUNTS = 1 << 14

#: mount ids and peer group ids come from IDAs of ints (fs/namespace.c mnt_alloc_id, mnt_alloc_group_id)
MAX_MOUNT_ID = 1 << 31

# include/linux/mount.h
MNT_NOSUID = 0x01
MNT_NODEV = 0x02
MNT_NOEXEC = 0x04
MNT_NOATIME = 0x08
MNT_NODIRATIME = 0x10
MNT_RELATIME = 0x20
MNT_READONLY = 0x40
MNT_NOSYMFOLLOW = 0x80
MNT_SHARED = 0x1000
MNT_UNBINDABLE = 0x2000
#: show_mnt_opts, in its order
MNT_OPTION_NAMES = (
    (MNT_NOSUID, "nosuid"),
    (MNT_NODEV, "nodev"),
    (MNT_NOEXEC, "noexec"),
    (MNT_NOATIME, "noatime"),
    (MNT_NODIRATIME, "nodiratime"),
    (MNT_RELATIME, "relatime"),
    (MNT_NOSYMFOLLOW, "nosymfollow"),
)
# include/linux/fs.h (super_block.s_flags); show_sb_opts, in its order
SB_RDONLY = 0x01
SB_OPTION_NAMES = ((0x10, "sync"), (0x80, "dirsync"), (0x40, "mand"), (1 << 25, "lazytime"))
#: fs/proc_namespace.c mangle(): characters mountinfo writes as \ooo
_MANGLED = " \t\n\\"


def task_mnt_ns(task: Struct) -> Pointer | None:
    """The ``struct mnt_namespace`` of a ``struct task_struct`` (None once it is exiting)."""
    nsproxy = task.nsproxy
    return nsproxy.mnt_ns if nsproxy else None


def mnt_namespace_mounts(ns: Pointer | Struct) -> list[Struct]:
    """The ``struct mount``s of a ``struct mnt_namespace``, in the order mountinfo lists
    them; GuestDataError when they are not as many as the namespace counts."""
    ns = ns.deref() if isinstance(ns, Pointer) else ns
    prog = ns.prog_
    name = f"mounts of mnt_namespace 0x{ns.address_:x}"
    if ns.has_member_("nr_mounts"):  # 6.8 and later: an rbtree
        count = int(ns.nr_mounts)
        _check_count(count, name)
        root = int(ns.mounts.rb_node)
        offset = prog.member_offset("mount", "mnt_node")
        nodes = rb_inorder(prog, root, name=name, limit=count)
        mounts = [prog.struct("mount", node - offset) for node in nodes]
    else:
        count = int(ns.mounts)
        _check_count(count, name)
        head = ns.list.address_of_()
        walk = list_for_each_entry(prog, "mount", head, "mnt_list", name=name, limit=count, check_prev=True)
        mounts = list(walk)
    if len(mounts) != count:
        raise GuestDataError(f"{name}: the namespace counts {count}, its list holds {len(mounts)}")
    for mount in mounts:
        if int(mount.mnt_ns) != ns.address_:
            raise GuestDataError(f"{name}: mount 0x{mount.address_:x} belongs to namespace 0x{int(mount.mnt_ns):x}")
    return mounts


def _check_count(count: int, name: str) -> None:
    if not 0 < count <= MAX_NAMESPACE_MOUNTS:
        raise GuestDataError(f"{name}: the namespace counts {count} mounts (1 to {MAX_NAMESPACE_MOUNTS} are possible)")


def mount_info(mount: Struct, root: Struct) -> MountInfo:
    """What mountinfo says of a ``struct mount`` to a task whose root is the ``struct path``
    `root` (mount points are relative to it)."""
    sb = mount.mnt.mnt_sb.deref()
    master = mount.mnt_master
    subtype = sb.s_subtype
    fstype = kernel_text(sb.s_type.name.string_(64))
    if subtype:
        fstype += "." + kernel_text(subtype.string_(64))
    devname = mount.mnt_devname
    mnt_flags = int(mount.mnt.mnt_flags)
    options: tuple[str, ...] = ("ro" if mnt_flags & MNT_READONLY else "rw",)
    options += tuple(name for flag, name in MNT_OPTION_NAMES if mnt_flags & flag)
    ids = {
        "id": int(mount.mnt_id),
        "parent's id": int(mount.mnt_parent.mnt_id),
        "peer group": int(mount.mnt_group_id) if mnt_flags & MNT_SHARED else 0,
        "master's peer group": int(master.mnt_group_id) if master else 0,
    }
    for what, value in ids.items():
        if not 0 <= value < MAX_MOUNT_ID:
            raise GuestDataError(f"mount 0x{mount.address_:x}: {what} {value}, which no mount has")
    return MountInfo(
        mnt_id=ids["id"],
        parent_id=ids["parent's id"],
        dev=int(sb.s_dev),
        root=dentry_path(mount.mnt.mnt_root),
        mount_point=mount_point_path(mount, root),
        mount_options=options,
        unbindable=bool(mnt_flags & MNT_UNBINDABLE),
        shared_group=ids["peer group"] if mnt_flags & MNT_SHARED else None,
        master_group=ids["master's peer group"] if master else None,
        fstype=fstype,
        source=kernel_text(devname.string_(4096)) if devname else "none",
        sb_flags=int(sb.s_flags),
        fs_options=sb_fs_options(sb),
    )


def _mangle(text: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in _MANGLED else c for c in text)


def mountinfo_line(info: MountInfo) -> str | None:
    """The line of /proc/PID/mountinfo for `info` (where its file system's own options are not
    known, up to the super block's rw/ro and generic options, which they follow); None for a
    mount the task does not reach."""
    if info.mount_point is None:
        return None
    tags = []
    if info.shared_group is not None:
        tags.append(f"shared:{info.shared_group}")
    if info.master_group is not None:
        tags.append(f"master:{info.master_group}")
    if info.unbindable:
        tags.append("unbindable")
    sb_options = ["ro" if info.sb_flags & SB_RDONLY else "rw"]
    sb_options += [name for flag, name in SB_OPTION_NAMES if info.sb_flags & flag]
    if info.fs_options:
        sb_options.append(info.fs_options)
    return " ".join(
        [
            str(info.mnt_id),
            str(info.parent_id),
            f"{kdev_major(info.dev)}:{kdev_minor(info.dev)}",
            _mangle(info.root),
            _mangle(info.mount_point),
            ",".join(info.mount_options),
            *tags,
            "-",
            _mangle(info.fstype),
            _mangle(info.source),
            ",".join(sb_options),
        ]
    )


def path_walk_mount(path: str, mounts: list[Struct]) -> Struct | None:
    """The ``struct mount`` a walk of the absolute `path` from the root of `mounts`' namespace
    ends on (one of `mounts`, as mnt_namespace_mounts lists them): at each step down, onto
    whatever is mounted there, and onto what is mounted over that (kernel follow_mount). A name
    through a mount that another hides is not this mount's. None when no mount is the root."""
    by_address = {m.address_: m for m in mounts}
    over: dict[tuple[int, str], int] = {}  # (parent mount, mount point) -> the mount on it
    root = None
    for mount in mounts:
        parent = int(mount.mnt_parent)
        if parent == mount.address_ or parent not in by_address:
            root = root or mount.address_
            continue
        point = mount_point_path(mount)
        if point is not None:
            over[(parent, point)] = mount.address_  # the later of two on one point: mounted last
    found = walk_mount_points(path, root, over) if root is not None else None
    return by_address[found] if found is not None else None


def path_reaches_mount(path: str, mount: Struct, mounts: list[Struct]) -> bool:
    """Whether a walk of the absolute `path` from the root of `mounts`' namespace ends on the
    ``struct mount`` `mount`, not on another mounted over the way (criu's dump opens a name and
    keeps it only when it gives back what it named)."""
    reached = path_walk_mount(path, mounts)
    return reached is not None and reached.address_ == mount.address_


def walk_mount_points(path: str, root: int, over: dict[tuple[int, str], int]) -> int:
    """The mount (a key of `over`'s) a walk of `path` ends on, from the mount `root`; `over`
    maps (a mount, a path on it) to the mount on top there. Each step is bounded by the number
    of mounts, so a guest's loop of mounts over each other ends."""
    parts = [p for p in path.split("/") if p]
    mount = root
    for depth in range(len(parts) + 1):
        prefix = "/" + "/".join(parts[:depth])
        for _ in range(len(over)):
            top = over.get((mount, prefix))
            if top is None or top == mount:
                break
            mount = top
    return mount
