"""System V IPC of an IPC namespace (ipc/util.c, ipc/shm.c): ``struct ipc_namespace`` holds
three ``struct ipc_ids`` (semaphores, message queues, shared memory), each an IDR of
``struct kern_ipc_perm`` pointers embedded in ``struct sem_array`` / ``struct msg_queue``
/ ``struct shmid_kernel``. An object's user-visible id is its IDR index plus its sequence
number shifted by ipc_mni_shift (ipcid_to_idx: id & (ipc_mni - 1)).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from ..ds.xarray import xa_for_each

__all__ = ["IPC_MSG_IDS", "IPC_SEM_IDS", "IPC_SHM_IDS", "ipc_for_each", "ipc_ids", "kuid", "shm_of_perm", "task_ipc_ns"]


if TYPE_CHECKING:
    from ..core.memory import Program

# include/linux/ipc_namespace.h
IPC_SEM_IDS = 0
IPC_MSG_IDS = 1
IPC_SHM_IDS = 2
#: ipc/util.h IPCMNI_EXTEND: the most objects of one kind a namespace can have (with
#: ipcmni_extend; 32768 without)
IPCMNI_EXTEND = 1 << 24
IPCMNI = 1 << 15


def task_ipc_ns(task: Struct) -> Pointer | None:
    """The ``struct ipc_namespace *`` of a ``struct task_struct`` (nsproxy->ipc_ns), None for
    an exiting task without nsproxy."""
    nsp = task.nsproxy
    if not nsp:
        return None
    ns = nsp.ipc_ns
    return ns if ns else None


def ipc_mni(prog: Program) -> int:
    """How many ids of one kind the kernel allows (the ipc_mni variable: IPCMNI, or
    IPCMNI_EXTEND when booted with ipcmni_extend)."""
    if prog.has_symbol("ipc_mni"):
        n = prog.read_u32(prog.symbol_address("ipc_mni"))
        if n in (IPCMNI, IPCMNI_EXTEND):
            return n
        raise GuestDataError(f"ipc_mni is {n}, neither {IPCMNI} nor {IPCMNI_EXTEND}")
    return IPCMNI


def ipc_ids(ns: Pointer | Struct, which: int) -> Struct:
    """``ns->ids[which]`` of a ``struct ipc_namespace``: IPC_SEM_IDS, IPC_MSG_IDS or IPC_SHM_IDS."""
    return ns.ids[which]


def ipc_for_each(prog: Program, ids: Struct) -> Iterator[Struct]:
    """Every ``struct kern_ipc_perm`` of a ``struct ipc_ids``, in index order (what
    SHM_STAT/MSG_STAT/SEM_STAT from 0 to max_idx visit). The IDR walk stops at max_idx and
    at ipc_mni; each object's id must agree with its index, and their number with in_use."""
    prog_mni = ipc_mni(prog)
    max_idx = ids.max_idx
    in_use = ids.in_use
    if not 0 <= in_use <= prog_mni or max_idx >= prog_mni:
        raise GuestDataError(
            f"ipc_ids at 0x{ids.address_:x}: in_use {in_use}, max_idx {max_idx} beyond ipc_mni {prog_mni}"
        )
    if max_idx < 0:
        if in_use:
            raise GuestDataError(f"ipc_ids at 0x{ids.address_:x}: in_use {in_use} but no index in use")
        return
    idr = ids.ipcs_idr
    base = idr.idr_base
    xa = prog.struct("xarray", idr.idr_rt.address_)
    found = 0
    for first, _span, entry in xa_for_each(prog, xa, max_idx - base, limit=2 * prog_mni):
        if entry & 7:
            raise GuestDataError(
                f"ipc_ids at 0x{ids.address_:x}: IDR index {first} holds 0x{entry:x}, not a kern_ipc_perm pointer"
            )
        perm = prog.struct("kern_ipc_perm", entry)
        index = first + base
        if perm.id & (prog_mni - 1) != index:
            raise GuestDataError(f"kern_ipc_perm at 0x{entry:x} has id {perm.id} but sits at IDR index {index}")
        found += 1
        if found > in_use:
            raise GuestDataError(f"ipc_ids at 0x{ids.address_:x} holds more objects than its in_use {in_use}")
        yield perm
    if found != in_use:
        raise GuestDataError(
            f"ipc_ids at 0x{ids.address_:x}: in_use {in_use} but {found} objects up to max_idx {max_idx}"
        )


def shm_of_perm(perm: Struct) -> Struct:
    """The ``struct shmid_kernel`` whose shm_perm is this ``struct kern_ipc_perm``."""
    return perm.prog_.container_of(perm.address_, "shmid_kernel", "shm_perm")


def kuid(value: Struct) -> int:
    """The number of a ``kuid_t``/``kgid_t`` (its val), as seen from the initial user namespace."""
    return value.val
