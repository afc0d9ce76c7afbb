"""``struct page`` members whose layout differs between kernels, read one way everywhere.

* ``page->flags`` is an unsigned long, or (7.x) a ``memdesc_flags_t`` holding one in ``f``.
* ``page->index`` became ``__folio_index`` (7.x): the offset of a page cache folio in its file.
* A tail page's ``compound_head`` (``compound_info`` in 7.x) has bit 0 set. The rest is the
  head page's address, or, in 7.x with CONFIG_HUGETLB_PAGE_OPTIMIZE_VMEMMAP and a
  power-of-two ``struct page``, a mask: head = tail's own vmemmap address & mask
  (include/linux/page-flags.h compound_info_has_mask()).
Which one a kernel has is told by the ISF: the member's name and type, the struct's size and
whether the vmemmap optimisation's code is there.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..core.objects import Struct

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = ["PageLayout", "page_compound_head", "page_flags", "page_index", "page_layout"]


@dataclasses.dataclass(frozen=True)
class PageLayout:
    """Offsets in ``struct page`` of what bulk readers take from raw vmemmap bytes."""

    compound_offset: int  # compound_head / compound_info
    mapping_offset: int
    # a tail's compound word is a mask over its own address, not the head's address + 1
    compound_is_mask: bool


def page_layout(prog: Program) -> PageLayout:
    cached = getattr(prog, "_page_layout", None)
    if cached is None:
        page = prog.struct_type("page")
        compound = "compound_head" if page.has_member("compound_head") else "compound_info"
        size = page.size
        cached = PageLayout(
            compound_offset=prog.member_offset("page", compound),
            mapping_offset=prog.member_offset("page", "mapping"),
            compound_is_mask=compound == "compound_info"
            and size & (size - 1) == 0
            and prog.has_symbol("hugetlb_vmemmap_init"),
        )
        prog._page_layout = cached  # type: ignore[attr-defined]
    return cached


def page_compound_head(layout: PageLayout, page: int, compound: int) -> int:
    """The head page's address of the ``struct page`` at `page` whose compound word is
    `compound` (the page itself unless it is a tail)."""
    if not compound & 1:
        return page
    return page & compound if layout.compound_is_mask else compound - 1


def page_flags(page: Struct) -> int:
    """``page->flags`` as a word."""
    flags = page.flags
    return flags.f if isinstance(flags, Struct) else flags


def page_index(page: Struct) -> int:
    """``page->index``: a page cache folio's offset in its file, in pages."""
    return page.index if page.has_member_("index") else page.member_("__folio_index")
