"""ELF64 x86-64 core files as QEMU's dump-guest-memory writes them (paging off): PT_LOADs whose
p_paddr is guest-physical, and a PT_NOTE with the vCPUs and VMCOREINFO."""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import BinaryIO

from ._files import MappedFile, RunMap, fail, write_zeros
from .base import PhysicalRun, VcpuState
from .magic import ELF_MAGIC
from .notes import ParsedNotes, parse_notes

__all__ = [
    "EHDR",
    "ELFCLASS64",
    "ELFDATA2LSB",
    "ELF_MAGIC",
    "EM_X86_64",
    "ET_CORE",
    "ElfSource",
    "PHDR",
    "PN_XNUM",
    "PT_LOAD",
    "PT_NOTE",
    "SHDR",
]


ELFCLASS64 = 2
ELFDATA2LSB = 1
ET_CORE = 4
EM_X86_64 = 62
PT_LOAD = 1
PT_NOTE = 4
PN_XNUM = 0xFFFF

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr, 64 bytes
PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr, 56 bytes
SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr, 64 bytes

#: x86-64 guest-physical addresses have at most 52 bits; beyond that a header is corrupt
MAX_PHYS_ADDR = 1 << 52
#: QEMU's notes are a few KiB per vCPU; a note area this large is a corrupt header
MAX_NOTE_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class ElfHeader:
    e_type: int
    e_machine: int
    e_phoff: int
    e_shoff: int
    e_phentsize: int
    e_phnum: int  # as stored: PN_XNUM means the count is in section header 0 (see resolve_phnum)
    e_shentsize: int
    e_shnum: int


@dataclasses.dataclass(frozen=True)
class ProgramHeader:
    p_type: int
    p_flags: int
    p_offset: int
    p_vaddr: int
    p_paddr: int
    p_filesz: int
    p_memsz: int
    p_align: int


#: QEMU writes a PT_LOAD per guest RAM block (a handful); past this the header is corrupt, and
#: parsing the table it declares would take hundreds of MiB
MAX_PROGRAM_HEADERS = 1 << 17


def parse_elf_header(data: bytes, where: str, file_size: int) -> ElfHeader:
    """Check the identification and resolve PN_XNUM; `data` holds at least the first 64 bytes."""
    if len(data) < EHDR.size:
        raise fail(where, f"file is too short for an ELF header ({len(data)} bytes)")
    (
        ident,
        e_type,
        e_machine,
        _ver,
        _entry,
        phoff,
        shoff,
        _flags,
        _ehsize,
        phentsize,
        phnum,
        shentsize,
        shnum,
        _shstrndx,
    ) = EHDR.unpack_from(data)
    if ident[:4] != ELF_MAGIC:
        raise fail(where, "not an ELF file")
    if ident[4] != ELFCLASS64 or ident[5] != ELFDATA2LSB:
        raise fail(where, f"not a little-endian ELF64 file (class {ident[4]}, data {ident[5]})")
    if e_machine != EM_X86_64:
        raise fail(where, f"ELF machine is {e_machine}, not x86-64 ({EM_X86_64}); only x86-64 guests are supported")
    if e_type != ET_CORE:
        raise fail(where, f"ELF type is {e_type}, not a core file ({ET_CORE})")
    if phentsize < PHDR.size:
        raise fail(where, f"ELF program header size {phentsize} is smaller than {PHDR.size}")
    return ElfHeader(e_type, e_machine, phoff, shoff, phentsize, phnum, shentsize, shnum)


def resolve_phnum(header: ElfHeader, section0: bytes | None, where: str) -> int:
    """e_phnum, or with PN_XNUM the count kept in section header 0's sh_info; at most
    MAX_PROGRAM_HEADERS."""
    if header.e_phnum != PN_XNUM:
        return header.e_phnum
    if section0 is None or len(section0) < SHDR.size:
        raise fail(where, "e_phnum is PN_XNUM but section header 0 is missing")
    count: int = SHDR.unpack_from(section0)[7]  # sh_info
    if count > MAX_PROGRAM_HEADERS:
        raise fail(
            where, f"the ELF header declares {count} program headers, more than {MAX_PROGRAM_HEADERS}; corrupt header?"
        )
    return count


def parse_program_headers(data: bytes, count: int, entsize: int) -> list[ProgramHeader]:
    return [ProgramHeader(*PHDR.unpack_from(data, i * entsize)) for i in range(count)]


def _check_range(where: str, what: str, offset: int, size: int, file_size: int) -> None:
    if offset > file_size or size > file_size - offset:
        raise fail(
            where,
            f"{what} (offset {offset:#x}, {size:#x} bytes) extends beyond the end of the file ({file_size:#x} bytes); truncated?",
        )


def drop_overlaps(runs: list[tuple[int, int, int | None]]) -> list[tuple[int, int, int | None]]:
    """Runs with every guest-physical byte claimed once. QEMU's own PT_LOADs never overlap, but
    vmcore-style ELFs (and QEMU's paging dumps) show the same memory through several segments
    (the kernel image inside the direct map); it is the same memory, so the first (lowest
    start, then longest) wins and later ones are trimmed to what is new."""
    result: list[tuple[int, int, int | None]] = []
    covered = 0  # end of what is claimed so far
    for start, length, offset in sorted((r for r in runs if r[1] > 0), key=lambda r: (r[0], -r[1])):
        end = start + length
        if end <= covered:
            continue
        if start < covered:
            cut = covered - start
            start, length = covered, length - cut
            offset = None if offset is None else offset + cut
        result.append((start, length, offset))
        covered = end
    return result


class ElfSource:
    """Guest-physical memory of an ELF64 core. Reads come from an mmap; copy_to reads through the descriptor (preadv)."""

    format_name = "ELF core"
    guest_runs_on = False

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._file = MappedFile(path)
        try:
            self._load()
        except BaseException:
            self._file.close()
            raise

    # -- parsing -----------------------------------------------------------------------------
    def _load(self) -> None:
        where, size = self.path, self._file.size
        self.header = parse_elf_header(self._file.pread(0, min(size, EHDR.size)), where, size)
        section0 = None
        if self.header.e_phnum == PN_XNUM:
            if self.header.e_shnum == 0 and self.header.e_shoff == 0:
                raise fail(where, "e_phnum is PN_XNUM but there are no section headers")
            _check_range(where, "section header 0", self.header.e_shoff, SHDR.size, size)
            section0 = self._file.pread(self.header.e_shoff, SHDR.size)
        count = resolve_phnum(self.header, section0, where)
        table = count * self.header.e_phentsize
        _check_range(where, f"program header table ({count} entries)", self.header.e_phoff, table, size)
        entsize = self.header.e_phentsize
        if entsize == PHDR.size:
            raw = self._file.pread(self.header.e_phoff, table)
        else:  # entries padded (or a corrupt size): read what each holds, not the padding
            # (scattered over the file: read, not mapped, lest every entry map in its neighbours)
            raw = b"".join(
                self._file.pread_unmapped(self.header.e_phoff + i * entsize, PHDR.size) for i in range(count)
            )
        self.program_headers = parse_program_headers(raw, count, PHDR.size)
        self._map = RunMap(where, self._load_runs())
        self._note_bytes = self._read_notes()
        self.notes: ParsedNotes = parse_notes(self._note_bytes, where)

    def _load_runs(self) -> list[tuple[int, int, int | None]]:
        runs = self._segment_runs()
        self._check_overlaps(runs)
        return drop_overlaps([run for run, _ in runs])

    def _check_overlaps(self, runs: list[tuple[tuple[int, int, int | None], int]]) -> None:
        """Segments may show the same memory twice (vmcore-style ELFs), never two different
        contents for one guest-physical byte: a segment moved over RAM (a damaged or altered
        file) would otherwise be read as that RAM, silently. Compared at C speed, a MiB at a
        time, and only where segments overlap, which QEMU's own never do."""
        widest: tuple[tuple[int, int, int | None], int] | None = None
        for (start, length, offset), index in sorted((r for r in runs if r[0][1] > 0), key=lambda r: r[0][:2]):
            if widest is not None and start < widest[0][0] + widest[0][1]:
                (w_start, w_length, w_offset), w_index = widest
                stop = min(start + length, w_start + w_length)
                for at in range(start, stop, 1 << 20):
                    size = min(1 << 20, stop - at)
                    if self._segment_bytes(offset, at - start, size) != self._segment_bytes(
                        w_offset, at - w_start, size
                    ):
                        raise fail(
                            self.path,
                            f"PT_LOAD #{w_index} and #{index} both hold guest-physical {at:#x} (+{size:#x}),"
                            " with different bytes: the file is damaged or altered",
                        )
            if widest is None or start + length > widest[0][0] + widest[0][1]:
                widest = ((start, length, offset), index)

    def _segment_bytes(self, offset: int | None, skip: int, size: int) -> bytes:
        return bytes(size) if offset is None else self._file.pread_unmapped(offset + skip, size)

    def _segment_runs(self) -> list[tuple[tuple[int, int, int | None], int]]:
        """((guest-physical start, length, file offset or None for zeros), PT_LOAD index)."""
        runs: list[tuple[tuple[int, int, int | None], int]] = []
        for i, ph in enumerate(self.program_headers):
            if ph.p_type != PT_LOAD:
                continue
            if ph.p_filesz > ph.p_memsz:
                raise fail(self.path, f"PT_LOAD #{i} has p_filesz {ph.p_filesz:#x} > p_memsz {ph.p_memsz:#x}")
            if ph.p_paddr + ph.p_memsz > MAX_PHYS_ADDR:
                raise fail(
                    self.path,
                    f"PT_LOAD #{i} at guest-physical {ph.p_paddr:#x}+{ph.p_memsz:#x} is beyond 52-bit physical addresses",
                )
            _check_range(self.path, f"PT_LOAD #{i}", ph.p_offset, ph.p_filesz, self._file.size)
            runs.append(((ph.p_paddr, ph.p_filesz, ph.p_offset), i))
            # p_memsz beyond p_filesz is memory defined as zero, not stored
            runs.append(((ph.p_paddr + ph.p_filesz, ph.p_memsz - ph.p_filesz, None), i))
        return runs

    def _read_notes(self) -> bytes:
        parts = []
        total = 0
        for i, ph in enumerate(self.program_headers):
            if ph.p_type != PT_NOTE:
                continue
            _check_range(self.path, f"PT_NOTE #{i}", ph.p_offset, ph.p_filesz, self._file.size)
            total += ph.p_filesz
            if total > MAX_NOTE_BYTES:
                raise fail(self.path, f"note segments total {total} bytes, more than {MAX_NOTE_BYTES}; corrupt header?")
            parts.append(self._file.pread(ph.p_offset, ph.p_filesz))
        return b"".join(parts)

    # -- PhysicalSource ----------------------------------------------------------------------
    def runs(self) -> list[PhysicalRun]:
        return self._map.runs()

    def read(self, paddr: int, length: int) -> bytes:
        parts = []
        for _addr, size, offset in self._map.pieces(paddr, length):
            parts.append(bytes(size) if offset is None else self._file.pread(offset, size))
        return b"".join(parts)

    def data_extent(self, paddr: int, end: int) -> tuple[int, int]:
        """[start, stop): the first stretch in [paddr, end) that may hold non-zero bytes
        ((end, end) if none does). Memory the ELF defines as zero (p_memsz past p_filesz) and
        holes of a sparse file are known to be zero unread; searches of memory skip them."""
        for addr, size, offset in self._map.pieces(paddr, end - paddr):
            if offset is None:
                continue
            start, stop = self._file.data_extent(offset)
            if start < offset + size:
                return addr + (start - offset), addr + (min(stop, offset + size) - offset)
        return end, end

    def copy_to(self, paddr: int, length: int, out: BinaryIO) -> None:
        for _addr, size, offset in list(self._map.pieces(paddr, length)):
            if offset is None:
                write_zeros(out, size)
            else:
                self._file.copy_to(offset, size, out)

    def vcpus(self) -> list[VcpuState]:
        return list(self.notes.vcpus)

    def vmcoreinfo(self) -> dict[str, str] | None:
        return self.notes.vmcoreinfo

    def note_bytes(self) -> bytes:
        """The raw PT_NOTE content, for writers that carry the notes over."""
        return self._note_bytes

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ElfSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ElfSource({self.path!r})"
