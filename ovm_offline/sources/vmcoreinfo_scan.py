"""The guest kernel's VMCOREINFO note, found by scanning guest RAM (a live guest's memory file,
which no QEMU note hands over)."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from typing import Any

from .notes import parse_vmcoreinfo

__all__ = ["find_vmcoreinfo", "find_vmcoreinfo_at"]

# search for the name, not the zero note type before it: a pattern starting with a rare byte
# lets find() skip through memory (a leading NUL matches everywhere in zeroed RAM)
_VMCOREINFO_NAME = b"VMCOREINFO\x00\x00"
_SCAN_WINDOW = 16 << 20  # read, then let go of: the peak RSS of a live dump is ~40 MiB plus this
_PAGE = 4096
_NAME_WORD = int.from_bytes(_VMCOREINFO_NAME[:4], "little")
_MAX_VMCOREINFO = 1 << 16


def find_vmcoreinfo(data: Any) -> dict[str, str] | None:
    """The guest kernel's VMCOREINFO ELF note, found in RAM the way QEMU's vmcoreinfo device
    would hand it over: namesz 11, type 0, "VMCOREINFO", text starting with OSRELEASE=. Linux
    allocates the note page-aligned, so the start of every page is looked at first (one word
    a page: about ten times faster than searching every byte); only when none holds it is all
    of RAM searched, and the first unaligned copy taken (a kernel that keeps the note in its
    data). An mmap is read a window at a time, each let go of once read: the note can sit GiBs
    in, and every page read would otherwise stay resident in this process."""
    found = find_vmcoreinfo_at(data)
    return None if found is None else found[2]


def find_vmcoreinfo_at(data: Any) -> tuple[int, int, dict[str, str]] | None:
    """find_vmcoreinfo's note with where it is: (offset, length of the whole note, note)."""
    for head in _page_starts_named(data):
        note = _note_at(data, head)
        if note is not None:
            return head, _note_length(data, head), note
    for hit in _find_all(data, _VMCOREINFO_NAME):
        head = hit - 12
        if head >= 0 and head % 4 == 0 and (note := _note_at(data, head)) is not None:
            return head, _note_length(data, head), note
    return None


def _note_length(data: Any, head: int) -> int:
    return 24 + int(struct.unpack_from("<I", data, head + 4)[0])


def _note_at(data: Any, head: int) -> dict[str, str] | None:
    """The VMCOREINFO note whose header is at `head`, if that is one."""
    if head + 24 > len(data):
        return None
    namesz, descsz, ntype = struct.unpack_from("<III", data, head)
    desc = head + 12 + 12
    if namesz != 11 or ntype != 0 or not 0 < descsz <= _MAX_VMCOREINFO or desc + descsz > len(data):
        return None
    if bytes(data[head + 12 : head + 24]) != _VMCOREINFO_NAME:
        return None
    text = bytes(data[desc : desc + descsz])
    return parse_vmcoreinfo(text) if text.startswith(b"OSRELEASE=") else None


def _page_starts_named(data: Any) -> Iterator[int]:
    """Offsets of the pages of `data` whose bytes 12..15 are "VMCO" (where a page-aligned note
    has its name), read as one word a page."""
    release = getattr(data, "madvise", None)
    end = len(data) // _PAGE * _PAGE
    with memoryview(data) as whole:
        for window in range(0, end, _SCAN_WINDOW):
            stop = min(end, window + _SCAN_WINDOW)
            with whole[window:stop] as piece, piece.cast("I") as words, words[3 :: _PAGE // 4] as name_words:
                found = [i for i, word in enumerate(name_words.tolist()) if word == _NAME_WORD]
            yield from (window + i * _PAGE for i in found)
            if release is not None:
                release(mmap.MADV_DONTNEED, window, stop - window)


def _find_all(data: Any, needle: bytes) -> Iterator[int]:
    """Offsets of `needle` in `data` (an mmap, or bytes), in order."""
    release = getattr(data, "madvise", None)
    end = len(data)
    for window in range(0, end, _SCAN_WINDOW):
        stop = min(end, window + _SCAN_WINDOW + len(needle) - 1)  # a hit across the border
        pos = window
        while (hit := data.find(needle, pos, stop)) >= 0:
            pos = hit + 1
            yield hit
        if release is not None:
            release(mmap.MADV_DONTNEED, window, min(_SCAN_WINDOW, end - window))
