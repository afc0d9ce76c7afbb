"""A flattened kdump's record index, kept between runs.

Opening a flattened kdump (QEMU's kdump-zlib, -lzo, -snappy) walks every record header: one
Python step per record, 0.1 s per GiB of dump file, paid again by every command run on the same
file. The index (what `index_flat_records` returns) is kept in the user cache under
``kdump-index/``, one file per dump file, named by the dump's device and inode. It is
trusted only while the dump's size, modification and change times are those it was made from
(a write changes them; the change time cannot be set back), and only if a sample of the dump's
record headers still say what it says. A dump of fewer than MIN_RECORDS records is indexed in
milliseconds and not kept; at most MAX_FILES indexes are, the least recently used dropped first.
"""

from __future__ import annotations

import array
import os
import struct
import sys
import zlib

from ..user_cache import atomic_write, cache_root
from ._files import ByteReader, MappedFile
from .kdump_format import FLAT_RECORD, index_flat_records

__all__ = ["MAX_FILES", "MIN_RECORDS", "flat_records", "index_path"]

INDEX_FORMAT = 1
#: records below which indexing (about 2 us a record) costs less than loading a kept index
#: (0.3 ms for memhog-0's 3,304, which take 6 ms to index: more than a kdump's start has spare)
MIN_RECORDS = 1024
MAX_FILES = 32
#: record headers compared with the index when it is loaded (spread over the file)
SAMPLED_RECORDS = 64
_MAGIC = b"OVMKIDX\0"
# magic, format, records, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns, crc32 of the arrays
_HEAD = struct.Struct("<8sIQQQqqqI")

Index = tuple[array.array, array.array, array.array]


def flat_records(reader: ByteReader) -> Index:
    """`index_flat_records(reader)`: (logical starts, sizes, container offsets) of its records,
    from the cache when the cache holds this very file's; a dump file indexed anew is kept."""
    if not isinstance(reader, MappedFile):  # a Volatility layer: no file to key the index by
        return index_flat_records(reader)
    st = os.fstat(reader.fd)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    path = index_path(st.st_dev, st.st_ino)
    found = _load(path, key, reader)
    if found is not None:
        return found
    index = index_flat_records(reader)
    if len(index[0]) >= MIN_RECORDS and atomic_write(path, _encode(key, index)):
        _prune(os.path.dirname(path))
    return index


def index_path(st_dev: int, st_ino: int) -> str:
    """The file that keeps the index of the dump with this device and inode: its links and
    paths share it, and a new file on a reused inode is told apart by the times in the key.
    (Not a hash of the path: hashlib costs a kdump's every start 3 ms of imports.)"""
    return os.path.join(cache_root(), "kdump-index", f"{st_dev:x}-{st_ino:x}.idx")


def _encode(key: tuple[int, ...], index: Index) -> bytes:
    arrays = [array.array("q", a) for a in index]
    if sys.byteorder == "big":  # the file is little-endian wherever it was written
        for a in arrays:
            a.byteswap()
    body = b"".join(a.tobytes() for a in arrays)
    return _HEAD.pack(_MAGIC, INDEX_FORMAT, len(index[0]), *key, zlib.crc32(body)) + body


def _load(path: str, key: tuple[int, ...], reader: MappedFile) -> Index | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < _HEAD.size:
        return None
    magic, version, count, *made_from, crc = _HEAD.unpack_from(data)
    body = memoryview(data)[_HEAD.size :]
    if magic != _MAGIC or version != INDEX_FORMAT or tuple(made_from) != key or len(body) != 24 * count:
        return None
    if zlib.crc32(body) != crc:
        return None
    index: list[array.array] = []
    for i in range(3):
        a = array.array("q")
        a.frombytes(body[i * 8 * count : (i + 1) * 8 * count])
        if sys.byteorder == "big":
            a.byteswap()
        index.append(a)
    starts, sizes, offsets = index
    if not _headers_agree(reader, starts, sizes, offsets):
        return None
    try:
        os.utime(path)  # used: the last to be pruned
    except OSError:
        pass
    return starts, sizes, offsets


def _headers_agree(reader: MappedFile, starts: array.array, sizes: array.array, offsets: array.array) -> bool:
    """Do the dump's record headers at a sample of the index's records say what it says?"""
    n = len(starts)
    for i in {*range(0, n, max(1, n // SAMPLED_RECORDS)), n - 1} if n else ():
        at = offsets[i] - FLAT_RECORD.size
        if at < 0 or offsets[i] + sizes[i] > reader.size:
            return False
        # not through the mapping: a fault there maps the whole large folio around it (2 MiB
        # here), and 64 of them left 80 MiB resident
        if FLAT_RECORD.unpack(reader.pread_unmapped(at, FLAT_RECORD.size)) != (starts[i], sizes[i]):
            return False
    return True


def _prune(directory: str) -> None:
    try:
        with os.scandir(directory) as entries:
            kept = [(e.stat().st_mtime_ns, e.path) for e in entries if e.name.endswith(".idx")]
    except OSError:
        return
    kept.sort(reverse=True)
    for _, path in kept[MAX_FILES:]:
        try:
            os.unlink(path)
        except OSError:
            pass
