"""The kernel's xarray (lib/xarray.c, include/linux/xarray.h): a radix tree of 64-slot
``struct xa_node``s under ``xa->xa_head``. Page caches (address_space.i_pages) and IDRs
(System V IPC ids) are xarrays. Entries whose low two bits are 2 are internal: node
pointers (above 4096), sibling entries of a multi-index entry (a large folio), retry and
zero entries; value entries (shadow/swap entries) have the low bit set.

Every walk is bounded: a node's shift must be a multiple of 6 below 64 and step down by 6
from its parent, and whole-tree walks stop after a fixed number of nodes and entries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...errors import GuestDataError
from ..core.objects import Struct

__all__ = ["xa_for_each", "xa_load"]


if TYPE_CHECKING:
    from ..core.memory import Program

XA_CHUNK_SHIFT = 6
XA_CHUNK_SIZE = 1 << XA_CHUNK_SHIFT
XA_MAX_HEIGHT = (64 + XA_CHUNK_SHIFT - 1) // XA_CHUNK_SHIFT  # 11 levels cover 64-bit indices
#: Entries (and nodes) one whole-xarray walk visits at most: a 64 GiB file's page cache has
#: 2^24 pages; a hostile tree must not keep us walking past that.
MAX_XA_ENTRIES = 1 << 24


def xa_is_internal(entry: int) -> bool:
    return entry & 3 == 2


def xa_is_node(entry: int) -> bool:
    """Is an xarray entry a pointer to a child ``struct xa_node`` (tagged with 2)?"""
    return xa_is_internal(entry) and entry > 4096


def xa_is_sibling(entry: int) -> bool:
    """A sibling entry (internal, value < XA_CHUNK_SIZE): this slot belongs to the
    multi-index entry in slot ``entry >> 2`` of the same node."""
    return xa_is_internal(entry) and entry < ((XA_CHUNK_SIZE - 1) << 2 | 2)


def _node_shift(prog: Program, node: int) -> int:
    shift = prog.read_u8(node + prog.member_offset("xa_node", "shift"))
    if shift % XA_CHUNK_SHIFT or shift >= 64:
        raise GuestDataError(f"xa_node 0x{node:x} has a bad shift {shift}")
    return shift


def xa_load(xa: Struct, index: int) -> int:
    """The entry at `index` of a ``struct xarray`` (0 if none), walking down from xa_head
    like xas_load, at most XA_MAX_HEIGHT levels; sibling entries of multi-index entries
    (large folios) resolve to their canonical slot."""
    prog = xa.prog_
    entry = int(xa.xa_head)
    slots_off = prog.member_offset("xa_node", "slots")
    if not xa_is_node(entry):
        return entry if index == 0 else 0
    if index >> _node_shift(prog, entry - 2) >= XA_CHUNK_SIZE:
        return 0  # beyond what the root node covers
    for _ in range(XA_MAX_HEIGHT):
        node = entry - 2
        shift = _node_shift(prog, node)
        offset = (index >> shift) & (XA_CHUNK_SIZE - 1)
        entry = prog.read_u64(node + slots_off + 8 * offset)
        if xa_is_sibling(entry):
            entry = prog.read_u64(node + slots_off + 8 * (entry >> 2))
        if shift == 0 or not xa_is_node(entry):
            return 0 if xa_is_internal(entry) else entry
    raise GuestDataError(f"xarray at 0x{xa.address_:x} deeper than {XA_MAX_HEIGHT} levels")


def xa_for_each(
    prog: Program, xa: Struct, max_index: int, *, limit: int = MAX_XA_ENTRIES
) -> Iterator[tuple[int, int, int]]:
    """Every present entry of ``struct xarray`` `xa` at an index <= `max_index`, in index
    order, as (first index, number of indices it covers, entry): a page/folio pointer or a
    value entry (low bit set). A multi-index entry (a large folio) is yielded once per
    slot it fills, with the canonical entry for its sibling slots. Nodes are read whole
    (their 64 slots in one read); each node's shift must be its parent's minus 6, so a
    hostile tree can neither loop nor grow deeper than 64-bit indices allow."""
    head = int(xa.xa_head)
    if not head:
        return
    if not xa_is_node(head):
        if head & 3 != 2:  # a single entry at index 0
            yield 0, 1, head
        return
    nodes = _NodeReader(prog, xa, limit)
    # frames of [node address, shift, first index covered, next slot, slots]: depth-first,
    # so entries come out in index order
    stack = [nodes.open(head - 2, _node_shift(prog, head - 2), 0)]
    while stack:
        frame = stack[-1]
        node, shift, base, i, slots = frame
        if i >= XA_CHUNK_SIZE or base + (i << shift) > max_index:
            stack.pop()
            continue
        frame[3] = i + 1
        entry = _slot_entry(node, slots, i)
        first = base + (i << shift)
        if not entry:
            continue
        if xa_is_node(entry):
            if shift == 0:
                raise GuestDataError(f"xa_node 0x{node:x} has a child node below shift 0")
            stack.append(nodes.open(entry - 2, shift - XA_CHUNK_SHIFT, first))
            continue
        if entry & 3 == 2:  # retry, zero and other internal entries hold nothing
            continue
        nodes.count()
        yield first, 1 << shift, entry


class _NodeReader:
    """Reads the ``struct xa_node``s of one xarray walk, counting nodes and entries against
    the walk's limit."""

    def __init__(self, prog: Program, xa: Struct, limit: int) -> None:
        self.prog = prog
        self.xa = xa
        self.limit = limit
        self.visited = 0
        self.slots_off = prog.member_offset("xa_node", "slots")
        self.shift_off = prog.member_offset("xa_node", "shift")

    def count(self) -> None:
        self.visited += 1
        if self.visited > self.limit:
            raise GuestDataError(f"xarray at 0x{self.xa.address_:x} has more than {self.limit} nodes and entries")

    def open(self, node: int, shift: int, base: int) -> list[Any]:
        """A stack frame for the node at `node`, whose parent says its shift is `shift`."""
        self.count()
        own = self.prog.read_u8(node + self.shift_off)
        if own != shift:
            raise GuestDataError(f"xa_node 0x{node:x} has shift {own} where its parent says {shift}")
        slots = struct.unpack(f"<{XA_CHUNK_SIZE}Q", self.prog.read(node + self.slots_off, 8 * XA_CHUNK_SIZE))
        return [node, shift, base, 0, slots]


def _slot_entry(node: int, slots: tuple[int, ...], i: int) -> int:
    """The entry slot `i` of a node holds: a sibling slot's canonical entry for a multi-index
    entry (0 when that is a node or an internal entry: nothing of its own)."""
    entry = slots[i]
    if not xa_is_sibling(entry):
        return entry
    canonical = entry >> 2
    if canonical >= i:
        raise GuestDataError(f"xa_node 0x{node:x} slot {i} is a sibling of slot {canonical}, not of an earlier one")
    entry = slots[canonical]
    return 0 if entry & 3 == 2 else entry
