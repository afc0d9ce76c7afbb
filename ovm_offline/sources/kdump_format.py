"""The kdump-compressed (makedumpfile diskdump) format: the flattened and plain containers,
the headers, the bitmaps and page descriptors, and page decompression. kdump.py reads a
dump with them."""

from __future__ import annotations

import array
import bisect
import dataclasses
import functools
import itertools
import operator
import re
import struct
import zlib
from collections.abc import Callable, Iterator

from ._files import ByteReader, fail, release_resident
from .magic import FLAT_SIGNATURE, KDUMP_SIGNATURE

__all__ = [
    "Bitmap",
    "COMPRESSION_MASK",
    "COMPRESSION_NAMES",
    "DISK_DUMP_HEADER",
    "DUMP_DH_COMPRESSED_LZO",
    "DUMP_DH_COMPRESSED_SNAPPY",
    "DUMP_DH_COMPRESSED_ZLIB",
    "DiskDumpHeader",
    "FLAT_HEADER",
    "FLAT_HEADER_SIZE",
    "FLAT_RECORD",
    "FLAT_SIGNATURE",
    "FLAT_TYPE",
    "FLAT_VERSION",
    "FlattenedLayout",
    "KDUMP_SIGNATURE",
    "MAX_NOTE_BYTES",
    "MAX_PFNS",
    "MAX_RUNS",
    "PAGE_DESC",
    "PAGE_SIZE",
    "PageDesc",
    "SUB_HEADER",
    "UTS_FIELD",
    "bitmap_or",
    "decompress_page",
    "open_layout",
    "parse_disk_dump_header",
    "parse_page_descs",
    "parse_sub_header",
]


PAGE_SIZE = 4096

# -- the flattened container ----------------------------------------------------------------------
FLAT_HEADER_SIZE = 4096
FLAT_HEADER = struct.Struct(">16sqq")  # signature, type, version
FLAT_RECORD = struct.Struct(">qq")  # offset, size
FLAT_TYPE = 1
FLAT_VERSION = 1
#: logical offsets beyond this are a corrupt record (the logical file of a 4 PiB guest is smaller)
MAX_LOGICAL_SIZE = 1 << 62
#: records indexed between two releases of the pages their headers mapped (a 4 GiB dump holds
#: about a million of them, one page apart)
RELEASE_EVERY_RECORDS = 2048

# -- the diskdump logical file ----------------------------------------------------------------------
DISK_DUMP_HEADER = struct.Struct("<8si390s6xQQIIIIIIIIIi")  # 464 bytes
UTS_FIELD = 65
SUB_HEADER = struct.Struct("<QIIQQQQQQQQQQQ")  # KdumpSubHeader64, 104 bytes
PAGE_DESC = struct.Struct("<QIIQ")  # offset, size, flags, page_flags

DUMP_DH_COMPRESSED_ZLIB = 0x1
DUMP_DH_COMPRESSED_LZO = 0x2
DUMP_DH_COMPRESSED_SNAPPY = 0x4
DUMP_DH_COMPRESSED_ZSTD = 0x20
COMPRESSION_NAMES = {
    DUMP_DH_COMPRESSED_ZLIB: "zlib",
    DUMP_DH_COMPRESSED_LZO: "lzo",
    DUMP_DH_COMPRESSED_SNAPPY: "snappy",
    DUMP_DH_COMPRESSED_ZSTD: "zstd",
}
COMPRESSION_MASK = 0x27

#: x86-64: at most 52 physical address bits, so at most 2**40 pfns
MAX_PFNS = 1 << 40
MAX_NOTE_BYTES = 64 << 20
#: more separate ranges of present pages than this is not a real machine's memory map
MAX_RUNS = 1 << 20
#: rank granularity: one cumulative count per 2048 pfns (256 bitmap bytes): 8 bytes of index per
#: 8 MiB of guest, built in 0.3 ms for 4 GiB, and a rank costs one int.from_bytes of < 256 bytes
RANK_BLOCK_BYTES = 256


#: records a batch's stored bytes may span and still be written as pieces (QEMU's records hold
#: 4 pages: 64-128 per batch); a file of tiny records goes the way of its other bytes
MAX_PIECES = 1024


# ==== logical file =================================================================================
class PlainLayout:
    """The logical file is the container itself."""

    flattened = False

    def __init__(self, reader: ByteReader) -> None:
        self.reader = reader
        self.name = reader.name
        self.size = reader.size

    def pread(self, offset: int, length: int) -> bytes:
        return self.reader.pread(offset, length)

    def container_pieces(self, offset: int, length: int) -> list[tuple[int, int]] | None:
        """(container offset, size) of logical bytes [offset, offset+length), None if any is
        not stored in the file."""
        return [(offset, length)] if 0 <= offset and 0 <= length and offset + length <= self.size else None


IndexRecords = Callable[[ByteReader], "tuple[array.array, array.array, array.array]"]


class FlattenedLayout:
    """The logical file rebuilt from flattened records: indexed once (O(records)), then random
    access by binary search. Bytes no record covers read as zeros, as makedumpfile -R leaves them."""

    flattened = True

    def __init__(self, reader: ByteReader, index_records: IndexRecords | None = None) -> None:
        self.reader = reader
        self.name = reader.name
        if reader.size < FLAT_HEADER_SIZE:
            raise fail(reader.name, "truncated makedumpfile header")
        check_flat_header(reader.pread(0, FLAT_HEADER.size), reader.name)
        starts, sizes, offsets = (index_records or index_flat_records)(reader)
        self._starts = starts
        self._sizes = sizes
        self._offsets = offsets
        self.size = starts[-1] + sizes[-1] if len(starts) else 0

    def records(self) -> Iterator[tuple[int, int, int]]:
        """(logical offset, size, container offset) of every record, by logical offset."""
        return zip(self._starts, self._sizes, self._offsets)

    def container_pieces(self, offset: int, length: int) -> list[tuple[int, int]] | None:
        """(container offset, size) of logical bytes [offset, offset+length), record by record;
        None if a gap (bytes no record stores) lies among them, or more than MAX_PIECES records."""
        if offset < 0 or length < 0:
            return None
        pieces: list[tuple[int, int]] = []
        i, end = bisect.bisect_right(self._starts, offset) - 1, offset + length
        while offset < end:
            if i < 0 or i >= len(self._starts) or not self._starts[i] <= offset < self._starts[i] + self._sizes[i]:
                return None  # a gap (or the end): the stored bytes stop here
            if len(pieces) == MAX_PIECES:
                return None
            take = min(end, self._starts[i] + self._sizes[i]) - offset
            pieces.append((self._offsets[i] + offset - self._starts[i], take))
            offset += take
            i += 1
        return pieces

    def pread(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise fail(
                self.name,
                f"read of {length} bytes at logical offset {offset:#x} is beyond the dump ({self.size:#x} bytes); truncated?",
            )
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and offset + length <= self._starts[i] + self._sizes[i]:
            # the common case: one record holds it all
            return self.reader.pread(self._offsets[i] + offset - self._starts[i], length)
        parts = []
        end = offset + length
        i = max(i, 0)
        while offset < end:
            if i < len(self._starts) and self._starts[i] <= offset < self._starts[i] + self._sizes[i]:
                take = min(end, self._starts[i] + self._sizes[i]) - offset
                parts.append(self.reader.pread(self._offsets[i] + offset - self._starts[i], take))
                i += 1
            else:
                if i < len(self._starts) and self._starts[i] <= offset:
                    i += 1
                    continue
                nxt = self._starts[i] if i < len(self._starts) else end
                take = min(end, nxt) - offset
                parts.append(bytes(take))
            offset += take
        return b"".join(parts)


def check_flat_header(data: bytes, where: str) -> None:
    if len(data) < FLAT_HEADER.size:
        raise fail(where, "truncated makedumpfile header")
    signature, ftype, version = FLAT_HEADER.unpack_from(data)
    if signature.rstrip(b"\0") != FLAT_SIGNATURE:
        raise fail(where, "not a flattened makedumpfile stream")
    if ftype != FLAT_TYPE or version != FLAT_VERSION:
        raise fail(where, f"unsupported makedumpfile flattened format type {ftype} version {version}")


def index_flat_records(reader: ByteReader) -> tuple[array.array, array.array, array.array]:
    """(logical starts, sizes, container offsets) of all records, sorted by logical start.
    Every step advances at least 16 bytes, so this ends for any input. One Python step per
    record is the whole cost of opening a flattened dump (0.1 s per GiB of it): headers are
    read straight from the mapping where there is one, and the bounds are checked once."""
    starts, sizes, offsets = array.array("q"), array.array("q"), array.array("q")
    pos = FLAT_HEADER_SIZE
    where = reader.name
    end = reader.size
    mapped = getattr(reader, "mm", None)
    unpack_at = (
        functools.partial(FLAT_RECORD.unpack_from, mapped)
        if mapped is not None
        else lambda at: FLAT_RECORD.unpack(reader.pread(at, FLAT_RECORD.size))
    )
    add_start, add_size, add_offset = starts.append, sizes.append, offsets.append
    since_release = 0
    while True:
        if pos + FLAT_RECORD.size > end:
            raise fail(where, f"flattened stream ends without its end marker at file offset {pos:#x}; truncated?")
        start, size = unpack_at(pos)
        pos += FLAT_RECORD.size
        if size > 0 and 0 <= start <= MAX_LOGICAL_SIZE - size and pos + size <= end:
            add_start(start)
            add_size(size)
            add_offset(pos)
            pos += size
            since_release += 1
            if since_release >= RELEASE_EVERY_RECORDS:
                since_release = 0
                release_resident(reader)  # each header read maps the page it is on
            continue
        if start == -1 and size == -1:
            break
        if start == 0 and size == 0:
            pos = _past_zero_records(reader, pos - FLAT_RECORD.size, end)
            continue
        if start < 0 or size < 0 or start + size > MAX_LOGICAL_SIZE:
            raise fail(where, f"corrupt flattened record at file offset {pos - 16:#x} (offset {start}, size {size})")
        if size > end - pos:
            raise fail(
                where,
                f"flattened record at file offset {pos - 16:#x} holds {size} bytes, beyond the end of the file; truncated?",
            )
        # an empty record places nothing
    release_resident(reader)
    return _sort_records(where, starts, sizes, offsets)


def _past_zero_records(reader: ByteReader, pos: int, end: int) -> int:
    """The offset of the first record at or after `pos` that is not 16 zero bytes (a record
    that places nothing). Holes skipped by SEEK_DATA, zeros compared a MiB at once: a header
    before 64 GiB of zeros costs what data is really there, not 4 billion steps."""
    data_extent = getattr(reader, "data_extent", None)
    while pos + FLAT_RECORD.size <= end:
        if data_extent is not None:
            data_start, _ = data_extent(pos)
            if data_start >= pos + FLAT_RECORD.size:
                pos += (min(data_start, end) - pos) // FLAT_RECORD.size * FLAT_RECORD.size
                continue
        chunk = reader.pread(pos, min(1 << 20, end - pos) // FLAT_RECORD.size * FLAT_RECORD.size)
        release_resident(reader)
        zeros = len(chunk) - len(chunk.lstrip(b"\0"))
        pos += zeros // FLAT_RECORD.size * FLAT_RECORD.size
        if zeros < len(chunk):
            return pos
    return pos


def _sort_records(where: str, starts: array.array, sizes: array.array, offsets: array.array):
    following = itertools.islice(starts, 1, None)
    if not all(map(operator.lt, starts, following)):
        # QEMU interleaves page descriptors and page data, so records come out of order
        order = sorted(range(len(starts)), key=starts.__getitem__)
        starts = array.array("q", map(starts.__getitem__, order))
        sizes = array.array("q", map(sizes.__getitem__, order))
        offsets = array.array("q", map(offsets.__getitem__, order))
    ends = map(operator.add, starts, sizes)
    if any(map(operator.gt, ends, itertools.islice(starts, 1, None))):
        first = next(i for i in range(len(starts) - 1) if starts[i] + sizes[i] > starts[i + 1])
        raise fail(where, f"flattened records overlap at logical offset {starts[first + 1]:#x}")
    return starts, sizes, offsets


# ==== headers =====================================================================================
@dataclasses.dataclass(frozen=True)
class DiskDumpHeader:
    signature: bytes
    header_version: int
    utsname: tuple[str, ...]  # sysname, nodename, release, version, machine, domainname
    timestamp_sec: int
    timestamp_usec: int
    status: int
    block_size: int
    sub_hdr_size: int
    bitmap_blocks: int
    max_mapnr: int
    total_ram_blocks: int
    device_blocks: int
    written_blocks: int
    current_cpu: int
    nr_cpus: int


@dataclasses.dataclass(frozen=True)
class KdumpSubHeader:
    phys_base: int
    dump_level: int
    split: int
    start_pfn: int
    end_pfn: int
    offset_vmcoreinfo: int
    size_vmcoreinfo: int
    offset_note: int
    size_note: int
    offset_eraseinfo: int
    size_eraseinfo: int
    start_pfn_64: int
    end_pfn_64: int
    max_mapnr_64: int


@dataclasses.dataclass(frozen=True)
class PageDesc:
    offset: int
    size: int
    flags: int
    page_flags: int


def parse_disk_dump_header(data: bytes, where: str) -> DiskDumpHeader:
    if len(data) < DISK_DUMP_HEADER.size:
        raise fail(where, "truncated kdump header")
    fields = DISK_DUMP_HEADER.unpack_from(data)
    if fields[0] != KDUMP_SIGNATURE:
        raise fail(where, "not a kdump file (no 'KDUMP   ' signature)")
    raw_uts = fields[2]
    uts = tuple(
        raw_uts[i * UTS_FIELD : (i + 1) * UTS_FIELD].split(b"\0", 1)[0].decode("ascii", "replace") for i in range(6)
    )
    return DiskDumpHeader(fields[0], fields[1], uts, *fields[3:])


def parse_sub_header(data: bytes, where: str) -> KdumpSubHeader:
    if len(data) < SUB_HEADER.size:
        raise fail(where, "truncated kdump sub header")
    return KdumpSubHeader(*SUB_HEADER.unpack_from(data))


def parse_page_descs(data: bytes) -> list[PageDesc]:
    return [PageDesc(*f) for f in PAGE_DESC.iter_unpack(data)]


#: stretches of zero bytes, of 0xff bytes, and single bytes that mix set and clear bits
_BYTE_STRETCHES = re.compile(rb"\x00+|\xff+|[\x01-\xfe]")


# ==== bitmaps =====================================================================================
class Bitmap:
    """A pfn bitmap (LSB first) with O(1) rank: cumulative popcounts per RANK_BLOCK_BYTES block."""

    def __init__(self, data: bytes, nbits: int) -> None:
        nbytes = (nbits + 7) // 8
        data = bytes(data[:nbytes])
        if nbits % 8:
            # bits past max_mapnr do not name pages
            data = data[:-1] + bytes([data[-1] & ((1 << (nbits % 8)) - 1)])
        self.data = data
        self.nbits = nbits
        self.count = int.from_bytes(data, "little").bit_count()
        self._cum: array.array | None = None  # built by the first rank(): `present` never needs it

    def _cumulative_counts(self) -> array.array:
        cum = array.array("Q", [0])
        total = 0
        view = memoryview(self.data)
        for start in range(0, len(self.data), RANK_BLOCK_BYTES):
            total += int.from_bytes(view[start : start + RANK_BLOCK_BYTES], "little").bit_count()
            cum.append(total)
        return cum

    def test(self, bit: int) -> bool:
        return 0 <= bit < self.nbits and (self.data[bit >> 3] >> (bit & 7)) & 1 == 1

    def rank(self, bit: int) -> int:
        """Number of set bits below `bit`."""
        if bit >= self.nbits:
            return self.count
        if self._cum is None:
            self._cum = self._cumulative_counts()
        byte = bit >> 3
        block = byte // RANK_BLOCK_BYTES
        below = int.from_bytes(self.data[block * RANK_BLOCK_BYTES : byte], "little").bit_count()
        return self._cum[block] + below + (self.data[byte] & ((1 << (bit & 7)) - 1)).bit_count()

    def bits(self, start: int, count: int) -> int:
        """Bits [start, start+count) as an int, bit 0 = `start`."""
        value = int.from_bytes(self.data[start >> 3 : (start + count + 7) >> 3], "little") >> (start & 7)
        return value & ((1 << count) - 1)

    def runs(self) -> Iterator[tuple[int, int]]:
        """(first bit, length) of every run of set bits, in order. Stretches of 0x00 and 0xff
        bytes are found by `re` in C; only the bytes that mix set and clear bits are looked at
        bit by bit (a 4 GiB guest's bitmap of a handful of runs: 0.1 ms, not 9 ms). Each mixed
        byte ends or starts a run, so a caller that stops after N runs does O(N) work."""
        start = end = -1  # the open run [start, end), none while start < 0
        data = self.data
        for m in _BYTE_STRETCHES.finditer(data):
            first, last = m.span()
            byte = data[first]
            if byte == 0:
                continue
            if byte == 0xFF:
                if start >= 0 and end == first * 8:
                    end = last * 8
                    continue
                if start >= 0:
                    yield start, end - start
                start, end = first * 8, last * 8
                continue
            for bit in range(first * 8, first * 8 + 8):
                if not byte & 1 << (bit & 7):
                    continue
                if start >= 0 and end == bit:
                    end += 1
                    continue
                if start >= 0:
                    yield start, end - start
                start, end = bit, bit + 1
        if start >= 0:
            yield start, end - start


def bitmap_or(a: bytes, b: bytes) -> bytes:
    n = max(len(a), len(b))
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(n, "little")


# ==== decompression ==============================================================================
def _snappy_length(data: bytes) -> int:
    """The uncompressed length in a raw snappy stream's preamble (a varint)."""
    value = shift = 0
    for byte in data[:5]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    return -1


def decompress_page(data: bytes, flags: int, block_size: int) -> bytes:
    """One page's bytes; raises ValueError (callers wrap it) on anything but exactly block_size bytes."""
    method = flags  # a bit beyond the one compression the page names makes it unreadable
    if method == 0:
        out = data
    elif method == DUMP_DH_COMPRESSED_ZLIB:
        try:
            out = zlib.decompress(data)
        except zlib.error as exc:
            raise ValueError(f"zlib: {exc}") from None
    elif method == DUMP_DH_COMPRESSED_LZO:
        import lzo  # optional dependency; only lzo dumps need it

        try:
            out = lzo.decompress(data, False, block_size)
        except lzo.error as exc:
            raise ValueError(f"lzo: {exc}") from None
    elif method == DUMP_DH_COMPRESSED_SNAPPY:
        import cramjam

        # check the claimed size first: a hostile preamble could ask for gigabytes
        if _snappy_length(data) != block_size:
            raise ValueError("snappy: wrong uncompressed length")
        try:
            out = bytes(cramjam.snappy.decompress_raw(data))
        except cramjam.DecompressionError as exc:
            raise ValueError(f"snappy: {exc}") from None
    elif method == DUMP_DH_COMPRESSED_ZSTD:
        raise ValueError("zstd-compressed pages are not supported")
    else:
        raise ValueError(f"flags {flags:#x} name no one compression the format defines")
    if len(out) != block_size:
        raise ValueError(f"page decodes to {len(out)} bytes, not {block_size}")
    return out


def open_layout(reader: ByteReader, index_records: IndexRecords | None = None) -> PlainLayout | FlattenedLayout:
    """The logical file in `reader`; a flattened one indexed by `index_records` (the records'
    (logical starts, sizes, container offsets), as index_flat_records finds them)."""
    head = reader.pread(0, min(reader.size, 16))
    if head.startswith(FLAT_SIGNATURE):
        return FlattenedLayout(reader, index_records)
    if head.startswith(KDUMP_SIGNATURE):
        return PlainLayout(reader)
    raise fail(reader.name, "neither a flattened makedumpfile stream nor a kdump file")
