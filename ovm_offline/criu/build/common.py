"""What every image family's builder shares: the protobuf modules, the count of what was
written, and the F_SETOWN entry of an open file."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...state import Owner
from .. import pb

if TYPE_CHECKING:
    from .mm import ShmemImages

__all__ = ["C", "F", "M", "N", "NET", "NamespaceOut", "T", "U64", "X", "Written", "fown"]

#: uint64 image fields hold kernel values that are signed in C (loff_t) as their bits
U64 = (1 << 64) - 1

T, X, M, F, N = pb.criu_task_pb2, pb.criu_x86_pb2, pb.criu_mm_pb2, pb.criu_files_pb2, pb.criu_ns_pb2
C, NET = pb.criu_common_pb2, pb.criu_net_pb2


@dataclasses.dataclass
class Written:
    """What a dump wrote: image files, pages (process and shmem), files.img entries."""

    images: int = 0
    pages: int = 0
    page_bytes: int = 0
    files: int = 0


@dataclasses.dataclass
class NamespaceOut:
    """Where a namespace's writer puts its images: `put(kind, entries, id)` for an image of
    entries, `put_raw(kind, data, id)` for a raw file (a tar archive), `shmem` for the
    contents of shared memory segments."""

    put: Callable[..., None]
    put_raw: Callable[..., None]
    shmem: ShmemImages


def fown(owner: Owner | None) -> C.fown_entry:
    """The fown_entry of an open file's F_SETOWN state (all zero for none)."""
    if owner is None:
        return C.fown_entry(uid=0, euid=0, signum=0, pid_type=0, pid=0)
    return C.fown_entry(uid=owner.uid, euid=owner.euid, signum=owner.signum, pid_type=owner.pid_type, pid=owner.pid)
