"""Writing ELF64 x86-64 core headers the way QEMU does (PT_NOTE first, then one PT_LOAD per run,
p_paddr = p_vaddr = guest physical), including the PN_XNUM escape for more than 65534 segments."""

from __future__ import annotations

import dataclasses

from .elf import (
    EHDR,
    ELF_MAGIC,
    ELFCLASS64,
    ELFDATA2LSB,
    EM_X86_64,
    ET_CORE,
    PHDR,
    PN_XNUM,
    PT_LOAD,
    PT_NOTE,
    SHDR,
)

__all__ = ["core_layout"]


#: program headers beyond this count go through PN_XNUM (e_phnum is a u16 and 0xffff is the escape)
MAX_PLAIN_PHNUM = PN_XNUM - 1
SEGMENT_ALIGN = 4096


@dataclasses.dataclass(frozen=True)
class CoreLayout:
    header: bytes  # everything before the first segment's data: ELF header, shdr0, phdrs, notes
    segment_offsets: list[int]  # file offset of each run's data
    total_size: int


def _ident() -> bytes:
    return ELF_MAGIC + bytes([ELFCLASS64, ELFDATA2LSB, 1]) + bytes(9)


def core_layout(notes: bytes, runs: list[tuple[int, int]], force_xnum: bool = False) -> CoreLayout:
    """Headers and data offsets for a core of `runs` (guest-physical start, length) and `notes`."""
    phnum = 1 + len(runs)
    xnum = force_xnum or phnum > MAX_PLAIN_PHNUM
    shoff = EHDR.size if xnum else 0
    phoff = EHDR.size + (SHDR.size if xnum else 0)
    note_offset = phoff + phnum * PHDR.size
    data = -(-(note_offset + len(notes)) // SEGMENT_ALIGN) * SEGMENT_ALIGN
    ehdr = EHDR.pack(
        _ident(),
        ET_CORE,
        EM_X86_64,
        1,
        0,
        phoff,
        shoff,
        0,
        EHDR.size,
        PHDR.size,
        PN_XNUM if xnum else phnum,
        SHDR.size if xnum else 0,
        1 if xnum else 0,
        0,
    )
    parts = [ehdr]
    if xnum:
        # section header 0 carries the real count in sh_info (like Linux's fill_extnum_info)
        parts.append(SHDR.pack(0, 0, 0, 0, 0, 0, 0, phnum, 0, 0))
    parts.append(PHDR.pack(PT_NOTE, 0, note_offset, 0, 0, len(notes), len(notes), 0))
    offsets = []
    for start, length in runs:
        offsets.append(data)
        parts.append(PHDR.pack(PT_LOAD, 0, data, start, start, length, length, 0))  # p_flags 0 as QEMU 7.2
        data += length
    parts.append(notes)
    return CoreLayout(b"".join(parts), offsets, data)
