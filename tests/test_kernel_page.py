"""``struct page``'s members that differ between kernels (kernel/mm/page.py), on each pinned ISF."""

from __future__ import annotations

import pytest

from ovm_offline.kernel.mm.page import PageLayout, page_compound_head, page_layout
from tests.support.memory import FakeKernelMemory
from tests.support.paths import ISF

U64 = (1 << 64) - 1
STRUCT_PAGE = 64
#: a 2 MiB folio's head page in the vmemmap: 512 struct pages, aligned to their 32 KiB
HEAD = 0xFFFF_EA00_0004_0000


def test_a_tail_page_finds_its_head_by_pointer_or_by_its_own_address_and_a_mask():
    pointer = PageLayout(compound_offset=8, mapping_offset=24, compound_is_mask=False)
    mask = PageLayout(compound_offset=8, mapping_offset=24, compound_is_mask=True)
    tail = HEAD + 5 * STRUCT_PAGE
    assert page_compound_head(pointer, tail, HEAD + 1) == HEAD
    # compound_info_has_mask(): the tail's own address & the mask (bit 0 marks a tail)
    assert page_compound_head(mask, tail, (~(512 * STRUCT_PAGE - 1) & U64) | 1) == HEAD
    for layout in (pointer, mask):
        assert page_compound_head(layout, HEAD, 0x40) == HEAD  # bit 0 clear: no tail


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_the_isf_says_whether_a_tail_holds_a_mask(kernel):
    """7.2 renamed compound_head to compound_info, built with CONFIG_HUGETLB_PAGE_OPTIMIZE_VMEMMAP
    and a 64-byte struct page: a mask. Every older kernel holds the head's address."""
    prog = FakeKernelMemory(kernel).prog
    layout = page_layout(prog)
    assert layout.compound_is_mask == (kernel == "7.2")
    assert layout.compound_offset == 8 and layout.mapping_offset == 24
