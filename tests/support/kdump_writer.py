"""A small writer of kdump-compressed files (plain or flattened), the way QEMU lays them out.

QEMU 7.2 here writes only kdump-zlib, so tests build the lzo, snappy, raw and plain-layout variants
of a real dump by re-encoding its pages with this writer; tests also use it to generate random
valid dumps. Not a general makedumpfile: one block size (4096), header version 6.
"""

from __future__ import annotations

import dataclasses
import os
import random
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from ovm_offline.sources._files import MappedFile
from ovm_offline.sources.base import PhysicalSource
from ovm_offline.sources.kdump import ZERO_PAGE
from ovm_offline.sources.kdump_format import (
    DISK_DUMP_HEADER,
    DUMP_DH_COMPRESSED_LZO,
    DUMP_DH_COMPRESSED_SNAPPY,
    DUMP_DH_COMPRESSED_ZLIB,
    FLAT_HEADER,
    FLAT_HEADER_SIZE,
    FLAT_RECORD,
    FLAT_SIGNATURE,
    FLAT_TYPE,
    FLAT_VERSION,
    KDUMP_SIGNATURE,
    PAGE_DESC,
    PAGE_SIZE,
    SUB_HEADER,
    UTS_FIELD,
    FlattenedLayout,
)
from ovm_offline.sources.notes import NOTE_HEADER

COMPRESSION_FLAGS = {
    "zlib": DUMP_DH_COMPRESSED_ZLIB,
    "lzo": DUMP_DH_COMPRESSED_LZO,
    "snappy": DUMP_DH_COMPRESSED_SNAPPY,
    "raw": 0,
}


def compress_page(page: bytes, method: str) -> bytes:
    if method == "zlib":
        return zlib.compress(page, 1)
    if method == "lzo":
        import lzo

        return lzo.compress(page, 1, False)
    if method == "snappy":
        import cramjam

        return bytes(cramjam.snappy.compress_raw(page))
    if method == "raw":
        return page
    raise ValueError(f"unknown compression {method!r}")


# -- where the logical file goes -------------------------------------------------------------------
class PlainSink:
    """Writes the logical file in place."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def write_at(self, offset: int, data: bytes) -> None:
        self.out.seek(offset)
        self.out.write(data)

    def finish(self, size: int) -> None:
        self.out.truncate(size)


class FlatSink:
    """Writes the makedumpfile flattened stream: header, {offset, size} records, end marker.
    `split` cuts records into smaller ones and `shuffle` emits them in random order (tests)."""

    def __init__(self, out: BinaryIO, max_record: int | None = None, shuffle: random.Random | None = None) -> None:
        self.out = out
        self.max_record = max_record
        self.shuffle = shuffle
        self._held: list[tuple[int, bytes]] = []
        header = FLAT_HEADER.pack(FLAT_SIGNATURE, FLAT_TYPE, FLAT_VERSION)
        out.write(header + bytes(FLAT_HEADER_SIZE - len(header)))

    def write_at(self, offset: int, data: bytes) -> None:
        step = self.max_record or max(len(data), 1)
        for start in range(0, len(data), step):
            piece = bytes(data[start : start + step])
            if self.shuffle is not None:
                self._held.append((offset + start, piece))
            else:
                self._emit(offset + start, piece)

    def _emit(self, offset: int, data: bytes) -> None:
        self.out.write(FLAT_RECORD.pack(offset, len(data)))
        self.out.write(data)

    def finish(self, size: int) -> None:
        if self.shuffle is not None:
            self.shuffle.shuffle(self._held)
            for offset, data in self._held:
                self._emit(offset, data)
        self.out.write(FLAT_RECORD.pack(-1, -1))


# -- the layout -------------------------------------------------------------------------------------
@dataclasses.dataclass
class KdumpContents:
    """What goes into a kdump besides page data."""

    max_mapnr: int
    existing: bytes  # bitmap 1 (pages that exist), LSB first
    dumped: bytes  # bitmap 2 (pages whose data follows), LSB first
    notes: bytes = b""
    nr_cpus: int = 1
    phys_base: int = 0
    machine: str = "x86_64"
    dump_level: int = 1  # makedumpfile -d: QEMU writes 1 (zero pages left out)


def _blocks(nbytes: int) -> int:
    return (nbytes + PAGE_SIZE - 1) // PAGE_SIZE


def vmcoreinfo_desc_span(notes: bytes) -> tuple[int, int]:
    """(offset, size) of the VMCOREINFO note's descriptor inside a note stream, or (0, 0)."""
    pos = 0
    while pos + NOTE_HEADER.size <= len(notes):
        namesz, descsz, _type = NOTE_HEADER.unpack_from(notes, pos)
        name_at = pos + NOTE_HEADER.size
        desc_at = name_at + ((namesz + 3) & ~3)
        if notes[name_at : name_at + namesz].rstrip(b"\0") == b"VMCOREINFO":
            return desc_at, descsz
        pos = desc_at + ((descsz + 3) & ~3)
    return 0, 0


def write_kdump(
    out: BinaryIO,
    contents: KdumpContents,
    pages: Iterable[bytes],
    compression: str = "zlib",
    flattened: bool = True,
    max_record: int | None = None,
    shuffle: random.Random | None = None,
) -> None:
    """Write a kdump whose dumped pages (bitmap 2's set bits, in pfn order) are `pages`."""
    sink: PlainSink | FlatSink = FlatSink(out, max_record, shuffle) if flattened else PlainSink(out)
    bitmap_bytes_each = _blocks((contents.max_mapnr + 7) // 8) * PAGE_SIZE
    sub_hdr_blocks = _blocks(SUB_HEADER.size + len(contents.notes))
    bitmap_offset = (1 + sub_hdr_blocks) * PAGE_SIZE
    desc_offset = bitmap_offset + 2 * bitmap_bytes_each
    ndescs = int.from_bytes(contents.dumped, "little").bit_count()
    data_offset = desc_offset + ndescs * PAGE_DESC.size

    status = COMPRESSION_FLAGS[compression]
    _write_headers(sink, contents, status, sub_hdr_blocks, 2 * bitmap_bytes_each // PAGE_SIZE)
    sink.write_at(bitmap_offset, contents.existing.ljust(bitmap_bytes_each, b"\0"))
    sink.write_at(bitmap_offset + bitmap_bytes_each, contents.dumped.ljust(bitmap_bytes_each, b"\0"))

    # like QEMU: one shared zero page first, then the data of every other page
    sink.write_at(data_offset, ZERO_PAGE)
    zero_desc = PAGE_DESC.pack(data_offset, PAGE_SIZE, 0, 0)
    position = data_offset + PAGE_SIZE
    descs = bytearray()
    written = 0
    for page in pages:
        if len(page) != PAGE_SIZE:
            raise ValueError("pages must be 4096 bytes")
        if page == ZERO_PAGE:
            descs += zero_desc
        else:
            packed = compress_page(page, compression)
            flags = status
            if len(packed) >= PAGE_SIZE:
                packed, flags = page, 0  # incompressible: stored raw
            sink.write_at(position, packed)
            descs += PAGE_DESC.pack(position, len(packed), flags, 0)
            position += len(packed)
        if len(descs) >= 1024 * PAGE_DESC.size:
            sink.write_at(desc_offset + written, bytes(descs))
            written += len(descs)
            descs.clear()
    if descs:
        sink.write_at(desc_offset + written, bytes(descs))
        written += len(descs)
    if written != ndescs * PAGE_DESC.size:
        raise ValueError(f"got {written // PAGE_DESC.size} pages for {ndescs} set bits")
    sink.finish(position)


def _write_headers(
    sink: PlainSink | FlatSink, c: KdumpContents, status: int, sub_hdr_blocks: int, bitmap_blocks: int
) -> None:
    uts = b"".join(f.encode().ljust(UTS_FIELD, b"\0") for f in ("", "", "", "", c.machine, ""))
    header = DISK_DUMP_HEADER.pack(
        KDUMP_SIGNATURE,
        6,
        uts,
        0,
        0,
        status,
        PAGE_SIZE,
        sub_hdr_blocks,
        bitmap_blocks,
        min(c.max_mapnr, 0xFFFFFFFF),
        0,
        0,
        0,
        0,
        c.nr_cpus,
    )
    note_offset = PAGE_SIZE + SUB_HEADER.size
    vmci_at, vmci_size = vmcoreinfo_desc_span(c.notes)
    sub = SUB_HEADER.pack(
        c.phys_base,
        c.dump_level,
        0,
        0,
        0,
        note_offset + vmci_at if vmci_size else 0,
        vmci_size,
        note_offset if c.notes else 0,
        len(c.notes),
        0,
        0,
        0,
        0,
        c.max_mapnr,
    )
    sink.write_at(0, header)
    sink.write_at(PAGE_SIZE, sub + c.notes)


# -- re-encoding and unflattening -------------------------------------------------------------------
def _bitmap_from_runs(runs: Iterable[tuple[int, int]], max_mapnr: int) -> bytes:
    bits = 0
    for first, count in runs:
        bits |= ((1 << count) - 1) << first
    return bits.to_bytes((max_mapnr + 7) // 8, "little")


def _source_pages(source: PhysicalSource, runs: list[tuple[int, int]], chunk_pages: int = 256) -> Iterator[bytes]:
    for first, count in runs:
        for start in range(first, first + count, chunk_pages):
            n = min(chunk_pages, first + count - start)
            data = source.read(start * PAGE_SIZE, n * PAGE_SIZE)
            for i in range(n):
                yield data[i * PAGE_SIZE : (i + 1) * PAGE_SIZE]


def reencode(
    source: PhysicalSource,
    out_path: str | os.PathLike,
    compression: str,
    flattened: bool,
    max_record: int | None = 16384,
) -> None:
    """Write every page of `source` (any PhysicalSource with page-aligned runs) as a new kdump,
    carrying over the source's notes (note_bytes()) when it has them."""
    runs = [(r.start // PAGE_SIZE, r.length // PAGE_SIZE) for r in source.runs()]
    max_mapnr = max((f + n for f, n in runs), default=1)
    bitmap = _bitmap_from_runs(runs, max_mapnr)
    note_bytes = getattr(source, "note_bytes", None)
    notes = note_bytes() if note_bytes is not None else b""
    contents = KdumpContents(max_mapnr, bitmap, bitmap, notes, nr_cpus=max(len(source.vcpus()), 1))
    with open(out_path, "wb") as out:
        write_kdump(
            out, contents, _source_pages(source, runs), compression, flattened, max_record if flattened else None
        )


def unflatten(src_path: str | os.PathLike, dst_path: str | os.PathLike) -> None:
    """makedumpfile -R: rebuild the plain file from a flattened stream (each record in place)."""
    source = MappedFile(src_path)
    try:
        layout = FlattenedLayout(source)
        with open(dst_path, "wb") as out:
            for start, size, offset in layout.records():
                out.seek(start)
                source.copy_to(offset, size, out)
            out.truncate(layout.size)
    finally:
        source.close()
