"""fsnotify: inotify and fanotify instances as the kernel keeps them, read as /proc/PID/fdinfo
shows them (which is what CRIU records).

* An inotify file's ``private_data`` is its ``struct fsnotify_group``; the group's marks are on
  ``marks_list`` (newest first), each the ``fsn_mark`` of a ``struct inotify_inode_mark`` with
  its watch descriptor ``wd``. Events not read yet are on ``notification_list``.
* A fanotify file's ``private_data`` is its group too; ``fanotify_data`` holds the flags it was
  made with, its events' file flags, and permission events waiting for an answer
  (``access_list``). Its marks are ``struct fsnotify_mark``s, the flags a user gave them
  ``FSNOTIFY_MARK_FLAG_*`` bits of ``flags`` (the values since 5.19; a kernel whose mark still
  has ``ignored_mask``, renamed ``ignore_mask`` in 6.0, is a layout not known here).
* A mark watches the object of its ``connector``. The connector's ``obj`` points at the
  object's ``fsnotify_connp_t`` (``inode->i_fsnotify_marks``) before 6.11, and at the object
  itself after (its type a ``void *``): the ISF's type of ``obj`` says which.
* The flags a user gave inotify_add_watch (IN_ONESHOT, IN_EXCL_UNLINK) were bits of
  ``mask`` before 5.19 and are ``FSNOTIFY_MARK_FLAG_*`` bits of ``flags`` since. Each place's
  bits are unused in the other layout, so both are read on every kernel.
* fdinfo's f_handle is the inode's file handle as exportfs encodes it: by the file system's
  ``export_operations`` (tmpfs: generation and 64-bit inode number), or the generic
  FILEID_INO32_GEN when it has none (ramfs, and ext4, whose own is the same).
"""

from __future__ import annotations

import struct

from ...errors import GuestDataError, LayoutError
from ..core.ktypes import PointerType, VoidType
from ..core.objects import Pointer, Struct
from ..ds.list import hlist_for_each_entry, list_empty, list_for_each_entry
from .anonfds import file_private
from .dcache import d_unlinked, dentry_path_through

__all__ = [
    "FAN_MARK_EVICTABLE",
    "FAN_MARK_IGNORE",
    "FAN_MARK_IGNORED_SURV_MODIFY",
    "IN_ALL_EVENTS",
    "IN_EXCL_UNLINK",
    "IN_ONESHOT",
    "MAX_INOTIFY_WATCHES",
    "exportfs_encode_fh",
    "fanotify_group_flags",
    "fanotify_mark_user_flags",
    "fanotify_permission_events",
    "fsnotify_mark_object_type",
    "inode_paths_through_mounts",
    "fsnotify_group_marks",
    "fsnotify_group_queued",
    "fsnotify_mark_inode",
    "fsnotify_mark_mount",
    "inode_alias",
    "inotify_group_next_wd",
    "fsnotify_group_of",
    "inotify_mark_user_mask",
    "inotify_mark_wd",
]

#: include/uapi/linux/inotify.h
IN_ALL_EVENTS = 0x00000FFF
IN_EXCL_UNLINK = 0x04000000
IN_ONESHOT = 0x80000000
#: include/linux/fsnotify_backend.h (5.19 and later)
FSNOTIFY_MARK_FLAG_EXCL_UNLINK = 0x0010
FSNOTIFY_MARK_FLAG_IN_ONESHOT = 0x0020
FSNOTIFY_MARK_FLAG_IGNORED_SURV_MODIFY = 0x0100
FSNOTIFY_MARK_FLAG_NO_IREF = 0x0200
FSNOTIFY_MARK_FLAG_HAS_IGNORE_FLAGS = 0x0400
#: include/uapi/linux/fanotify.h
FAN_MARK_IGNORED_SURV_MODIFY = 0x40
FAN_MARK_EVICTABLE = 0x200
FAN_MARK_IGNORE = 0x400
#: the flags fanotify_init takes (FANOTIFY_INIT_FLAGS: fdinfo shows these; the group keeps
#: internal ones above them)
FANOTIFY_INIT_FLAGS = 0xFFFF
#: include/linux/exportfs.h
FILEID_INO32_GEN = 1
#: More watches than fs.inotify.max_user_watches allows by default on any machine (at most
#: 1048576); a group of more is a corrupt or looping list.
MAX_INOTIFY_WATCHES = 1 << 22
#: More names one inode can have than any file system allows (ext4: 65000 links)
MAX_ALIASES = 1 << 16


def fsnotify_group_of(file: Pointer | Struct) -> Pointer:
    """The ``struct fsnotify_group *`` of an inotify or fanotify instance's ``struct file``."""
    return file_private(file, "fsnotify_group")


def fsnotify_group_marks(group: Pointer | Struct) -> list[Struct]:
    """The ``struct fsnotify_mark``s of a ``struct fsnotify_group``, in ``marks_list`` order
    (the order fdinfo lists them: newest first)."""
    g = group.deref() if isinstance(group, Pointer) else group
    name = f"marks of fsnotify_group 0x{g.address_:x}"
    head = g.marks_list.address_of_()
    walk = list_for_each_entry(
        g.prog_, "fsnotify_mark", head, "g_list", name=name, limit=MAX_INOTIFY_WATCHES, check_prev=True
    )
    return list(walk)


def fsnotify_group_queued(group: Pointer | Struct) -> int:
    """How many events a ``struct fsnotify_group`` holds that its reader has not read
    (``q_len``; at least 1 when ``notification_list`` is not empty)."""
    g = group.deref() if isinstance(group, Pointer) else group
    queued = int(g.q_len)
    if not queued and not list_empty(g.prog_, g.notification_list.address_of_()):
        return 1
    return queued


def inotify_mark_wd(mark: Struct) -> int:
    """The watch descriptor of the ``struct inotify_inode_mark`` around a ``struct
    fsnotify_mark``."""
    return int(mark.prog_.container_of(mark.address_, "inotify_inode_mark", "fsn_mark").wd)


def inotify_mark_user_mask(mark: Struct) -> int:
    """The mask a ``struct fsnotify_mark`` of inotify watches with, as inotify_add_watch was
    given it: its events, and IN_ONESHOT and IN_EXCL_UNLINK wherever this kernel keeps them."""
    mask, flags = int(mark.mask), int(mark.flags)
    user = mask & (IN_ALL_EVENTS | IN_ONESHOT | IN_EXCL_UNLINK)
    if flags & FSNOTIFY_MARK_FLAG_IN_ONESHOT:
        user |= IN_ONESHOT
    if flags & FSNOTIFY_MARK_FLAG_EXCL_UNLINK:
        user |= IN_EXCL_UNLINK
    return user


def inotify_group_next_wd(group: Pointer | Struct) -> int:
    """The watch descriptor a ``struct fsnotify_group`` of inotify gives its next watch (its
    idr's cursor: watch descriptors are allocated cyclically)."""
    g = group.deref() if isinstance(group, Pointer) else group
    return int(g.inotify_data.idr.idr_next)


def fsnotify_mark_object_type(mark: Struct) -> str | None:
    """What a ``struct fsnotify_mark`` watches, by its connector's type: "INODE", "VFSMOUNT",
    "SB", ... (the FSNOTIFY_OBJ_TYPE_ enumerator's name); None when it is detached."""
    connector = mark.connector
    if not connector:
        return None
    kind = int(connector.deref().type)
    prog = mark.prog_
    for name in ("INODE", "VFSMOUNT", "SB", "MNTNS"):
        if prog.symbols.enumerator(f"FSNOTIFY_OBJ_TYPE_{name}") == kind:
            return name
    return None


#: the object a connector of each type is attached to: its struct, the member an ``obj`` points
#: at before 6.11 (its fsnotify_connp_t), and after (the struct itself, or its ``struct vfsmount``)
_CONNECTOR_OBJECTS = {"INODE": ("inode", "i_fsnotify_marks", ""), "VFSMOUNT": ("mount", "mnt_fsnotify_marks", "mnt")}


def _connector_object(mark: Struct, kind: str) -> int | None:
    """The address of the object a ``struct fsnotify_mark`` of connector type `kind` watches;
    None when it watches another type of object, or is detached."""
    if fsnotify_mark_object_type(mark) != kind:
        return None
    prog = mark.prog_
    obj = int(mark.connector.deref().obj)
    if not obj:
        return None
    struct_name, connp_member, object_member = _CONNECTOR_OBJECTS[kind]
    obj_type = prog.struct_type("fsnotify_mark_connector").member("obj").type
    target = obj_type.target if isinstance(obj_type, PointerType) else None
    if isinstance(target, VoidType):  # 6.11 and later: the object itself
        return prog.container_of(obj, struct_name, object_member).address_ if object_member else obj
    if isinstance(target, PointerType):  # before: the object's fsnotify_connp_t
        return prog.container_of(obj, struct_name, connp_member).address_
    raise LayoutError(
        "fsnotify_mark_connector.obj is neither a void * nor a fsnotify_connp_t *: a layout not supported"
    )


def fsnotify_mark_inode(mark: Struct) -> Pointer | None:
    """The ``struct inode *`` a ``struct fsnotify_mark`` watches; None when it watches a mount
    or a super block, or is detached."""
    address = _connector_object(mark, "INODE")
    return None if address is None else mark.prog_.pointer("inode", address)


def fsnotify_mark_mount(mark: Struct) -> Struct | None:
    """The ``struct mount`` a ``struct fsnotify_mark`` watches (FAN_MARK_MOUNT); None when it
    watches an inode or a super block, or is detached."""
    address = _connector_object(mark, "VFSMOUNT")
    return None if address is None else mark.prog_.struct("mount", address)


def inode_alias(inode: Pointer | Struct) -> Struct | None:
    """A ``struct dentry`` of a ``struct inode`` that still names it (the first of
    ``i_dentry`` in the dcache, or a file system's root), None when no name of it is left."""
    i = inode.deref() if isinstance(inode, Pointer) else inode
    prog = i.prog_
    alias = "d_alias" if prog.struct_type("dentry").has_member("d_alias") else "d_u.d_alias"
    name = f"aliases of inode 0x{i.address_:x}"
    for dentry in hlist_for_each_entry(prog, "dentry", i.i_dentry.address_of_(), alias, name=name, limit=MAX_ALIASES):
        if not d_unlinked(dentry):
            return dentry
    return None


def inode_paths_through_mounts(inode: Pointer | Struct, mounts: list[Struct]) -> list[tuple[str, Struct]]:
    """The names of a ``struct inode`` in a mount namespace, each with the ``struct mount`` it
    is through: one per mount of `mounts` (the namespace's, in mountinfo order, as criu's dump
    tries them) of the inode's super block under whose root a dentry of it is; none when no
    name of it is left. A name may be hidden by a mount over it (mounts.path_walk_mount)."""
    i = inode.deref() if isinstance(inode, Pointer) else inode
    dentry = inode_alias(i)
    if dentry is None:
        return []
    sb = int(i.i_sb)
    named = []
    for mount in mounts:
        if int(mount.mnt.mnt_sb) != sb:
            continue
        path = dentry_path_through(dentry, mount)
        if path is not None:
            named.append((path, mount))
    return named


def fanotify_group_flags(group: Pointer | Struct) -> tuple[int, int]:
    """The flags a fanotify ``struct fsnotify_group`` was made with (fanotify_init's) and the
    file flags of its events' files, as fdinfo shows them."""
    g = group.deref() if isinstance(group, Pointer) else group
    data = g.fanotify_data
    return int(data.flags) & FANOTIFY_INIT_FLAGS, int(data.f_flags) & 0xFFFFFFFF


def fanotify_permission_events(group: Pointer | Struct) -> bool:
    """Does a fanotify ``struct fsnotify_group`` hold permission events its reader read and has
    not answered yet (``fanotify_data.access_list``)?"""
    g = group.deref() if isinstance(group, Pointer) else group
    return not list_empty(g.prog_, g.fanotify_data.access_list.address_of_())


def fanotify_mark_user_flags(mark: Struct) -> int:
    """The FAN_MARK_* flags a ``struct fsnotify_mark`` of fanotify keeps (fdinfo's mflags)."""
    if not mark.has_member_("ignore_mask"):
        raise LayoutError(
            "fsnotify_mark has no ignore_mask: mark flags of a kernel before 5.19, a layout not supported"
        )
    flags = int(mark.flags)
    mflags = 0
    for own, user in (
        (FSNOTIFY_MARK_FLAG_IGNORED_SURV_MODIFY, FAN_MARK_IGNORED_SURV_MODIFY),
        (FSNOTIFY_MARK_FLAG_NO_IREF, FAN_MARK_EVICTABLE),
        (FSNOTIFY_MARK_FLAG_HAS_IGNORE_FLAGS, FAN_MARK_IGNORE),
    ):
        if flags & own:
            mflags |= user
    return mflags


def _ino32_gen(inode: Struct) -> tuple[int, bytes]:
    # fs/exportfs/expfs.c export_encode_fh: struct fid's i32 {ino, gen}
    return FILEID_INO32_GEN, struct.pack("<II", int(inode.i_ino) & 0xFFFFFFFF, int(inode.i_generation) & 0xFFFFFFFF)


def _shmem(inode: Struct) -> tuple[int, bytes]:
    # mm/shmem.c shmem_encode_fh: generation, then the 64-bit inode number in two halves
    ino = int(inode.i_ino)
    return 1, struct.pack("<III", int(inode.i_generation) & 0xFFFFFFFF, ino & 0xFFFFFFFF, ino >> 32 & 0xFFFFFFFF)


#: a super block's export_operations -> how it encodes a file handle (None: it has none)
_ENCODERS = {None: _ino32_gen, "shmem_export_ops": _shmem, "ext4_export_ops": _ino32_gen}


def exportfs_encode_fh(inode: Pointer | Struct) -> tuple[int, bytes] | None:
    """The file handle (type, bytes) fdinfo shows for a ``struct inode``; None when its file
    system encodes handles in a way not known here."""
    i = inode.deref() if isinstance(inode, Pointer) else inode
    sb = i.i_sb
    if not sb:
        raise GuestDataError(f"inode 0x{i.address_:x} has no super block")
    ops = int(sb.deref().s_export_op)
    name = None
    if ops:
        name = next((n for n in _ENCODERS if n and i.prog_.has_symbol(n) and i.prog_.symbol_address(n) == ops), "?")
    encode = _ENCODERS.get(name)
    return encode(i) if encode else None
