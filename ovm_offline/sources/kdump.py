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

import itertools
import operator
import os
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from ._files import ByteReader, MappedFile, fail, release_resident, unreadable, write_zeros
from .base import PhysicalRun, VcpuState
from .kdump_format import (
    COMPRESSION_MASK,
    COMPRESSION_NAMES,
    DISK_DUMP_HEADER,
    DUMP_DH_COMPRESSED_ZLIB,
    MAX_NOTE_BYTES,
    MAX_PFNS,
    MAX_PIECES,
    MAX_RUNS,
    PAGE_DESC,
    PAGE_SIZE,
    SUB_HEADER,
    Bitmap,
    DiskDumpHeader,
    PageDesc,
    bitmap_or,
    decompress_page,
    open_layout,
    parse_disk_dump_header,
    parse_page_descs,
    parse_sub_header,
)
from .kdump_index import flat_records
from .kdump_pieces import ZERO_PAGE, Piece, StoredRaw, clipped, pieces_of_batch
from .notes import ParsedNotes, parse_notes, parse_vmcoreinfo
from .ordered import cores, ordered_map

__all__ = ["KdumpImage", "KdumpSource", "StoredRaw", "ZERO_PAGE"]


#: pages decoded per batch in bulk reads (1 MiB decoded, descriptor table slices of 6 KiB)
BATCH_PAGES = 256
#: threads that decode batches at once: a few cores reach the disk's speed, and each batch in
#: flight holds up to twice its size (stored and decoded) in memory
MAX_DECODE_THREADS = 4
#: decoded pages kept for small reads
PAGE_CACHE_PAGES = 256
#: pages decoded between two releases of the container's resident pages (at most 4 MiB of
#: compressed data stay mapped: a dump's RSS must not grow with the process's size)
RELEASE_EVERY_PAGES = 1024
#: keys (offset, size, flags) of stored pages known to decode to zeros: QEMU points every zero
#: page at one; a hostile dump cannot make the set grow past this
MAX_ZERO_KEYS = 64
#: zlib pages inflated in one C-level loop (without the GIL between them) before their sizes
#: are checked: a hostile page can inflate to about 4 MiB
INFLATE_AT_ONCE = 8
#: how far apart a batch's stored pages may lie and still be read in one piece
BATCH_SLACK = 64 * PAGE_SIZE


# ==== the dump ====================================================================================
class KdumpImage:
    """A parsed kdump logical file: pfn -> page bytes. Independent of where the container bytes
    come from (an mmap for KdumpSource, a Volatility layer for the Volatility glue)."""

    def __init__(self, reader: ByteReader) -> None:
        self.reader = reader
        self.where = reader.name
        self.layout = open_layout(reader, flat_records)  # a dump file's index kept between runs
        self._load_headers()
        self._load_bitmaps()
        self._load_notes()
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._decoded_since_release = 0
        self._zero_keys: set[tuple[int, int, int]] = set()

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
        # makedumpfile's dump level bits: 1 zero pages, 2 and 4 cache, 8 user, 16 free pages
        self.excluded_unknown = bool(self.sub.dump_level & ~1)
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
        # excluded by the dumper (see _excluded); a dumped page always exists.
        self.present = Bitmap(bitmap_or(raw[:half], self.dumped.data), self.nbits)
        if self.desc_offset + self.dumped.count * PAGE_DESC.size > self.layout.size:
            raise fail(
                self.where,
                f"kdump page descriptor table ({self.dumped.count} entries) extends beyond the end of the dump; truncated?",
            )
        self._runs: list[PhysicalRun] | None = None
        # where the page data begins: the one shared page (the zero page) is written there
        self.data_start = self.desc_offset + self.dumped.count * PAGE_DESC.size

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

    def _placed_descs(self, rank: int, pfns: list[int]) -> list[tuple[int, int, int, int]]:
        """The descriptors (offset, size, flags, page_flags) of dumped pages `pfns`, whose
        first is the rank-th dumped, each checked to place its data where QEMU and
        makedumpfile write it: the one shared page first (the zero page, at the start of the
        data), every other page after its predecessor's data and before its successor's. A
        descriptor pointed at another page's data is named, not read as that page."""
        low, high = max(rank - 1, 0), min(rank + len(pfns) + 1, self.dumped.count)
        around = list(PAGE_DESC.iter_unpack(self._desc_bytes(low, high - low)))
        shared, pairs = self.data_start, zip(around, around[1:])
        if min(d[0] for d in around) < shared or any(
            a[0] + a[1] > b[0] for a, b in pairs if a[0] != shared and b[0] != shared
        ):
            for i, pfn in enumerate(pfns, rank - low):
                self._check_placed(pfn, around[i], around[i - 1] if i else None, around[i + 1 : i + 2])
        return around[rank - low : rank - low + len(pfns)]

    def decode(self, pfn: int, desc: PageDesc) -> bytes:
        data = self._read_stored(desc.offset, desc.size, pfn)
        self._decoded_since_release += 1
        if self._decoded_since_release >= RELEASE_EVERY_PAGES:
            self._decoded_since_release = 0
            release_resident(self.reader)
        return bytes(self._decode_bytes(pfn, data, desc.flags))

    def page(self, pfn: int) -> bytes:
        """One page, through a small LRU cache (page-table walks read the same pages again)."""
        cached = self._cache.get(pfn)
        if cached is not None:
            self._cache.move_to_end(pfn)
            return cached
        if not self.present.test(pfn):
            raise fail(self.where, f"guest-physical address {pfn * PAGE_SIZE:#x} is not in the dump")
        if self.dumped.test(pfn):
            data = self.decode(pfn, PageDesc(*self._placed_descs(self.dumped.rank(pfn), [pfn])[0]))
        else:
            data = self._excluded(pfn)
        self._cache[pfn] = data
        if len(self._cache) > PAGE_CACHE_PAGES:
            self._cache.popitem(last=False)
        return data

    def _check_placed(
        self, pfn: int, desc: tuple[int, ...], before: tuple[int, ...] | None, after: list[tuple[int, ...]]
    ) -> None:
        """The slow path of _placed_descs: which of a page's neighbours its data disagrees with."""
        offset, size, shared = desc[0], desc[1], self.data_start
        if not 0 < size <= PAGE_SIZE or offset + size > self.layout.size:
            raise unreadable(self.where, f"corrupt page descriptor for pfn {pfn:#x} (offset {offset:#x}, size {size})")
        if offset == shared:
            return
        if offset < shared:
            relation = f"lies before the page data begins ({shared:#x})"
        elif before is not None and before[0] != shared and before[0] + before[1] > offset:
            relation = f"begins inside the previous dumped page's (offset {before[0]:#x}, size {before[1]})"
        elif after and after[0][0] != shared and offset + size > after[0][0]:
            relation = f"runs into the next dumped page's (offset {after[0][0]:#x})"
        else:
            return
        raise unreadable(
            self.where,
            f"page descriptor for pfn {pfn:#x} (offset {offset:#x}, size {size}): its data {relation}, out of"
            " the order pages are written in; one of them is damaged or altered",
        )

    def _excluded(self, pfn: int) -> bytes:
        """A page that exists but that the dumper left out: zeros when its dump level left
        out only zero pages (QEMU's is 1); otherwise (makedumpfile -d 2..31 leaves out cache,
        user or free pages too) its content is not in the dump, and reading it is an error."""
        if self.excluded_unknown:
            raise unreadable(
                self.where,
                f"pfn {pfn:#x} was left out by the dumper (dump level {self.sub.dump_level}: more than"
                " zero pages), so its content is not in the dump",
            )
        return ZERO_PAGE

    def batch(self, pfn: int, n: int, raw_as_stored: bool = False) -> list[Piece]:
        """Pages [pfn, pfn+n) (n <= BATCH_PAGES) decoded: (pages, bytes) pieces in order, None
        for a stretch of at least ZERO_STRETCH_PAGES zero pages; with `raw_as_stored`, one
        StoredRaw for a batch stored uncompressed whole. SourceError for a page that is not in
        the dump or does not decode. Changes nothing but a small set of keys known to
        decode to zeros, so threads may run it at once."""
        if pfn < 0 or not 0 < n <= BATCH_PAGES or pfn + n > self.nbits:
            raise fail(self.where, f"guest-physical range {pfn * PAGE_SIZE:#x}+{n * PAGE_SIZE:#x} is not in the dump")
        holes = ~self.present.bits(pfn, n) & ((1 << n) - 1)
        if holes:
            missing = pfn + (holes & -holes).bit_length() - 1
            raise fail(self.where, f"guest-physical address {missing * PAGE_SIZE:#x} is not in the dump")
        dumped = self.dumped.bits(pfn, n)
        if dumped != (1 << n) - 1 and self.excluded_unknown:
            excluded = ~dumped & ((1 << n) - 1)
            self._excluded(pfn + (excluded & -excluded).bit_length() - 1)
        if not dumped:
            return [(n, None)]
        # plain tuples (offset, size, flags, page_flags): no per-page object construction
        where = [i for i, bit in enumerate(reversed(f"{dumped:b}")) if bit == "1"]
        descs = self._placed_descs(self.dumped.rank(pfn), [pfn + i for i in where])
        if raw_as_stored and dumped == (1 << n) - 1 and (whole := self._stored_raw(descs)) is not None:
            return [(n, whole)]
        todo = [(i, (o, s, f)) for i, (o, s, f, _) in zip(where, descs) if (o, s, f) not in self._zero_keys]
        stored = self._stored_pages([pfn + i for i, _ in todo], [key for _, key in todo])
        pages = self._decode_all(pfn, todo, stored)
        filled: list[tuple[int, bytes | memoryview]] = []
        for (i, key), page in zip(todo, pages):
            if page == ZERO_PAGE:
                # QEMU points every zero page at one shared copy: decode it once
                if len(self._zero_keys) < MAX_ZERO_KEYS:
                    self._zero_keys.add(key)
                continue
            filled.append((i, page))
        return pieces_of_batch(n, filled)

    def _stored_raw(self, descs: list[tuple[int, int, int, int]]) -> StoredRaw | None:
        """The pages of `descs` as a StoredRaw if every one is stored uncompressed and in the file."""
        if not descs:
            return None
        # C-level passes over the batch's 256 descriptors: this runs for every batch of a copy
        offsets, sizes, flags, _ = zip(*descs)
        if sizes.count(PAGE_SIZE) != len(sizes) or any(flags):  # any flag: decoded (or refused) one by one
            return None
        # (logical offset, size) of pages stored one after another, joined
        steps = map(operator.sub, itertools.islice(offsets, 1, None), offsets)
        starts = [0, *itertools.compress(range(1, len(offsets)), map(PAGE_SIZE.__ne__, steps)), len(offsets)]
        spans = [(offsets[first], (stop - first) * PAGE_SIZE) for first, stop in itertools.pairwise(starts)]
        pieces: list[tuple[int, int]] = []
        found: dict[tuple[int, int], list[tuple[int, int]] | None] = {}
        for key in spans:
            # QEMU points every zero page at one stored copy: most spans of a sparse batch are it
            where = found[key] if key in found else found.setdefault(key, self.layout.container_pieces(*key))
            if where is None:
                return None  # not all in the file: decoded page by page, which names the page
            pieces += where
            if len(pieces) > MAX_PIECES:
                return None  # a file of tiny records: read as any other
        return StoredRaw(tuple(pieces))

    def _stored_pages(self, pfns: list[int], keys: list[tuple[int, int, int]]) -> list[bytes | memoryview]:
        """The stored bytes of pages `pfns` (their keys: offset, size, flags): sliced from one
        read of the stretch of the file that holds them all when they lie close together (QEMU
        writes them in pfn order), read one by one otherwise."""
        for pfn, (offset, size, _) in zip(pfns, keys):
            if not 0 < size <= PAGE_SIZE or offset + size > self.layout.size:
                raise unreadable(
                    self.where, f"corrupt page descriptor for pfn {pfn:#x} (offset {offset:#x}, size {size})"
                )
        if not keys:
            return []
        low = min(o for o, _, _ in keys)
        high = max(o + s for o, s, _ in keys)
        if high - low > 2 * sum(s for _, s, _ in keys) + BATCH_SLACK:
            return [self.layout.pread(o, s) for o, s, _ in keys]
        blob = memoryview(self.layout.pread(low, high - low))
        return [blob[o - low : o - low + s] for o, s, _ in keys]

    def _decode_all(
        self, pfn: int, todo: list[tuple[int, tuple[int, int, int]]], stored: list[bytes | memoryview]
    ) -> Sequence[bytes | memoryview]:
        """The pages of `todo` (index in the batch, key) decoded from `stored`. A batch of zlib
        pages is inflated in one C-level loop, so that a thread holds the GIL only between
        batches, not between pages, and threads inflate at once."""
        if all(f == DUMP_DH_COMPRESSED_ZLIB for _, (_, _, f) in todo):
            pages: list[bytes | memoryview] = []
            try:
                # a few pages at a time: a hostile page may inflate to 4 MiB, not to a page
                for start in range(0, len(stored), INFLATE_AT_ONCE):
                    inflated = list(map(zlib.decompress, stored[start : start + INFLATE_AT_ONCE]))
                    if any(len(page) != PAGE_SIZE for page in inflated):
                        break
                    pages += inflated
                else:
                    return pages
            except zlib.error:
                pass  # found and named page by page below
        return [self._decode_bytes(pfn + i, data, f) for (i, (_, _, f)), data in zip(todo, stored)]

    def _read_stored(self, offset: int, size: int, pfn: int) -> bytes:
        if not 0 < size <= PAGE_SIZE or offset + size > self.layout.size:
            raise unreadable(self.where, f"corrupt page descriptor for pfn {pfn:#x} (offset {offset:#x}, size {size})")
        return self.layout.pread(offset, size)

    def _decode_bytes(self, pfn: int, data: bytes | memoryview, flags: int) -> bytes:
        try:
            if flags == DUMP_DH_COMPRESSED_ZLIB:
                # the common case, without decompress_page's call and copy per page
                try:
                    page = zlib.decompress(data)
                except zlib.error as exc:
                    raise ValueError(f"zlib: {exc}") from None
                if len(page) != PAGE_SIZE:
                    raise ValueError(f"page decodes to {len(page)} bytes, not {PAGE_SIZE}")
                return page
            return decompress_page(bytes(data), flags, PAGE_SIZE)
        except ValueError as exc:
            raise unreadable(self.where, f"page at guest-physical {pfn * PAGE_SIZE:#x}: {exc}") from None

    def batches(self, pfn: int, count: int, raw_as_stored: bool = False) -> Iterator[list[Piece]]:
        """batch() of pages [pfn, pfn+count) BATCH_PAGES at a time, in order, decoded on all
        cores when there are several batches and this image's reader maps its file."""
        if pfn < 0 or count < 0 or pfn + count > self.nbits:
            raise fail(
                self.where, f"guest-physical range {pfn * PAGE_SIZE:#x}+{count * PAGE_SIZE:#x} is not in the dump"
            )
        starts = range(pfn, pfn + count, BATCH_PAGES)
        end = pfn + count

        def one(start: int) -> list[Piece]:
            return self.batch(start, min(BATCH_PAGES, end - start), raw_as_stored)

        workers = min(cores(), MAX_DECODE_THREADS) if isinstance(self.reader, MappedFile) else 1
        done = ordered_map(one, starts, workers, workers + 1) if workers > 1 and len(starts) > 1 else map(one, starts)
        for pieces in done:
            yield pieces
            # at most one batch of compressed data per worker stays mapped: RSS stays flat
            release_resident(self.reader)

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
            for pieces in self.batches(first, last - first + 1):
                for pages, piece in pieces:
                    assert not isinstance(piece, StoredRaw)
                    buf += piece if piece is not None else bytes(pages * PAGE_SIZE)
            data = bytes(buf)
        skip = paddr - first * PAGE_SIZE
        return data[skip : skip + length]

    def copy_to(self, paddr: int, length: int, out: BinaryIO, sparse: bool = False) -> None:
        """Decode pages a batch at a time (all cores for long copies) and write them. With
        sparse=True long zero stretches become seeks (holes) instead of writes: `out` must be
        seekable and the caller must truncate/extend the file at the end."""
        if length <= 0:
            if length < 0:
                raise fail(self.where, f"bad copy length {length}")
            return
        first, last = paddr // PAGE_SIZE, (paddr + length - 1) // PAGE_SIZE
        skip = paddr - first * PAGE_SIZE  # an unaligned start: drop the bytes before paddr
        remaining = length
        # batches stored raw go straight from the mapped file; a sparse copy decodes them, to find
        # the zero pages it leaves as holes
        raw_as_stored = not sparse and isinstance(self.reader, MappedFile)
        for pieces in self.batches(first, last - first + 1, raw_as_stored):
            for pages, piece in pieces:
                size = min(pages * PAGE_SIZE - skip, remaining)
                if size <= 0:
                    skip -= pages * PAGE_SIZE
                    continue
                if isinstance(piece, StoredRaw):
                    assert isinstance(self.reader, MappedFile)
                    self.reader.write_pieces(clipped(piece.pieces, skip, size), out)
                elif piece is not None:
                    out.write(piece[skip : skip + size])
                elif sparse:
                    out.seek(size, os.SEEK_CUR)
                else:
                    write_zeros(out, size)
                skip = 0
                remaining -= size


class KdumpSource:
    """Guest-physical memory of a kdump-compressed file (flattened or plain)."""

    guest_runs_on = False

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
