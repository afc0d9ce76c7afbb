"""inotify instances: their watches, as /proc fdinfo shows them and CRIU 3.17 saves them
(inotify_file_entry in files.img, one inotify_wd_entry per watch, criu/fsnotify.c).

Each watch carries the inode's file handle as fdinfo encodes it and the path criu's dump finds
for it (``f_handle.path``), by which criu's restore reopens the inode and adds the watch again
with the same watch descriptor (INOTIFY_IOC_SETNEXTWD), in ascending order of descriptors. The
last one restored leaves the instance's cursor after the highest: where a program that never
removed its newest watch has it. When the program did, its next watch gets another descriptor
than it would have; criu's image has no field for the cursor, so that is a warning.

Refused, by name, because criu's restore would change what the program sees:
- events queued that the reader has not read (criu's dump drops them with a warning);
- a watch with IN_ONESHOT or IN_EXCL_UNLINK (criu's restore keeps IN_ALL_EVENTS only, so the
  watch would outlive its one event, or report events of unlinked children);
- a watch on an inode with no name left, on a file system whose file handles are not known
  here, or that no mount of the process's mount namespace reaches (criu's dump fails there).
"""

from __future__ import annotations

import dataclasses
import logging

from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs.fsnotify import (
    IN_ALL_EVENTS,
    IN_EXCL_UNLINK,
    IN_ONESHOT,
    fsnotify_group_marks,
    fsnotify_group_of,
    fsnotify_group_queued,
    fsnotify_mark_inode,
    inotify_group_next_wd,
    inotify_mark_user_mask,
    inotify_mark_wd,
)
from ..kernel.fs.mounts import mnt_namespace_mounts, task_mnt_ns
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved
from .watched import WatchedInode

__all__ = ["KIND", "InotifyState", "InotifyWatch"]

log = logging.getLogger("ovm_offline")

_FLAG_NAMES = ((IN_ONESHOT, "IN_ONESHOT"), (IN_EXCL_UNLINK, "IN_EXCL_UNLINK"))


@dataclasses.dataclass
class InotifyWatch:
    """One watch (``struct inotify_inode_mark``) and the inode it watches."""

    wd: int
    mask: int  # the events watched (IN_ALL_EVENTS bits)
    inode: WatchedInode


@dataclasses.dataclass
class InotifyState(FileState):
    """An inotify instance (``struct fsnotify_group``): its watches, newest first (as fdinfo)."""

    watches: list[InotifyWatch]


def _watch(mark: Struct, mounts: list[Struct]) -> InotifyWatch:
    wd = inotify_mark_wd(mark)
    user_mask = inotify_mark_user_mask(mark)
    flags = [name for bit, name in _FLAG_NAMES if user_mask & bit]
    if flags:
        raise UnsupportedError(
            f"an inotify watch (wd {wd}) with {' and '.join(flags)}, which criu 3.17 restores as a plain lasting watch"
        )
    inode = fsnotify_mark_inode(mark)
    if inode is None:
        raise UnsupportedError(f"an inotify watch (wd {wd}) on no inode")
    watched = WatchedInode.of(inode, mounts, f"an inotify watch (wd {wd})")
    return InotifyWatch(wd=wd, mask=user_mask & IN_ALL_EVENTS, inode=watched)


def extract_inotify(ctx: ExtractContext, f: OpenFile, file: Pointer) -> InotifyState:
    group = fsnotify_group_of(file)
    queued = fsnotify_group_queued(group)
    if queued:
        raise UnsupportedError(
            f"an inotify instance with {queued} event(s) its reader has not read, which criu 3.17 drops"
        )
    mnt_ns = task_mnt_ns(ctx.task)
    mounts = mnt_namespace_mounts(mnt_ns) if mnt_ns else []
    watches = [_watch(mark, mounts) for mark in fsnotify_group_marks(group)]
    next_wd = inotify_group_next_wd(group)
    restored_next = max((w.wd for w in watches), default=0) + 1
    if watches and next_wd != restored_next:
        log.warning(
            "an inotify instance of %d (%s) gives its next watch descriptor %d; after criu's restore, %d",
            ctx.pid,
            ctx.comm,
            next_wd,
            restored_next,
        )
    return InotifyState(watches=watches)


class InotifyWriter:
    fd_type = F.INOTIFY

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, InotifyState)
        fid = table.next_id()
        wds = []
        for w in f.state.watches:
            fh = w.inode.fh_entry(table)
            wd = F.inotify_wd_entry(
                id=0, i_ino=w.inode.ino, mask=w.mask, ignored_mask=0, s_dev=w.inode.dev, wd=w.wd, f_handle=fh
            )
            wds.append(wd)
        entry = F.inotify_file_entry(id=fid, flags=f.flags, fown=fown(f.owner), wd=wds)
        table.entries.append(F.file_entry(type=F.INOTIFY, id=fid, ify=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="inotify",
    noun="an inotify instance",
    marks=Marks(fops=("inotify_fops",)),
    saved=Saved(writer=InotifyWriter, fd_type=F.INOTIFY, state_type=InotifyState, extract=extract_inotify),
)
