"""``struct iov_iter`` (include/linux/uio.h): the cursor a read or write call moves user bytes with.

read() and write() wrap their one user buffer in an iterator on the kernel stack
(new_sync_write, new_sync_read: ITER_UBUF since 6.0, ITER_IOVEC over one iovec before) and
pass it down; as bytes are copied, ``iov_offset`` grows
and ``count`` shrinks by as many, so ``iov_offset`` says how far a call blocked half-way got.
Some layers move the bytes with a copy (sock_write_iter's msghdr holds one; new_sync_write's
stays at offset 0), and frames of earlier calls leave iterators behind: only the live frames
of a sleeping task are searched, and an offset of 0 says nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import OvmError, UnreadablePageError
from ..core.objects import Struct
from ..cpu.regs import task_stack_from

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = ["task_ubuf_iters"]

#: include/linux/uio.h: ITER_SOURCE (the iterator is the source of the data: a write)
ITER_SOURCE = 1


def task_ubuf_iters(task: Struct, ubuf: int, size: int, source: bool) -> list[Struct]:
    """Every ``struct iov_iter`` over the one user buffer `ubuf` of `size` bytes (the data's
    source when `source`, a write, else its destination) in the live frames of the kernel
    stack of a ``struct task_struct`` switched out (from its saved SP up), whose offset and
    count add up to `size`. The layout is the ISF's: ``iter_type`` and ``data_source`` with
    an ITER_UBUF iterator (6.0+), or ``type`` holding ITER_IOVEC and the direction, over the
    one ``struct iovec`` new_sync_read/write made (before)."""
    prog = task.prog_
    if not prog.symbols.has_type("struct iov_iter"):
        return []
    frames = task_stack_from(task, int(task.thread.sp))
    if frames is None:
        return []
    sp, raw = frames
    iter_size = prog.struct_type("iov_iter").size
    if prog.struct_type("iov_iter").has_member("iter_type"):
        matches = _ubuf_iter_matcher(prog, ubuf, source)
    else:
        matches = _iovec_iter_matcher(prog, ubuf, size, source)
    if matches is None:
        return []
    at = {m: prog.member_offset("iov_iter", m) for m in ("iov_offset", "count")}
    return [
        prog.struct("iov_iter", sp + i)
        for i in range(0, len(raw) - iter_size + 1, 8)
        if matches(raw, i) and _u64(raw, i + at["iov_offset"]) + _u64(raw, i + at["count"]) == size
    ]


def _ubuf_iter_matcher(prog: Program, ubuf: int, source: bool) -> Callable[[bytes, int], bool] | None:
    ubuf_type = prog.symbols.enum_value("iter_type", "ITER_UBUF", -1)
    if ubuf_type < 0:
        return None
    at = {m: prog.member_offset("iov_iter", m) for m in ("iter_type", "data_source", "ubuf")}
    direction = ITER_SOURCE if source else 0

    def matches(raw: bytes, i: int) -> bool:
        return (
            _u64(raw, i + at["ubuf"]) == ubuf
            and raw[i + at["iter_type"]] == ubuf_type
            and raw[i + at["data_source"]] == direction
        )

    return matches


def _iovec_iter_matcher(prog: Program, ubuf: int, size: int, source: bool) -> Callable[[bytes, int], bool] | None:
    iovec_type = prog.symbols.enum_value("iter_type", "ITER_IOVEC", -1)
    if iovec_type < 0:
        return None
    at = {m: prog.member_offset("iov_iter", m) for m in ("type", "iov", "nr_segs")}
    wanted_type = iovec_type | (ITER_SOURCE if source else 0)  # WRITE is 1, READ 0
    one_iovec = struct.pack("<QQ", ubuf, size)

    def matches(raw: bytes, i: int) -> bool:
        if struct.unpack_from("<I", raw, i + at["type"])[0] != wanted_type or _u64(raw, i + at["nr_segs"]) != 1:
            return False
        try:
            return prog.read(_u64(raw, i + at["iov"]), 16) == one_iovec
        except UnreadablePageError:
            raise  # a damaged page of the dump, not a stale pointer
        except OvmError:
            return False  # not a pointer: leftovers of an earlier frame

    return matches


def _u64(raw: bytes, at: int) -> int:
    return struct.unpack_from("<Q", raw, at)[0]
