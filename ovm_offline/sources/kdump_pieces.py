"""A decoded batch of a kdump's pages as pieces: stretches of data, stretches of zeros, and
stretches stored uncompressed that a copy writes straight from the container file."""

from __future__ import annotations

import itertools
from typing import NamedTuple

from .kdump_format import PAGE_SIZE

__all__ = ["ZERO_PAGE", "ZERO_STRETCH_PAGES", "Piece", "StoredRaw", "clipped", "pieces_of_batch"]

ZERO_PAGE = bytes(PAGE_SIZE)
#: zero pages in a row that a copy skips (a hole, or writes of a shared zero block) rather than
#: writes from the decoded batch
ZERO_STRETCH_PAGES = 16


class StoredRaw(NamedTuple):
    """A batch whose pages are all stored uncompressed (QEMU stores a page raw when zlib does
    not shrink it, as it does memhog's, and points zero pages at one raw zero page): its bytes
    are the container file's at `pieces` ((offset, size), in order), written from the page
    cache in one writev, never decoded or joined in Python."""

    pieces: tuple[tuple[int, int], ...]


#: a stretch of a batch: (pages, their bytes | StoredRaw | None for zeros)
Piece = tuple[int, "bytes | StoredRaw | None"]


def clipped(pieces: tuple[tuple[int, int], ...], skip: int, size: int) -> list[tuple[int, int]]:
    """`size` bytes of the (offset, size) `pieces` after their first `skip` bytes."""
    clipped = []
    for offset, length in pieces:
        if skip >= length:
            skip -= length
            continue
        take = min(length - skip, size)
        clipped.append((offset + skip, take))
        skip, size = 0, size - take
        if not size:
            break
    return clipped


def pieces_of_batch(n: int, filled: list[tuple[int, bytes | memoryview]]) -> list[Piece]:
    """A batch of n pages, those at `filled` (index, bytes; ascending) not zero, as pieces:
    zero stretches of ZERO_STRETCH_PAGES or more are None, everything else joined bytes (the
    cost follows the pages that hold data, not the batch's size)."""
    if not filled:
        return [(n, None)]
    pieces: list[Piece] = []
    begin = filled[0][0] if filled[0][0] >= ZERO_STRETCH_PAGES else 0  # the data piece being gathered
    if begin:
        pieces.append((begin, None))
    parts: list[bytes | memoryview] = []
    end = begin
    for i, page in filled:
        if i - end >= ZERO_STRETCH_PAGES:
            pieces.append((end - begin, b"".join(parts)))
            pieces.append((i - end, None))
            parts.clear()
            begin = end = i
        parts.extend(itertools.repeat(ZERO_PAGE, i - end))
        parts.append(page)
        end = i + 1
    if n - end < ZERO_STRETCH_PAGES:
        parts.extend(itertools.repeat(ZERO_PAGE, n - end))
        end = n
    pieces.append((end - begin, b"".join(parts)))
    if end < n:
        pieces.append((n - end, None))
    return pieces
