"""x86-64 page tables: translation of single addresses and bulk walks of ranges.

Levels are numbered as in the Intel SDM, from the leaf up: 1 = PT (4 KiB pages),
2 = PD (2 MiB pages when PS is set), 3 = PDPT (1 GiB pages when PS is set),
4 = PML4, 5 = PML5 (only with LA57, CR4 bit 12).  A root is the physical address of
the top table (CR3 with its flag/PCID bits masked off).

Every table is read with one ``source.read(paddr, 4096)`` and decoded with one
``struct.unpack``; a bounded LRU keeps recently used tables.  Guest page tables are
untrusted: table pointers outside the source's physical runs are treated as holes
(reported as `NonPresent` with the present bit set), and a walk stops with
GuestDataError after `max_tables` table visits or when it meets the same table over
and over: a hostile guest can point every entry of every level at one table and
make a naive walk visit 2^36 entries.
"""

from __future__ import annotations

import bisect
import struct
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

from ...errors import GuestDataError
from ...sources.base import PhysicalSource

__all__ = [
    "ADDR_MASK",
    "CR4_LA57",
    "KPTI_USER_BIT",
    "NonPresent",
    "PAGE_SHIFT",
    "PAGE_SIZE",
    "PTE_PRESENT",
    "PageTables",
    "PhysicalRuns",
    "Run",
    "Translation",
    "canonical",
    "level_shift",
    "present_runs",
]


PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
ENTRIES = 512

PTE_PRESENT = 1 << 0
PTE_PS = 1 << 7  # page size: leaf at level 2 (2 MiB) or 3 (1 GiB)
# Bits 12..51 hold the next table / page frame (MAXPHYADDR is at most 52).
ADDR_MASK = 0x000F_FFFF_FFFF_F000

CR4_LA57 = 1 << 12
# CR3: bits 0..11 are PCID/flags, bit 63 is "no flush" on writes; under KPTI
# (PTI_USER_PGTABLE_MASK, bit 12) a vCPU in user mode holds the user half of an
# 8 KiB-aligned pair, the kernel's is the page below.
KPTI_USER_BIT = 1 << 12

MAX_TABLE_REPEATS = 64

_UNPACK_TABLE = struct.Struct("<512Q").unpack
_ZERO_TABLE = (0,) * ENTRIES


def level_shift(level: int) -> int:
    """log2 of the span one entry at `level` maps (12, 21, 30, 39, 48)."""
    return PAGE_SHIFT + 9 * (level - 1)


def va_bits(levels: int) -> int:
    return 48 if levels == 4 else 57


def canonical(lin: int, levels: int) -> int:
    """Sign-extend a linear address of `levels`-level paging into a 64-bit address."""
    bits = va_bits(levels)
    if lin & (1 << (bits - 1)):
        return lin | (~((1 << bits) - 1) & 0xFFFF_FFFF_FFFF_FFFF)
    return lin


def is_canonical(vaddr: int, levels: int) -> bool:
    bits = va_bits(levels)
    top = vaddr >> (bits - 1)
    return top == 0 or top == (1 << (64 - bits + 1)) - 1


class Run(NamedTuple):
    """Contiguous present memory: [vaddr, vaddr+length) maps to [paddr, paddr+length).
    paddr may lie outside the source's RAM (MMIO, e.g. a mapped PCI BAR); callers check."""

    vaddr: int
    paddr: int
    length: int


class NonPresent(NamedTuple):
    """A non-zero entry that maps nothing: at level 1 usually a swap or migration entry
    (present bit clear); with the present bit set, a table pointer outside physical
    memory.  It covers [vaddr, vaddr+size) clipped to the walked range."""

    vaddr: int
    size: int
    level: int
    entry: int


class Translation(NamedTuple):
    paddr: int
    page_size: int  # 4096, 2 MiB or 1 GiB
    entry: int  # the leaf entry (flags: RW bit 1, US bit 2, NX bit 63, ...)


class PageTables:
    """The page tables of one address space, rooted at physical `root`."""

    def __init__(
        self,
        source: PhysicalSource,
        root: int,
        levels: int = 4,
        *,
        cache_tables: int = 1024,
        runs: PhysicalRuns | None = None,
    ) -> None:
        if levels not in (4, 5):
            raise ValueError("levels must be 4 or 5")
        self.source = source
        self.root = root & ADDR_MASK
        self.levels = levels
        self.runs = runs if runs is not None else PhysicalRuns.of(source)
        self._cache: OrderedDict[int, tuple[int, ...]] = OrderedDict()
        self._cache_max = cache_tables

    # ----- tables
    def table(self, paddr: int) -> tuple[int, ...] | None:
        """The 512 entries of the table at `paddr`, or None if it is outside memory."""
        t = self._cache.get(paddr)
        if t is not None:
            self._cache.move_to_end(paddr)
            return t
        if not self.runs.contains(paddr, PAGE_SIZE):
            return None
        data = self.source.read(paddr, PAGE_SIZE)
        t = _ZERO_TABLE if not any(data) else _UNPACK_TABLE(data)
        self._cache[paddr] = t
        if len(self._cache) > self._cache_max:
            self._cache.popitem(last=False)
        return t

    # ----- single translation
    def lookup(self, vaddr: int) -> Translation | NonPresent | None:
        """Translate one address: a Translation, a NonPresent entry, or None when the
        address is non-canonical or its entry is zero."""
        if not is_canonical(vaddr, self.levels):
            return None
        table_pa = self.root
        for level in range(self.levels, 0, -1):
            t = self.table(table_pa)
            shift = level_shift(level)
            if t is None:
                return NonPresent(vaddr & ~((1 << (shift + 9)) - 1), 1 << (shift + 9), level + 1, table_pa)
            e = t[(vaddr >> shift) & 511]
            if not e & PTE_PRESENT:
                if e:
                    return NonPresent(vaddr & ~((1 << shift) - 1), 1 << shift, level, e)
                return None
            if level == 1 or (e & PTE_PS and level in (2, 3)):
                size = 1 << shift
                base = e & ADDR_MASK & ~(size - 1)
                return Translation(base | (vaddr & (size - 1)), size, e)
            table_pa = e & ADDR_MASK
        return None  # unreachable

    def translate(self, vaddr: int) -> int | None:
        """Physical address of `vaddr`, or None if it is not mapped."""
        r = self.lookup(vaddr)
        return r.paddr if isinstance(r, Translation) else None

    # ----- bulk walk
    def walk(
        self, start: int, end: int, *, max_tables: int = 1 << 16, report_non_present: bool = True
    ) -> Iterator[Run | NonPresent]:
        """Walk [start, end): yield maximal `Run`s of present pages (physically
        contiguous, merged across pages and tables) in address order, interleaved with
        `NonPresent` entries.  Non-canonical parts of the range are skipped.  Raises
        GuestDataError after more than `max_tables` table visits."""
        bits = va_bits(self.levels)
        half = 1 << (bits - 1)
        mask = (1 << bits) - 1
        top = 0xFFFF_FFFF_FFFF_FFFF
        pieces = []
        # The lower and the upper canonical halves, as linear (bits-wide) ranges.
        lo_s, lo_e = max(start, 0), min(end, half)
        if lo_s < lo_e:
            pieces.append((lo_s, lo_e))
        up_start = top - half + 1  # first upper-half canonical address
        hi_s, hi_e = max(start, up_start), min(end, top + 1)
        if hi_s < hi_e:
            pieces.append((hi_s & mask, ((hi_e - 1) & mask) + 1))
        w = _Walk(self, max_tables, report_non_present, start, end)
        for s, e in pieces:
            for item in w.run(s, e):
                yield _clip(item, start, end) if isinstance(item, Run) else item
        last = w.flush()
        if last is not None:
            yield _clip(last, start, end)


def _clip(r: Run, start: int, end: int) -> Run:
    """4 KiB leaves are merged whole; cut a run to a range that is not page-aligned."""
    if r.vaddr >= start and r.vaddr + r.length <= end:
        return r
    v0 = max(r.vaddr, start)
    v1 = min(r.vaddr + r.length, end)
    return Run(v0, r.paddr + (v0 - r.vaddr), v1 - v0)


class _Walk:
    """State of one bulk walk: the pending run being merged and the table budget."""

    def __init__(self, pt: PageTables, max_tables: int, report: bool, start: int, end: int) -> None:
        self.pt = pt
        self.levels = pt.levels
        self.budget = max_tables
        self.max_tables = max_tables
        # Within one address space no table is referenced twice (hugetlb PMD sharing
        # is across processes); a few repeats are tolerated, many mean hostile tables.
        self.seen: set[int] = set()
        self.repeats = 0
        self.report = report
        self.range = (start, end)
        self.pv = self.pp = self.pl = 0  # pending run (vaddr, paddr, length); pl == 0: none

    def flush(self) -> Run | None:
        if self.pl:
            r = Run(self.pv, self.pp, self.pl)
            self.pl = 0
            return r
        return None

    def run(self, lo: int, hi: int) -> Iterator[Run | NonPresent]:
        yield from self._table(self.pt.root, self.levels, 0, lo, hi)

    def _spend(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            s, e = self.range
            raise GuestDataError(
                f"page-table walk of 0x{s:x}-0x{e:x} visited more than {self.max_tables} tables:"
                " looping or hostile page tables"
            )

    def _visit(self, table_pa: int) -> None:
        """Count a table against the walk's budget; a table met too often is a loop."""
        self._spend()
        if table_pa in self.seen:
            self.repeats += 1
            if self.repeats > MAX_TABLE_REPEATS:
                s, e = self.range
                raise GuestDataError(
                    f"page-table walk of 0x{s:x}-0x{e:x} met the same tables more than {MAX_TABLE_REPEATS}"
                    " times: looping or hostile page tables"
                )
        else:
            self.seen.add(table_pa)

    def _table(self, table_pa: int, level: int, base: int, lo: int, hi: int) -> Iterator[Run | NonPresent]:
        self._visit(table_pa)
        t = self.pt.table(table_pa)
        if t is None:
            if self.report:
                r = self.flush()
                if r is not None:
                    yield r
                yield NonPresent(canonical(lo, self.levels), hi - lo, level + 1, table_pa | PTE_PRESENT)
            return
        if t is _ZERO_TABLE:
            return
        shift = level_shift(level)
        first = (lo - base) >> shift
        last = (hi - 1 - base) >> shift
        if level == 1:
            yield from self._ptes(t, first, last, base)
        else:
            yield from self._upper(t, level, first, last, base, lo, hi)

    def _ptes(self, t: tuple[int, ...], first: int, last: int, base: int) -> Iterator[Run | NonPresent]:
        """Hot loop: the 4 KiB pages of a page table, merged into the pending run while
        contiguous."""
        pv, pp, pl = self.pv, self.pp, self.pl
        report = self.report
        vbase = canonical(base, self.levels)  # one table never straddles the canonical hole
        for i in range(first, last + 1):
            e = t[i]
            if not e & PTE_PRESENT:
                if e and report:
                    if pl:
                        yield Run(pv, pp, pl)
                        pl = 0
                    yield NonPresent(vbase + (i << 12), PAGE_SIZE, 1, e)
                continue
            pa = e & ADDR_MASK
            v = vbase + (i << 12)
            if pl and pa == pp + pl and v == pv + pl:
                pl += PAGE_SIZE
            else:
                if pl:
                    yield Run(pv, pp, pl)
                pv, pp, pl = v, pa, PAGE_SIZE
        self.pv, self.pp, self.pl = pv, pp, pl

    def _upper(
        self, t: tuple[int, ...], level: int, first: int, last: int, base: int, lo: int, hi: int
    ) -> Iterator[Run | NonPresent]:
        """The entries of a table above the page tables: huge pages (2 MiB, 1 GiB) join the
        pending run, tables below are walked."""
        shift = level_shift(level)
        span = 1 << shift
        for i in range(first, last + 1):
            e = t[i]
            ent_base = base + (i << shift)
            s = max(lo, ent_base)
            x = min(hi, ent_base + span)
            if not e & PTE_PRESENT:
                if e and self.report:
                    r = self.flush()
                    if r is not None:
                        yield r
                    yield NonPresent(canonical(s, self.levels), x - s, level, e)
                continue
            if e & PTE_PS and level in (2, 3):
                pa = (e & ADDR_MASK & ~(span - 1)) + (s - ent_base)
                v = canonical(s, self.levels)
                if self.pl and pa == self.pp + self.pl and v == self.pv + self.pl:
                    self.pl += x - s
                else:
                    if self.pl:
                        yield Run(self.pv, self.pp, self.pl)
                    self.pv, self.pp, self.pl = v, pa, x - s
                continue
            if e & PTE_PS:
                continue  # PS in PML4E/PML5E is a reserved bit: the CPU would fault
            yield from self._table(e & ADDR_MASK, level - 1, ent_base, s, x)


class PhysicalRuns:
    """Fast membership test for guest-physical ranges present in a source."""

    def __init__(self, runs: list[tuple[int, int]]) -> None:
        runs = sorted(runs)
        self.starts = [s for s, _ in runs]
        self.ends = [s + n for s, n in runs]
        self.total = sum(n for _, n in runs)

    @classmethod
    def of(cls, source: PhysicalSource) -> PhysicalRuns:
        return cls([(r.start, r.length) for r in source.runs()])

    def contains(self, paddr: int, length: int = 1) -> bool:
        i = bisect.bisect_right(self.starts, paddr) - 1
        return i >= 0 and paddr + length <= self.ends[i]

    def run_end(self, paddr: int) -> int | None:
        """End of the run containing paddr, or None."""
        i = bisect.bisect_right(self.starts, paddr) - 1
        if i >= 0 and paddr < self.ends[i]:
            return self.ends[i]
        return None


def translate(source: PhysicalSource, root: int, vaddr: int, levels: int = 4) -> int | None:
    """Physical address of `vaddr` under the page tables at `root`, or None."""
    return PageTables(source, root, levels).translate(vaddr)


def present_runs(
    source: PhysicalSource, root: int, start: int, end: int, levels: int = 4, *, max_tables: int = 1 << 16
) -> Iterator[tuple[int, int, int]]:
    """Only the (vaddr, paddr, length) runs of present pages in [start, end)."""
    for r in PageTables(source, root, levels).walk(start, end, max_tables=max_tables, report_non_present=False):
        if isinstance(r, Run):
            yield r
