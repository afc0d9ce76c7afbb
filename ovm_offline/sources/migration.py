"""Guest RAM from QEMU's own live-migration stream (savevm format version 3, QEMU 7.2).

Pre-copy: QEMU sends every RAM page while the guest runs, then the pages dirtied since, round
after round, tracking writes itself (TCG and KVM alike); when what is left fits its downtime
limit it stops the guest, sends the rest and the device state, and leaves the guest paused
("postmigrate"). The pages, last copy winning, are then guest RAM at that stop, exactly: the
moment a one-pause dump would read, with a pause that does not grow with the memory.

Only the "ram" section is read; the stream is parsed up to the first full device section and
the rest is drained. Format (migration/savevm.c, migration/ram.c): header "QEVM", version 3;
sections of one type byte each: configuration (machine name), START/FULL (id, name, instance,
version, payload), PART/END (id, payload), each followed by a footer (0x7e, id) with footers
on, and EOF. RAM payloads are 64-bit words `offset | flags`: MEM_SIZE (then the block list:
name, length), PAGE (4096 bytes follow), ZERO (one fill byte follows), CONTINUE (same block as
before; otherwise the block's name follows the word), EOS (end of this payload).
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import BinaryIO

from ..errors import SourceError

__all__ = ["RamStream", "StreamReader", "WrittenChunks", "read_ram_stream"]

QEVM_MAGIC = 0x5145564D
QEVM_VERSION = 3

# migration/savevm.c section types
SECTION_EOF = 0x00
SECTION_START = 0x01
SECTION_PART = 0x02
SECTION_END = 0x03
SECTION_FULL = 0x04
SECTION_VMDESCRIPTION = 0x06
SECTION_CONFIGURATION = 0x07
SECTION_COMMAND = 0x08
SECTION_FOOTER = 0x7E

# migration/ram.c page flags (the low bits of each word)
FLAG_ZERO = 0x02
FLAG_MEM_SIZE = 0x04
FLAG_PAGE = 0x08
FLAG_EOS = 0x10
FLAG_CONTINUE = 0x20
FLAG_XBZRLE = 0x40
FLAG_COMPRESS_PAGE = 0x100
FLAG_MULTIFD_FLUSH = 0x200
PAGE_SIZE = 4096
_FLAG_MASK = PAGE_SIZE - 1

_NEVER, _AS_ZERO, _WITH_DATA = 0, 1, 2
_ZERO_PAGE = bytes(PAGE_SIZE)

#: more RAM blocks than a machine has (pc: RAM, ROMs, video RAM, option ROMs)
MAX_RAM_BLOCKS = 4096
#: a block no guest has (QEMU's own limit is the host's address space)
MAX_BLOCK_BYTES = 1 << 46


@dataclasses.dataclass
class RamStream:
    """What a migration stream carried of one RAM block: its length, pages sent with contents,
    pages sent as zero, and how many of either re-sent a page sent before (dirtied meanwhile)."""

    block: str
    block_bytes: int = 0
    pages: int = 0
    zero_pages: int = 0
    resent: int = 0
    complete: bool = False  # the RAM section's END was read
    #: the section type whose byte ended RAM (device state, EOF or the description): taken from the stream
    ended_by: int | None = None


@dataclasses.dataclass
class WrittenChunks:
    """One flag per chunk of 2**shift bytes of the output file, set after the reader writes
    into that chunk; a checker clears a flag before it reads the chunk."""

    flags: bytearray
    shift: int


class StreamReader:
    """Big-endian records of a migration stream, counted by offset; SourceError on a short one."""

    def __init__(self, stream: BinaryIO, where: str) -> None:
        self.stream = stream
        self.where = where
        self.offset = 0

    def take(self, n: int) -> bytes:
        data = self.stream.read(n)
        if len(data) != n:
            raise self.short(self.offset + len(data))
        self.offset += n
        return data

    def short(self, end: int) -> SourceError:
        return SourceError(f"{self.where}: migration stream ends at byte {end} inside a record")

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack(">Q", self.take(8))[0]
        return value

    def name(self) -> str:
        return self.take(self.u8()).decode("latin-1")

    def bad(self, why: str) -> SourceError:
        return SourceError(f"{self.where}: not a QEMU 7.2 migration stream as expected (byte {self.offset}): {why}")


def read_ram_stream(
    stream: BinaryIO,
    block: str,
    out_fd: int,
    where: str = "migration stream",
    max_block_bytes: int = MAX_BLOCK_BYTES,
    block_bytes: int | None = None,
    written: WrittenChunks | None = None,
) -> RamStream:
    """Read a QEMU migration `stream` and write RAM block `block` (the guest RAM's memory
    backend, at most `max_block_bytes` long, exactly `block_bytes` if given) into file
    descriptor `out_fd` at its offsets, last copy winning; a page re-sent as zero is written
    as zero; `written` is told of each write after it. Returns when the device state
    starts (the RAM is then complete) or the stream ends. Raises SourceError on anything this
    reader does not know."""
    r = StreamReader(stream, where)
    if r.u32() != QEVM_MAGIC or r.u32() != QEVM_VERSION:
        raise r.bad("no QEVM header of version 3")
    ram = _RamBlock(r, block, out_fd, max_block_bytes, block_bytes, written)
    sections: dict[int, str] = {}
    while True:
        kind = r.u8()
        if kind == SECTION_EOF or kind in (SECTION_FULL, SECTION_VMDESCRIPTION):
            ram.result.ended_by = kind  # the end, or device state: RAM is over
            return ram.result
        if kind == SECTION_CONFIGURATION:
            r.take(r.u32())  # the machine type's name
            continue
        if kind == SECTION_COMMAND:
            r.take(2)  # the command
            r.take(struct.unpack(">H", r.take(2))[0])
            continue
        if kind not in (SECTION_START, SECTION_PART, SECTION_END):
            raise r.bad(f"section type {kind:#x}")
        section_id = r.u32()
        if kind == SECTION_START:
            sections[section_id] = r.name()
            r.u32()  # instance id
            r.u32()  # version id
        name = sections.get(section_id)
        if name != "ram":
            raise r.bad(f"live section {name!r} (only RAM is read)")
        ram.read_payload()
        if _peek(stream) == SECTION_FOOTER:
            r.u8()
            if r.u32() != section_id:
                raise r.bad("a section footer names another section")
        if kind == SECTION_END:
            ram.result.complete = True


class _RamBlock:
    """The pages of one RAM block, written into a file as they arrive."""

    def __init__(
        self,
        r: StreamReader,
        block: str,
        out_fd: int,
        max_bytes: int,
        exact_bytes: int | None = None,
        written: WrittenChunks | None = None,
    ) -> None:
        self.r, self.block, self.out_fd, self.max_bytes = r, block, out_fd, max_bytes
        self.written = written
        self.exact_bytes = exact_bytes  # the file is that long already (and mapped: it must not shrink)
        self.result = RamStream(block)
        self.sent = bytearray()  # per page: _NEVER, _AS_ZERO (the file reads zero there) or _WITH_DATA
        self.current: str | None = None  # the last page's block: CONTINUE spans sections, as in QEMU's loader

    def read_payload(self) -> None:
        """Words up to EOS: the block list, or pages."""
        r = self.r
        while True:
            word = r.u64()
            flags, offset = word & _FLAG_MASK, word & ~_FLAG_MASK
            if flags & FLAG_EOS:
                return
            if flags & FLAG_MEM_SIZE:
                self.read_block_list(offset)
                continue
            if flags & (FLAG_XBZRLE | FLAG_COMPRESS_PAGE | FLAG_MULTIFD_FLUSH):
                raise r.bad(f"page flags {flags:#x} (XBZRLE, compression and multifd are not read)")
            if not flags & (FLAG_PAGE | FLAG_ZERO):
                raise r.bad(f"page flags {flags:#x}")
            if not flags & FLAG_CONTINUE:
                self.current = r.name()
            elif self.current is None:
                raise r.bad("a page continues no block")
            data = r.take(PAGE_SIZE) if flags & FLAG_PAGE else None
            fill = r.u8() if data is None else 0
            if self.current == self.block:
                self.put(offset, data, fill)

    def read_block_list(self, total: int) -> None:
        """Each block's name and length, until their lengths add up to `total`."""
        r, blocks = self.r, 0
        while total > 0:
            blocks += 1
            if blocks > MAX_RAM_BLOCKS:
                raise r.bad(f"more than {MAX_RAM_BLOCKS} RAM blocks")
            name, length = r.name(), r.u64()
            if name == self.block:
                wrong = self.exact_bytes is not None and length != self.exact_bytes
                if wrong or length > self.max_bytes or length % PAGE_SIZE or self.result.block_bytes:
                    raise r.bad(f"RAM block {name} of {length:#x} bytes")
                self.result.block_bytes = length
                os.ftruncate(self.out_fd, length)
                self.sent = bytearray(length // PAGE_SIZE)
            total -= length

    def put(self, offset: int, data: bytes | None, fill: int) -> None:
        index = offset // PAGE_SIZE
        if index >= len(self.sent):
            raise self.r.bad(f"page at {offset:#x} beyond RAM block {self.block} of {self.result.block_bytes:#x} bytes")
        before = self.sent[index]
        self.result.resent += before != _NEVER
        if data is not None:
            self.result.pages += 1
            self.write(data, offset)
            self.sent[index] = _WITH_DATA
            return
        self.result.zero_pages += 1
        if fill:
            self.write(bytes([fill]) * PAGE_SIZE, offset)
            self.sent[index] = _WITH_DATA
            return
        if before == _WITH_DATA:  # a fresh file reads zero where nothing was written
            self.write(_ZERO_PAGE, offset)
        self.sent[index] = _AS_ZERO

    def write(self, data: bytes, offset: int) -> None:
        os.pwrite(self.out_fd, data, offset)
        if self.written is not None:  # after the write: whoever clears the flag first reads it
            self.written.flags[offset >> self.written.shift] = 1


def _peek(stream: BinaryIO) -> int | None:
    """The next byte of `stream` without taking it (QEMU sends section footers unless the
    machine type predates them)."""
    peek = getattr(stream, "peek", None)
    if peek is None:
        return SECTION_FOOTER
    head = peek(1)[:1]
    return head[0] if head else None
