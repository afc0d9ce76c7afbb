"""The pagemap CRIU's page pipe makes (ovm_offline.extract.pages) on constructed page runs,
and the pages file written from a fake source: one bulk copy per physical stretch, bytes in
pagemap order. The real-guest comparisons with golden images are in test_extract_mm.py."""

from __future__ import annotations

import io
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ovm_offline.extract.pages import (
    PE_LAZY,
    PE_PRESENT,
    PIPE_MAX_PAGES,
    PagesStats,
    pagemap_entries,
    pagemap_entries_with_pages,
    write_pages,
)
from ovm_offline.state import MmState, PageRun, UserWrite
from tests.support.memory import SparseSource

P = 4096
L, N = PE_LAZY | PE_PRESENT, PE_PRESENT


def run(vaddr: int, pages: int, lazy: bool, paddr: int = 0) -> PageRun:
    return PageRun(vaddr, paddr or vaddr & 0xFFFF_FFFF, pages * P, lazy)


def entries(runs):
    return [(e.vaddr, e.nr_pages, e.flags) for e in pagemap_entries(runs)]


def test_memhog_like_layout_splits_where_criu_does():
    """As in the golden memhog-64 pagemap: text/data pages (not lazy), then the heap and
    the big anonymous mapping share lazy pipes of 1024 pages: 4 + 15 + 15 + 990."""
    H, M = 0x5600_0000_0000, 0x7F00_0000_0000
    runs = [
        run(0x5500_0000_1000, 1, False),
        run(0x5500_0000_3000, 2, False),
        run(H, 4, True),
        run(M, 15, True),
        run(M + 16 * P, 15, True),
        run(M + 32 * P, 3000, True),
    ]
    assert entries(runs) == [
        (0x5500_0000_1000, 1, N),
        (0x5500_0000_3000, 2, N),
        (H, 4, L),
        (M, 15, L),
        (M + 16 * P, 15, L),
        (M + 32 * P, 990, L),
        (M + 1022 * P, 1024, L),
        (M + 2046 * P, 986, L),
    ]


def test_kind_changes_cut_entries_and_adjacent_runs_merge():
    a = 0x1000_0000
    runs = [run(a, 2, False), run(a + 2 * P, 3, False), run(a + 5 * P, 1, True), run(a + 6 * P, 1, False)]
    assert entries(runs) == [(a, 5, N), (a + 5 * P, 1, L), (a + 6 * P, 1, N)]


def test_chunks_of_eight_pipes_do_not_change_entries():
    # 20 kind changes: CRIU drains its 8 pipes twice; every change starts an entry anyway.
    a = 0x2000_0000
    runs = [run(a + i * P, 1, bool(i % 2)) for i in range(20)]
    assert entries(runs) == [(a + i * P, 1, L if i % 2 else N) for i in range(20)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3000), st.booleans()), max_size=40))
def test_entries_cover_the_runs_in_order_and_respect_pipe_size(spec):
    runs, va = [], 0x7000_0000_0000
    for gap, n, lazy in spec:
        va += gap * P
        runs.append(run(va, n, lazy))
        va += n * P
    got = list(pagemap_entries(runs))
    pages = [(r.vaddr + i * P, r.lazy) for r in runs for i in range(r.length // P)]
    assert [(e.vaddr + i * P, e.flags == L) for e in got for i in range(e.nr_pages)] == pages
    assert all(1 <= e.nr_pages <= PIPE_MAX_PAGES for e in got)
    # Within a stretch of one kind, pipes fill up 1024 pages each: touching entries of
    # one kind are cut exactly where the stretch's page count reaches a multiple of 1024.
    streak = 0
    for x, y in itertools.pairwise(got):
        streak = streak + x.nr_pages if x.flags == y.flags else 0
        if x.flags == y.flags and x.vaddr + x.nr_pages * P == y.vaddr:
            assert streak % PIPE_MAX_PAGES == 0


class CountingSource(SparseSource):
    def __init__(self) -> None:
        super().__init__(1 << 32)
        self.copies: list[tuple[int, int]] = []

    def copy_to(self, paddr, length, out):
        self.copies.append((paddr, length))
        super().copy_to(paddr, length, out)


def test_write_pages_copies_physical_stretches_in_bulk():
    src = CountingSource()
    for i in range(64):
        src.write(0x10_0000 + i * P, bytes([i]) * P)
    # Virtually discontiguous but physically adjacent runs merge into one copy.
    runs = [
        PageRun(0x1000_0000, 0x10_0000, 8 * P, True),
        PageRun(0x2000_0000, 0x10_0000 + 8 * P, 8 * P, True),
        PageRun(0x3000_0000, 0x10_0000 + 32 * P, 4 * P, False),
    ]
    mm = MmState(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, [], None, [], 1, False, runs)
    out = io.BytesIO()
    stats = PagesStats()
    ents = write_pages(src, mm, out, stats)
    assert src.copies == [(0x10_0000, 16 * P), (0x10_0000 + 32 * P, 4 * P)]
    data = out.getvalue()
    assert data == b"".join(bytes([i]) * P for i in list(range(16)) + list(range(32, 36)))
    assert [(e.vaddr, e.nr_pages, e.flags) for e in ents] == [
        (0x1000_0000, 8, L),
        (0x2000_0000, 8, L),
        (0x3000_0000, 4, N),
    ]
    assert (stats.pages, stats.bytes, stats.copies, stats.entries, stats.lazy_pages) == (20, 20 * P, 2, 3, 16)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 1500), st.booleans(), st.booleans()), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 1 << 30), st.binary(min_size=1, max_size=40)), max_size=4),
)
def test_what_a_page_server_or_a_lazy_dump_gets_is_what_the_pages_file_holds(spec, writes_at):
    """The entries sent with their pages (to criu's page server), and a lazy dump's non-lazy
    pages, hold the bytes write_pages writes, the kernel's user writes laid over them."""
    src = SparseSource(1 << 34)
    runs, va, pa = [], 0x7000_0000_0000, 0x1000_0000
    for gap, n, lazy, contiguous in spec:
        va += gap * P
        pa += 0 if contiguous else 7 * P  # physically adjacent or not: one copy or several
        runs.append(PageRun(va, pa, n * P, lazy))
        for i in range(0, n, 97):
            src.write(pa + i * P, (va + i * P).to_bytes(8, "little") * 8)
        va, pa = va + n * P, pa + n * P
    total = sum(r.length for r in runs)
    saved = [r.vaddr + i for r in runs for i in range(0, r.length, P)]
    writes = [UserWrite(saved[at % len(saved)] + at % P, data) for at, data in writes_at]
    writes = [w for w in writes if place_user_writes_ok(runs, w)]
    mm = MmState(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, [], None, [], 1, False, runs, user_writes=writes)
    out = io.BytesIO()
    files = [(e.vaddr, e.nr_pages, e.flags) for e in write_pages(src, mm, out, PagesStats())]
    sent = list(pagemap_entries_with_pages(src, runs, writes))
    assert [(e.vaddr, e.nr_pages, e.flags) for e, _ in sent] == files
    assert b"".join(bytes(d) for _, d in sent) == out.getvalue() and len(out.getvalue()) == total
    # a lazy dump: its lazy entries PE_LAZY alone and without pages, the others' bytes as the
    # file has them at the same addresses (its entries may be cut otherwise: no chunk mode)
    file_bytes = {e[0] + i * P: out.getvalue()[o + i * P : o + (i + 1) * P]
                  for e, o in zip(files, itertools.accumulate([0] + [n * P for _, n, _ in files])) for i in range(e[1])}  # fmt: skip
    for entry, data in pagemap_entries_with_pages(src, runs, writes, lazy_dump=True):
        if entry.flags == PE_LAZY:
            assert data is None
        else:
            assert entry.flags == PE_PRESENT and data is not None
            assert bytes(data) == b"".join(file_bytes[entry.vaddr + i * P] for i in range(entry.nr_pages))


def place_user_writes_ok(runs, w) -> bool:
    """Whether one run holds the whole write (as place_user_writes requires of a dump)."""
    return any(r.vaddr <= w.vaddr and w.vaddr + len(w.data) <= r.vaddr + r.length for r in runs)
