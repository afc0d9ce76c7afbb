"""The pagemap entries and the pages file (pages-N.img) of one process, as CRIU 3.17 writes them.

CRIU's dump collects the pages to save in a "page pipe" (criu/page-pipe.c) and writes
one pagemap entry per iovec of it, pages in the same order. So the entries are not just
maximal runs; they are cut where CRIU's page pipe cuts them:

* a page pipe buffer (ppb) holds pages of one kind (lazy or not): a change of kind
  starts a new ppb;
* a ppb holds at most PIPE_MAX_PAGES pages (its pipe grows from 16 pages up to
  PIPE_MAX_SIZE = 8 pages * 4096 / sizeof(struct pipe_buffer) = 819, which the kernel
  rounds up to 1024): a full one starts a new ppb;
* in "chunk mode" (every normal dump) at most NR_PIPES_PER_CHUNK = 8 ppbs exist; when
  a 9th is needed CRIU drains them, starts over with one empty non-lazy ppb, and the
  page goes to that or (if lazy) to a second one.

Within a ppb, pages extend the last iovec when they follow it. Entry flags: PE_PRESENT
for non-lazy, PE_LAZY | PE_PRESENT for lazy pages (the pages are in the image).

`write_pages` copies the pages straight from the source with `source.copy_to`, one call
per physically contiguous stretch; it holds only the run list, so memory does not
grow with the size of the process.
"""

from __future__ import annotations

import bisect
import dataclasses
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from ..errors import UnsupportedError
from ..sources.base import PhysicalSource
from ..state import MmState, PageRun, UserWrite

__all__ = [
    "PAGE_SIZE",
    "PE_LAZY",
    "PE_PARENT",
    "PE_PRESENT",
    "PIPE_MAX_PAGES",
    "PagesStats",
    "place_user_writes",
    "pagemap_entries",
    "pagemap_entries_with_pages",
    "read_user_pages",
    "split_over_parent",
    "write_page_runs",
    "write_pages",
    "write_pages_over_parent",
]


PAGE_SIZE = 4096

# criu/include/pagemap.h / images/pagemap.proto
PE_PARENT = 1 << 0
PE_LAZY = 1 << 1
PE_PRESENT = 1 << 2

# criu/include/page-pipe.h, and the kernel's rounding of F_SETPIPE_SZ to a power of two
NR_PIPES_PER_CHUNK = 8
PIPE_MAX_PAGES = 1024


@dataclasses.dataclass
class PagemapRun:
    """One pagemap_entry: `nr_pages` pages at user `vaddr`, flags PE_*."""

    vaddr: int
    nr_pages: int
    flags: int


@dataclasses.dataclass
class PagesStats:
    """Byte counters for the dump summary."""

    pages: int = 0
    bytes: int = 0
    entries: int = 0
    copies: int = 0  # source.copy_to calls (physically contiguous stretches)
    lazy_pages: int = 0
    parent_pages: int = 0  # unchanged since a parent dump: PE_PARENT entries, not written


class _Ppb:
    __slots__ = ("iovs", "lazy", "pages")

    def __init__(self, lazy: bool) -> None:
        self.lazy = lazy
        self.pages = 0
        self.iovs: list[list[int]] = []  # [vaddr, nr_pages]


def pagemap_entries(
    runs: Iterable[PageRun], *, pipe_pages: int = PIPE_MAX_PAGES, pipes_per_chunk: int = NR_PIPES_PER_CHUNK
) -> Iterator[PagemapRun]:
    """The pagemap entries CRIU's page pipe makes of these page runs (ascending vaddr),
    in order; see the module doc. Works per run, not per page."""
    ppbs = [_Ppb(False)]  # create_page_pipe / page_pipe_reinit start with one non-lazy ppb

    def drain() -> Iterator[PagemapRun]:
        for ppb in ppbs:
            flags = (PE_LAZY | PE_PRESENT) if ppb.lazy else PE_PRESENT
            for va, n in ppb.iovs:
                yield PagemapRun(va, n, flags)

    for r in runs:
        va, left = r.vaddr, r.length // PAGE_SIZE
        while left:
            last = ppbs[-1]
            if last.lazy != r.lazy or last.pages >= pipe_pages:
                if len(ppbs) == pipes_per_chunk:
                    yield from drain()  # -EAGAIN: drain_pages + xfer, then page_pipe_reinit
                    ppbs = [_Ppb(False)]
                    if r.lazy:
                        ppbs.append(_Ppb(True))
                else:
                    ppbs.append(_Ppb(r.lazy))
                last = ppbs[-1]
            n = min(left, pipe_pages - last.pages)
            if last.iovs and last.iovs[-1][0] + last.iovs[-1][1] * PAGE_SIZE == va:
                last.iovs[-1][1] += n
            else:
                last.iovs.append([va, n])
            last.pages += n
            va += n * PAGE_SIZE
            left -= n
    yield from drain()


def _physical_stretches(runs: Iterable[PageRun]) -> Iterator[tuple[int, int]]:
    """(paddr, length) of the runs with physically adjacent neighbours merged: the file
    is the runs' bytes back to back, so only physical adjacency matters."""
    pa = n = 0
    for r in runs:
        if n and pa + n == r.paddr:
            n += r.length
            continue
        if n:
            yield pa, n
        pa, n = r.paddr, r.length
    if n:
        yield pa, n


def _file_offset(runs: list[PageRun], vaddr: int, size: int) -> int | None:
    """Where `size` bytes at user `vaddr` are in a pages file of `runs`, if one run holds them."""
    offset = 0
    for r in runs:
        if r.vaddr <= vaddr and vaddr + size <= r.vaddr + r.length:
            return offset + vaddr - r.vaddr
        offset += r.length
    return None


def place_user_writes(mm: MmState, writes: Iterable[UserWrite], who: str) -> list[UserWrite]:
    """The writes, checked to land in pages the dump saves (they are laid over them);
    UnsupportedError naming `who` for one that does not."""
    placed = list(writes)
    for w in placed:
        if _file_offset(mm.pages, w.vaddr, len(w.data)) is None:
            raise UnsupportedError(
                f"{who}: the kernel would write {len(w.data)} bytes at 0x{w.vaddr:x} as it ends an interrupted"
                " call, which is not in a page the dump saves"
            )
    return placed


def write_pages(
    source: PhysicalSource, mm: MmState, pages_file: BinaryIO, stats: PagesStats | None = None
) -> list[PagemapRun]:
    """Write the pages of `mm` (its `pages` runs, in order, with its `user_writes` laid over
    them) to `pages_file` and return the pagemap entries that describe them. Pass a
    `PagesStats` to get the counters."""
    start = pages_file.tell()
    entries = write_page_runs(source, mm.pages, pages_file, stats)
    if mm.user_writes:
        end = pages_file.tell()
        for w in mm.user_writes:
            offset = _file_offset(mm.pages, w.vaddr, len(w.data))
            assert offset is not None, "place_user_writes checked it"
            pages_file.seek(start + offset)
            pages_file.write(w.data)
        pages_file.seek(end)
    return entries


def write_page_runs(
    source: PhysicalSource, runs: list[PageRun], pages_file: BinaryIO, stats: PagesStats | None = None
) -> list[PagemapRun]:
    """Write the pages of `runs` (ascending vaddr) to `pages_file` and return their pagemap
    entries: a process's memory, or a shmem file's (vaddr = offset in the file, which is
    how CRIU's do_dump_one_shmem numbers them)."""
    st = stats if stats is not None else PagesStats()
    written = 0
    for pa, n in _physical_stretches(runs):
        source.copy_to(pa, n, pages_file)
        st.copies += 1
        written += n
    entries = list(pagemap_entries(runs))
    st.bytes += written
    st.pages += written // PAGE_SIZE
    st.lazy_pages += sum(r.length for r in runs if r.lazy) // PAGE_SIZE
    st.entries += len(entries)
    return entries


def read_user_pages(
    source: PhysicalSource, runs: list[PageRun], start: int, end: int, user_writes: Iterable[UserWrite] = ()
) -> bytearray:
    """The bytes of user addresses [start, end), every page of them in `runs` (ascending vaddr),
    with `user_writes` laid over them; ValueError where a page is in no run."""
    at = bisect.bisect_right(runs, start, key=lambda r: r.vaddr) - 1
    data = bytearray()
    va = start
    while va < end:
        if at < 0 or at >= len(runs) or not runs[at].vaddr <= va < runs[at].vaddr + runs[at].length:
            raise ValueError(f"user page 0x{va:x} is not one the dump saves")
        run = runs[at]
        n = min(end, run.vaddr + run.length) - va
        data += source.read(run.paddr + va - run.vaddr, n)
        va += n
        at += 1
    for w in user_writes:
        lo, hi = max(w.vaddr, start), min(w.vaddr + len(w.data), end)
        if lo < hi:
            data[lo - start : hi - start] = w.data[lo - w.vaddr : hi - w.vaddr]
    return data


def pagemap_entries_with_pages(
    source: PhysicalSource,
    runs: list[PageRun],
    user_writes: Iterable[UserWrite] = (),
    stats: PagesStats | None = None,
    *,
    lazy_dump: bool = False,
) -> Iterator[tuple[PagemapRun, bytearray | None]]:
    """Each pagemap entry of `runs` (ascending vaddr) with its pages' bytes, `user_writes` laid
    over them: what write_pages writes, one entry (at most PIPE_MAX_PAGES pages) in memory at a
    time, for a destination that takes an entry with its pages (criu's page server). Entries
    come in ascending vaddr, as the pages file holds them (a new ppb always follows the last).
    `lazy_dump`: as `criu dump --lazy-pages` makes them, its page pipe without chunk mode, and
    its lazy entries PE_LAZY alone, without their pages (None): they are served on request."""
    st = stats if stats is not None else PagesStats()
    writes = list(user_writes)
    chunk = sys.maxsize if lazy_dump else NR_PIPES_PER_CHUNK
    for entry in pagemap_entries(runs, pipes_per_chunk=chunk):
        st.entries += 1
        if lazy_dump and entry.flags & PE_LAZY:
            st.lazy_pages += entry.nr_pages
            yield dataclasses.replace(entry, flags=PE_LAZY), None
            continue
        data = read_user_pages(source, runs, entry.vaddr, entry.vaddr + entry.nr_pages * PAGE_SIZE, writes)
        st.copies += 1
        st.bytes += len(data)
        st.pages += entry.nr_pages
        st.lazy_pages += entry.nr_pages if entry.flags & PE_LAZY else 0
        yield entry, data


#: how much guest memory is read at a time to be compared with a parent dump's pages
_COMPARE_BYTES = 1 << 20


def write_pages_over_parent(
    source: PhysicalSource,
    mm: MmState,
    pages_file: BinaryIO,
    parent_page: Callable[[int], bytes | None],
    stats: PagesStats | None = None,
) -> list[PagemapRun]:
    """write_pages for a dump with a parent (criu --prev-images-dir): a page whose bytes equal
    the parent's page at the same address (`parent_page(vaddr)`, None where it has none) is
    a PE_PARENT entry and not written; the others are written as write_pages writes them."""
    st = stats if stats is not None else PagesStats()
    changed, kept = split_over_parent(source, mm, lambda vaddr, page: parent_page(vaddr) == page)
    entries = write_pages(source, dataclasses.replace(mm, pages=changed), pages_file, st)
    entries += kept
    st.parent_pages += sum(e.nr_pages for e in kept)
    st.entries += len(kept)
    return sorted(entries, key=lambda e: e.vaddr)


def split_over_parent(
    source: PhysicalSource, mm: MmState, unchanged: Callable[[int, bytes], bool]
) -> tuple[list[PageRun], list[PagemapRun]]:
    """The runs of `mm`'s pages that changed since a parent dump, and the PE_PARENT entries of
    those that did not (`unchanged(vaddr, page)`). Content decides, not a dirty log (QEMU's is
    not exact under TCG). A page the kernel would still write into (`user_writes`) has changed."""
    written = {
        page * PAGE_SIZE
        for w in mm.user_writes
        for page in range(w.vaddr // PAGE_SIZE, (w.vaddr + max(len(w.data), 1) - 1) // PAGE_SIZE + 1)
    }
    changed: list[PageRun] = []
    kept: list[list[int]] = []  # [vaddr, nr_pages] of runs the parent holds
    for run in mm.pages:
        for at in range(0, run.length, _COMPARE_BYTES):
            chunk = source.read(run.paddr + at, min(_COMPARE_BYTES, run.length - at))
            for i in range(0, len(chunk), PAGE_SIZE):
                vaddr, paddr = run.vaddr + at + i, run.paddr + at + i
                if vaddr not in written and unchanged(vaddr, chunk[i : i + PAGE_SIZE]):
                    if kept and kept[-1][0] + kept[-1][1] * PAGE_SIZE == vaddr:
                        kept[-1][1] += 1
                    else:
                        kept.append([vaddr, 1])
                    continue
                last = changed[-1] if changed else None
                if (
                    last
                    and last.vaddr + last.length == vaddr
                    and last.paddr + last.length == paddr
                    and last.lazy == run.lazy
                ):
                    changed[-1] = dataclasses.replace(last, length=last.length + PAGE_SIZE)
                else:
                    changed.append(PageRun(vaddr, paddr, PAGE_SIZE, run.lazy))
    return changed, [PagemapRun(vaddr, n, PE_PARENT) for vaddr, n in kept]
