"""The maple tree decoder (ovm_offline.kernel.ds.maple) on trees built in fake memory with the
real 6.1 and 6.12 layouts: random trees decode to exactly the ranges put in, lookups agree,
and hostile trees (cycles, bad pivots, bad node types, too many nodes) are one-line
GuestDataErrors, never hangs."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ovm_offline.errors import GuestDataError
from ovm_offline.kernel.ds.maple import (
    MAPLE_ARANGE_64,
    MAPLE_LEAF_64,
    MAPLE_RANGE_64,
    ULONG_MAX,
    XA_ZERO_ENTRY,
    mt_for_each,
    mtree_load,
)
from tests.support.memory import FAKE_POB, FakeKernelMemory

NODE_BASE = 0x10_0000  # physical; node i at NODE_BASE + 256 * i
ENTRY_BASE = FAKE_POB + 0x4000_0000
MAPLE_ROOT_NODE = 0x02
MAPLE_ENODE_NULL = 0x04


class FakeTree(FakeKernelMemory):
    """A maple tree laid out in SparseSource memory the way lib/maple_tree.c stores it."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        self.nodes = 0
        self.tree = FAKE_POB + 0x1000  # the struct maple_tree

    # --- raw layout
    def node_addr(self) -> int:
        addr = FAKE_POB + NODE_BASE + 256 * self.nodes
        self.nodes += 1
        return addr

    def write_node(self, ntype: int, slots: list[int], pivots: list[int], node_max: int) -> int:
        """A range_64/leaf_64/arange_64 node with these slots (and the pivots between
        them); returns its encoded (child) pointer."""
        addr = self.node_addr()
        words = [0] * 32
        k = len(slots)
        if ntype == MAPLE_ARANGE_64:
            npiv, p0, s0, meta = 9, 1, 10, 240
        else:
            npiv, p0, s0, meta = 15, 1, 16, 248
        assert 1 <= k <= npiv + 1
        for i, piv in enumerate(pivots):
            words[p0 + i] = piv
        if k - 1 < npiv:
            words[p0 + k - 1] = node_max  # the last used slot's pivot is the node's max
        for i, s in enumerate(slots):
            words[s0 + i] = s
        raw = bytearray(struct.pack("<32Q", *words))
        if ntype == MAPLE_ARANGE_64 or words[p0 + npiv - 1] == 0:
            raw[meta] = k - 1  # maple_metadata.end
        self.src.write(addr - FAKE_POB, bytes(raw))
        return addr | (ntype << 3) | MAPLE_ENODE_NULL

    def set_tree(self, root: int, height: int, alloc: bool) -> None:
        flags = (height << 2) | (1 if alloc else 0)
        self.src.write_u64(self.tree - FAKE_POB + self.prog.member_offset("maple_tree", "ma_root"), root)
        off = self.prog.member_offset("maple_tree", "ma_flags")
        self.src.write(self.tree - FAKE_POB + off, struct.pack("<I", flags))

    def build(self, slots: list[tuple[int, int]], group: list[int], alloc: bool) -> None:
        """Pack (last, entry) slots covering [0, ULONG_MAX] into leaves, then parents
        (arange_64 when `alloc`, else range_64), group sizes cycling through `group`."""
        level: list[tuple[int, int, int]] = []  # (enode, min, max)
        gi = 0

        def take(limit: int) -> int:
            nonlocal gi
            n = max(1, min(limit, group[gi % len(group)]))
            gi += 1
            return n

        lo = 0
        i = 0
        while i < len(slots):
            n = min(take(16), len(slots) - i)
            chunk = slots[i : i + n]
            hi = chunk[-1][0]
            enode = self.write_node(MAPLE_LEAF_64, [e for _l, e in chunk], [last for last, _e in chunk[:-1]], hi)
            level.append((enode, lo, hi))
            lo = hi + 1
            i += n
        height = 1
        itype, fan = (MAPLE_ARANGE_64, 10) if alloc else (MAPLE_RANGE_64, 16)
        while len(level) > 1:
            up: list[tuple[int, int, int]] = []
            i = 0
            while i < len(level):
                n = min(take(fan), len(level) - i)
                if n == 1 and len(level) - i > 1:
                    n = 2  # a parent with one child is legal, but keep trees shallow
                chunk = level[i : i + n]
                hi = chunk[-1][2]
                enode = self.write_node(itype, [c[0] for c in chunk], [c[2] for c in chunk[:-1]], hi)
                up.append((enode, chunk[0][1], hi))
                i += n
            level = up
            height += 1
        self.set_tree(level[0][0] | MAPLE_ROOT_NODE, height, alloc)


def ranges_to_slots(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """[(first, last, entry)] ascending, disjoint -> (last, entry) slots covering all
    indices, NULL between them, as the kernel keeps gaps."""
    slots: list[tuple[int, int]] = []
    at = 0
    for first, last, entry in ranges:
        if first > at:
            slots.append((first - 1, 0))
        slots.append((last, entry))
        at = last + 1
    if at <= ULONG_MAX:
        slots.append((ULONG_MAX, 0))
    return slots


@st.composite
def range_lists(draw) -> list[tuple[int, int, int]]:
    pieces = draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 1 << 16)), max_size=300))
    out = []
    at = draw(st.integers(0, 3)) * 4096
    for k, (gap, size) in enumerate(pieces):
        first = at + gap * 4096
        last = first + size * 4096 - 1
        out.append((first, last, ENTRY_BASE + 64 * k))
        at = last + 1
    return out


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
@pytest.mark.parametrize("alloc", [True, False], ids=["arange64", "range64"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ranges=range_lists(),
    group=st.lists(st.integers(1, 16), min_size=1, max_size=8),
    probes=st.lists(st.integers(0, 1 << 40), max_size=20),
)
def test_random_trees_decode_to_their_ranges(kernel, alloc, ranges, group, probes):
    t = FakeTree(kernel)
    t.build(ranges_to_slots(ranges), group, alloc)
    got = list(mt_for_each(t.tree, prog=t.prog))
    assert got == ranges
    for first, last, entry in ranges[:20]:
        assert mtree_load(t.tree, first, prog=t.prog) == entry
        assert mtree_load(t.tree, last, prog=t.prog) == entry
    for x in probes:
        want = next((e for f, l_, e in ranges if f <= x <= l_), 0)
        assert mtree_load(t.tree, x, prog=t.prog) == want


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_full_and_fifteen_slot_leaves_use_pivots_not_metadata(kernel):
    # 16 slots: no metadata, the last slot ends at the node max; 15: pivot[14] == max.
    for n in (15, 16):
        t = FakeTree(kernel)
        ranges = [(i * 0x2000, i * 0x2000 + 0xFFF, ENTRY_BASE + 8 * i) for i in range(n // 2)]
        slots = ranges_to_slots(ranges)[:n]
        slots[-1] = (ULONG_MAX, slots[-1][1])
        t.build(slots, [16], alloc=True)
        want = []
        lo = 0
        for last, e in slots:
            if e:
                want.append((lo, last, e))
            lo = last + 1
        assert list(mt_for_each(t.tree, prog=t.prog)) == want


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_single_entry_root_and_zero_entries(kernel):
    t = FakeTree(kernel)
    t.set_tree(ENTRY_BASE, 0, True)
    assert list(mt_for_each(t.tree, prog=t.prog)) == [(0, 0, ENTRY_BASE)]
    t.set_tree(0, 0, True)
    assert list(mt_for_each(t.tree, prog=t.prog)) == []
    t = FakeTree(kernel)
    t.build(ranges_to_slots([(0x1000, 0x1FFF, XA_ZERO_ENTRY), (0x3000, 0x3FFF, ENTRY_BASE)]), [16], True)
    assert list(mt_for_each(t.tree, prog=t.prog)) == [(0x3000, 0x3FFF, ENTRY_BASE)]
    assert (0x1000, 0x1FFF, XA_ZERO_ENTRY) in list(mt_for_each(t.tree, prog=t.prog, advanced=True))


def _two_level(t: FakeTree) -> tuple[int, int]:
    """A root arange_64 node with two leaf children; returns (root node address, leaf 0 address)."""
    leaf0 = t.write_node(MAPLE_LEAF_64, [0, ENTRY_BASE], [0xFFF], 0x1FFF)
    leaf1 = t.write_node(MAPLE_LEAF_64, [ENTRY_BASE + 8, 0], [0x2FFF], ULONG_MAX)
    root = t.write_node(MAPLE_ARANGE_64, [leaf0, leaf1], [0x1FFF], ULONG_MAX)
    t.set_tree(root | MAPLE_ROOT_NODE, 2, True)
    return root & ~0xFF, leaf0 & ~0xFF


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_cyclic_trees_are_guest_data_errors(kernel):
    t = FakeTree(kernel)
    root, leaf0 = _two_level(t)
    assert [e for _f, _l, e in mt_for_each(t.tree, prog=t.prog)] == [ENTRY_BASE, ENTRY_BASE + 8]
    # Turn the root's second child into the root itself (typed as an internal node).
    slot1 = root - FAKE_POB + 80 + 8  # maple_arange_64.slot[1]
    t.src.write_u64(slot1, root | (MAPLE_ARANGE_64 << 3) | MAPLE_ENODE_NULL)
    with pytest.raises(GuestDataError, match="twice|cyclic|deeper"):
        list(mt_for_each(t.tree, prog=t.prog))


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
@settings(max_examples=30, deadline=None)
@given(depth=st.integers(2, 40))
def test_self_referencing_chain_stops(kernel, depth):
    """A chain of internal nodes deeper than any maple tree, last one pointing at the first."""
    t = FakeTree(kernel)
    addrs = [t.node_addr() for _ in range(depth)]
    for i, a in enumerate(addrs):
        child = addrs[(i + 1) % depth] | (MAPLE_RANGE_64 << 3) | MAPLE_ENODE_NULL
        words = [0] * 32
        words[16] = child  # slot[0]
        raw = bytearray(struct.pack("<32Q", *words))
        raw[248] = 0  # end = 0: one slot covering the whole range
        t.src.write(a - FAKE_POB, bytes(raw))
    t.set_tree(addrs[0] | (MAPLE_RANGE_64 << 3) | MAPLE_ROOT_NODE, 0, False)
    with pytest.raises(GuestDataError) as e:
        list(mt_for_each(t.tree, prog=t.prog))
    assert "\n" not in str(e.value)
    with pytest.raises(GuestDataError):
        mtree_load(t.tree, 0x1234, prog=t.prog)


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_bad_pivots_and_types_are_guest_data_errors(kernel):
    t = FakeTree(kernel)
    # Pivots going backwards.
    leaf = t.write_node(MAPLE_LEAF_64, [ENTRY_BASE, ENTRY_BASE + 8, 0], [0x5FFF, 0x1FFF], ULONG_MAX)
    t.set_tree(leaf | MAPLE_ROOT_NODE, 1, False)
    with pytest.raises(GuestDataError, match="pivot"):
        list(mt_for_each(t.tree, prog=t.prog))
    # Unknown node type 5.
    t.set_tree((leaf & ~0xFF) | (5 << 3) | MAPLE_ROOT_NODE, 1, False)
    with pytest.raises(GuestDataError, match="unknown type"):
        list(mt_for_each(t.tree, prog=t.prog))
    # Metadata claiming more slots than the node has.
    t2 = FakeTree(kernel)
    root, _leaf0 = _two_level(t2)
    t2.src.write(root - FAKE_POB + 240, bytes([12]))
    with pytest.raises(GuestDataError, match="used slots"):
        list(mt_for_each(t2.tree, prog=t2.prog))


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_node_budget(kernel):
    t = FakeTree(kernel)
    ranges = [(i * 0x2000, i * 0x2000 + 0xFFF, ENTRY_BASE + 8 * i) for i in range(400)]
    t.build(ranges_to_slots(ranges), [16], alloc=True)
    assert len(list(mt_for_each(t.tree, prog=t.prog))) == 400
    with pytest.raises(GuestDataError, match="more than 10 nodes"):
        list(mt_for_each(t.tree, prog=t.prog, max_nodes=10))
