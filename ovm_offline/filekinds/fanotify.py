"""fanotify instances: their flags and inode marks, as /proc fdinfo shows them and CRIU 3.17
saves them (fanotify_file_entry in files.img, one fanotify_mark_entry per mark,
criu/fsnotify.c).

An inode mark carries the inode as an inotify watch does (filekinds/watched.py
`WatchedInode`: number, device, file handle and the path criu's restore reopens it by); a mount
mark (FAN_MARK_MOUNT) its mount's id, device and mount point, which criu's restore opens to mark
the mount there again (the path only where criu does not save the mount namespace, which then
names the mount by id). Each has the events it reports (``mask``), those it ignores
(``ignore_mask``) and its FAN_MARK_ flags. criu's restore makes the group again with
fanotify_init(faflags, evflags) and adds each mark.

Refused, by name:
- events queued that the reader has not read (criu's dump drops them), and permission events
  read but not answered yet (the program waiting on them would wait forever, or the accessing
  process be let through);
- a mark on a file system or a mount namespace (criu's images have no entry for one), or on a
  mount that is not the process's namespace's or whose mount point another mount hides (criu's
  restore would mark the mount it finds there);
- a mark made with FAN_MARK_EVICTABLE or FAN_MARK_IGNORE, flags criu 3.17 does not know;
- a mark on an inode criu could not name (as an inotify watch's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs.dcache import mount_point_path
from ..kernel.fs.fsnotify import (
    FAN_MARK_EVICTABLE,
    FAN_MARK_IGNORE,
    fanotify_group_flags,
    fanotify_mark_user_flags,
    fanotify_permission_events,
    fsnotify_group_marks,
    fsnotify_group_of,
    fsnotify_group_queued,
    fsnotify_mark_inode,
    fsnotify_mark_mount,
    fsnotify_mark_object_type,
)
from ..kernel.fs.mounts import mnt_namespace_mounts, path_reaches_mount, task_mnt_ns
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved
from .watched import WatchedInode

__all__ = ["KIND", "FanotifyMark", "FanotifyState", "MarkedMount"]

_OBJECT_NOUNS = {
    "SB": "a file system (FAN_MARK_FILESYSTEM)",
    "MNTNS": "a mount namespace",
}
_UNKNOWN_FLAGS = ((FAN_MARK_EVICTABLE, "FAN_MARK_EVICTABLE"), (FAN_MARK_IGNORE, "FAN_MARK_IGNORE"))


@dataclasses.dataclass
class MarkedMount:
    """A mount a fanotify mark watches (FAN_MARK_MOUNT), as criu's fanotify_mount_mark_entry
    names it."""

    mnt_id: int
    dev: int  # its super block's s_dev, in the kernel's encoding (criu's mount_info s_dev)
    path: str  # its mount point in the process's mount namespace


@dataclasses.dataclass
class FanotifyMark:
    """One mark of a fanotify group: on an inode or on a mount."""

    mflags: int  # FAN_MARK_* flags it keeps (fdinfo's mflags)
    mask: int
    ignored_mask: int
    inode: WatchedInode | None
    mount: MarkedMount | None = None


@dataclasses.dataclass
class FanotifyState(FileState):
    """A fanotify instance (``struct fsnotify_group``): fanotify_init's flags, its events' file
    flags, and its marks, newest first (as fdinfo)."""

    faflags: int
    evflags: int
    marks: list[FanotifyMark]


def _mark(mark: Struct, mounts: list[Struct], n: int) -> FanotifyMark:
    what = fsnotify_mark_object_type(mark)
    if what not in ("INODE", "VFSMOUNT"):
        raise UnsupportedError(
            f"a fanotify mark (#{n}) on {_OBJECT_NOUNS.get(what or '', 'no object')},"
            " which criu's images have no entry for (they know inode and mount marks)"
        )
    mflags = fanotify_mark_user_flags(mark)
    unknown = [name for bit, name in _UNKNOWN_FLAGS if mflags & bit]
    if unknown:
        raise UnsupportedError(
            f"a fanotify mark (#{n}) made with {' and '.join(unknown)}, which criu 3.17 cannot restore"
        )
    mask, ignored_mask = int(mark.mask) & 0xFFFFFFFF, int(mark.ignore_mask) & 0xFFFFFFFF
    if what == "VFSMOUNT":
        mount = _marked_mount(mark, mounts, n)
        return FanotifyMark(mflags=mflags, mask=mask, ignored_mask=ignored_mask, inode=None, mount=mount)
    inode = fsnotify_mark_inode(mark)
    if inode is None:
        raise UnsupportedError(f"a fanotify mark (#{n}) on no inode")
    watched = WatchedInode.of(inode, mounts, f"a fanotify mark (#{n})")
    return FanotifyMark(mflags=mflags, mask=mask, ignored_mask=ignored_mask, inode=watched)


def _marked_mount(mark: Struct, mounts: list[Struct], n: int) -> MarkedMount:
    mount = fsnotify_mark_mount(mark)
    if mount is None or mount.address_ not in {m.address_ for m in mounts}:
        raise UnsupportedError(f"a fanotify mark (#{n}) on a mount that is not of the process's mount namespace")
    path = mount_point_path(mount)
    if path is None or not path_reaches_mount(path, mount, mounts):
        raise UnsupportedError(
            f"a fanotify mark (#{n}) on the mount at {path or '?'}, which a mount over it hides"
            " (criu's restore would mark the mount it finds there)"
        )
    return MarkedMount(mnt_id=int(mount.mnt_id), dev=int(mount.mnt.mnt_sb.deref().s_dev), path=path)


def extract_fanotify(ctx: ExtractContext, f: OpenFile, file: Pointer) -> FanotifyState:
    group = fsnotify_group_of(file)
    queued = fsnotify_group_queued(group)
    if queued:
        raise UnsupportedError(
            f"a fanotify instance with {queued} event(s) its reader has not read, which criu 3.17 drops"
        )
    if fanotify_permission_events(group):
        raise UnsupportedError("a fanotify instance with permission events read and not answered yet")
    mnt_ns = task_mnt_ns(ctx.task)
    mounts = mnt_namespace_mounts(mnt_ns) if mnt_ns else []
    faflags, evflags = fanotify_group_flags(group)
    marks = [_mark(mark, mounts, n) for n, mark in enumerate(fsnotify_group_marks(group), 1)]
    return FanotifyState(faflags=faflags, evflags=evflags, marks=marks)


class FanotifyWriter:
    fd_type = F.FANOTIFY

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, FanotifyState)
        fid = table.next_id()
        marks = []
        for m in f.state.marks:
            marks.append(
                F.fanotify_mark_entry(
                    id=0, mflags=m.mflags, mask=m.mask, ignored_mask=m.ignored_mask, **_object_fields(m, table)
                )
            )
        entry = F.fanotify_file_entry(
            id=fid, flags=f.flags, fown=fown(f.owner), faflags=f.state.faflags, evflags=f.state.evflags, mark=marks
        )
        table.entries.append(F.file_entry(type=F.FANOTIFY, id=fid, ffy=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


def _object_fields(m: FanotifyMark, table: FileTable) -> dict[str, Any]:
    """A mark entry's type, device and object: the inode (ie) or the mount (me)."""
    if m.mount is not None:
        me = F.fanotify_mount_mark_entry(mnt_id=m.mount.mnt_id)
        if not table.mnt_ids:  # criu names the mount by its mount point where it saves no mount namespace
            me.path = m.mount.path
        return {"type": F.MOUNT, "s_dev": m.mount.dev, "me": me}
    assert m.inode is not None
    ie = F.fanotify_inode_mark_entry(i_ino=m.inode.ino, f_handle=m.inode.fh_entry(table))
    return {"type": F.INODE, "s_dev": m.inode.dev, "ie": ie}


KIND = FileKind(
    name="fanotify",
    noun="a fanotify instance",
    marks=Marks(fops=("fanotify_fops",)),
    saved=Saved(writer=FanotifyWriter, fd_type=F.FANOTIFY, state_type=FanotifyState, extract=extract_fanotify),
)
