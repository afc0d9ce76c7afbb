"""File contents from the guest's page cache: the xarray of an address_space, and the ELF
build-id of a cached executable (CRIU records it to check, at restore, that the same file is
there)."""

from __future__ import annotations

import struct
from typing import Iterator

from ..errors import GuestDataError, SourceError
from .memory import Program
from .objects import Pointer, Struct

PAGE_SIZE = 4096
XA_CHUNK_SHIFT = 6
XA_CHUNK_SIZE = 1 << XA_CHUNK_SHIFT
MAX_XA_DEPTH = 11  # 64-bit indices in 6-bit steps
NT_GNU_BUILD_ID = 3
PT_NOTE = 4
MAX_NOTES_BYTES = 1 << 16


def xa_is_node(entry: int) -> bool:
    return entry & 3 == 2 and entry > 4096


def xa_load(prog: Program, xa: Struct, index: int) -> int:
    """The entry at `index` of ``struct xarray`` `xa` (0 if none): a folio/page pointer in a
    page cache, or a value entry (low bit set) for a shadow or swap entry."""
    entry = int(xa.xa_head)
    if not xa_is_node(entry):
        return entry if index == 0 else 0
    for _ in range(MAX_XA_DEPTH):
        node = prog.object("xa_node", entry - 2)
        shift = node.shift
        if shift % XA_CHUNK_SHIFT or shift >= 64:
            raise GuestDataError(f"xarray node at 0x{entry - 2:x} has a bad shift {shift}")
        offset = index >> shift
        if offset >= XA_CHUNK_SIZE:
            return 0
        entry = int(node.slots[offset])
        if not xa_is_node(entry):
            return entry if shift == 0 else 0
        index &= (1 << shift) - 1
    raise GuestDataError("xarray deeper than 64-bit indices allow")


def page_to_phys(prog: Program, page: int) -> int:
    """Physical address of ``struct page *`` `page` (SPARSEMEM_VMEMMAP: the page's index in
    the vmemmap array is its pfn)."""
    vmemmap = int(prog["vmemmap_base"])
    size = prog.struct_type("page").size
    pfn, rem = divmod(page - vmemmap, size)
    if rem or pfn < 0:
        raise GuestDataError(f"0x{page:x} is not a struct page of the vmemmap")
    return pfn * PAGE_SIZE


def find_cached_page(prog: Program, mapping: Pointer, index: int) -> bytes | None:
    """Page `index` of ``struct address_space *`` `mapping` if it is in the page cache."""
    entry = xa_load(prog, mapping.i_pages, index)
    if not entry or entry & 1:
        return None
    # a large folio covers several indices; its head page is stored at each of them
    folio = prog.object("page", entry)
    head_index = folio.index
    phys = page_to_phys(prog, entry) + (index - head_index) * PAGE_SIZE if 0 <= index - head_index < 512 else None
    if phys is None:
        return None
    try:
        return prog.source.read(phys, PAGE_SIZE)
    except SourceError:
        return None


def read_cached(prog: Program, inode: Pointer, offset: int, length: int) -> bytes | None:
    """`length` bytes at `offset` of the file of ``struct inode *`` `inode`, if all cached."""
    out = bytearray()
    while length > 0:
        page = find_cached_page(prog, inode.i_mapping, offset // PAGE_SIZE)
        if page is None:
            return None
        start = offset % PAGE_SIZE
        piece = page[start:start + length]
        out += piece
        offset += len(piece)
        length -= len(piece)
    return bytes(out)


def inode_build_id(prog: Program, inode: Pointer) -> bytes | None:
    """The NT_GNU_BUILD_ID of the ELF file of ``struct inode *`` `inode`, read from the page
    cache; None for a file that is not ELF or whose headers are not cached."""
    size = inode.i_size
    if size < 64:
        return None
    header = read_cached(prog, inode, 0, 64)
    if header is None or header[:4] != b"\x7fELF" or header[4] != 2:
        return None
    phoff, = struct.unpack_from("<Q", header, 32)
    phentsize, phnum = struct.unpack_from("<HH", header, 54)
    if phentsize < 56 or phnum > 256 or phoff + phnum * phentsize > size:
        return None
    phdrs = read_cached(prog, inode, phoff, phnum * phentsize)
    if phdrs is None:
        return None
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", phdrs, i * phentsize)
        if p_type != PT_NOTE or p_filesz > MAX_NOTES_BYTES or p_offset + p_filesz > size:
            continue
        notes = read_cached(prog, inode, p_offset, p_filesz)
        if notes is None:
            continue
        pos = 0
        while pos + 12 <= len(notes):
            namesz, descsz, ntype = struct.unpack_from("<III", notes, pos)
            name_end = pos + 12 + namesz
            desc = (name_end + 3) & ~3
            if desc + descsz > len(notes):
                break
            if ntype == NT_GNU_BUILD_ID and notes[pos + 12:name_end].rstrip(b"\0") == b"GNU":
                return notes[desc:desc + descsz]
            pos = (desc + descsz + 3) & ~3
    return None


# ------------------------------------------------------------------------- whole xarrays

#: Entries (and nodes) one xarray walk visits at most: a 64 GiB file's page cache has
#: 2^24 pages; a hostile tree must not keep us walking past that.
MAX_XA_ENTRIES = 1 << 24
XA_RETRY_ENTRY = 0x402  # xa_mk_internal(256)
XA_ZERO_ENTRY = 0x406  # xa_mk_internal(257)


def xa_is_sibling(entry: int) -> bool:
    """A sibling entry (internal, value < XA_CHUNK_SIZE): this slot belongs to the
    multi-index entry in slot ``entry >> 2`` of the same node."""
    return entry & 3 == 2 and entry < ((XA_CHUNK_SIZE - 1) << 2 | 2)


def xa_for_each(prog: Program, xa: Struct, max_index: int, *,
                limit: int = MAX_XA_ENTRIES) -> Iterator[tuple[int, int, int]]:
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
    slots_off = prog.member_offset("xa_node", "slots")
    shift_off = prog.member_offset("xa_node", "shift")
    root_shift = prog.read_u8(head - 2 + shift_off)
    if root_shift % XA_CHUNK_SHIFT or root_shift >= 64:
        raise GuestDataError(f"xarray at 0x{xa.address_:x}: root node has a bad shift {root_shift}")
    visited = 0

    def open_node(node: int, shift: int, base: int) -> list:
        nonlocal visited
        visited += 1
        if visited > limit:
            raise GuestDataError(f"xarray at 0x{xa.address_:x} has more than {limit} nodes and entries")
        own = prog.read_u8(node + shift_off)
        if own != shift:
            raise GuestDataError(f"xa_node 0x{node:x} has shift {own} where its parent says {shift}")
        slots = struct.unpack(f"<{XA_CHUNK_SIZE}Q", prog.read(node + slots_off, 8 * XA_CHUNK_SIZE))
        return [node, shift, base, 0, slots]

    # frames of [node address, shift, first index covered, next slot, slots]: depth-first,
    # so entries come out in index order
    stack = [open_node(head - 2, root_shift, 0)]
    while stack:
        frame = stack[-1]
        node, shift, base, i, slots = frame
        if i >= XA_CHUNK_SIZE or base + (i << shift) > max_index:
            stack.pop()
            continue
        frame[3] = i + 1
        entry = slots[i]
        first = base + (i << shift)
        if not entry:
            continue
        if xa_is_sibling(entry):
            canonical = entry >> 2
            if canonical >= i:
                raise GuestDataError(f"xa_node 0x{node:x} slot {i} is a sibling of slot {canonical},"
                                     " not of an earlier one")
            entry = slots[canonical]
            if entry & 3 == 2:  # the sibling of a node or internal entry: nothing of its own
                continue
        if xa_is_node(entry):
            if shift == 0:
                raise GuestDataError(f"xa_node 0x{node:x} has a child node below shift 0")
            stack.append(open_node(entry - 2, shift - XA_CHUNK_SHIFT, first))
            continue
        if entry & 3 == 2:  # retry, zero and other internal entries hold nothing
            continue
        visited += 1
        if visited > limit:
            raise GuestDataError(f"xarray at 0x{xa.address_:x} has more than {limit} nodes and entries")
        yield first, 1 << shift, entry
