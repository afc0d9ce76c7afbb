"""Maple trees (``struct maple_tree``, include/linux/maple_tree.h, lib/maple_tree.c; 6.1+).

A maple tree maps ranges [first, last] of unsigned longs to pointers; mm->mm_mt holds
the VMAs of an address space. Its root (``ma_root``) is either one entry for index 0 or
an *encoded node pointer* (``struct maple_enode *``): nodes are 256-byte aligned, so
the low byte of the pointer is free and holds

* at the root, bit 1 set and bit 0 clear (MAPLE_ROOT_NODE; ``xa_is_node``: ``(v & 3) == 2``
  and ``v > 4096``); in a parent's slot, bits 0-1 clear and bit 2 set (MAPLE_ENODE_NULL),
* the node type in bits 3..6 (``mte_node_type``: ``(v >> 3) & 0xF``):
  maple_dense (0), maple_leaf_64 (1), maple_range_64 (2), maple_arange_64 (3).

A range_64/leaf_64 node has 15 pivots and 16 slots; an arange_64 node (trees that
track gaps, like mm_mt) 9 pivots, 10 slots and 10 gaps. Slot i covers
[pivot[i-1] + 1, pivot[i]] (the first from the node's min, the last up to its max).
How many slots are used (``ma_data_end``): arange_64 keeps it in its metadata
(``meta.end``); range_64 in metadata too unless the node is full (its last pivot is
non-zero: then 14 if that pivot is the node's max, else 15). Dense nodes (31 slots,
one index each) are part of the format but no kernel builds them yet.

Guest memory is hostile: the walk visits at most `max_nodes` nodes, never the same
node twice, never deeper than MAPLE_HEIGHT_MAX, and checks that pivots ascend within
their parent's range; anything else is a GuestDataError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ...errors import GuestDataError, SymbolError
from ..core.objects import Object, Pointer

__all__ = [
    "MAPLE_ARANGE_64",
    "MAPLE_LEAF_64",
    "MAPLE_RANGE_64",
    "ULONG_MAX",
    "XA_ZERO_ENTRY",
    "mt_for_each",
    "mtree_load",
]


if TYPE_CHECKING:
    from ..core.memory import Program

ULONG_MAX = (1 << 64) - 1

# include/linux/maple_tree.h
MAPLE_NODE_SLOTS = 31
MAPLE_RANGE64_SLOTS = 16
MAPLE_ARANGE64_SLOTS = 10
MAPLE_NODE_MASK = 255
MAPLE_NODE_TYPE_MASK = 0x0F
MAPLE_NODE_TYPE_SHIFT = 0x03
MAPLE_RESERVED_RANGE = 4096
MAPLE_HEIGHT_MAX = 31
MT_FLAGS_HEIGHT_OFFSET = 0x02
MT_FLAGS_HEIGHT_MASK = 0x7C
MAPLE_NODE_SIZE = 256

MAPLE_DENSE = 0
MAPLE_LEAF_64 = 1
MAPLE_RANGE_64 = 2
MAPLE_ARANGE_64 = 3
NODE_TYPE_NAMES = {0: "maple_dense", 1: "maple_leaf_64", 2: "maple_range_64", 3: "maple_arange_64"}

# include/linux/xarray.h: XA_ZERO_ENTRY = xa_mk_internal(257), a reserved "present but
# NULL" entry (fork failure marks the rest of a copied mm_mt with it since 6.8).
XA_ZERO_ENTRY = (257 << 2) | 2

#: A VMA tree of 2^16 VMAs (vm.max_map_count default 65530) needs ~7000 nodes; this bound
#: leaves room for max_map_count raised a hundredfold.
DEFAULT_MAX_NODES = 1 << 20

_NODE = struct.Struct("<32Q")


def xa_is_internal(entry: int) -> bool:
    return entry & 3 == 2


def xa_is_node(entry: int) -> bool:
    """Is a maple tree entry an encoded node pointer (not a value or a reserved entry)?"""
    return xa_is_internal(entry) and entry > MAPLE_RESERVED_RANGE


def is_child_enode(entry: int) -> bool:
    """Is a slot of an internal node a plausible encoded child pointer?  Children are
    ``node | type << 3 | MAPLE_ENODE_NULL (0x04)``: only the root carries bit 1
    (MAPLE_ROOT_NODE), so xa_is_node does not apply below it."""
    return entry & 3 == 0 and mte_to_node(entry) >= MAPLE_RESERVED_RANGE


def xa_is_zero(entry: int) -> bool:
    return entry == XA_ZERO_ENTRY


def mte_to_node(enode: int) -> int:
    """The ``struct maple_node`` address of an encoded node pointer."""
    return enode & ~MAPLE_NODE_MASK & ULONG_MAX


def mte_node_type(enode: int) -> int:
    """The ``enum maple_type`` of an encoded node pointer."""
    return (enode >> MAPLE_NODE_TYPE_SHIFT) & MAPLE_NODE_TYPE_MASK


def ma_is_leaf(node_type: int) -> bool:
    return node_type < MAPLE_RANGE_64


def mt_height(ma_flags: int) -> int:
    """The tree height kept in ``maple_tree.ma_flags``."""
    return (ma_flags & MT_FLAGS_HEIGHT_MASK) >> MT_FLAGS_HEIGHT_OFFSET


class MapleNode(NamedTuple):
    """A decoded node: its used pivots and slots (``end + 1`` slots; pivots has one fewer
    entry than slots since the last slot ends at the node's max)."""

    address: int
    type: int
    pivots: tuple[int, ...]
    slots: tuple[int, ...]


class _Layout(NamedTuple):
    """Word offsets inside the 256-byte node, from the ISF where it has the types."""

    r_pivot: int
    r_slot: int
    r_meta: int  # byte offset of maple_range_64.meta
    a_pivot: int
    a_slot: int
    a_meta: int  # byte offset of maple_arange_64.meta
    d_slot: int


_DEFAULT_LAYOUT = _Layout(1, 16, 248, 1, 10, 240, 1)


def _layout(prog: Program) -> _Layout:
    cached = getattr(prog, "_maple_layout", None)
    if cached is not None:
        return cached
    try:
        lay = _Layout(
            prog.member_offset("maple_range_64", "pivot") // 8,
            prog.member_offset("maple_range_64", "slot") // 8,
            prog.member_offset("maple_range_64", "meta"),
            prog.member_offset("maple_arange_64", "pivot") // 8,
            prog.member_offset("maple_arange_64", "slot") // 8,
            prog.member_offset("maple_arange_64", "meta"),
            prog.member_offset("maple_node", "slot") // 8,
        )
    except SymbolError:  # an ISF without the maple types: the layout has not changed since 6.1
        lay = _DEFAULT_LAYOUT
    words = MAPLE_NODE_SIZE // 8
    if not (
        lay.r_pivot + MAPLE_RANGE64_SLOTS - 1 <= words
        and lay.r_slot + MAPLE_RANGE64_SLOTS <= words
        and lay.a_pivot + MAPLE_ARANGE64_SLOTS - 1 <= words
        and lay.a_slot + MAPLE_ARANGE64_SLOTS <= words
        and lay.d_slot + MAPLE_NODE_SLOTS <= words
        and max(lay.r_meta, lay.a_meta) < MAPLE_NODE_SIZE
    ):
        raise SymbolError(f"the maple node members of this ISF do not fit a {MAPLE_NODE_SIZE}-byte maple node")
    prog._maple_layout = lay  # type: ignore[attr-defined]
    return lay


def decode_node(prog: Program, enode: int, node_max: int) -> MapleNode:
    """Read and decode the node an encoded pointer designates (mte_to_node,
    mte_node_type, ma_data_end); `node_max` is the upper bound its parent gives it."""
    addr = mte_to_node(enode)
    ntype = mte_node_type(enode)
    if ntype not in NODE_TYPE_NAMES:
        raise GuestDataError(f"maple node 0x{addr:x} has unknown type {ntype} (encoded 0x{enode:x})")
    raw = prog.read(addr, MAPLE_NODE_SIZE)
    words = _NODE.unpack(raw)
    lay = _layout(prog)
    if ntype == MAPLE_DENSE:
        slots = words[lay.d_slot : lay.d_slot + MAPLE_NODE_SLOTS]
        return MapleNode(addr, ntype, (), tuple(slots))
    if ntype == MAPLE_ARANGE_64:
        npiv = MAPLE_ARANGE64_SLOTS - 1
        pivots = words[lay.a_pivot : lay.a_pivot + npiv]
        slots = words[lay.a_slot : lay.a_slot + MAPLE_ARANGE64_SLOTS]
        end = raw[lay.a_meta]
    else:
        npiv = MAPLE_RANGE64_SLOTS - 1
        pivots = words[lay.r_pivot : lay.r_pivot + npiv]
        slots = words[lay.r_slot : lay.r_slot + MAPLE_RANGE64_SLOTS]
        last = pivots[npiv - 1]
        if not last:
            end = raw[lay.r_meta]  # metadata overlays the unused last slot
        elif last == node_max:
            end = npiv - 1
        else:
            end = npiv
    if end > npiv:
        raise GuestDataError(f"{NODE_TYPE_NAMES[ntype]} node 0x{addr:x} claims {end + 1} used slots of {npiv + 1}")
    return MapleNode(addr, ntype, tuple(pivots[:end]), tuple(slots[: end + 1]))


def _tree_root_and_flags(tree: Object | int, prog: Program | None) -> tuple[Program, int, int]:
    if isinstance(tree, Pointer):
        prog = tree.prog_
        t = prog.struct("maple_tree", int(tree))
    elif isinstance(tree, Object):
        prog = tree.prog_
        t = prog.struct("maple_tree", tree.address_)
    else:
        if prog is None:
            raise TypeError("mt_for_each(address) needs prog")
        t = prog.struct("maple_tree", int(tree))
    return prog, int(t.ma_root), t.ma_flags


def mt_for_each(
    tree: Object | int, *, prog: Program | None = None, advanced: bool = False, max_nodes: int = DEFAULT_MAX_NODES
) -> Iterator[tuple[int, int, int]]:
    """(first, last, entry) of every non-NULL entry of a ``struct maple_tree`` (a Struct,
    a pointer to one, or its address with `prog`), in ascending order; both bounds are
    inclusive. Zero entries (XA_ZERO_ENTRY) are skipped unless `advanced`."""
    prog, root, flags = _tree_root_and_flags(tree, prog)
    if not xa_is_node(root):
        if root and (advanced or not xa_is_zero(root)):
            yield 0, 0, root
        return
    height = mt_height(flags)
    seen: set[int] = set()
    # Depth-first, in index order: a stack of (encoded node, min, max, depth).
    stack: list[tuple[int, int, int, int]] = [(root, 0, ULONG_MAX, 1)]
    while stack:
        enode, lo, hi, depth = stack.pop()
        addr = mte_to_node(enode)
        if addr in seen:
            raise GuestDataError(f"maple tree at height {depth}: node 0x{addr:x} reached twice: a cyclic tree")
        if len(seen) >= max_nodes:
            raise GuestDataError(f"maple tree has more than {max_nodes} nodes: corrupt or cyclic")
        if depth > MAPLE_HEIGHT_MAX or (height and depth > height):
            raise GuestDataError(f"maple tree deeper than its height {height or MAPLE_HEIGHT_MAX} at node 0x{addr:x}")
        seen.add(addr)
        node = decode_node(prog, enode, hi)
        if node.type == MAPLE_DENSE:
            for i, slot in enumerate(node.slots):
                index = lo + i
                if index > hi:
                    break
                if slot and (advanced or not xa_is_zero(slot)):
                    yield index, index, slot
            continue
        leaf = ma_is_leaf(node.type)
        children: list[tuple[int, int, int, int]] = []
        start = lo
        n = len(node.slots)
        for i, slot in enumerate(node.slots):
            end = node.pivots[i] if i < n - 1 else hi
            if end < start or end > hi:
                raise GuestDataError(
                    f"{NODE_TYPE_NAMES[node.type]} node 0x{addr:x}: pivot {i} = 0x{end:x} outside 0x{start:x}..0x{hi:x}"
                )
            if leaf:
                if slot and (advanced or not xa_is_zero(slot)):
                    yield start, end, slot
            elif slot:
                if not is_child_enode(slot):
                    raise GuestDataError(
                        f"{NODE_TYPE_NAMES[node.type]} node 0x{addr:x}: slot {i} holds 0x{slot:x}, not a node"
                    )
                children.append((slot, start, end, depth + 1))
            if end == ULONG_MAX:
                break
            start = end + 1
        stack.extend(reversed(children))


def mtree_load(tree: Object | int, index: int, *, prog: Program | None = None) -> int:
    """The entry covering `index` in a ``struct maple_tree`` (0 if none), walking one path
    down from the root (bounded by MAPLE_HEIGHT_MAX)."""
    prog, entry, _flags = _tree_root_and_flags(tree, prog)
    if not xa_is_node(entry):
        return entry if index == 0 and not xa_is_zero(entry) else 0
    lo, hi = 0, ULONG_MAX
    for _ in range(MAPLE_HEIGHT_MAX):
        node = decode_node(prog, entry, hi)
        if node.type == MAPLE_DENSE:
            i = index - lo
            return node.slots[i] if 0 <= i < len(node.slots) else 0
        offset = len(node.slots) - 1
        for i, piv in enumerate(node.pivots):
            if piv >= index:
                offset = i
                hi = piv
                break
            lo = piv + 1
        entry = node.slots[offset]
        if ma_is_leaf(node.type):
            return 0 if xa_is_zero(entry) else entry
        if not is_child_enode(entry):
            return 0
    raise GuestDataError(f"maple tree lookup of 0x{index:x} deeper than {MAPLE_HEIGHT_MAX} levels")
