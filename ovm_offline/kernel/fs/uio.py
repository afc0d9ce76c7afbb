"""``struct iov_iter`` (include/linux/uio.h): the cursor a read or write call moves user bytes with.

read() and write() wrap their one user buffer in an ITER_UBUF iterator on the kernel stack
(new_sync_write, new_sync_read) and pass it down; as bytes are copied, ``iov_offset`` grows
and ``count`` shrinks by as many, so ``iov_offset`` says how far a call blocked half-way got.
Some layers move the bytes with a copy (sock_write_iter's msghdr holds one; new_sync_write's
stays at offset 0), and frames of earlier calls leave iterators behind: only the live frames
of a sleeping task are searched, and an offset of 0 says nothing.
"""

from __future__ import annotations

import struct

from ..core.objects import Struct
from ..cpu.regs import task_stack_from

__all__ = ["task_ubuf_iters"]

#: include/linux/uio.h: ITER_SOURCE (the iterator is the source of the data: a write)
ITER_SOURCE = 1


def task_ubuf_iters(task: Struct, ubuf: int, size: int, source: bool) -> list[Struct]:
    """Every ``struct iov_iter`` over the one user buffer `ubuf` of `size` bytes (ITER_UBUF;
    the data's source when `source`, a write, else its destination) in the live frames of
    the kernel stack of a ``struct task_struct`` switched out (from its saved SP up), whose
    offset and count add up to `size`."""
    prog = task.prog_
    if not prog.symbols.has_type("struct iov_iter"):
        return []
    ubuf_type = prog.symbols.enum_value("iter_type", "ITER_UBUF", -1)
    frames = task_stack_from(task, int(task.thread.sp))
    if ubuf_type < 0 or frames is None:
        return []
    sp, raw = frames
    at = {m: prog.member_offset("iov_iter", m) for m in ("iter_type", "data_source", "iov_offset", "count", "ubuf")}
    iter_size = prog.struct_type("iov_iter").size
    found = []
    for i in range(0, len(raw) - iter_size + 1, 8):
        if _u64(raw, i + at["ubuf"]) != ubuf:
            continue
        if raw[i + at["iter_type"]] != ubuf_type or raw[i + at["data_source"]] != (ITER_SOURCE if source else 0):
            continue
        if _u64(raw, i + at["iov_offset"]) + _u64(raw, i + at["count"]) == size:
            found.append(prog.struct("iov_iter", sp + i))
    return found


def _u64(raw: bytes, at: int) -> int:
    return struct.unpack_from("<Q", raw, at)[0]
