"""Low-level helpers shared by the sources: bounded reads of a mapped file, the bulk copy path,
and address -> run lookups. Nothing here knows a dump format."""

from __future__ import annotations

import bisect
import errno
import io
import mmap
import os
import stat
import threading
from collections.abc import Iterable
from typing import BinaryIO, Protocol

from ..errors import SourceError, UnreadablePageError
from .base import PhysicalRun

__all__ = [
    "BULK_CHUNK",
    "ByteReader",
    "MappedFile",
    "RunMap",
    "fail",
    "open_input",
    "read_binary_input",
    "read_text_input",
    "unreadable",
    "write_zeros",
]


#: biggest piece handed to one write() when `out` has no descriptor: large enough that Python
#: overhead vanishes, small enough not to touch hundreds of MiB of page cache at once
BULK_CHUNK = 8 << 20
#: reads of this size or more bypass the map (see MappedFile.pread)
_PREAD_FROM = 1 << 20


def fail(where: str | os.PathLike[str], problem: str) -> SourceError:
    """The one-line error every bad input turns into: '<file>: <problem>'."""
    return SourceError(f"{where}: {problem}")


def unreadable(where: str | os.PathLike[str], problem: str) -> UnreadablePageError:
    """fail() for one page that the file holds but that cannot be read as it describes it."""
    return UnreadablePageError(f"{where}: {problem}")


_NOT_A_FILE = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFDIR: "a directory",
}


def open_input(path: str | os.PathLike[str], what: str = "a dump file") -> int:
    """A read-only descriptor of a regular file or block device. Anything else is refused
    before a byte is read: opening a FIFO would wait for a writer forever, a character device
    could stream without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise fail(path, f"cannot open: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISBLK(mode)):
        os.close(fd)
        raise fail(path, f"is {_NOT_A_FILE.get(stat.S_IFMT(mode), 'not a regular file')}, not {what}")
    os.set_blocking(fd, True)
    return fd


#: the longest HMP text read (`info mtree`, `info registers -a`): a few KiB for a small
#: guest, hundreds for one with hundreds of devices or vCPUs; beyond this it is not HMP text
MAX_TEXT_BYTES = 16 << 20


def read_text_input(path: str | os.PathLike[str], what: str) -> str:
    """The text of a regular file of at most MAX_TEXT_BYTES, refused by name otherwise: a FIFO
    would wait for a writer forever, a device (/dev/zero) stream without end."""
    return read_binary_input(path, what, MAX_TEXT_BYTES).decode("utf-8", "replace")


def read_binary_input(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, refused by name otherwise."""
    fd = open_input(path, what)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise fail(path, f"is a block device, not {what}")
        size = file_size(fd)
        if size > limit:
            raise fail(path, f"is {size} bytes, more than {limit >> 20} MiB: not {what}")
        return os.pread(fd, size, 0)
    except OSError as exc:
        raise fail(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def file_size(fd: int) -> int:
    """The size of a regular file or block device (whose st_size is 0)."""
    return os.lseek(fd, 0, os.SEEK_END)


class ByteReader(Protocol):
    """Random access to the bytes of a container file (the dump file itself, or a Volatility layer)."""

    name: str
    size: int

    def pread(self, offset: int, length: int) -> bytes:
        """Exactly `length` bytes at `offset`; SourceError if the range is outside the file."""
        ...


def release_resident(reader: ByteReader) -> None:
    """Let go of the pages `reader`'s reads made resident in this process, if it maps its file
    (a Volatility layer does not)."""
    release = getattr(reader, "release_resident", None)
    if release is not None:
        release()


class MappedFile:
    """A read-only mmap of a file with bounds-checked reads; also keeps the fd for bulk copies."""

    def __init__(self, path: str | os.PathLike[str], what: str = "a dump file") -> None:
        self.name = str(path)
        self._fd = open_input(path, what)
        try:
            self.size = file_size(self._fd)
            # mmap of an empty file is an error; an empty file is simply truncated
            self.mm: mmap.mmap | None = mmap.mmap(self._fd, self.size, prot=mmap.PROT_READ) if self.size else None
        except (OSError, ValueError) as exc:
            os.close(self._fd)
            raise fail(path, f"cannot map: {exc}") from None
        if self.mm is not None:
            # dumps are mostly read front to back in big pieces
            try:
                self.mm.madvise(mmap.MADV_SEQUENTIAL)
            except (AttributeError, OSError):
                pass

    @property
    def fd(self) -> int:
        return self._fd

    def pread(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise fail(
                self.name,
                f"read of {length} bytes at offset {offset:#x} is beyond the end of the file ({self.size:#x} bytes); truncated?",
            )
        if length == 0 or self.mm is None:
            return b""
        if length >= _PREAD_FROM:
            return self.pread_unmapped(offset, length)
        return self.mm[offset : offset + length]

    def release_resident(self) -> None:
        """Unmap the pages reads have touched (they stay in the page cache): a walk through
        a whole dump by small reads would otherwise keep all it read resident in this process."""
        if self.mm is not None:
            self.mm.madvise(mmap.MADV_DONTNEED)

    def pread_unmapped(self, offset: int, length: int) -> bytes:
        """pread() through the descriptor: the bytes are not mapped into this process, where
        they would stay resident (big reads: searches through all memory; scattered ones)."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise fail(
                self.name, f"read of {length} bytes at offset {offset:#x} is beyond the end of the file; truncated?"
            )
        parts, done = [], 0
        while done < length:
            piece = os.pread(self._fd, length - done, offset + done)
            if not piece:
                raise fail(self.name, f"file shrank while being read (at offset {offset + done:#x})")
            parts.append(piece)
            done += len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def data_extent(self, offset: int) -> tuple[int, int]:
        """[start, stop): the first stretch at or after `offset` that is not a hole of a sparse
        file (start is the file's size if there is none); the rest of the file where the file
        system cannot tell. Reading holes through the map costs a page fault per page."""
        try:
            start = os.lseek(self._fd, offset, os.SEEK_DATA)
            return start, os.lseek(self._fd, start, os.SEEK_HOLE)
        except OSError as exc:
            return (self.size, self.size) if exc.errno == errno.ENXIO else (offset, self.size)

    def copy_to(self, offset: int, length: int, out: BinaryIO) -> None:
        """Write file bytes [offset, offset+length) to `out` through the bulk path."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise fail(self.name, f"range {offset:#x}+{length:#x} is beyond the end of the file; truncated?")
        if length:
            assert self.mm is not None
            bulk_copy(out, self._fd, self.mm, offset, length, self.name)

    def write_pieces(self, pieces: list[tuple[int, int]], out: BinaryIO) -> None:
        """Write the file's bytes at `pieces` ((offset, size), in order) to `out` in one go:
        gathered by preadv into one buffer, written when it is full."""
        for offset, length in pieces:
            if offset < 0 or length < 0 or offset + length > self.size:
                raise fail(self.name, f"range {offset:#x}+{length:#x} is beyond the end of the file; truncated?")
        out_fd = _out_fileno(out)
        if out_fd is None:
            assert self.mm is not None
            with memoryview(self.mm) as view:
                for offset, length in pieces:
                    out.write(view[offset : offset + length])
            return
        out.flush()  # buffered bytes must land before the ones written past the buffer
        copy_pieces(self._fd, pieces, out_fd, self.name)
        _resync_position(out)

    def close(self) -> None:
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:
                # a caller still holds a memoryview; the mapping goes away with it
                pass
            self.mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _out_fileno(out: BinaryIO) -> int | None:
    try:
        return out.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return None


def bulk_copy(out: BinaryIO, fd: int, mm: mmap.mmap, offset: int, length: int, name: str) -> None:
    """Copy `length` bytes at `offset` of file `fd` (named `name`) to `out`: through one reused
    buffer when `out` has a descriptor (copy_pieces), else as big mmap slices."""
    out_fd = _out_fileno(out)
    if out_fd is None:
        with memoryview(mm) as view:
            while length > 0:
                size = min(length, BULK_CHUNK)
                out.write(view[offset : offset + size])
                offset += size
                length -= size
        return
    out.flush()  # buffered bytes must land before the ones written past the buffer
    copy_pieces(fd, [(offset, length)], out_fd, name)
    _resync_position(out)


def copy_pieces(in_fd: int, pieces: list[tuple[int, int]], out_fd: int, name: str) -> None:
    """Write the bytes of file `in_fd` (named `name`) at `pieces` ((offset, size), in order) to
    `out_fd`: gathered into one reused buffer, written whenever it fills. Nothing is mapped, so
    nothing stays resident in this process."""
    with memoryview(_copy_buffer()) as buffer:
        size = len(buffer)
        filled, i, n = 0, 0, len(pieces)
        while i < n:
            offset, length = pieces[i]
            if length > size - filled:
                _write_all(out_fd, buffer[:filled])
                filled = 0
            if length > size:  # bigger than the buffer: a buffer at a time
                while length > 0:
                    take = min(length, size)
                    _read_exactly(in_fd, buffer[:take], offset, name)
                    _write_all(out_fd, buffer[:take])
                    offset, length = offset + take, length - take
                i += 1
                continue
            group = []  # (file offset, size, offset in the buffer) of the pieces that fit
            while i < n and pieces[i][1] <= size - filled:
                offset, length = pieces[i]
                group.append((offset, length, filled))
                filled += length
                i += 1
            _read_group(in_fd, group, buffer, name)
        _write_all(out_fd, buffer[:filled])


def _read_group(fd: int, group: list[tuple[int, int, int]], buffer: memoryview, name: str) -> None:
    """Read each (file offset, size, buffer offset) of `group` into `buffer`: in file order, by
    one preadv for pieces a few bytes apart (a flattened kdump's records, with their headers
    between them read into _SKIPPED), and a piece that repeats an earlier one (QEMU stores every
    zero page as a pointer to one) copied within the buffer instead of read again."""
    first: dict[tuple[int, int], int] = {}
    repeats: list[tuple[int, int, int]] = []
    unique: list[tuple[int, int, int]] = []
    for offset, length, at in group:
        if not length:
            continue
        seen = first.setdefault((offset, length), at)
        if seen != at:
            repeats.append((seen, at, length))
        else:
            unique.append((offset, length, at))
    unique.sort()
    with memoryview(_SKIPPED) as skipped:
        start = 0
        while start < len(unique):
            stop, views = start + 1, [buffer[unique[start][2] : unique[start][2] + unique[start][1]]]
            end = unique[start][0] + unique[start][1]
            while stop < len(unique) and stop - start < _PIECES_PER_SPAN and 0 <= unique[stop][0] - end <= _MAX_GAP:
                offset, length, at = unique[stop]
                if offset > end:
                    views.append(skipped[: offset - end])
                views.append(buffer[at : at + length])
                end = offset + length
                stop += 1
            if os.preadv(fd, views, unique[start][0]) != end - unique[start][0]:
                for offset, length, at in unique[start:stop]:  # read short: piece by piece, to name a shrunk file
                    _read_exactly(fd, buffer[at : at + length], offset, name)
            start = stop
    for source, at, length in repeats:
        buffer[at : at + length] = buffer[source : source + length]


#: bytes between two pieces that one preadv still reads through (into _SKIPPED)
_MAX_GAP = 4096
_SKIPPED = bytearray(_MAX_GAP)
#: iovecs per preadv (Linux's IOV_MAX is 1024): a piece and the gap before it are two
_PIECES_PER_SPAN = 512


def _read_exactly(fd: int, into: memoryview, offset: int, name: str) -> None:
    while into:
        got = os.preadv(fd, [into], offset)
        if got == 0:
            raise fail(name, f"file shrank while being read (at offset {offset:#x})")
        into, offset = into[got:], offset + got


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


#: copy_pieces' buffer. preadv + write through it beat copy_file_range and sendfile here
#: (bench/bench_copy.py, 256 MiB into a new file on ext4): 69 ms against 121 for both when the
#: source is not block-aligned, as a QEMU ELF dump's pages are not, and 69 against 79 when it
#: is; cp takes 81. From tmpfs (a live guest's RAM): 90-93 against 95-137 for sendfile.
#: Page-aligned (an anonymous mapping, not a bytearray): 101 ms from an aligned source in a
#: bytearray. A kdump's raw records went by writev of slices of the dump's mapping, which
#: faulted them in. A fresh buffer per call would cost its page faults.
_COPY_BUFFER_SIZE = 2 << 20
_copy_buffers = threading.local()


def _copy_buffer() -> mmap.mmap | bytearray:
    buffer: mmap.mmap | bytearray | None = getattr(_copy_buffers, "buffer", None)
    if buffer is None:
        # page-aligned (a bytearray is not): the kernel copies whole pages in and out of it
        buffer = _copy_buffers.buffer = mmap.mmap(-1, _COPY_BUFFER_SIZE)
    return buffer


def _resync_position(out: BinaryIO) -> None:
    """A write through the descriptor moved its offset; make a buffered writer agree with it."""
    try:
        if out.seekable():
            out.seek(0, os.SEEK_CUR)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


_ZERO_BLOCK = memoryview(bytes(1 << 20))


def write_zeros(out: BinaryIO, length: int) -> None:
    """`length` zero bytes, written from one shared 1 MiB block (no per-call allocation)."""
    while length > 0:
        size = min(length, len(_ZERO_BLOCK))
        out.write(_ZERO_BLOCK[:size])
        length -= size


class RunMap:
    """Guest-physical runs, each mapped to an offset in some backing store (None: defined as
    zero, not stored), with O(log n) lookup."""

    def __init__(self, where: str, runs: Iterable[tuple[int, int, int | None]]) -> None:
        # (start, length, backing offset), sorted; overlaps are a corrupt file
        self.where = where
        entries = sorted(((s, n, b) for s, n, b in runs if n > 0), key=lambda e: e[0])
        for (s0, n0, _), (s1, _, _) in zip(entries, entries[1:]):
            if s0 + n0 > s1:
                raise fail(where, f"memory ranges overlap at guest-physical {s1:#x}")
        self.starts = [s for s, _, _ in entries]
        self.entries = entries

    def pieces(self, paddr: int, length: int) -> Iterable[tuple[int, int, int | None]]:
        """(guest address, size, backing offset) pieces covering [paddr, paddr+length); SourceError on a hole."""
        if paddr < 0 or length < 0:
            raise fail(self.where, f"bad read request {paddr:#x}+{length:#x}")
        end = paddr + length
        i = bisect.bisect_right(self.starts, paddr) - 1
        while paddr < end:
            if i < 0 or i >= len(self.entries):
                raise fail(self.where, f"guest-physical address {paddr:#x} is not in the dump")
            start, size, backing = self.entries[i]
            if not start <= paddr < start + size:
                raise fail(self.where, f"guest-physical address {paddr:#x} is not in the dump")
            piece = min(end, start + size) - paddr
            yield paddr, piece, None if backing is None else backing + (paddr - start)
            paddr += piece
            i += 1

    def runs(self) -> list[PhysicalRun]:
        return merge_runs((s, n) for s, n, _ in self.entries)


def merge_runs(runs: Iterable[tuple[int, int]]) -> list[PhysicalRun]:
    """Sorted, non-overlapping runs with touching neighbours joined."""
    merged: list[list[int]] = []
    for start, length in sorted(runs):
        if length <= 0:
            continue
        if merged and start <= merged[-1][0] + merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], start + length - last[0])
        else:
            merged.append([start, length])
    return [PhysicalRun(s, n) for s, n in merged]
