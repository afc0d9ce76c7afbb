"""files.img: one entry per open file (or per mapped file, as CRIU does), ids handed out in
the order CRIU meets files. The entries of each kind of open file, and the images a kind writes
of its own (tty-info, pipes-data, sk-queues, ...), come from that kind's `KindWriter`
(ovm_offline.filekinds): this table only hands out ids, keeps CRIU's order and writes regular
files, which everything refers to (exe, mappings, cwd, root, a tty's or FIFO's path), with the
ghost file of one that has no name left and its remap-fpath entry."""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Mapping
from typing import NamedTuple, Protocol

from google.protobuf.message import Message

from ...state import FileIdentity, GhostFile, OpenFile, Owner, SharedMemory
from .. import images
from .common import U64, F, fown

__all__ = ["FD_CLOEXEC", "ExtraImage", "FileTable", "KindWriter", "has_size"]

FD_CLOEXEC = 1
O_ACCMODE, O_WRONLY, O_APPEND = 0o3, 0o1, 0o2000
S_IFMT, S_IFREG, S_IFLNK, S_IFCHR, S_IFBLK = 0o170000, 0o100000, 0o120000, 0o020000, 0o060000
#: criu's GHOST_CHUNKS_THRESH: a regular file this big or more is written as chunks of data
GHOST_CHUNKS_THRESH = 3 * 4096


#: An image a kind writes besides files.img: its kind, entries, and the raw bytes after each
#: entry (None for an image without them).
class ExtraImage(NamedTuple):
    """An image a kind writes besides files.img: its entries, the raw data following each (for
    kinds with payload fields) and, for kinds written once per object, the id in its name."""

    kind: images.ImageKind
    entries: list[Message]
    payloads: list[bytes] | None = None
    image_id: int | str | None = None


class KindWriter(Protocol):
    """The CRIU side of one kind of open file, for one dump."""

    @property
    def fd_type(self) -> int:
        """CRIU's FdTypes value, in fdinfo entries."""
        ...

    def write(self, table: FileTable, f: OpenFile) -> int:
        """Append the entries of `f` to `table` (in CRIU's order) and return its file id."""
        ...

    def images(self, table: FileTable) -> list[ExtraImage]:
        """The images this kind writes besides files.img, once every process is written."""
        ...


class FileTable:
    """files.img entries in the order CRIU writes them, and their ids in the order met."""

    def __init__(self, writers: Mapping[str, KindWriter]) -> None:
        self.entries: list[F.file_entry | None] = []
        self.writers = writers
        self._by_key: dict[Hashable, int] = {}
        self._last_id = 0
        #: net namespace inode -> its id in the dump (set by write_dump)
        self.net_ns_id: Callable[[int], int] = lambda inum: 0
        # a namespace's id in the dump by kind and inode number (ObjectIds.ns)
        self.ns_id: Callable[[str, int], int] = lambda kind, inum: 0
        # the memfd.img inode id of a shmem file, dumping the inode when first met (ShmemImages)
        self.memfd_inode_id: Callable[[SharedMemory], int] = _no_shmem_images
        #: regular files name their mount (reg_file_entry.mnt_id), as criu does when it saves
        #: the tree's mount namespace (set by write_dump)
        self.mnt_ids = False
        #: every IPv4/IPv6 socket names its network namespace, not only those inet_diag lists, as
        #: criu does when the tree has a network namespace of its own (gen_uncon_sk asks the
        #: socket for it then; set by write_dump)
        self.inet_ns_ids = False
        # ghost files by (dev, ino), numbered from 1 as met, and the remap of each file to one
        self._ghost_ids: dict[tuple[int, int], int] = {}
        self._ghosts: list[GhostFile] = []
        self._remaps: list[F.remap_file_path_entry] = []
        self._dead_pids: set[int] = set()

    def next_id(self) -> int:
        # ids are handed out when a file is met; some entries are written later (CRIU writes
        # a FIFO's path before the FIFO, and a UNIX socket once its peer is met), so an id is
        # not an index into `entries`
        self._last_id += 1
        return self._last_id

    def reserve(self) -> tuple[int, int]:
        """A new file id and the index of a placeholder in `entries` for its entry, to be
        filled once the entries it refers to (a tty's path, a memfd's inode) are made."""
        self.entries.append(None)
        return self.next_id(), len(self.entries) - 1

    def regular(
        self,
        identity: FileIdentity,
        flags: int = 0,
        pos: int = 0,
        key: Hashable | None = None,
        owner: Owner | None = None,
    ) -> int:
        """The id of the reg_file_entry of `identity` opened with `flags` at `pos`, made when
        first met (`key` says which files are one: by default, the same path, flags and pos)."""
        key = key or ("path", identity.path, flags, pos)
        if key in self._by_key:
            return self._by_key[key]
        fid = self.next_id()
        # f_pos is a signed loff_t; files with unsigned offsets (/proc/PID/mem, /dev/mem) go
        # past 2**63, and CRIU stores what lseek returned as a uint64, as here
        pos &= U64
        reg = F.reg_file_entry(id=fid, flags=flags, pos=pos, fown=fown(owner), name=identity.path, mode=identity.mode)
        if self.mnt_ids and identity.mnt_id:
            reg.mnt_id = identity.mnt_id
        if has_size(identity, flags):
            reg.size = identity.size
        build_id = identity.build_id
        if build_id:
            reg.build_id.extend(struct.unpack(f"<{len(build_id) // 4}I", build_id[: len(build_id) // 4 * 4]))
        if identity.ghost is not None:
            self._remaps.append(
                F.remap_file_path_entry(orig_id=fid, remap_id=self._ghost_id(identity.ghost), remap_type=F.GHOST)
            )
        if identity.dead_pid is not None and identity.dead_pid not in self._dead_pids:
            # one remap per PID, as criu's dump_dead_process_remap: restore forks one helper for
            # it, and every file below its /proc directory opens while that helper lives
            self._dead_pids.add(identity.dead_pid)
            self._remaps.append(F.remap_file_path_entry(orig_id=fid, remap_id=identity.dead_pid, remap_type=F.PROCFS))
        self.entries.append(F.file_entry(type=F.REG, id=fid, reg=reg))
        self._by_key[key] = fid
        return fid

    def _ghost_id(self, ghost: GhostFile) -> int:
        """The id of ghost-file-ID.img for `ghost`'s inode: one per inode however many files
        name it (criu's dump_ghost_remap, by device and inode number)."""
        key = (ghost.dev, ghost.ino)
        if key not in self._ghost_ids:
            self._ghosts.append(ghost)
            self._ghost_ids[key] = len(self._ghosts)
        return self._ghost_ids[key]

    def open_file(self, f: OpenFile) -> int:
        """The id of the files.img entry of open file `f`, written by its kind when first met."""
        key = ("file", f.key)
        if key not in self._by_key:
            # the dump decided every refusal before writing: a kind without a writer is a bug here
            self._by_key[key] = self.writers[f.kind].write(self, f)
        return self._by_key[key]

    def fd_type(self, f: OpenFile) -> int:
        return self.writers[f.kind].fd_type

    def images(self) -> list[ExtraImage]:
        """Every kind's images besides files.img, those with no entries left out, and the ghost
        files with remap-fpath.img naming the files each one stands for."""
        kinds = [img for w in self.writers.values() for img in w.images(self) if img.entries]
        ghosts = [ghost_image(gid, g) for gid, g in enumerate(self._ghosts, 1)]
        remaps = [ExtraImage(images.REMAP_FPATH, list(self._remaps))] if self._remaps else []
        return kinds + ghosts + remaps


def ghost_image(ghost_id: int, ghost: GhostFile) -> ExtraImage:
    """ghost-file-ID.img as criu's dump_ghost_file writes it: the inode's owner, mode, times
    and device, then a regular file's contents, whole up to its size or, from
    GHOST_CHUNKS_THRESH on, as a chunk entry before each stretch of data (holes left out)."""
    entry = F.ghost_file_entry(uid=ghost.uid, gid=ghost.gid, mode=ghost.mode, dev=ghost.dev & 0xFFFFFFFF, ino=ghost.ino)
    entry.atim.tv_sec, entry.atim.tv_usec = ghost.atime[0] & U64, ghost.atime[1] // 1000
    entry.mtim.tv_sec, entry.mtim.tv_usec = ghost.mtime[0] & U64, ghost.mtime[1] // 1000
    file_type = ghost.mode & S_IFMT
    if file_type in (S_IFCHR, S_IFBLK):
        entry.rdev = ghost.rdev & 0xFFFFFFFF
    if file_type == S_IFLNK and ghost.symlink_target is not None:
        entry.symlnk_target = ghost.symlink_target
    if file_type != S_IFREG:
        return ExtraImage(images.GHOST_FILE, [entry], [b""], ghost_id)
    if ghost.size < GHOST_CHUNKS_THRESH:
        whole = bytearray(ghost.size)
        for off, data in ghost.data:
            whole[off : off + len(data)] = data
        return ExtraImage(images.GHOST_FILE, [entry], [bytes(whole)], ghost_id)
    entry.chunks, entry.size = True, ghost.size
    chunks = [F.ghost_chunk_entry(len=len(data), off=off) for off, data in ghost.data]
    return ExtraImage(images.GHOST_FILE, [entry, *chunks], [b"", *(data for _, data in ghost.data)], ghost_id)


def has_size(identity: FileIdentity, flags: int) -> bool:
    """CRIU records (and restore checks) the size of regular files, except those opened
    write-only for appending: logs may legitimately grow (CRIU's should_check_size)."""
    if (identity.mode & 0o170000) != 0o100000:
        return False
    return not ((flags & O_ACCMODE) == O_WRONLY and flags & O_APPEND)


def _no_shmem_images(shm: SharedMemory) -> int:
    raise ValueError("this FileTable writes no memfd inodes (write_dump connects it to its ShmemImages)")
