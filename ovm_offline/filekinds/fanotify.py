"""fanotify instances: their flags and inode marks, as /proc fdinfo shows them and CRIU 3.17
saves them (fanotify_file_entry in files.img, one fanotify_mark_entry per mark,
criu/fsnotify.c).

An inode mark carries the inode as an inotify watch does (filekinds/inotify.py
`WatchedInode`: number, device, file handle and the path criu's restore reopens it by), with
the events it reports (``mask``), those it ignores (``ignore_mask``) and its FAN_MARK_ flags.
criu's restore makes the group again with fanotify_init(faflags, evflags) and adds each mark.

Refused, by name:
- events queued that the reader has not read (criu's dump drops them), and permission events
  read but not answered yet (the program waiting on them would wait forever, or the accessing
  process be let through);
- a mark on a mount, a file system or a mount namespace (not saved here yet);
- a mark made with FAN_MARK_EVICTABLE or FAN_MARK_IGNORE, flags criu 3.17 does not know;
- a mark on an inode criu could not name (as an inotify watch's).
"""

from __future__ import annotations

import dataclasses

from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer, Struct
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
    fsnotify_mark_object_type,
)
from ..kernel.fs.mounts import mnt_namespace_mounts, task_mnt_ns
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved
from .watched import WatchedInode

__all__ = ["KIND", "FanotifyMark", "FanotifyState"]

_OBJECT_NOUNS = {
    "VFSMOUNT": "a mount (FAN_MARK_MOUNT)",
    "SB": "a file system (FAN_MARK_FILESYSTEM)",
    "MNTNS": "a mount namespace",
}
_UNKNOWN_FLAGS = ((FAN_MARK_EVICTABLE, "FAN_MARK_EVICTABLE"), (FAN_MARK_IGNORE, "FAN_MARK_IGNORE"))


@dataclasses.dataclass
class FanotifyMark:
    """One inode mark of a fanotify group."""

    mflags: int  # FAN_MARK_* flags it keeps (fdinfo's mflags)
    mask: int
    ignored_mask: int
    inode: WatchedInode


@dataclasses.dataclass
class FanotifyState(FileState):
    """A fanotify instance (``struct fsnotify_group``): fanotify_init's flags, its events' file
    flags, and its marks, newest first (as fdinfo)."""

    faflags: int
    evflags: int
    marks: list[FanotifyMark]


def _mark(mark: Struct, mounts: list[Struct], n: int) -> FanotifyMark:
    what = fsnotify_mark_object_type(mark)
    if what != "INODE":
        raise UnsupportedError(f"a fanotify mark (#{n}) on {_OBJECT_NOUNS.get(what or '', 'no object')}, not saved yet")
    mflags = fanotify_mark_user_flags(mark)
    unknown = [name for bit, name in _UNKNOWN_FLAGS if mflags & bit]
    if unknown:
        raise UnsupportedError(
            f"a fanotify mark (#{n}) made with {' and '.join(unknown)}, which criu 3.17 cannot restore"
        )
    inode = fsnotify_mark_inode(mark)
    if inode is None:
        raise UnsupportedError(f"a fanotify mark (#{n}) on no inode")
    watched = WatchedInode.of(inode, mounts, f"a fanotify mark (#{n})")
    return FanotifyMark(
        mflags=mflags, mask=int(mark.mask) & 0xFFFFFFFF, ignored_mask=int(mark.ignore_mask) & 0xFFFFFFFF, inode=watched
    )


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
            inode = F.fanotify_inode_mark_entry(i_ino=m.inode.ino, f_handle=m.inode.fh_entry(table))
            marks.append(
                F.fanotify_mark_entry(
                    id=0,
                    type=F.INODE,
                    mflags=m.mflags,
                    mask=m.mask,
                    ignored_mask=m.ignored_mask,
                    s_dev=m.inode.dev,
                    ie=inode,
                )
            )
        entry = F.fanotify_file_entry(
            id=fid, flags=f.flags, fown=fown(f.owner), faflags=f.state.faflags, evflags=f.state.evflags, mark=marks
        )
        table.entries.append(F.file_entry(type=F.FANOTIFY, id=fid, ffy=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="fanotify",
    noun="a fanotify instance",
    marks=Marks(fops=("fanotify_fops",)),
    saved=Saved(writer=FanotifyWriter, fd_type=F.FANOTIFY, state_type=FanotifyState, extract=extract_fanotify),
)
