"""What a file kind declares: how the kernel marks it (`Marks`), the words refusals use for it,
and, for kinds ovm-offline saves (`Saved`), the state it extracts and the CRIU entries it
writes. Kind modules build one `FileKind` row each; the registry lists them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..criu.build.files import KindWriter
from ..extract.ghost import Ghosts
from ..state import Fd, FileKindName, FileState, OpenFile, SharedMemory

if TYPE_CHECKING:
    from ..kernel.core.memory import Program
    from ..kernel.core.objects import Pointer, Struct

__all__ = [
    "Check",
    "DanglingCheck",
    "ExtractContext",
    "Extractor",
    "FileKind",
    "Marks",
    "Saved",
]

_S = TypeVar("_S")

# include/uapi/linux/stat.h
S_IFMT = 0o170000
S_IFSOCK = 0o140000
S_IFLNK = 0o120000
S_IFREG = 0o100000
S_IFBLK = 0o060000
S_IFDIR = 0o040000
S_IFCHR = 0o020000
S_IFIFO = 0o010000


@dataclasses.dataclass(frozen=True)
class Marks:
    """How the kernel marks a file of this kind. A file matches when its ``f_op`` is one of
    `fops` (or, when its ``f_op`` is none of the tables any kind names, its inode type is one
    of `modes`), or when it sits on the internal mount `mount` with a dentry name starting with
    `name_prefix`; and then, if given, its inode is (not) on pipefs and its socket's address
    family is one of `families`. Rows are tried in registry order; the first match wins."""

    fops: tuple[str, ...] = ()
    modes: tuple[int, ...] = ()
    mount: str | None = None  # a kernel `struct vfsmount *` variable, e.g. "anon_inode_mnt"
    name_prefix: bytes = b""
    pipefs: bool | None = None
    families: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.fops or self.modes or self.mount)


@dataclasses.dataclass
class ExtractContext:
    """What a kind's extractor may use: the process holding the file and the objects the
    processes of one dump share (per kind: e.g. pipes by ``pipe_inode_info``, sockets by file)."""

    prog: Program
    task: Struct
    pid_ns: Pointer | Struct
    pid: int  # global
    comm: str
    shared: dict[str, dict[int, Any]]
    fds: Sequence[Fd] = ()  # the process's fds already saved (an epoll's targets are looked up here)
    # shmem files by inode address, shared with the mappings of them (extract/mm.py), so an inode
    # both mapped and open is read once
    shmem: dict[int, SharedMemory] = dataclasses.field(default_factory=dict)
    # files with no name left, shared with the mappings and cwds of them (extract/ghost.py)
    ghosts: Ghosts = dataclasses.field(default_factory=Ghosts)

    def cache(self, kind: str) -> dict[int, Any]:
        return self.shared.setdefault(kind, {})

    def once(self, kind: str, key: int, make: Callable[[], _S]) -> _S:
        """The state of one kernel object that several fds (of several processes) may hold,
        made by `make` the first time it is met in this dump."""
        cache = self.cache(kind)
        if key not in cache:
            cache[key] = make()
        state: _S = cache[key]
        return state


#: The state of one open file of the kind, from its ``struct file *``. Raises UnsupportedError
#: (the reason, e.g. "a vt terminal (/dev/tty1), not a pseudo-terminal") to refuse this file.
Extractor = Callable[[ExtractContext, OpenFile, "Pointer"], FileState]

#: Why one open file of a kind whose common fields are all CRIU records cannot be saved (an
#: unlinked file needs a ghost image), or None.
Check = Callable[[OpenFile], str | None]

#: Given every saved fd of the dumped tree, a check of one fd of one process (with that
#: process's saved fds) that says why it cannot stay in the dump now that others were left
#: out (a socket whose peer is gone, an epoll watching a left-out fd), or None.
DanglingCheck = Callable[[Sequence[Fd]], Callable[[Fd, Sequence[Fd]], str | None]]


@dataclasses.dataclass(frozen=True)
class Saved:
    """How ovm-offline saves a kind: its state (None when the common OpenFile fields are all
    CRIU needs), its extractor, and a fresh writer per dump."""

    writer: Callable[[], KindWriter]
    fd_type: int
    state_type: type[FileState] | None = None
    extract: Extractor | None = None
    late: bool = False  # extracted after the process's other fds (it refers to them)
    dangling: DanglingCheck | None = None
    # for a kind with no state of its own: says why one instance cannot be saved, or None
    check: Check | None = None
    # saved in flight in a UNIX socket's queue too (SCM_RIGHTS); not a socket or terminal, which
    # restore would have to send before its own queue or session is set up (criu 3.17 neither)
    in_flight: bool = True


@dataclasses.dataclass(frozen=True)
class FileKind:
    """One row of the file-kind registry."""

    name: FileKindName
    noun: str  # how refusals name a file of this kind: "an IPv4/IPv6 socket"
    marks: Marks
    saved: Saved | None = None  # None: recognised, and refused by name


def describe(kind: FileKind, f: OpenFile) -> str:
    """A file of a kind that is not saved, as a refusal names it."""
    return f"{kind.noun} ({f.identity.path})"
