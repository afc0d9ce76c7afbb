"""Pipe rings in fake kernel memory: pipe_inode_info, pipe_buffer slots and the struct pages
of the data they hold (the pipe tests, and the socket tests that build skb fragments on it)."""

from __future__ import annotations

from ovm_offline.kernel.core.memory import START_KERNEL_MAP

from .memory import FAKE_POB, FakeKernelMemory

#: Where the fake kernel's vmemmap (its struct pages) starts.
VMEMMAP = 0xFFFF_EA00_0000_0000


class FakePipes(FakeKernelMemory):
    """pipe_inode_info and pipe_buffer rings in fake memory."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        self.src.write_u64(self.symbols.symbol_address("vmemmap_base") - START_KERNEL_MAP, VMEMMAP)
        self.page_size = self.symbols.struct_type("page").size
        self.buf_size = self.symbols.struct_type("pipe_buffer").size

    def data_page(self, data: bytes, offset: int = 0) -> int:
        """A struct page * (in the vmemmap) of a fresh physical page holding `data` at `offset`."""
        phys = self.alloc(4096) - FAKE_POB
        self.src.write(phys + offset, data)
        return VMEMMAP + (phys // 4096) * self.page_size

    def pipe(
        self,
        *,
        head: int,
        tail: int,
        ring_size: int = 16,
        max_usage: int | None = None,
        bufs: dict[int, tuple[int, int, int]] | None = None,
        bufs_addr: int | None = None,
    ) -> object:
        """A pipe whose ring slot i holds bufs[i] = (page, offset, len)."""
        pipe = self.alloc(self.symbols.struct_type("pipe_inode_info").size)
        if bufs_addr is None:
            bufs_addr = self.alloc(self.buf_size * max(ring_size, 1)) if ring_size <= 4096 else self.alloc(4096)
        for slot, (page, offset, length) in (bufs or {}).items():
            b = bufs_addr + slot * self.buf_size
            self.set(b, "pipe_buffer", "page", page)
            self.set(b, "pipe_buffer", "offset", offset)
            self.set(b, "pipe_buffer", "len", length)
        for name, value in (
            ("head", head),
            ("tail", tail),
            ("ring_size", ring_size),
            ("max_usage", ring_size if max_usage is None else max_usage),
            ("bufs", bufs_addr),
        ):
            self.set(pipe, "pipe_inode_info", name, value)
        return self.prog.pointer("pipe_inode_info", pipe)
