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

import dataclasses
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
from ..state import MountInfo

__all__ = [
    "RUNC_ROOTS",
    "RuncContainer",
    "runc_container_ids",
    "runc_containers",
    "runc_descriptors",
    "runc_external_mounts",
]

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


@dataclasses.dataclass(frozen=True)
class RuncContainer:
    """A live runc container: its id, its first process's global PID, and runc's state.json
    as the guest holds it (untrusted: read its fields through the functions below)."""

    ident: str
    init_pid: int
    state: dict


def runc_containers(prog: Program) -> dict[int, RuncContainer]:
    """Each runc container in the guest, keyed by the global PID of its first process (the
    PID namespace runc ran in is taken to be the initial one). The whole search reads at most
    one `WalkBudget` of dentries and mounts."""
    found: dict[int, RuncContainer] = {}
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
            if pid is not None and state is not None:
                found[pid] = RuncContainer(ident, pid, state)
    return found


def runc_container_ids(prog: Program) -> dict[int, str]:
    """The id of each runc container in the guest, keyed by the global PID of its first
    process."""
    return {container.init_pid: container.ident for container in runc_containers(prog).values()}


def _string_list(container: RuncContainer, key: str) -> list[str]:
    config = container.state.get("config")
    value = config.get(key, []) if isinstance(config, dict) else None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GuestDataError(f"runc state of container {container.ident!r}: config.{key} is not a list of paths")
    return value


def _bind_destinations(container: RuncContainer) -> list[str]:
    config = container.state.get("config")
    mounts = config.get("mounts", []) if isinstance(config, dict) else None
    if not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts):
        raise GuestDataError(f"runc state of container {container.ident!r}: config.mounts is not a list of mounts")
    binds = [m.get("destination") for m in mounts if m.get("device") == "bind"]
    if not all(isinstance(d, str) for d in binds):
        raise GuestDataError(f"runc state of container {container.ident!r}: a bind mount without a destination")
    return [str(d) for d in binds]


def _user_ns_devices(container: RuncContainer) -> list[str]:
    config = container.state.get("config")
    if not isinstance(config, dict):
        return []
    spaces = config.get("namespaces") or []
    if not isinstance(spaces, list) or not any(isinstance(n, dict) and n.get("type") == "NEWUSER" for n in spaces):
        return []
    devices = config.get("devices") or []
    if not isinstance(devices, list):
        raise GuestDataError(f"runc state of container {container.ident!r}: config.devices is not a list")
    return [str(d["path"]) for d in devices if isinstance(d, dict) and isinstance(d.get("path"), str)]


def runc_external_mounts(container: RuncContainer, mounts: list[MountInfo]) -> dict[str, str]:
    """The mounts `runc checkpoint` names external to criu, as {mount point: key}: each bind
    mount of the container's config, by its destination (runc binds the same source there at
    restore), and each masked path that is a file, hidden by a bind mount of /dev/null (a
    masked directory gets a tmpfs of its own, which criu saves)."""
    masked = set(_string_list(container, "mask_paths"))
    points = {m.mount_point for m in mounts}
    external = {d: d for d in _bind_destinations(container) if d in points}
    # in a user namespace runc binds the host's device nodes instead of making them
    external.update({d: d for d in _user_ns_devices(container) if d in points})
    external.update({m.mount_point: "/dev/null" for m in mounts if m.mount_point in masked and m.root != "/"})
    return external


def runc_descriptors(container: RuncContainer) -> list[str]:
    """What the container's first process had open as fds 0, 1, 2 ("pipe:[4711]",
    "/dev/null") when runc started it: the descriptors.json `runc checkpoint` writes beside
    the images, which `runc restore` reads to hand the same kind of stdio to criu."""
    value = container.state.get("external_descriptors")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > 3:
        raise GuestDataError(f"runc state of container {container.ident!r}: external_descriptors is not 0 to 3 paths")
    return list(value)
