"""The IPC namespace of a dumped tree as CRIU 3.17 saves it (ipc_ns.c): the sysctls of
ipcns-var.img and the System V shared memory segments of ipcns-shm.img, whose contents are
shmem files (extract/shmem.py). Message queues and semaphore sets are refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.ns.ipc import (
    IPC_MSG_IDS,
    IPC_SEM_IDS,
    IPC_SHM_IDS,
    ipc_for_each,
    ipc_ids,
    kuid,
    shm_of_perm,
    task_ipc_ns,
)
from ..kernel.ns.nsproxy import ns_inum
from ..state import IpcNamespaceState, IpcShmSegment, SharedMemory
from .shmem import shared_memory_of

if TYPE_CHECKING:
    from ..kernel.core.memory import Program

__all__ = ["extract_ipc_namespace", "task_ipc_ns"]


def _next_id(ids: Struct) -> int | None:
    """kernel.{sem,msg,shm}_next_id: ipc_ids.next_id, None while unset (-1), as CRIU leaves
    it out then."""
    n = ids.next_id
    return None if n < 0 else n


def extract_ipc_namespace(prog: Program, ns: Pointer, cache: dict[int, SharedMemory]) -> IpcNamespaceState:
    """What CRIU 3.17 saves of a ``struct ipc_namespace``: its sysctls and its System V
    shared memory segments (with their contents, sharing `cache` with the VMAs that attach
    them). Message queues and semaphore sets are refused: ovm-offline cannot save them yet."""
    inum = ns_inum(ns)
    if inum is None:
        raise GuestDataError(f"ipc_namespace at 0x{int(ns):x} has no inode number")
    refuse_msg_and_sem(prog, ns, inum)
    shm_ids = ipc_ids(ns, IPC_SHM_IDS)
    return IpcNamespaceState(
        inum=inum,
        sem_ctls=[int(ns.sem_ctls[i]) & 0xFFFFFFFF for i in range(4)],
        msg_ctlmax=ns.msg_ctlmax,
        msg_ctlmnb=ns.msg_ctlmnb,
        msg_ctlmni=ns.msg_ctlmni,
        shm_ctlmax=ns.shm_ctlmax,
        shm_ctlall=ns.shm_ctlall,
        shm_ctlmni=ns.shm_ctlmni & 0xFFFFFFFF,
        shm_rmid_forced=ns.shm_rmid_forced & 0xFFFFFFFF,
        mq_queues_max=ns.mq_queues_max,
        mq_msg_max=ns.mq_msg_max,
        mq_msgsize_max=ns.mq_msgsize_max,
        mq_msg_default=ns.mq_msg_default,
        mq_msgsize_default=ns.mq_msgsize_default,
        msg_next_id=_next_id(ipc_ids(ns, IPC_MSG_IDS)),
        sem_next_id=_next_id(ipc_ids(ns, IPC_SEM_IDS)),
        shm_next_id=_next_id(shm_ids),
        shm_segments=shm_segments(prog, shm_ids, inum, cache),
    )


def refuse_msg_and_sem(prog: Program, ns: Pointer, inum: int) -> None:
    """UnsupportedError when a ``struct ipc_namespace`` holds message queues or semaphore
    sets, which ovm-offline cannot save yet."""
    others = []
    for which, what in ((IPC_MSG_IDS, "message queue"), (IPC_SEM_IDS, "semaphore set")):
        ids = [perm.id for perm in ipc_for_each(prog, ipc_ids(ns, which))]
        if ids:
            others.append(f"{len(ids)} {what}(s) (id {', '.join(map(str, ids))})")
    if others:
        raise UnsupportedError(
            f"IPC namespace {inum} holds {' and '.join(others)}; ovm-offline can save only"
            " System V shared memory of an IPC namespace yet"
        )


def shm_segments(prog: Program, shm_ids: Struct, inum: int, cache: dict[int, SharedMemory]) -> list[IpcShmSegment]:
    """The System V shared memory segments of an IPC namespace's shm ``struct ipc_ids``, in id
    index order, each with its shmem file's contents (shared with the VMAs through `cache`)."""
    segments = []
    for perm in ipc_for_each(prog, shm_ids):
        shp = shm_of_perm(perm)
        if not shp.shm_file:
            raise GuestDataError(f"System V segment {perm.id} (shmid_kernel 0x{shp.address_:x}) has no file")
        contents = shared_memory_of(prog, shp.shm_file, cache)
        if contents is None:
            raise UnsupportedError(
                f"System V segment {perm.id} of IPC namespace {inum} is not backed by shmem"
                " (a SHM_HUGETLB segment?); ovm-offline cannot save it yet"
            )
        if contents.ino != perm.id:
            raise GuestDataError(f"System V segment {perm.id}: its shmem inode is {contents.ino}, not the shmid")
        segments.append(
            IpcShmSegment(
                id=perm.id,
                key=perm.key & 0xFFFFFFFF,
                uid=kuid(perm.uid),
                gid=kuid(perm.gid),
                cuid=kuid(perm.cuid),
                cgid=kuid(perm.cgid),
                mode=perm.mode,
                size=shp.shm_segsz,
                contents=contents,
            )
        )
    return segments
