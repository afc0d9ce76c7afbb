"""CRIU 3.17 image files: framing, the table of image kinds, reading and writing.

An image is ``[COMMON or SERVICE magic] image-magic {u32 length, message, [raw payload]}``;
``inventory.img`` has its own magic only; ``pages-N.img`` and a few network/tmpfs dumps
are raw files without any header. Every kind of image is one row of ``KINDS``
(descriptors.py, re-exported here), so callers never deal with magics or framing:

    from ovm_offline.criu import images, pb
    core = pb.criu_task_pb2.core_entry(mtype=pb.criu_task_pb2.core_entry.X86_64, ...)
    images.write_image(out / images.CORE.filename(pid), images.CORE, [core])
    kind, entries, payloads = images.read_image(out / "core-10000.img")

Writers are deterministic (same messages -> same bytes). Every malformed input raises
``ImageError`` with a one-line message naming the file and entry.
"""

from __future__ import annotations

__all__ = [
    "KINDS",
    "KINDS_BY_MAGIC",
    "KINDS_BY_NAME",
    "CGROUP",
    "COMMON_MAGIC",
    "CORE",
    "Entry",
    "FDINFO",
    "FIFO_DATA",
    "FILES",
    "FILE_LOCKS",
    "GHOST_FILE",
    "FS",
    "IDS",
    "INVENTORY",
    "IPCNS_SHM",
    "IPCNS_VAR",
    "Image",
    "ImageDir",
    "ImageError",
    "ImageKind",
    "MEMFD_INODE",
    "MM",
    "MOUNTPOINTS",
    "NETNS",
    "NOT_IMAGES",
    "PAGEMAP",
    "PAGES",
    "PAGE_SIZE",
    "PE_LAZY",
    "PE_PARENT",
    "PE_PRESENT",
    "PIPES_DATA",
    "PSTREE",
    "REMAP_FPATH",
    "Page",
    "SECCOMP",
    "SERVICE_MAGIC",
    "SHMEM_PAGEMAP",
    "SK_QUEUES",
    "STATS",
    "TCP_STREAM",
    "TIMENS",
    "TTY_DATA",
    "TTY_INFO",
    "TMPFS_DEV",
    "USERNS",
    "UTSNS",
    "decode_image",
    "encode_image",
    "kind_for_filename",
    "page_present",
    "read_image",
    "write_image",
]

import errno
import io
import mmap
import os
import stat
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from google.protobuf.message import DecodeError, EncodeError, Message

from ..errors import ImageError, writing_output
from .descriptors import (
    CGROUP,
    COMMON_MAGIC,
    CORE,
    FDINFO,
    FIFO_DATA,
    FILE_LOCKS,
    FILES,
    FS,
    GHOST_FILE,
    IDS,
    INVENTORY,
    IPCNS_SHM,
    IPCNS_VAR,
    KINDS,
    KINDS_BY_MAGIC,
    KINDS_BY_NAME,
    MEMFD_INODE,
    MM,
    MOUNTPOINTS,
    NETNS,
    NOT_IMAGES,
    PAGE_SIZE,
    PAGEMAP,
    PAGES,
    PE_LAZY,
    PE_PARENT,
    PE_PRESENT,
    PIPES_DATA,
    PSTREE,
    REMAP_FPATH,
    SECCOMP,
    SERVICE_MAGIC,
    SHMEM_PAGEMAP,
    SK_QUEUES,
    STATS,
    TCP_STREAM,
    TIMENS,
    TMPFS_DEV,
    TTY_DATA,
    TTY_INFO,
    USERNS,
    UTSNS,
    ImageKind,
    kind_for_filename,
)

#: A decoded entry: a message of its image kind's type, whose fields that kind defines.
Entry = Any

_U32 = struct.Struct("<I")


class Image(NamedTuple):
    """A decoded image: entries in file order, and the raw data after each entry
    (b"" for kinds without payload). Raw kinds have no entries and one payload."""

    kind: ImageKind
    entries: list[Entry]
    payloads: list[bytes]


# ---- decoding ----------------------------------------------------------------------


def decode_image(data: bytes | memoryview, name: str = "<image>") -> Image:
    """Decode one image file's bytes; the kind comes from the magic (raw kinds from name)."""
    by_name = kind_for_filename(os.path.basename(name))
    if by_name is not None and by_name.raw:
        return Image(by_name, [], [bytes(data)])
    view = memoryview(data)
    if len(view) < 4:
        raise ImageError(f"{name}: {len(view)} bytes, too short for an image magic")
    (magic,) = _U32.unpack_from(view, 0)
    off = 4
    prefix: int | None = None
    if magic in (COMMON_MAGIC, SERVICE_MAGIC):
        if len(view) < 8:
            raise ImageError(f"{name}: truncated after the common magic")
        prefix, (magic,) = magic, _U32.unpack_from(view, 4)
        off = 8
    kind = KINDS_BY_MAGIC.get(magic)
    if kind is None:
        raise ImageError(f"{name}: unknown image magic 0x{magic:08x}")
    if kind is PAGEMAP and SHMEM_PAGEMAP.match(os.path.basename(name)) is not None:
        kind = SHMEM_PAGEMAP
    if prefix != kind.prefix:
        want = "none" if kind.prefix is None else f"0x{kind.prefix:08x}"
        have = "none" if prefix is None else f"0x{prefix:08x}"
        raise ImageError(f"{name}: {kind.name} image with leading magic {have}, expected {want}")
    entries: list[Entry] = []
    payloads: list[bytes] = []
    while off < len(view):
        idx = len(entries)
        if len(view) - off < 4:
            raise ImageError(f"{name}: entry {idx}: truncated length field")
        (size,) = _U32.unpack_from(view, off)
        off += 4
        if size > len(view) - off:
            raise ImageError(f"{name}: entry {idx}: length {size} exceeds the {len(view) - off} bytes left")
        cls = kind.head if (kind.head is not None and idx == 0) else kind.message
        assert cls is not None
        msg: Entry = cls()
        try:
            msg.ParseFromString(view[off : off + size].tobytes())
        except (DecodeError, RecursionError, ValueError) as e:
            raise ImageError(f"{name}: entry {idx}: bad {cls.DESCRIPTOR.name}: {_one_line(e)}") from None
        missing = msg.FindInitializationErrors()
        if missing:  # protobuf-c, and so criu, rejects these too
            raise ImageError(f"{name}: entry {idx}: {cls.DESCRIPTOR.name} lacks required {', '.join(missing)}")
        off += size
        payload = b""
        if idx == 0 and cls is kind.head and kind.head_data_to_end(msg):
            payload = view[off:].tobytes()
            off = len(view)
        elif kind.payload_fields and cls is kind.message:
            n = kind.payload_size(msg)
            if n > len(view) - off:
                raise ImageError(f"{name}: entry {idx}: {n} payload bytes announced, {len(view) - off} left")
            payload = view[off : off + n].tobytes()
            off += n
        entries.append(msg)
        payloads.append(payload)
    _check_count(kind, entries, name)
    return Image(kind, entries, payloads)


def _open_image_file(path: str | os.PathLike[str]) -> BinaryIO:
    """An image file opened for reading: a regular file itself, never a symbolic link (which
    could lead out of the directory), a FIFO (which would block) or a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ImageError(f"{path}: is a symbolic link, not an image file") from None
        raise ImageError(f"{path}: cannot read: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory", stat.S_IFSOCK: "a socket"}.get(
            stat.S_IFMT(mode), "a device"
        )
        raise ImageError(f"{path}: is {kind}, not an image file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_image(path: str | os.PathLike[str]) -> Image:
    """Read and decode one image file; raises ImageError for anything malformed."""
    p = Path(path)
    with _open_image_file(p) as f:
        try:
            data = f.read()
        except OSError as e:
            raise ImageError(f"{p}: cannot read: {e.strerror or e}") from None
    return decode_image(data, str(p))


def _check_count(kind: ImageKind, entries: Sequence[Message], name: str) -> None:
    if kind.single and len(entries) != 1:
        raise ImageError(f"{name}: {kind.name} image must hold exactly one entry, found {len(entries)}")
    if kind.head is not None and not entries:
        raise ImageError(f"{name}: {kind.name} image lacks its {kind.head.DESCRIPTOR.name}")


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# ---- encoding ----------------------------------------------------------------------


def encode_image(kind: ImageKind, entries: Sequence[Entry], payloads: Sequence[bytes] | None = None) -> bytes:
    """The bytes of an image of `kind` (raw kinds: the concatenated payloads)."""
    if kind.raw:
        if entries:
            raise ImageError(f"{kind.name}: raw image kind takes payloads, not entries")
        return b"".join(bytes(p) for p in payloads or ())
    name = kind.filename("N") if "{id}" in kind.pattern else kind.pattern
    _check_count(kind, entries, name)
    if kind.payload_fields or kind.head_data_field:
        if payloads is not None and len(payloads) != len(entries):
            raise ImageError(f"{name}: {len(entries)} entries but {len(payloads)} payloads")
    elif payloads is not None and any(payloads):
        raise ImageError(f"{name}: {kind.name} entries carry no payload")
    out = io.BytesIO()
    if kind.prefix is not None:
        out.write(_U32.pack(kind.prefix))
    assert kind.magic is not None
    out.write(_U32.pack(kind.magic))
    for idx, msg in enumerate(entries):
        cls = kind.head if (kind.head is not None and idx == 0) else kind.message
        assert cls is not None
        if msg.DESCRIPTOR.full_name != cls.DESCRIPTOR.full_name:
            raise ImageError(
                f"{name}: entry {idx} is a {msg.DESCRIPTOR.full_name}, expected {cls.DESCRIPTOR.full_name}"
            )
        missing = msg.FindInitializationErrors()
        if missing:
            raise ImageError(f"{name}: entry {idx}: required field(s) not set: {', '.join(missing)}")
        try:
            body = msg.SerializeToString(deterministic=True)
        except EncodeError as e:  # pragma: no cover - FindInitializationErrors catches it first
            raise ImageError(f"{name}: entry {idx}: {_one_line(e)}") from None
        out.write(_U32.pack(len(body)))
        out.write(body)
        if idx == 0 and cls is kind.head and kind.head_data_to_end(msg):
            if len(entries) > 1:
                raise ImageError(f"{name}: entries after a head whose data runs to the end of the image")
            out.write(bytes(payloads[0]) if payloads is not None else b"")
        elif kind.payload_fields and cls is kind.message:
            payload = bytes(payloads[idx]) if payloads is not None else b""
            want = kind.payload_size(msg)
            if len(payload) != want:
                raise ImageError(f"{name}: entry {idx}: payload is {len(payload)} bytes, the entry says {want}")
            out.write(payload)
    return out.getvalue()


def write_image(
    dest: str | os.PathLike[str] | BinaryIO,
    kind: ImageKind,
    entries: Sequence[Entry],
    payloads: Sequence[bytes] | None = None,
) -> int:
    """Encode and write one image; returns the number of bytes written.

    For PAGEMAP, entries[0] is the pagemap_head. For kinds with payload_fields, payloads[i]
    is the raw data following entries[i]. For raw kinds (PAGES), pass entries=[] and the
    data as payloads (any number of chunks; they are concatenated).
    """
    data = encode_image(kind, entries, payloads)
    if isinstance(dest, (str, os.PathLike)):
        with writing_output(dest):
            Path(dest).write_bytes(data)
    else:
        dest.write(data)
    return len(data)


# ---- image directories ----------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page of a task's dumped memory."""

    vaddr: int
    flags: int  # pagemap flags of its run (PE_*); PE_PRESENT when the data is in the pages image
    data: bytes | None  # None when the page is not in pages-N.img (PE_PARENT / PE_LAZY only)


def pagemap_run_pages(entry: Entry) -> int:
    """A pagemap run's page count: CRIU 4.2's 64-bit field where it is set (4.2 leaves the
    32-bit one 0), else the 32-bit one every CRIU reads."""
    return entry.nr_pages_64 if entry.HasField("nr_pages_64") else entry.nr_pages


def page_present(entry: Entry) -> bool:
    """Whether a pagemap run's data is in pages-N.img (entries without flags predate them)."""
    if entry.HasField("flags"):
        return bool(entry.flags & PE_PRESENT)
    return not entry.in_parent


class ImageDir:
    """All images of one dump directory, decoded on first use.

    Files that are not images (dump.log, restore.log) are left out; raw files (pages-N.img)
    are listed by `names()` but read page by page through `pages()`.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._cache: dict[str, Image] = {}
        if not self.path.is_dir():
            raise ImageError(f"{self.path}: not a directory")

    def __repr__(self) -> str:
        return f"ImageDir({str(self.path)!r})"

    def names(self) -> list[str]:
        """Image file names, sorted."""
        return sorted(
            p.name
            for p in self.path.iterdir()
            if p.is_file() and not p.is_symlink() and not NOT_IMAGES.fullmatch(p.name)
            and (p.name.endswith(".img") or kind_for_filename(p.name) is not None)
        )  # fmt: skip

    def _file(self, name: str) -> Path:
        """The path of file `name` of this directory; a name that leads elsewhere is refused."""
        if "/" in name or name in ("", ".", ".."):
            raise ImageError(f"{name!r}: not the name of a file in {self.path}")
        return self.path / name

    def raw(self, name: str) -> bytes:
        """The bytes of file `name` (a raw image such as pages-N.img), read whole."""
        with _open_image_file(self._file(name)) as f:
            return f.read()

    def raw_digest(self, name: str) -> tuple[int, str]:
        """(size, sha256 hex) of file `name`, read a MiB at a time: a pages image of gigabytes
        (or a sparse one claiming them) is summed in bounded memory."""
        import hashlib

        digest, size = hashlib.sha256(), 0
        with _open_image_file(self._file(name)) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        return size, digest.hexdigest()

    def load(self, name: str) -> Image:
        if name not in self._cache:
            self._cache[name] = read_image(self._file(name))
        return self._cache[name]

    def kind_of(self, name: str) -> ImageKind:
        """The kind of a file, from its name if raw, else from its magic."""
        k = kind_for_filename(name)
        if k is not None and k.raw:
            return k
        return self.load(name).kind

    def find(self, kind: ImageKind) -> dict[str, Image]:
        """name -> image for every non-raw file of this kind (by magic)."""
        return {n: self.load(n) for n in self.names() if self.kind_of(n) is kind and not kind.raw}

    def get(self, kind: ImageKind, id: int | str | None = None) -> Image | None:
        """The image named kind.filename(id), or None if the directory has no such file."""
        name = kind.filename(id)
        return self.load(name) if (self.path / name).is_file() else None

    def entry(self, kind: ImageKind, id: int | str | None = None) -> Entry | None:
        """The single entry of a single-entry image, or None if absent."""
        img = self.get(kind, id)
        return None if img is None else img.entries[0]

    def pids(self) -> list[int]:
        """Pids of all tasks in pstree order."""
        img = self.get(PSTREE)
        return [] if img is None else [e.pid for e in img.entries]

    def pages(self, pid: int, kind: ImageKind = PAGEMAP) -> Iterator[Page]:
        """Every page the pagemap of `pid` lists, in pagemap order, with its data (with
        kind=SHMEM_PAGEMAP: of the shmem file with inode number `pid`)."""
        pm = self.get(kind, pid)
        if pm is None:
            return
        head, runs = pm.entries[0], pm.entries[1:]
        pages_name = PAGES.filename(head.pages_id)
        pages_path = self.path / pages_name
        need = sum(pagemap_run_pages(e) for e in runs if page_present(e)) * PAGE_SIZE
        with _map_file(pages_path, need) as data:
            if len(data) < need:
                raise ImageError(f"{pages_path}: {len(data)} bytes, {kind.filename(pid)} needs {need}")
            off = 0
            for run in runs:
                present = page_present(run)
                flags = run.flags if run.HasField("flags") else (PE_PARENT if run.in_parent else PE_PRESENT)
                for i in range(pagemap_run_pages(run)):
                    chunk = None
                    if present:
                        chunk = bytes(data[off : off + PAGE_SIZE])
                        off += PAGE_SIZE
                    yield Page(run.vaddr + i * PAGE_SIZE, flags, chunk)


class _map_file:
    """Memory-map a pages file read-only; an empty or (if nothing is needed) missing file maps
    to b"". The view is released before the map is closed, so no BufferError on exit."""

    def __init__(self, path: Path, need: int):
        self.path, self.need = path, need
        self._f: BinaryIO | None = None
        self._m: mmap.mmap | None = None
        self._v: memoryview | None = None

    def __enter__(self) -> memoryview | bytes:
        if self.need == 0 and not self.path.exists():
            return b""
        self._f = _open_image_file(self.path)
        try:
            if os.fstat(self._f.fileno()).st_size == 0:
                return b""
            self._m = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            self.__exit__()
            raise ImageError(f"{self.path}: cannot read: {e.strerror or e}") from None
        self._v = memoryview(self._m)
        return self._v

    def __exit__(self, *exc: object) -> None:
        if self._v is not None:
            self._v.release()
        if self._m is not None:
            self._m.close()
        if self._f is not None:
            self._f.close()
