"""kdump-compressed dumps (makedumpfile's diskdump format) as QEMU writes them.

Two containers hold the same logical file:
  * the *flattened* stream (QEMU's kdump-zlib/-lzo/-snappy): a 4096-byte "makedumpfile" header,
    then big-endian {int64 offset, int64 size} records each followed by its bytes, ending with
    offset = size = -1; the records place pieces of the logical file;
  * the *plain* layout (QEMU >= 8.2 kdump-raw-*, makedumpfile without -F): the logical file itself.

The logical file: block 0 DiskDumpHeader64 ("KDUMP   "), block 1.. the sub header and notes, then
two bitmaps (bit per pfn, LSB first: pages that exist, pages that were dumped), one 24-byte
page_desc per dumped page in pfn order, then the page data (zlib/lzo/snappy or raw).
"""

from __future__ import annotations

import array
import bisect
import dataclasses
import os
import re
import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import BinaryIO

from ._files import BULK_CHUNK, ByteReader, MappedFile, fail, write_zeros
from .base import PhysicalRun, VcpuState
from .notes import ParsedNotes, parse_notes, parse_vmcoreinfo

PAGE_SIZE = 4096

# -- the flattened container ----------------------------------------------------------------------
FLAT_SIGNATURE = b"makedumpfile"
FLAT_HEADER_SIZE = 4096
FLAT_HEADER = struct.Struct(">16sqq")  # signature, type, version
FLAT_RECORD = struct.Struct(">qq")  # offset, size
FLAT_TYPE = 1
FLAT_VERSION = 1
#: logical offsets beyond this are a corrupt record (the logical file of a 4 PiB guest is smaller)
MAX_LOGICAL_SIZE = 1 << 62

# -- the diskdump logical file ----------------------------------------------------------------------
KDUMP_SIGNATURE = b"KDUMP   "
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
#: rank granularity: one cumulative count per 512 pfns (64 bitmap bytes): 8 bytes of index per
#: 2 MiB of guest, and a rank costs one int.from_bytes of at most 64 bytes
RANK_BLOCK_BYTES = 64
#: pages decoded per batch in bulk reads (descriptor table slices of 24 KiB)
BATCH_PAGES = 1024
PAGE_CACHE_PAGES = 256
ZERO_PAGE = bytes(PAGE_SIZE)
_ZEROS = memoryview(bytes(16 * PAGE_SIZE))


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


class FlattenedLayout:
    """The logical file rebuilt from flattened records: indexed once (O(records)), then random
    access by binary search. Bytes no record covers read as zeros, as makedumpfile -R leaves them."""

    flattened = True

    def __init__(self, reader: ByteReader) -> None:
        self.reader = reader
        self.name = reader.name
        if reader.size < FLAT_HEADER_SIZE:
            raise fail(reader.name, "truncated makedumpfile header")
        check_flat_header(reader.pread(0, FLAT_HEADER.size), reader.name)
        starts, sizes, offsets = index_flat_records(reader)
        self._starts = starts
        self._sizes = sizes
        self._offsets = offsets
        self.size = starts[-1] + sizes[-1] if len(starts) else 0

    def records(self) -> Iterator[tuple[int, int, int]]:
        """(logical offset, size, container offset) of every record, by logical offset."""
        return zip(self._starts, self._sizes, self._offsets)

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
    Every step advances at least 16 bytes, so this ends for any input."""
    starts, sizes, offsets = array.array("q"), array.array("q"), array.array("q")
    pos = FLAT_HEADER_SIZE
    where = reader.name
    while True:
        if pos + FLAT_RECORD.size > reader.size:
            raise fail(where, f"flattened stream ends without its end marker at file offset {pos:#x}; truncated?")
        start, size = FLAT_RECORD.unpack(reader.pread(pos, FLAT_RECORD.size))
        pos += FLAT_RECORD.size
        if start == -1 and size == -1:
            break
        if start < 0 or size < 0 or start + size > MAX_LOGICAL_SIZE:
            raise fail(where, f"corrupt flattened record at file offset {pos - 16:#x} (offset {start}, size {size})")
        if size > reader.size - pos:
            raise fail(
                where,
                f"flattened record at file offset {pos - 16:#x} holds {size} bytes, beyond the end of the file; truncated?",
            )
        if size:
            starts.append(start)
            sizes.append(size)
            offsets.append(pos)
        pos += size
    return _sort_records(where, starts, sizes, offsets)


def _sort_records(where: str, starts: array.array, sizes: array.array, offsets: array.array):
    if all(starts[i] < starts[i + 1] for i in range(len(starts) - 1)):
        order = None
    else:
        # QEMU interleaves page descriptors and page data, so records come out of order
        order = sorted(range(len(starts)), key=starts.__getitem__)
        starts = array.array("q", (starts[i] for i in order))
        sizes = array.array("q", (sizes[i] for i in order))
        offsets = array.array("q", (offsets[i] for i in order))
    for i in range(len(starts) - 1):
        if starts[i] + sizes[i] > starts[i + 1]:
            raise fail(where, f"flattened records overlap at logical offset {starts[i + 1]:#x}")
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


# ==== bitmaps =====================================================================================
class Bitmap:
    """A pfn bitmap (LSB first) with O(1) rank: cumulative popcounts per 64-byte block."""

    def __init__(self, data: bytes, nbits: int) -> None:
        nbytes = (nbits + 7) // 8
        data = bytes(data[:nbytes])
        if nbits % 8:
            # bits past max_mapnr do not name pages
            data = data[:-1] + bytes([data[-1] & ((1 << (nbits % 8)) - 1)])
        self.data = data
        self.nbits = nbits
        self._cum = array.array("Q", [0])
        total = 0
        view = memoryview(data)
        for start in range(0, len(data), RANK_BLOCK_BYTES):
            total += int.from_bytes(view[start : start + RANK_BLOCK_BYTES], "little").bit_count()
            self._cum.append(total)
        self.count = total

    def test(self, bit: int) -> bool:
        return 0 <= bit < self.nbits and (self.data[bit >> 3] >> (bit & 7)) & 1 == 1

    def rank(self, bit: int) -> int:
        """Number of set bits below `bit`."""
        if bit >= self.nbits:
            return self.count
        byte = bit >> 3
        block = byte // RANK_BLOCK_BYTES
        below = int.from_bytes(self.data[block * RANK_BLOCK_BYTES : byte], "little").bit_count()
        return self._cum[block] + below + (self.data[byte] & ((1 << (bit & 7)) - 1)).bit_count()

    def bits(self, start: int, count: int) -> int:
        """Bits [start, start+count) as an int, bit 0 = `start`."""
        value = int.from_bytes(self.data[start >> 3 : (start + count + 7) >> 3], "little") >> (start & 7)
        return value & ((1 << count) - 1)

    def runs(self) -> Iterator[tuple[int, int]]:
        """(first bit, length) of every run of set bits, in order. Works a chunk of bits at a
        time as a string so the scanning runs in C (re), not a Python loop per bit."""
        chunk_bytes = 1 << 20
        pending: list[int] | None = None
        for base_byte in range(0, len(self.data), chunk_bytes):
            chunk = self.data[base_byte : base_byte + chunk_bytes]
            nbits = len(chunk) * 8
            text = format(int.from_bytes(chunk, "little"), f"0{nbits}b")[::-1]
            base = base_byte * 8
            for m in re.finditer("1+", text):
                start, end = base + m.start(), base + m.end()
                if pending is not None and pending[0] + pending[1] == start:
                    pending[1] += end - start
                    continue
                if pending is not None:
                    yield pending[0], pending[1]
                pending = [start, end - start]
        if pending is not None:
            yield pending[0], pending[1]


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
    method = flags & COMPRESSION_MASK
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
        raise ValueError(f"more than one compression flag set ({flags:#x})")
    if len(out) != block_size:
        raise ValueError(f"page decodes to {len(out)} bytes, not {block_size}")
    return out


# ==== the dump ====================================================================================
class KdumpImage:
    """A parsed kdump logical file: pfn -> page bytes. Independent of where the container bytes
    come from (an mmap for KdumpSource, a Volatility layer for the Volatility glue)."""

    def __init__(self, reader: ByteReader) -> None:
        self.reader = reader
        self.where = reader.name
        self.layout = open_layout(reader)
        self._load_headers()
        self._load_bitmaps()
        self._load_notes()
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    # -- parsing -----------------------------------------------------------------------------
    def _load_headers(self) -> None:
        lf, where = self.layout, self.where
        if lf.size < DISK_DUMP_HEADER.size:
            raise fail(where, "truncated kdump header")
        self.header = h = parse_disk_dump_header(lf.pread(0, DISK_DUMP_HEADER.size), where)
        machine = h.utsname[4]
        if machine and machine != "x86_64":
            raise fail(where, f"kdump of a {machine!r} machine; only x86-64 guests are supported")
        if h.block_size != PAGE_SIZE:
            raise fail(where, f"kdump block size {h.block_size}, expected {PAGE_SIZE} (x86-64 pages)")
        if not 0 < h.sub_hdr_size < lf.size // h.block_size:
            raise fail(where, f"corrupt kdump header: sub header of {h.sub_hdr_size} blocks")
        if h.bitmap_blocks <= 0 or h.bitmap_blocks % 2:
            raise fail(where, f"corrupt kdump header: {h.bitmap_blocks} bitmap blocks (must be a positive even number)")
        self.sub = parse_sub_header(lf.pread(h.block_size, SUB_HEADER.size), where)
        self.max_mapnr = self.sub.max_mapnr_64 if h.header_version >= 6 else h.max_mapnr
        bitmap_bits = h.bitmap_blocks // 2 * h.block_size * 8
        if not 0 < self.max_mapnr <= MAX_PFNS:
            raise fail(where, f"corrupt kdump header: max_mapnr {self.max_mapnr}")
        self.nbits = min(self.max_mapnr, bitmap_bits)
        self.bitmap_offset = (1 + h.sub_hdr_size) * h.block_size
        self.bitmap_bytes = h.bitmap_blocks * h.block_size
        # bitmaps are read whole; they must really be in the file (bounds memory use)
        if self.bitmap_offset + self.bitmap_bytes > lf.size or self.bitmap_bytes > self.reader.size:
            raise fail(
                where,
                f"kdump bitmaps ({self.bitmap_bytes} bytes at {self.bitmap_offset:#x}) extend beyond the end of the dump; truncated?",
            )
        self.desc_offset = self.bitmap_offset + self.bitmap_bytes

    def _load_bitmaps(self) -> None:
        half = self.bitmap_bytes // 2
        raw = self.layout.pread(self.bitmap_offset, self.bitmap_bytes)
        self.dumped = Bitmap(raw[half:], self.nbits)
        # bitmap 1: pages that exist; bitmap 2: pages dumped. Pages in 1 but not 2 were
        # excluded by the dumper and are defined as zero; a dumped page always exists.
        self.present = Bitmap(bitmap_or(raw[:half], self.dumped.data), self.nbits)
        if self.desc_offset + self.dumped.count * PAGE_DESC.size > self.layout.size:
            raise fail(
                self.where,
                f"kdump page descriptor table ({self.dumped.count} entries) extends beyond the end of the dump; truncated?",
            )
        self._runs: list[PhysicalRun] | None = None

    def _load_notes(self) -> None:
        s, lf = self.sub, self.layout
        note_bytes = b""
        if self.header.header_version >= 4 and s.size_note:
            if s.size_note > MAX_NOTE_BYTES or s.offset_note + s.size_note > lf.size:
                raise fail(
                    self.where,
                    f"kdump note area ({s.size_note} bytes at {s.offset_note:#x}) is beyond the dump; corrupt or truncated",
                )
            note_bytes = lf.pread(s.offset_note, s.size_note)
        self.note_bytes = note_bytes
        self.notes: ParsedNotes = parse_notes(note_bytes, self.where)
        self.vmcoreinfo = self.notes.vmcoreinfo
        if self.vmcoreinfo is None and self.header.header_version >= 3 and s.size_vmcoreinfo:
            if s.size_vmcoreinfo > MAX_NOTE_BYTES or s.offset_vmcoreinfo + s.size_vmcoreinfo > lf.size:
                raise fail(self.where, "kdump VMCOREINFO area is beyond the dump; corrupt or truncated")
            self.vmcoreinfo = parse_vmcoreinfo(lf.pread(s.offset_vmcoreinfo, s.size_vmcoreinfo))

    # -- descriptors and pages -----------------------------------------------------------------
    @property
    def compression(self) -> str:
        return COMPRESSION_NAMES.get(self.header.status & COMPRESSION_MASK, "raw")

    def runs(self) -> list[PhysicalRun]:
        if self._runs is None:
            runs: list[PhysicalRun] = []
            for start, n in self.present.runs():
                if len(runs) >= MAX_RUNS:
                    # real memory maps have a handful of runs; this is a hostile or corrupt bitmap
                    raise fail(
                        self.where, f"kdump bitmap describes more than {MAX_RUNS} separate memory ranges; corrupt?"
                    )
                runs.append(PhysicalRun(start * PAGE_SIZE, n * PAGE_SIZE))
            self._runs = runs
        return list(self._runs)

    def _desc_bytes(self, first_index: int, count: int) -> bytes:
        return self.layout.pread(self.desc_offset + first_index * PAGE_DESC.size, count * PAGE_DESC.size)

    def descs(self, first_index: int, count: int) -> list[PageDesc]:
        return parse_page_descs(self._desc_bytes(first_index, count))

    def decode(self, pfn: int, desc: PageDesc) -> bytes:
        if not 0 < desc.size <= PAGE_SIZE or desc.offset + desc.size > self.layout.size:
            raise fail(
                self.where, f"corrupt page descriptor for pfn {pfn:#x} (offset {desc.offset:#x}, size {desc.size})"
            )
        data = self.layout.pread(desc.offset, desc.size)
        try:
            return decompress_page(data, desc.flags, PAGE_SIZE)
        except ValueError as exc:
            raise fail(self.where, f"page at guest-physical {pfn * PAGE_SIZE:#x}: {exc}") from None

    def page(self, pfn: int) -> bytes:
        """One page, through a small LRU cache (page-table walks read the same pages again)."""
        cached = self._cache.get(pfn)
        if cached is not None:
            self._cache.move_to_end(pfn)
            return cached
        if not self.present.test(pfn):
            raise fail(self.where, f"guest-physical address {pfn * PAGE_SIZE:#x} is not in the dump")
        if self.dumped.test(pfn):
            data = self.decode(pfn, self.descs(self.dumped.rank(pfn), 1)[0])
        else:
            data = ZERO_PAGE
        self._cache[pfn] = data
        if len(self._cache) > PAGE_CACHE_PAGES:
            self._cache.popitem(last=False)
        return data

    def spans(self, pfn: int, count: int) -> Iterator[tuple[int, bytes | None]]:
        """(pages, data) pieces for pages [pfn, pfn+count) in order: data None means that many
        zero pages; otherwise the decoded bytes of one page. SourceError before yielding anything
        for a batch that reaches a page not in the dump."""
        if pfn < 0 or count < 0 or pfn + count > self.nbits:
            raise fail(
                self.where, f"guest-physical range {pfn * PAGE_SIZE:#x}+{count * PAGE_SIZE:#x} is not in the dump"
            )
        last_key: tuple[int, int, int] | None = None
        last_data = ZERO_PAGE
        last_zero = True
        while count > 0:
            n = min(count, BATCH_PAGES)
            full = (1 << n) - 1
            holes = ~self.present.bits(pfn, n) & full
            if holes:
                missing = pfn + (holes & -holes).bit_length() - 1
                raise fail(self.where, f"guest-physical address {missing * PAGE_SIZE:#x} is not in the dump")
            dumped = self.dumped.bits(pfn, n)
            # plain tuples (offset, size, flags, page_flags): no per-page object construction
            descs = (
                list(PAGE_DESC.iter_unpack(self._desc_bytes(self.dumped.rank(pfn), dumped.bit_count())))
                if dumped
                else []
            )
            di = 0
            zeros = 0
            for i in range(n):
                if not (dumped >> i) & 1:
                    zeros += 1
                    continue
                d = descs[di]
                di += 1
                key = d[:3]
                if key != last_key:
                    # QEMU points every zero page at one shared copy: decode it once
                    last_data = self.decode(pfn + i, PageDesc(*d))
                    last_key = key
                    last_zero = last_data == ZERO_PAGE
                if last_zero:
                    zeros += 1
                    continue
                if zeros:
                    yield zeros, None
                    zeros = 0
                yield 1, last_data
            if zeros:
                yield zeros, None
            pfn += n
            count -= n

    def read(self, paddr: int, length: int) -> bytes:
        if length <= 0:
            if length < 0:
                raise fail(self.where, f"bad read length {length}")
            return b""
        first, last = paddr // PAGE_SIZE, (paddr + length - 1) // PAGE_SIZE
        if paddr < 0:
            raise fail(self.where, f"bad guest-physical address {paddr:#x}")
        if last - first < 4:
            data = b"".join(self.page(p) for p in range(first, last + 1))
        else:
            buf = bytearray()
            for pages, page in self.spans(first, last - first + 1):
                buf += page if page is not None else bytes(pages * PAGE_SIZE)
            data = bytes(buf)
        skip = paddr - first * PAGE_SIZE
        return data[skip : skip + length]

    def copy_to(self, paddr: int, length: int, out: BinaryIO, sparse: bool = False) -> None:
        """Decode pages in batches into a buffer written in multi-MiB pieces. With sparse=True
        long zero stretches become seeks (holes) instead of writes: `out` must be seekable and
        the caller must truncate/extend the file at the end."""
        if length <= 0:
            if length < 0:
                raise fail(self.where, f"bad copy length {length}")
            return
        first, last = paddr // PAGE_SIZE, (paddr + length - 1) // PAGE_SIZE
        head = paddr - first * PAGE_SIZE
        remaining = length
        chunks = _ChunkWriter(out, min(BULK_CHUNK, length))
        try:
            for pages, page in self.spans(first, last - first + 1):
                size = pages * PAGE_SIZE
                if head:
                    # an unaligned start: drop the bytes before paddr
                    skip = min(head, size)
                    head -= skip
                    size -= skip
                    piece = page[skip:] if page is not None else None
                else:
                    piece = page
                size = min(size, remaining)
                if size <= 0:
                    continue
                remaining -= size
                if piece is None:
                    if size >= len(_ZEROS):
                        # long zero stretches skip the buffer: a hole, or writes of one shared zero block
                        chunks.flush()
                        if sparse:
                            out.seek(size, os.SEEK_CUR)
                        else:
                            write_zeros(out, size)
                    else:
                        chunks.add(_ZEROS[:size])
                else:
                    chunks.add(piece if size == len(piece) else piece[:size])
            chunks.flush()
        finally:
            chunks.release()


class _ChunkWriter:
    """Gathers pages in one reused buffer, written out BULK_CHUNK at a time (a fresh bytearray
    per chunk would page-fault its way through hundreds of MiB)."""

    def __init__(self, out: BinaryIO, size: int = BULK_CHUNK) -> None:
        self.out = out
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.pos = 0

    def add(self, data: bytes | memoryview) -> None:
        n = len(data)
        if self.pos + n > len(self.buf):
            self.flush()
            if n > len(self.buf):
                self.out.write(data)
                return
        self.buf[self.pos : self.pos + n] = data
        self.pos += n

    def flush(self) -> None:
        if self.pos:
            self.out.write(self.view[: self.pos])
            self.pos = 0

    def release(self) -> None:
        self.view.release()


def open_layout(reader: ByteReader) -> PlainLayout | FlattenedLayout:
    head = reader.pread(0, min(reader.size, 16))
    if head.startswith(FLAT_SIGNATURE):
        return FlattenedLayout(reader)
    if head.startswith(KDUMP_SIGNATURE):
        return PlainLayout(reader)
    raise fail(reader.name, "neither a flattened makedumpfile stream nor a kdump file")


class KdumpSource:
    """Guest-physical memory of a kdump-compressed file (flattened or plain)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._file = MappedFile(path)
        try:
            self.image = KdumpImage(self._file)
        except BaseException:
            self._file.close()
            raise
        layout = "flattened" if self.image.layout.flattened else "plain"
        self.format_name = f"kdump-{self.image.compression} ({layout})"

    @property
    def header(self) -> DiskDumpHeader:
        return self.image.header

    def runs(self) -> list[PhysicalRun]:
        return self.image.runs()

    def read(self, paddr: int, length: int) -> bytes:
        return self.image.read(paddr, length)

    def copy_to(self, paddr: int, length: int, out: BinaryIO, sparse: bool = False) -> None:
        self.image.copy_to(paddr, length, out, sparse)

    def vcpus(self) -> list[VcpuState]:
        return list(self.image.notes.vcpus)

    def vmcoreinfo(self) -> dict[str, str] | None:
        return self.image.vmcoreinfo

    def note_bytes(self) -> bytes:
        return self.image.note_bytes

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> KdumpSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KdumpSource({self.path!r})"
