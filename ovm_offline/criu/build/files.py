"""files.img: one entry per open file (or per mapped file, as CRIU does), ids handed out in
the order CRIU meets files. The entries of each kind of open file, and the images a kind writes
of its own (tty-info, pipes-data, sk-queues, ...), come from that kind's `KindWriter`
(ovm_offline.filekinds): this table only hands out ids, keeps CRIU's order and writes regular
files, which everything refers to (exe, mappings, cwd, root, a tty's or FIFO's path)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Mapping
from typing import NamedTuple, Protocol

from google.protobuf.message import Message

from ...state import FileIdentity, OpenFile, Owner, SharedMemory
from .. import images
from .common import U64, F, fown

__all__ = ["FD_CLOEXEC", "ExtraImage", "FileTable", "KindWriter", "has_size"]

FD_CLOEXEC = 1
O_ACCMODE, O_WRONLY, O_APPEND = 0o3, 0o1, 0o2000


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
        self.entries.append(F.file_entry(type=F.REG, id=fid, reg=reg))
        self._by_key[key] = fid
        return fid

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
        """Every kind's images besides files.img, those with no entries left out."""
        return [img for w in self.writers.values() for img in w.images(self) if img.entries]


def has_size(identity: FileIdentity, flags: int) -> bool:
    """CRIU records (and restore checks) the size of regular files, except those opened
    write-only for appending: logs may legitimately grow (CRIU's should_check_size)."""
    if (identity.mode & 0o170000) != 0o100000:
        return False
    return not ((flags & O_ACCMODE) == O_WRONLY and flags & O_APPEND)


def _no_shmem_images(shm: SharedMemory) -> int:
    raise ValueError("this FileTable writes no memfd inodes (write_dump connects it to its ShmemImages)")
