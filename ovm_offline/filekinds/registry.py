"""The file-kind registry: every kind in the order `classify` tries them, and the lookups
over it."""

from __future__ import annotations

from collections.abc import Iterator

from ..criu.build.files import KindWriter
from ..errors import GuestDataError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs.dcache import dentry_name
from ..kernel.fs.fdtable import (
    S_IFMT,
    file_fops_name,
    file_inode_ptr,
    file_on_internal_mount,
    inode_is_on_pipefs,
    socket_family,
)
from ..state import FileKindName
from . import (
    eventfd,
    eventpoll,
    fanotify,
    inet,
    inotify,
    memfd,
    nsfs,
    pipe,
    refused,
    regular,
    signalfd,
    timerfd,
    tty,
    unix,
)
from .base import FileKind, Marks

__all__ = ["FILE_KINDS", "KNOWN_FOPS", "classify", "kind_named", "new_writers", "saved_kinds"]

#: Every kind, in the order `classify` tries them: the first whose marks match wins.
FILE_KINDS: tuple[FileKind, ...] = (
    pipe.PIPE,
    pipe.FIFO,
    unix.KIND,
    inet.KIND,
    *refused.SOCKET_KINDS,
    refused.OTHER_SOCKET,
    tty.KIND,
    eventfd.KIND,
    signalfd.KIND,
    timerfd.KIND,
    eventpoll.KIND,
    nsfs.KIND,
    inotify.KIND,
    fanotify.KIND,
    *refused.REFUSED_ANON_KINDS,
    memfd.KIND,
    refused.ANON,
    regular.KIND,
)
#: what a file no row matches is: an anon inode on some other internal mount
UNMATCHED = refused.ANON

_BY_NAME = {k.name: k for k in FILE_KINDS}
#: every file_operations table some kind names: a file with another f_op goes by inode type
KNOWN_FOPS = frozenset(f for k in FILE_KINDS for f in k.marks.fops)


def kind_named(name: FileKindName) -> FileKind:
    return _BY_NAME[name]


class _Probe:
    """What the marks look at in one ``struct file``, each read only when a row asks."""

    def __init__(self, file: Pointer | Struct) -> None:
        self.file = file.deref() if isinstance(file, Pointer) else file
        self.inode = file_inode_ptr(self.file)
        self.mode = self.inode.i_mode & S_IFMT
        self.fops = file_fops_name(self.file, KNOWN_FOPS)
        self._pipefs: bool | None = None
        self._family: int | None | bool = False  # False: not read yet

    def pipefs(self) -> bool:
        if self._pipefs is None:
            self._pipefs = inode_is_on_pipefs(self.inode)
        return self._pipefs

    def family(self) -> int | None:
        if self._family is False:
            try:
                self._family = socket_family(self.file)
            except GuestDataError:
                self._family = None  # an unreadable sock: "a socket"
        assert self._family is not False
        return self._family

    def on_mount(self, symbol: str, prefix: bytes) -> bool:
        if not file_on_internal_mount(self.file, symbol):
            return False
        return not prefix or dentry_name(self.file.f_path.dentry).startswith(prefix)


def _matches(m: Marks, p: _Probe) -> bool:
    if m.fops and p.fops in m.fops:
        pass
    elif m.modes and p.fops is None and p.mode in m.modes:
        pass
    elif m.mount is not None and p.on_mount(m.mount, m.name_prefix):
        pass
    else:
        return False
    if m.pipefs is not None and p.pipefs() != m.pipefs:
        return False
    return not m.families or p.family() in m.families


def classify(file: Pointer | Struct) -> FileKind:
    """The kind of a ``struct file``."""
    probe = _Probe(file)
    return next((k for k in FILE_KINDS if _matches(k.marks, probe)), UNMATCHED)


def new_writers() -> dict[str, KindWriter]:
    """A fresh writer for every kind ovm-offline saves, for one dump."""
    return {k.name: k.saved.writer() for k in FILE_KINDS if k.saved is not None}


def saved_kinds() -> Iterator[FileKind]:
    return (k for k in FILE_KINDS if k.saved is not None)
