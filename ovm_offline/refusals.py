"""Refusals are data: extraction collects every reason a dump cannot be written as asked, and
the dump decides on all of them before it writes anything."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

from .criu.build.locks import held_locks
from .criu.build.mnt import UnsavedMount, mountpoints_entries
from .errors import MomentError, UnsupportedError
from .state import OFFSET_MAX, FileLock, MountNamespaceState, ProcessState

__all__ = [
    "FILE_LOCKS",
    "SKIP_UNSUPPORTED",
    "Refusal",
    "decide",
    "file_lock_refusals",
    "taken_dead_pid_refusals",
    "unencodable_text",
]

#: the option that leaves refused open files out instead
SKIP_UNSUPPORTED = "--skip-unsupported"
#: the option that saves file locks (criu dump's own, which its restore needs too)
FILE_LOCKS = "--file-locks"


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why something of process `pid` cannot be saved: one of its open files (`fd`), or the
    process or tree itself (`fd` None: then `why` is the whole sentence). `option` names what
    would let the dump go on without it, if anything. `moment`: refused only for what a thread
    was doing at the pause (a MomentError), so another moment of the guest may be saved."""

    pid: int  # global
    comm: str
    why: str
    fd: int | None = None
    option: str | None = None
    moment: bool = False

    def __str__(self) -> str:
        return self.why if self.fd is None else f"PID {self.pid} ({self.comm}) fd {self.fd}: {self.why}"

    @classmethod
    def open_file(cls, pid: int, comm: str, fd: int, why: str) -> Refusal:
        return cls(pid, comm, why, fd=fd, option=SKIP_UNSUPPORTED)


def decide(refusals: list[Refusal], skip_unsupported: bool) -> list[Refusal]:
    """Raise one UnsupportedError naming every refusal that stands, or return those left out
    (open files, when `skip_unsupported`): the dump may then be written without them."""
    blocking = [r for r in refusals if r.option is None]
    files = [r for r in refusals if r.option is not None]
    parts = ["; ".join(map(str, blocking))] if blocking else []
    if files and not skip_unsupported:
        parts.append(
            f"cannot save {len(files)} open file(s) yet: "
            + "; ".join(map(str, files))
            + f" ({SKIP_UNSUPPORTED} leaves them out)"
        )
    if parts:
        only_the_moment = blocking and all(r.moment for r in blocking) and (skip_unsupported or not files)
        raise (MomentError if only_the_moment else UnsupportedError)("; ".join(parts))
    return files


_TEXT_FREE: dict[type, bool] = {int: True, bool: True, float: True, bytes: True, type(None): True}


def _text_free(cls: type) -> bool:
    """Can no value of `cls` hold a string? (numbers, bytes, and dataclasses made only of
    those: page runs, registers, signal state), so a walk may skip it. Decided once a type."""
    known = _TEXT_FREE.get(cls)
    if known is None:
        try:
            hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else None
        except Exception:  # a name only imported for type checking: walk it
            hints = None
        known = _TEXT_FREE[cls] = hints is not None and all(_hint_text_free(h) for h in hints.values())
    return known


def _hint_text_free(hint: Any) -> bool:
    if typing.get_origin(hint) is typing.Literal:
        return True  # our own constants
    args = typing.get_args(hint)
    if args:
        return all(a is Ellipsis or _hint_text_free(a) for a in args)
    return isinstance(hint, type) and _text_free(hint)


def _bad_strings(value: Any, where: str, seen: set[int]) -> Iterator[tuple[str, str]]:
    """(field path, text) of every string in extracted state that is not valid UTF-8 (the
    kernel side keeps a path's undecodable bytes as surrogates, reversibly)."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                yield where, value
        return
    if id(value) in seen:
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        seen.add(id(value))
        for f in dataclasses.fields(value):
            field = getattr(value, f.name)
            if not _text_free(type(field)):
                yield from _bad_strings(field, f"{where}.{f.name}" if where else f.name, seen)
    elif isinstance(value, (list, tuple)):
        seen.add(id(value))
        for i, item in enumerate(value):
            if not _text_free(type(item)):
                yield from _bad_strings(item, f"{where}[{i}]", seen)
    elif isinstance(value, dict):
        seen.add(id(value))
        for key, item in value.items():
            yield from _bad_strings(item, f"{where}[{key!r}]", seen)


def _shown(text: str) -> str:
    return repr(text.encode("utf-8", "surrogateescape"))


def unencodable_text(processes: list[ProcessState]) -> list[Refusal]:
    """Names CRIU 3.17's images cannot hold: its protobuf string fields (paths, names) must be
    valid UTF-8, and a guest's file names are bytes. Such an open file can be left out; the
    same name elsewhere (cwd, a mapped file) refuses the process. Refused open files are
    taken out of `processes`, as a file kind's own refusals are."""
    refusals = []
    for proc in processes:
        for fd in list(proc.fds):
            for where, text in _bad_strings(fd.file, "", set()):
                why = f"its {where} {_shown(text)} is not valid UTF-8, which CRIU's images cannot hold"
                refusals.append(Refusal.open_file(proc.global_pid, proc.comm, fd.fd, why))
                proc.fds.remove(fd)
                break
        rest = {f.name: getattr(proc, f.name) for f in dataclasses.fields(proc) if f.name != "fds"}
        for where, text in _bad_strings(rest, "", set()):
            why = (
                f"PID {proc.global_pid} ({proc.comm}): {where.strip('[]')} {_shown(text)} is not valid UTF-8,"
                " which CRIU's images cannot hold"
            )
            refusals.append(Refusal(proc.global_pid, proc.comm, why))
    return refusals


def mount_namespace_refusals(root: ProcessState, ns: MountNamespaceState | None) -> list[Refusal]:
    """The tree's own mount namespace checked against what mountpoints-N can hold: each mount's
    file system and place (criu/build/mnt.py says which), its texts valid UTF-8."""
    if ns is None:
        return []
    start = f"PID {root.global_pid} ({root.comm}) is in a mount namespace with"
    refusals = []
    for info in ns.mounts:
        for where, text in _bad_strings(info, "", set()):
            why = f"{start} mount {info.mnt_id} whose {where} {_shown(text)} is not valid UTF-8"
            why += ", which CRIU's images cannot hold"
            refusals.append(Refusal(root.global_pid, root.comm, why))
    if not refusals:
        try:
            mountpoints_entries(ns.mounts, ns.cgroup_root, ns.external)
        except UnsavedMount as e:
            refusals.append(Refusal(root.global_pid, root.comm, f"{start} {e}"))
    return refusals


_LOCK_TYPES = {0: "read", 1: "write", 2: "unlock"}
_FLOCK_TYPES = {0: "a shared", 1: "an exclusive"}


def _lock_text(lock: FileLock, path: str) -> str:
    """A lock as a refusal names it: "a POSIX write lock on bytes 0-9 of /f", "an exclusive
    flock on /f", "a read lease on /f"."""
    if lock.kind == "lease":
        return f"a {_LOCK_TYPES.get(lock.type, str(lock.type))} lease on {path}"
    if lock.kind == "flock":
        return f"{_FLOCK_TYPES.get(lock.type, f'a type {lock.type}')} flock on {path}"
    end = "EOF" if lock.end >= OFFSET_MAX else str(lock.end)
    noun = "a POSIX" if lock.kind == "posix" else "an OFD"
    return f"{noun} {_LOCK_TYPES.get(lock.type, str(lock.type))} lock on bytes {lock.start}-{end} of {path}"


def file_lock_refusals(processes: list[ProcessState], save_locks: bool) -> list[Refusal]:
    """The file locks and leases the tree holds, refused unless `save_locks` (criu dump, too,
    saves them only with --file-locks, and its restore needs the option); refused always: a
    lease being broken, and a lock CRIU's images would give to no process (a POSIX lock of one
    process taken through a file another process of the tree met first)."""
    refusals = []
    held = list(held_locks(processes))
    for h in held:
        if h.lock.breaking:
            why = f"PID {h.global_pid} ({h.comm}) fd {h.fd} holds {_lock_text(h.lock, h.path)} that is being broken"
            refusals.append(Refusal(h.global_pid, h.comm, why + ", which ovm-offline cannot save yet"))
        elif not save_locks:
            why = f"PID {h.global_pid} ({h.comm}) fd {h.fd} holds {_lock_text(h.lock, h.path)}"
            refusals.append(Refusal(h.global_pid, h.comm, f"{why} ({FILE_LOCKS} saves it, as with criu dump)"))
    attributed = {(h.lock.file_key, h.lock.owner_key, h.lock.start, h.lock.kind) for h in held}
    owners = {p.files_key: p for p in processes}
    for proc in processes:
        for fd in proc.fds:
            for lock in fd.file.locks:
                owner = owners.get(lock.owner_key)
                key = (lock.file_key, lock.owner_key, lock.start, lock.kind)
                if owner is proc and key not in attributed:
                    attributed.add(key)
                    why = (
                        f"PID {proc.global_pid} ({proc.comm}) holds {_lock_text(lock, fd.file.identity.path)}"
                        " through a file another process of the tree holds too, and criu's images give such a"
                        " lock to no process"
                    )
                    refusals.append(Refusal(proc.global_pid, proc.comm, why))
    return refusals


def taken_dead_pid_refusals(processes: list[ProcessState], dead_pids: dict[int, str]) -> list[Refusal]:
    """A file in an exited process's /proc directory is remapped to that PID, which a helper
    takes at restore (`dead_pids`: PID to the file's path). Refused where a dumped thread has
    taken the PID since: criu's dump refuses a thread's (dead_pid_conflict), and for a process's
    its restore adds no helper and opens the file in the restored process's own directory, which
    the program would see as a live process's /proc, not a gone one."""
    refusals = []
    for proc in processes:
        # a zombie has no threads left but keeps its PID
        for tid in dict.fromkeys([proc.pid, *(t.tid for t in proc.threads)]):
            path = dead_pids.get(tid)
            if path is None:
                continue
            what = "its PID" if tid == proc.pid else f"its thread {tid}'s TID"
            why = (
                f"PID {proc.global_pid} ({proc.comm}): {what} is that of an exited process whose /proc directory"
                f" a dumped process holds ({path}); criu's restore cannot give the PID to both"
            )
            refusals.append(Refusal(proc.global_pid, proc.comm, why))
    return refusals
