"""Paths of files (``struct path``, ``struct dentry``, ``struct mount``) and inode facts.

`d_path` does what the kernel's fs/d_path.c does for /proc/PID/maps and the
/proc/PID/fd links: names from the dentry up its ``d_parent`` chain to the root of
its mount, then across to the mount point (``mount->mnt_mountpoint``) in the parent
mount (``mnt_parent``), until the root (a given ``struct path``, e.g. the task's
``fs->root``, or else the root of the mount tree). Pseudo files (pipes, sockets,
anon inodes, namespaces, shmem/memfd) have no path: their dentry operations name
them (``d_op->d_dname``), and we recognise those functions by symbol.

Every walk is bounded: a path is at most PATH_MAX bytes and crosses at most
MAX_MOUNT_DEPTH mounts; a looping chain is a GuestDataError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ...errors import GuestDataError, UnsupportedError
from ...state import FileIdentity
from ..core.invariants import broken
from ..core.objects import Object, Pointer, Struct
from ..ns.nsproxy import ns_common_name

__all__ = [
    "component_name",
    "d_path",
    "d_path_info",
    "refuse_escaped",
    "dentry_name",
    "dentry_path",
    "file_identity",
    "file_path",
    "inode_ino",
    "inode_sb_dev",
    "inode_time",
    "mount_point_path",
    "dentry_path_through",
    "new_encode_dev",
]


if TYPE_CHECKING:
    from ..core.memory import Program

#: include/uapi/linux/limits.h
PATH_MAX = 4096
NAME_MAX = 255
#: More nested mounts than any real system has (the kernel's default mount-max is 100000
#: mounts per namespace, but nesting depth is far lower in practice).
MAX_MOUNT_DEPTH = 4096
#: "/a" per component: a path of PATH_MAX bytes has at most PATH_MAX / 2 components.
MAX_COMPONENTS = PATH_MAX // 2 + 1

DELETED_SUFFIX = " (deleted)"

# include/uapi/linux/stat.h
S_IFMT = 0o170000
S_IFREG = 0o100000
S_IFDIR = 0o040000
S_IFCHR = 0o020000
S_IFBLK = 0o060000
S_IFIFO = 0o010000
S_IFLNK = 0o120000
S_IFSOCK = 0o140000

# include/linux/kdev_t.h: the kernel's internal dev_t is MAJOR << 20 | MINOR
MINORBITS = 20
MINORMASK = (1 << MINORBITS) - 1


class PathInfo(NamedTuple):
    """What `d_path_info` found: the path without the " (deleted)" suffix, whether the
    dentry is unlinked, whether the name came from d_op->d_dname (a pseudo file such as
    "pipe:[123]", not a path in any file system), and whether the walk reached the root
    it was asked for (False: the file is outside it, or on a detached mount)."""

    path: str
    unlinked: bool
    pseudo: bool
    reachable: bool
    escaped: bool = False  # the walk met a dentry that is its own parent below its mount's root


def _addr(obj: Object | int) -> int:
    if isinstance(obj, Pointer):
        return int(obj)
    if isinstance(obj, Object):
        return obj.address_
    return int(obj)


def _dentry(prog: Program, obj: Object | int) -> Struct:
    return prog.struct("dentry", _addr(obj))


def dentry_name(dentry: Pointer | Struct) -> bytes:
    """The name (``d_name``, one path component, at most NAME_MAX bytes) of a
    ``struct dentry``."""
    d = _dentry(dentry.prog_, dentry)
    qstr = d.d_name
    n = qstr.len
    if n > NAME_MAX:
        raise GuestDataError(f"dentry 0x{d.address_:x} has a name of {n} bytes (NAME_MAX is {NAME_MAX})")
    if n == 0:
        return b""
    return d.prog_.read(int(qstr.name), n)


def component_name(dentry: Pointer | Struct) -> str:
    """The name of a ``struct dentry`` below its file system's root, as one path component:
    never empty and never holding a '/' (lookup refuses both; only a root's name is "/")."""
    name = kernel_text(dentry_name(dentry))
    if not name or "/" in name:
        raise broken("dentry.d_name", f"dentry 0x{_addr(dentry):x} below its root", f"is named {name!r}")
    return name


def d_unhashed(dentry: Pointer | Struct) -> bool:
    """Is a ``struct dentry`` out of the dcache hash (``d_hash.pprev == NULL``)?"""
    return not _dentry(dentry.prog_, dentry).d_hash.pprev


def is_root(dentry: Pointer | Struct) -> bool:
    """IS_ROOT: is the ``struct dentry`` its own parent (the root of its file system,
    or a disconnected dentry)?"""
    d = _dentry(dentry.prog_, dentry)
    return int(d.d_parent) == d.address_


def d_unlinked(dentry: Pointer | Struct) -> bool:
    """d_unlinked: unhashed and not a root, i.e. the file was deleted (or never had a
    name, as shmem/memfd files)."""
    return d_unhashed(dentry) and not is_root(dentry)


def real_mount(vfsmnt: Pointer | Struct) -> Struct:
    """The ``struct mount`` that embeds a ``struct vfsmount`` (fs/mount.h real_mount)."""
    return vfsmnt.prog_.container_of(_addr(vfsmnt), "mount", "mnt")


def kernel_text(raw: bytes) -> str:
    """A kernel name or path (bytes in Linux) as text; undecodable bytes are kept reversibly
    (surrogateescape) rather than failing."""
    return raw.decode("utf-8", "surrogateescape")


def _d_dname_name(prog: Program, dentry: Struct) -> tuple[str, bool] | None:
    """(name, always " (deleted)") that d_op->d_dname gives a pseudo ``struct dentry``, or
    None when it has no d_dname (a real file). Only the kernel's own d_dname functions are
    known; others are named "<name>:[ino]" after their dentry like most of them are."""
    d_op = dentry.d_op
    if not d_op:
        return None
    fn = int(d_op.d_dname)
    if not fn:
        return None
    inode = dentry.d_inode
    ino = inode.i_ino if inode else 0
    name = kernel_text(dentry_name(dentry))

    def is_fn(sym: str) -> bool:
        return prog.has_symbol(sym) and prog.symbol_address(sym) == fn

    if is_fn("pipefs_dname"):
        return f"pipe:[{ino}]", False
    if is_fn("sockfs_dname"):
        return f"socket:[{ino}]", False
    if is_fn("anon_inodefs_dname"):
        return f"anon_inode:{name}", False
    if is_fn("ns_dname"):
        # fs/nsfs.c: the inode's i_private is the namespace's struct ns_common, whose ops name
        # its type (d_fsdata held the ops too before 6.9, and no longer does)
        private = int(inode.i_private) if inode else 0
        ns_name = ns_common_name(prog.struct("ns_common", private)) if private else None
        return f"{kernel_text(ns_name) if ns_name is not None else '?'}:[{ino}]", False
    if is_fn("simple_dname"):
        # fs/d_path.c: "/" + d_name + " (deleted)", for pseudo files of an internal mount
        # (shmem "dev/zero" of shared anonymous memory, "memfd:NAME"); the caller adds
        # the suffix (these dentries are their own parent, so never d_unlinked).
        return "/" + name, True
    if is_fn("dmabuffs_dname"):
        return f"/dmabuf:{name}", False
    return f"{name}:[{ino}]", False


def _names_to_fs_root(dentry: Struct) -> list[str]:
    """Names of `dentry` and its ancestors up to (not including) the root of its file
    system, innermost first."""
    names: list[str] = []
    total = 0
    d = dentry
    seen: set[int] = set()
    while True:
        parent = int(d.d_parent)
        if parent == d.address_ or not parent:
            return names
        if d.address_ in seen or len(names) >= MAX_COMPONENTS:
            raise GuestDataError(
                f"dentry 0x{dentry.address_:x}: d_parent chain loops or is deeper than {MAX_COMPONENTS} components"
            )
        seen.add(d.address_)
        name = component_name(d)
        total += len(name) + 1
        if total > PATH_MAX:
            raise GuestDataError(f"dentry 0x{dentry.address_:x}: path longer than PATH_MAX ({PATH_MAX})")
        names.append(name)
        d = d.prog_.struct("dentry", parent)


def d_path_info(path: Struct, root: Struct | None = None) -> PathInfo:
    """Resolve a ``struct path`` to its absolute name, relative to `root` (a ``struct
    path``: the task's fs->root for what that task sees) or to the root of its mount tree.

    As the kernel's __prepend_path: at the root dentry of a mount, continue at its mount
    point in the parent mount; a dentry that is its own parent before the root (a file
    outside `root`, "escaped") ends the walk, as does the top mount of a tree."""
    prog = path.prog_
    dentry = _dentry(prog, path.dentry)
    mnt = real_mount(path.mnt)  # never NULL: invariants.NEVER_NULL
    if int(dentry.d_sb) != int(mnt.mnt.mnt_sb):
        raise broken(
            "dentry.d_sb of a mount",
            f"struct path at 0x{path.address_:x}",
            f"dentry 0x{dentry.address_:x} is of super block 0x{int(dentry.d_sb):x},"
            f" its mount of 0x{int(mnt.mnt.mnt_sb):x}",
        )
    pseudo = _d_dname_name(prog, dentry)
    unlinked = d_unlinked(dentry)
    if pseudo is not None:
        return PathInfo(pseudo[0], pseudo[1] or unlinked, True, True)
    names, reachable = _prepend_path(prog, int(path.dentry), dentry, mnt, root)
    return PathInfo("/" + "/".join(reversed(names)), unlinked, False, bool(reachable), reachable is None)


def _prepend_path(
    prog: Program, start: int, dentry: Struct, mnt: Struct, root: Struct | None
) -> tuple[list[str], bool | None]:
    """The names from `dentry` (of ``struct mount`` `mnt`) up to `root` or the top of the mount
    tree, last first, and whether the file is reachable from there (the kernel's
    __prepend_path): None where the walk escaped, at a dentry that is its own parent but not
    its mount's root. `start` names the walk in errors."""
    root_dentry = int(root.dentry) if root is not None else None
    root_mnt = int(root.mnt) if root is not None else None
    names: list[str] = []
    total = 0
    seen_mounts: set[int] = set()
    steps = 0
    while True:
        d_addr = dentry.address_
        mnt_vfs = mnt.address_ + prog.member_offset("mount", "mnt")
        if root is not None and d_addr == root_dentry and mnt_vfs == root_mnt:
            return names, True
        steps += 1
        if steps > MAX_COMPONENTS + MAX_MOUNT_DEPTH:
            raise GuestDataError(
                f"d_path of dentry 0x{start:x}: more than {MAX_COMPONENTS} components or {MAX_MOUNT_DEPTH} mounts: looping"
            )
        parent = int(dentry.d_parent)
        if d_addr == int(mnt.mnt.mnt_root):
            m = mnt.mnt_parent
            if int(m) != mnt.address_ and m:
                if mnt.address_ in seen_mounts or len(seen_mounts) >= MAX_MOUNT_DEPTH:
                    raise GuestDataError(
                        f"d_path of dentry 0x{start:x}: mount chain loops or is deeper than {MAX_MOUNT_DEPTH}"
                    )
                seen_mounts.add(mnt.address_)
                dentry = _dentry(prog, mnt.mnt_mountpoint)
                mnt = prog.struct("mount", int(m))
                continue
            # The top of the mount tree: the root asked for is not above this file
            # (unless none was asked for); a detached mount (no namespace) is unreachable.
            return names, root is None and bool(mnt.mnt_ns)
        if parent == d_addr or not parent:
            return names, None  # escaped: a disconnected dentry (or a forged d_parent)
        name = component_name(dentry)
        total += len(name.encode("utf-8", "surrogateescape")) + 1
        if total > PATH_MAX:
            raise GuestDataError(f"d_path of dentry 0x{start:x}: longer than PATH_MAX ({PATH_MAX})")
        names.append(name)
        dentry = _dentry(prog, parent)


def mount_point_path(mount: Struct, root: Struct | None = None) -> str | None:
    """Where a ``struct mount`` is mounted, seen from the ``struct path`` `root` (or from the
    root of its namespace): mountinfo's mount point, the path of the mount's root dentry on it,
    with no " (deleted)"; None when `root` does not reach it."""
    return dentry_path_through(mount.mnt.mnt_root.deref(), mount, root)


def dentry_path_through(dentry: Struct, mount: Struct, root: Struct | None = None) -> str | None:
    """The path of a ``struct dentry`` through ``struct mount`` `mount`, seen from the ``struct
    path`` `root` (or from the root of the mount's namespace); None when the dentry is not
    under the mount's root or `root` does not reach the mount."""
    names, reachable = _prepend_path(mount.prog_, dentry.address_, dentry, mount, root)
    return "/" + "/".join(reversed(names)) if reachable else None


def d_path(path: Struct, root: Struct | None = None) -> str:
    """The name of a ``struct path`` as /proc shows it (kernel d_path): absolute, across
    mounts, with " (deleted)" appended when its dentry is unlinked. See `d_path_info`
    for the pieces separately."""
    info = d_path_info(path, root)
    return info.path + DELETED_SUFFIX if info.unlinked else info.path


def dentry_path(dentry: Pointer | Struct) -> str:
    """The path of a ``struct dentry`` inside its own file system (kernel dentry_path_raw)."""
    d = _dentry(dentry.prog_, dentry)
    return "/" + "/".join(reversed(_names_to_fs_root(d)))


def _file(file: Pointer | Struct) -> Struct:
    if isinstance(file, Pointer):
        if not file:
            raise GuestDataError("NULL struct file")
        return file.prog_.struct("file", int(file))
    return file


def file_path(file: Pointer | Struct, root: Struct | None = None) -> str:
    """d_path of a ``struct file``'s f_path (what readlink /proc/PID/fd/N gives)."""
    return d_path(_file(file).f_path, root)


def file_inode(file: Pointer | Struct) -> Pointer:
    """The ``struct inode *`` of a ``struct file`` (f_inode)."""
    inode = _file(file).f_inode
    if not inode:
        raise GuestDataError(f"struct file at 0x{_file(file).address_:x} has no inode")
    return inode


def inode_size(inode: Pointer | Struct) -> int:
    """i_size of a ``struct inode`` (bytes): a loff_t no file system sets negative."""
    size: int = inode.i_size
    if not 0 <= size < 1 << 63:
        address = inode.address_ if isinstance(inode, Struct) else int(inode)
        raise GuestDataError(f"struct inode at 0x{address:x} has i_size {size}, which no file has")
    return size


def inode_mode(inode: Pointer | Struct) -> int:
    """i_mode of a ``struct inode`` (file type and permission bits)."""
    return inode.i_mode


def inode_ino(inode: Pointer | Struct) -> int:
    """i_ino of a ``struct inode``."""
    return inode.i_ino


def inode_time(inode: Struct, which: str) -> tuple[int, int]:
    """(seconds, nanoseconds) of a ``struct inode``'s access or modification time (`which`:
    "a" or "m"): a ``struct timespec64`` ``i_Xtime`` or ``__i_Xtime``, or the pair
    ``i_Xtime_sec``/``i_Xtime_nsec``, whichever members the kernel has."""
    if which not in ("a", "m"):
        raise ValueError(f"no inode time {which!r}")
    if inode.has_member_(f"i_{which}time_sec"):
        sec, nsec = int(inode.member_(f"i_{which}time_sec")), int(inode.member_(f"i_{which}time_nsec"))
    else:
        name = f"i_{which}time" if inode.has_member_(f"i_{which}time") else f"__i_{which}time"
        ts = inode.member_(name)
        sec, nsec = int(ts.tv_sec), int(ts.tv_nsec)
    if not 0 <= nsec < 1_000_000_000:
        raise GuestDataError(f"struct inode at 0x{inode.address_:x} has a time of {nsec} nanoseconds past a second")
    return sec, nsec


def inode_sb_dev(inode: Pointer | Struct) -> int:
    """The device of a ``struct inode``'s file system (``i_sb->s_dev``), in the kernel's
    internal encoding (MAJOR << 20 | MINOR)."""
    sb = inode.i_sb
    return sb.s_dev if sb else 0


def inode_sb_magic(inode: Pointer | Struct) -> int:
    """The magic number of a ``struct inode``'s file system (``i_sb->s_magic``: statfs's f_type)."""
    sb = inode.i_sb
    return sb.s_magic if sb else 0


def kdev_major(dev: int) -> int:
    return dev >> MINORBITS


def kdev_minor(dev: int) -> int:
    return dev & MINORMASK


def new_encode_dev(dev: int) -> int:
    """The user-visible (stat st_dev) encoding of a kernel dev_t (include/linux/kdev_t.h)."""
    major, minor = kdev_major(dev), kdev_minor(dev)
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


def refuse_escaped(info: PathInfo, dentry: int) -> None:
    """A path whose walk escaped (a dentry that is its own parent below its mount's root: a
    disconnected dentry, as open_by_handle_at leaves one, or a forged ``d_parent``) has no name
    that reopens the file: /proc shows only the part below the escape, which criu's restore
    would open as another file, or fail to."""
    if info.escaped:
        raise UnsupportedError(
            f"dentry 0x{dentry:x}: its path escapes its mount at a dentry that is its own parent"
            f" (disconnected, or its d_parent forged): {info.path!r} does not name it"
        )


def file_identity(file: Pointer | Struct, root: Struct | None = None) -> FileIdentity:
    """Path, device (kernel encoding of the file system's s_dev), inode number, size and
    mode of a ``struct file``. The path has no " (deleted)" suffix: `deleted` tells."""
    f = _file(file)
    info = d_path_info(f.f_path, root)
    refuse_escaped(info, int(f.f_path.dentry))
    inode = file_inode(f)
    return FileIdentity(
        path=info.path,
        dev=inode_sb_dev(inode),
        ino=inode_ino(inode),
        size=inode_size(inode),
        mode=inode_mode(inode),
        deleted=info.unlinked,
        mnt_id=int(real_mount(f.f_path.mnt).mnt_id),
    )
