"""Containers as their runtime names them, from what the runtime keeps in the guest's memory.

runc keeps one directory per container under its state root (``runc --root``, ``/run/runc``
by default), each holding ``state.json`` with the container's ``id``, ``init_process_pid``
(its first process, as runc's PID namespace numbers it) and ``init_process_start`` (that
process's start time in clock ticks, as /proc/PID/stat has it). The root is a tmpfs in any
real setup, so the file is in the page cache and its names are in the dcache.

Where to look: runc's default root below the guest's root and below the root of every mount
under it (a runtime run from a chroot or a sysroot keeps its root there; the corpus guest
runs runc so). A state file is taken only when its process is alive and started when the
file says, so a container that exited and left its directory behind (or a recycled PID)
names nothing; a file that cannot be read or parsed is skipped with a warning.
"""

from __future__ import annotations

import json
import logging

from ..errors import GuestDataError
from ..kernel.core.memory import Program
from ..kernel.core.objects import Struct
from ..kernel.fs.dcache import dentry_name, inode_size, real_mount
from ..kernel.fs.fs_struct import fs_root, task_fs
from ..kernel.fs.namei import WalkBudget, dentry_children, lookup_cached, mount_tree
from ..kernel.mm.pagecache import read_cached
from ..kernel.task.tasks import find_task, task_start_ticks

__all__ = ["RUNC_ROOTS", "runc_container_ids"]

log = logging.getLogger("ovm_offline")

#: runc's state roots, relative to a file system root: its default as root (rootless runc
#: and runtimes that pass --root elsewhere are not searched)
RUNC_ROOTS = ("run/runc",)
#: far more than a state.json holds (a few KiB)
MAX_STATE_BYTES = 1 << 20


def _guest_root(prog: Program) -> tuple[Struct, Struct]:
    """(``struct mount``, ``struct dentry``) of the root of the guest's init (PID 1)."""
    init = find_task(prog, 1)
    fs = task_fs(init) if init is not None else None
    if fs is None:
        raise GuestDataError("PID 1 has no fs_struct")
    root = fs_root(fs)
    return real_mount(root.mnt), root.dentry.deref()


def _state_roots(prog: Program, budget: WalkBudget) -> list[Struct]:
    """The runc state directories (``struct dentry``) in the guest, each once."""
    top, root = _guest_root(prog)
    tree = mount_tree(top, budget)
    found: dict[int, Struct] = {}
    for mount in tree.mounts:
        start = root if mount.address_ == top.address_ else mount.mnt.mnt_root.deref()
        for relative in RUNC_ROOTS:
            hit = lookup_cached(tree, mount, start, relative, budget)
            if hit is not None:
                found.setdefault(hit[1].address_, hit[1])
    return list(found.values())


def _read_state(prog: Program, state_file: Struct) -> dict | None:
    inode = state_file.d_inode
    size = inode_size(inode)
    if not 0 < size <= MAX_STATE_BYTES:
        raise GuestDataError(f"it has {size} bytes")
    raw = read_cached(prog, inode, 0, size)
    if raw is None:
        raise GuestDataError("its pages are not all in memory")
    try:
        state = json.loads(raw)
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than json parses
        raise GuestDataError(f"it is not JSON ({type(e).__name__})") from None
    return state if isinstance(state, dict) else None


def _live_init_pid(prog: Program, state: dict, ident: str) -> int | None:
    """The PID of the container's first process if `state` describes container `ident` and
    that process is alive with the start time the state records."""
    pid, start = state.get("init_process_pid"), state.get("init_process_start")
    if state.get("id") != ident or not isinstance(pid, int) or not isinstance(start, int):
        return None
    task = find_task(prog, pid) if 0 < pid < 1 << 22 else None
    return pid if task is not None and task_start_ticks(task) == start else None


def runc_container_ids(prog: Program) -> dict[int, str]:
    """The id of each runc container in the guest, keyed by the global PID of its first
    process (the PID namespace runc ran in is taken to be the initial one). The whole search
    reads at most one `WalkBudget` of dentries and mounts."""
    ids: dict[int, str] = {}
    budget = WalkBudget()
    for state_root in _state_roots(prog, budget):
        for container in dentry_children(state_root, budget):
            ident = dentry_name(container).decode("utf-8", "replace")
            children = dentry_children(container, budget)
            state_file = next((c for c in children if dentry_name(c) == b"state.json"), None)
            if state_file is None:
                continue
            try:
                state = _read_state(prog, state_file)
            except GuestDataError as e:
                log.warning("runc state of container %r skipped: %s", ident, e)
                continue
            pid = _live_init_pid(prog, state or {}, ident)
            if pid is not None:
                ids[pid] = ident
    return ids
