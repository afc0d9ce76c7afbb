"""Where a live QEMU guest's RAM lives on the host: its memory backends and the files behind them.

QEMU keeps guest RAM in memory backends (QOM objects under /objects): a memory-backend-file
maps a file (or, when its mem-path is a directory such as a hugetlbfs mount, an unlinked file
it made there, `qemu_back_mem.ID.XXXXXX`), a memory-backend-memfd an anonymous memfd, which
QEMU names "memory-backend-memfd" whatever the backend's id; memory-backend-ram (and plain
`-m`, whose backend is "pc.ram") is QEMU's private memory. Every file and memfd stays open in
QEMU, so /proc/QEMUPID/fd reaches each of them; QEMU's pid is the QMP socket's peer.

Equal-sized memfds (libvirt gives each NUMA cell one) cannot be told apart by name or size: the
guest's own bytes tell them, read through QEMU (HMP `xp`) at a place where the files differ.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path
from typing import Protocol

from ..errors import SourceError
from ._files import fail

__all__ = ["MemoryBackend", "backend_files", "memory_backends"]

#: the QOM types of memory backends whose memory another process can map
MAPPABLE = ("memory-backend-file", "memory-backend-memfd")
MEMFD_NAME = "/memfd:memory-backend-memfd"
#: an open file whose name says it is one of QEMU's memory: what /proc/PID/fd shows of it
_DELETED = " (deleted)"
#: probes of the guest's bytes through QEMU when equal-sized memfds must be told apart
MAX_PROBES = 256
PROBE_BYTES = 64
COMPARE_CHUNK = 1 << 20
#: a QEMU process holds a few hundred descriptors; thousands are not a QEMU's
MAX_FDS = 65536

RECIPE = (
    "give the guest a memory backend another process can map: -object"
    " memory-backend-memfd,id=ram0,size=SIZE,share=on -machine memory-backend=ram0 (libvirt:"
    " <memoryBacking><source type='memfd'/><access mode='shared'/>)"
)


class Qmp(Protocol):
    peer_pid: int | None

    def execute(self, command: str, arguments: dict[str, object] | None = None) -> object: ...

    def hmp(self, command_line: str) -> str: ...


@dataclasses.dataclass(frozen=True)
class MemoryBackend:
    """One QOM memory backend: its id (also the name of its RAM region in `info mtree`), its
    QOM type, size, whether QEMU maps it shared, and a file backend's mem-path."""

    id: str
    kind: str
    size: int
    shared: bool
    mem_path: str | None = None

    def __str__(self) -> str:
        return f"{self.id} ({self.kind}, {_size(self.size)})"


def memory_backends(qmp: Qmp) -> list[MemoryBackend]:
    """Every memory backend of the QEMU behind `qmp`, as QOM lists them."""
    listed = qmp.execute("qom-list", {"path": "/objects"})
    found = []
    for child in listed if isinstance(listed, list) else []:
        kind = re.fullmatch(r"child<(memory-backend-[\w-]+)>", str(child.get("type", "")))
        if not kind:
            continue
        name, path = str(child["name"]), f"/objects/{child['name']}"
        size, shared = _prop(qmp, path, "size"), _prop(qmp, path, "share")
        mem_path = _prop(qmp, path, "mem-path") if kind[1] == "memory-backend-file" else None
        size = size if isinstance(size, int) else 0
        found.append(MemoryBackend(name, kind[1], size, bool(shared), None if mem_path is None else str(mem_path)))
    return found


def _prop(qmp: Qmp, path: str, name: str) -> object:
    try:
        return qmp.execute("qom-get", {"path": path, "property": name})
    except SourceError:
        return None  # a property this QEMU's backend does not have


def backend_files(
    qmp: Qmp, backends: list[MemoryBackend], shown: dict[str, list[tuple[int, int, int]]], given: str | None
) -> dict[str, str]:
    """The host file holding each backend that guest memory shows (`shown`: id -> its layout,
    (guest-physical start, length, offset)), as a path this process can open. `given` (--mem)
    must be one of them. SourceError naming the backend, its kind and what to pass otherwise."""
    used = [b for b in backends if shown.get(b.id)]
    if not used:
        named = ", ".join(map(str, backends)) or "none"
        raise fail(qmp_where(qmp), f"no memory backend of this QEMU shows in guest memory (backends: {named})")
    for backend in used:
        _refuse_unmappable(qmp, backend)
    fds = _qemu_files(qmp)
    files = {b.id: _file_backend_path(qmp, b, fds) for b in used if b.kind == "memory-backend-file"}
    memfds = [b for b in used if b.kind == "memory-backend-memfd"]
    if memfds:
        files |= _memfd_paths(qmp, memfds, fds, shown, given)
    if given is not None:
        _check_given(qmp, given, files, used)
    return files


def qmp_where(qmp: Qmp) -> str:
    return str(getattr(qmp, "where", "QMP"))


def _refuse_unmappable(qmp: Qmp, backend: MemoryBackend) -> None:
    if backend.kind not in MAPPABLE:
        raise fail(
            qmp_where(qmp),
            f"guest RAM is in memory backend {backend}, QEMU's private memory, which no other process can read; {RECIPE}",
        )
    if not backend.shared:
        # mapped MAP_PRIVATE, the guest's writes never reach the file: reading it would be
        # reading RAM as it was when QEMU started
        raise fail(
            qmp_where(qmp),
            f"memory backend {backend} is mapped privately (share=off): the guest's writes never reach its"
            " file; start the guest with share=on on it",
        )


@dataclasses.dataclass(frozen=True)
class _OpenFile:
    path: str  # /proc/PID/fd/N
    target: str  # what the link names
    size: int
    inode: tuple[int, int]


def _qemu_files(qmp: Qmp) -> list[_OpenFile] | str:
    """QEMU's open regular files, or why they cannot be seen."""
    pid = qmp.peer_pid
    if pid is None:
        return "the QMP socket's peer (QEMU) has no pid here (another pid namespace?)"
    directory = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(directory)
    except OSError as exc:
        return f"cannot list {directory}: {exc.strerror}"
    found = []
    for name in names[:MAX_FDS]:
        path = str(directory / name)
        try:
            target = os.readlink(path)
            st = os.stat(path)
        except OSError:
            continue  # closed meanwhile, or not ours to see
        if stat.S_ISREG(st.st_mode):
            found.append(_OpenFile(path, target, st.st_size, (st.st_dev, st.st_ino)))
    return found


def _file_backend_path(qmp: Qmp, backend: MemoryBackend, fds: list[_OpenFile] | str) -> str:
    """The file QEMU holds open for a file backend: its mem-path where that is the file QEMU
    holds, else QEMU's descriptor of it. A QEMU in another mount namespace may see another file
    at that path than this process does; a file replaced since QEMU opened it is not its RAM;
    a directory mem-path (hugetlbfs) holds an unlinked file QEMU made there."""
    mem_path = backend.mem_path or ""
    if isinstance(fds, str):  # QEMU's descriptors out of sight: the path is all there is
        if os.path.isfile(mem_path):
            return mem_path
        raise fail(qmp_where(qmp), f"memory backend {backend} has mem-path {mem_path}, which is not a file here, {fds}")
    try:
        here = os.stat(mem_path)
        if stat.S_ISREG(here.st_mode) and (here.st_dev, here.st_ino) in {f.inode for f in fds}:
            return mem_path
    except OSError:
        pass
    made_there = f"{mem_path.rstrip('/')}/qemu_back_mem.{backend.id.replace('/', '_')}."
    for f in fds:
        if f.target.removesuffix(_DELETED) == mem_path or f.target.startswith(made_there):
            return f.path
    raise fail(
        qmp_where(qmp),
        f"memory backend {backend} has mem-path {mem_path}, and QEMU (pid {qmp.peer_pid}) holds no file of that"
        " name open (replaced or moved since QEMU opened it?)",
    )


def _memfd_paths(
    qmp: Qmp,
    memfds: list[MemoryBackend],
    fds: list[_OpenFile] | str,
    shown: dict[str, list[tuple[int, int, int]]],
    given: str | None,
) -> dict[str, str]:
    if isinstance(fds, str):
        ids = ", ".join(b.id for b in memfds)
        raise fail(qmp_where(qmp), f"memory backend {ids} is a memfd, found through QEMU's /proc/PID/fd, but {fds}")
    files: dict[str, str] = {}
    for size in sorted({b.size for b in memfds}):
        group = [b for b in memfds if b.size == size]
        candidates = _distinct([f for f in fds if f.target.startswith(MEMFD_NAME) and f.size == size])
        if len(candidates) < len(group):
            raise fail(
                qmp_where(qmp),
                f"memory backend {group[0]} is a memfd, and QEMU (pid {qmp.peer_pid}) has"
                f" {len(candidates)} memfd of its size for {len(group)} such backends",
            )
        if len(group) == 1 and len(candidates) == 1:
            files[group[0].id] = candidates[0].path
        else:
            files |= _tell_apart(qmp, group, candidates, shown)
    return files


def _distinct(files: list[_OpenFile]) -> list[_OpenFile]:
    seen: dict[tuple[int, int], _OpenFile] = {}
    for f in files:
        seen.setdefault(f.inode, f)
    return list(seen.values())


def _tell_apart(
    qmp: Qmp, group: list[MemoryBackend], candidates: list[_OpenFile], shown: dict[str, list[tuple[int, int, int]]]
) -> dict[str, str]:
    """Which memfd holds which of equal-sized backends: at an offset where the memfds' bytes
    all differ, the guest's bytes through each backend (read by QEMU) equal one of them. The
    memfds are compared a chunk at a time, until each backend is told (or RAM ends: all equal)."""
    size = group[0].size
    left = {b.id: b for b in group}
    pool = {c.path: c for c in candidates}
    found: dict[str, str] = {}
    descriptors = {c.path: os.open(c.path, os.O_RDONLY | os.O_CLOEXEC) for c in candidates}
    probes = 0
    try:
        for chunk in range(0, size, COMPARE_CHUNK):
            if len(left) == 1 and len(pool) == 1:
                found[next(iter(left))] = next(iter(pool))
                return found
            contents = {path: os.pread(fd, COMPARE_CHUNK, chunk) for path, fd in descriptors.items() if path in pool}
            offset = _where_all_differ(list(contents.values()))
            if offset is None:
                continue
            at = {path: data[offset : offset + PROBE_BYTES] for path, data in contents.items()}
            for backend_id in list(left):
                paddr = _guest_address(shown[backend_id], chunk + offset)
                if paddr is None or probes >= MAX_PROBES:
                    continue
                probes += 1
                match = [path for path, data in at.items() if data == _guest_bytes(qmp, paddr)]
                if len(match) == 1:
                    found[backend_id] = match[0]
                    del left[backend_id], pool[match[0]], at[match[0]]
            if not left:
                return found
    finally:
        for fd in descriptors.values():
            os.close(fd)
    ids = ", ".join(sorted(left))
    raise fail(
        qmp_where(qmp),
        f"memory backends {ids} are memfds of {_size(size)} each, and the guest's bytes did not tell which"
        " of QEMU's memfds is which; give the guest distinct sizes or memory-backend-file",
    )


def _where_all_differ(chunks: list[bytes]) -> int | None:
    """The first PROBE_BYTES-aligned offset at which every chunk holds different bytes."""
    if len(chunks) < 2 or len(set(chunks)) < len(chunks):
        return None if len(chunks) > 1 else 0
    for offset in range(0, min(map(len, chunks)) - PROBE_BYTES + 1, PROBE_BYTES):
        if len({c[offset : offset + PROBE_BYTES] for c in chunks}) == len(chunks):
            return offset
    return None


def _guest_address(layout: list[tuple[int, int, int]], offset: int) -> int | None:
    for start, length, file_offset in layout:
        if file_offset <= offset and offset + PROBE_BYTES <= file_offset + length:
            return start + offset - file_offset
    return None


def _guest_bytes(qmp: Qmp, paddr: int) -> bytes:
    """PROBE_BYTES of guest-physical memory at `paddr`, as QEMU reads them (HMP `xp`)."""
    text = qmp.hmp(f"xp /{PROBE_BYTES // 8}gx {paddr:#x}")
    words = [w for line in text.splitlines() for w in re.findall(r"\b0x([0-9a-fA-F]+)\b", line.split(":", 1)[-1])]
    return b"".join(int(w, 16).to_bytes(8, "little") for w in words[: PROBE_BYTES // 8])


def _check_given(qmp: Qmp, given: str, files: dict[str, str], used: list[MemoryBackend]) -> None:
    """--mem must be the memory of one of the backends: a file of another guest, or a copy,
    would be read as this guest's RAM."""
    try:
        st = os.stat(given)
    except OSError as exc:
        raise fail(given, f"cannot open: {exc.strerror}") from None
    for backend_id, path in files.items():
        try:
            if os.path.samestat(st, os.stat(path)):
                files[backend_id] = given
                return
        except OSError:
            continue
    named = ", ".join(map(str, used))
    raise fail(given, f"is not the memory of any memory backend of this QEMU (backends: {named})")


def _size(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"
