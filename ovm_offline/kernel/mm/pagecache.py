"""File contents from the guest's page cache: the xarray of an address_space, and the ELF
build-id of a cached executable (CRIU records it to check, at restore, that the same file is
there)."""

from __future__ import annotations

import struct

from ...errors import GuestDataError, SourceError, UnreadablePageError
from ..core.memory import Program
from ..core.objects import Pointer
from ..ds.xarray import xa_load
from .page import page_index

__all__ = ["PAGE_SIZE", "inode_build_id", "page_to_phys"]


PAGE_SIZE = 4096
NT_GNU_BUILD_ID = 3
PT_NOTE = 4
MAX_NOTES_BYTES = 1 << 16


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
    entry = xa_load(mapping.i_pages, index)
    if not entry or entry & 1:
        return None
    # a large folio covers several indices; its head page is stored at each of them
    folio = prog.object("page", entry)
    head_index = page_index(folio)
    phys = page_to_phys(prog, entry) + (index - head_index) * PAGE_SIZE if 0 <= index - head_index < 512 else None
    if phys is None:
        return None
    try:
        return prog.source.read(phys, PAGE_SIZE)
    except UnreadablePageError:
        raise  # in the dump, and damaged: never taken for a page that is not cached
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
        piece = page[start : start + length]
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
    (phoff,) = struct.unpack_from("<Q", header, 32)
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
            if ntype == NT_GNU_BUILD_ID and notes[pos + 12 : name_end].rstrip(b"\0") == b"GNU":
                return notes[desc : desc + descsz]
            pos = (desc + descsz + 3) & ~3
    return None
