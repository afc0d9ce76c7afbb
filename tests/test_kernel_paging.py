"""Page-table decoder: 4- and 5-level paging, 2 MiB / 1 GiB pages, bulk walks, bounds.

Page tables are built in a sparse in-memory physical source from random mappings;
translation and the bulk walk must reproduce exactly the mappings put in.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ovm_offline.errors import GuestDataError
from ovm_offline.kernel.core.paging import (
    ADDR_MASK,
    NonPresent,
    PageTables,
    Run,
    Translation,
    canonical,
    level_shift,
    present_runs,
)
from tests.support.memory import SparseSource

P, RW, US, PS = 1, 2, 4, 0x80
NX = 1 << 63
SIZES = {1: 1 << 12, 2: 1 << 21, 3: 1 << 30}  # leaf level -> page size
TABLE_BASE = 0x100_0000  # tables are allocated from here; data frames need not exist


class Builder:
    """Builds page tables in a SparseSource, one mapping at a time."""

    def __init__(self, levels: int) -> None:
        self.src = SparseSource(1 << 46)
        self.levels = levels
        self.next_table = TABLE_BASE
        self.root = self.alloc()

    def alloc(self) -> int:
        pa = self.next_table
        self.next_table += 4096
        self.src.write(pa, bytes(4096))
        return pa

    def _entry_addr(self, table: int, vaddr: int, level: int) -> int:
        return table + ((vaddr >> level_shift(level)) & 511) * 8

    def _read(self, addr: int) -> int:
        return int.from_bytes(self.src.read(addr, 8), "little")

    def map(self, vaddr: int, paddr: int, leaf_level: int, flags: int = P | RW | US) -> None:
        table = self.root
        for level in range(self.levels, leaf_level, -1):
            ea = self._entry_addr(table, vaddr, level)
            e = self._read(ea)
            if not e & P:
                t = self.alloc()
                self.src.write_u64(ea, t | P | RW | US)
                table = t
            else:
                table = e & ADDR_MASK
        ea = self._entry_addr(table, vaddr, leaf_level)
        self.src.write_u64(ea, paddr | flags | (PS if leaf_level > 1 else 0))

    def swap_entry(self, vaddr: int, value: int) -> None:
        """A non-present, non-zero PTE (as a swap entry looks)."""
        self.map(vaddr, 0, 1)
        table = self.root
        for level in range(self.levels, 1, -1):
            table = self._read(self._entry_addr(table, vaddr, level)) & ADDR_MASK
        self.src.write_u64(self._entry_addr(table, vaddr, 1), value & ~P)


@st.composite
def mappings(draw, levels: int):
    """Non-overlapping (vaddr, paddr, leaf_level) triples, some contiguous neighbours."""
    bits = 48 if levels == 4 else 57
    out: list[tuple[int, int, int]] = []
    taken: list[tuple[int, int]] = []
    n = draw(st.integers(1, 12))
    for _ in range(n):
        leaf = draw(st.sampled_from([1, 1, 1, 2, 2, 3]))
        size = SIZES[leaf]
        # Cluster addresses in a few areas so tables are shared and runs can merge.
        area = draw(st.sampled_from([0, 1, 2, (1 << (bits - 12)) - 3]))  # last: upper half
        lin_page = draw(st.integers(0, 4095))
        lin = ((area << 30) + lin_page * size) & ((1 << bits) - 1)
        lin -= lin % size
        count = draw(st.integers(1, 3))  # consecutive pages, physically contiguous or not
        contiguous = draw(st.booleans())
        pframe = draw(st.integers(1, (1 << 34) // size))
        for k in range(count):
            v = lin + k * size
            if v + size > (1 << bits):
                break
            if any(v < e and s < v + size for s, e in taken):
                continue
            if (v < (1 << (bits - 1))) != (lin < (1 << (bits - 1))):
                break  # do not wrap across the canonical hole
            pa = (pframe + (k if contiguous else 7 * k)) * size
            taken.append((v, v + size))
            out.append((canonical(v, levels), pa, leaf))
    return out


def merged(maps: list[tuple[int, int, int]]) -> list[Run]:
    runs: list[Run] = []
    for v, p, leaf in sorted(maps):
        size = SIZES[leaf]
        if runs and runs[-1].vaddr + runs[-1].length == v and runs[-1].paddr + runs[-1].length == p:
            last = runs.pop()
            runs.append(Run(last.vaddr, last.paddr, last.length + size))
        else:
            runs.append(Run(v, p, size))
    return runs


def _check(levels: int, maps, offsets) -> None:
    b = Builder(levels)
    for v, p, leaf in maps:
        b.map(v, p, leaf)
    pt = PageTables(b.src, b.root, levels)
    for (v, p, leaf), off in zip(maps, offsets, strict=False):  # offsets outnumber maps
        off %= SIZES[leaf]
        r = pt.lookup(v + off)
        assert isinstance(r, Translation)
        assert r.paddr == p + off and r.page_size == SIZES[leaf]
    got = [r for r in pt.walk(0, 1 << 64) if isinstance(r, Run)]
    assert got == merged(maps)
    # A sub-range cuts runs at its ends.
    if maps:
        v, p, leaf = maps[0]
        lo, hi = v + SIZES[leaf] // 4, v + SIZES[leaf] // 2
        assert list(present_runs(b.src, b.root, lo, hi, levels)) == [Run(lo, p + SIZES[leaf] // 4, hi - lo)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(maps=mappings(4), offsets=st.lists(st.integers(0, 1 << 30), min_size=40, max_size=40))
def test_four_level(maps, offsets):
    _check(4, maps, offsets)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(maps=mappings(5), offsets=st.lists(st.integers(0, 1 << 30), min_size=40, max_size=40))
def test_five_level(maps, offsets):
    _check(5, maps, offsets)


def test_unmapped_and_non_canonical():
    b = Builder(4)
    b.map(0x400000, 0x1234000, 1)
    pt = PageTables(b.src, b.root, 4)
    assert pt.translate(0x401000) is None
    assert pt.translate(0x0000_8000_0000_0000) is None  # non-canonical in 4-level
    assert pt.translate(0x400123) == 0x1234123


def test_huge_page_pat_bit_and_nx_ignored():
    b = Builder(4)
    # Bit 12 of a 2 MiB leaf is PAT, not an address bit; NX is not an address bit either.
    b.map(0x20_0000, 0x4000_0000 | (1 << 12), 2, flags=P | RW | NX)
    pt = PageTables(b.src, b.root, 4)
    assert pt.translate(0x20_0000 + 0x1234) == 0x4000_0000 + 0x1234


def test_swap_entries_reported_separately():
    b = Builder(4)
    b.map(0x1000, 0x5000, 1)
    b.map(0x2000, 0x6000, 1)
    b.swap_entry(0x3000, 0xABC00)
    b.map(0x4000, 0x7000, 1)
    items = list(PageTables(b.src, b.root, 4).walk(0, 0x10000))
    assert items == [Run(0x1000, 0x5000, 0x2000), NonPresent(0x3000, 4096, 1, 0xABC00), Run(0x4000, 0x7000, 0x1000)]
    assert list(present_runs(b.src, b.root, 0, 0x10000)) == [Run(0x1000, 0x5000, 0x2000), Run(0x4000, 0x7000, 0x1000)]


def test_table_pointer_outside_memory_is_a_hole():
    b = Builder(4)
    b.map(0x1000, 0x5000, 1)
    # A PML4 entry pointing far beyond physical memory.
    b.src.write_u64(b.root + 8 * 5, (1 << 50) | P)
    pt = PageTables(b.src, b.root, 4)
    items = list(pt.walk(0, 1 << 47))
    assert items[0] == Run(0x1000, 0x5000, 0x1000)
    assert isinstance(items[1], NonPresent) and items[1].entry & P
    assert pt.translate(5 << 39) is None


def test_one_table_read_per_table():
    b = Builder(4)
    for i in range(512):
        b.map(0x4000_0000 + i * 4096, 0x800_0000 + i * 4096, 1)
    b.src.reads = 0
    runs = list(present_runs(b.src, b.root, 0, 1 << 47))
    assert runs == [Run(0x4000_0000, 0x800_0000, 512 * 4096)]
    assert b.src.reads == 4  # PML4, PDPT, PD, PT: one read each


@pytest.mark.parametrize("levels", [4, 5])
def test_hostile_self_referencing_tables_are_bounded(levels):
    # Every entry of the root points at the root itself: each level sees 512 present
    # tables, a naive walk would visit 512**levels entries.
    src = SparseSource(1 << 30)
    root = 0x10000
    src.write(root, (root | P | RW | US).to_bytes(8, "little") * 512)
    pt = PageTables(src, root, levels)
    assert pt.translate(0x1234_5678) is not None  # bounded by depth anyway
    with pytest.raises(GuestDataError) as e:
        for _ in pt.walk(0, 1 << 64):
            pass
    assert "\n" not in str(e.value) and "same tables" in str(e.value)


def test_table_budget():
    """Distinct tables are limited by max_tables."""
    b = Builder(4)
    for i in range(40):  # 40 distinct page tables under one PD
        b.map(0x4000_0000 + i * (2 << 20), 0x100_0000 + i * 4096, 1)
    pt = PageTables(b.src, b.root, 4)
    assert len(list(pt.walk(0, 1 << 47, max_tables=43))) == 40
    with pytest.raises(GuestDataError, match="more than 42 tables"):
        list(pt.walk(0, 1 << 47, max_tables=42))
