"""Pipes: ``struct pipe_inode_info`` and the data buffered in it.

Both ends of a pipe (and a FIFO's opens) share one ``struct pipe_inode_info``: the
inode's ``i_pipe``, also each ``struct file``'s ``private_data``. Since 5.5 the data
sits in a ring of ``struct pipe_buffer`` (``bufs[ring_size]``, ring_size a power of 2)
addressed by free-running unsigned counters: the occupied slots are ``tail`` up to
``head - 1`` (mod 2^32), slot ``i & (ring_size - 1)``; each buffer holds ``len``
bytes at ``offset`` in its ``page``. ``max_usage`` slots may be used at once, and
F_GETPIPE_SZ answers ``max_usage * PAGE_SIZE``.

Every value is checked before it drives a read, so a hostile ring (absurd ring size,
head running away from tail, buffers outside their page) ends in one GuestDataError.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...errors import GuestDataError, SourceError
from ..core.objects import Pointer, Struct
from ..mm.pagecache import PAGE_SIZE, page_to_phys
from .fdtable import file_fops_name, file_inode_ptr

__all__ = [
    "ANON_PIPE_FOPS",
    "FIFO_FOPS",
    "MAX_RING_SIZE",
    "file_is_pipe",
    "file_pipe",
    "pipe_buffers",
    "pipe_read_data",
    "pipe_size",
]


if TYPE_CHECKING:
    from ..core.memory import Program

#: fs/pipe.c round_pipe_size(): a pipe is at most 2^31 bytes, so at most this many slots.
MAX_RING_SIZE = (1 << 31) // PAGE_SIZE
U32 = 1 << 32


@dataclasses.dataclass(frozen=True)
class PipeBuffer:
    """One occupied slot of the ring: `length` bytes at guest-physical `paddr`."""

    slot: int
    paddr: int
    length: int
    flags: int


def file_pipe(file: Pointer | Struct) -> Pointer:
    """The ``struct pipe_inode_info *`` of a pipe's or FIFO's ``struct file`` (its inode's
    ``i_pipe``); GuestDataError if the inode has none."""
    inode = file_inode_ptr(file)
    pipe = inode.i_pipe
    if not pipe:
        raise GuestDataError(f"pipe inode at 0x{int(inode):x} has no pipe_inode_info")
    return pipe


def file_is_pipe(file: Pointer | Struct) -> bool:
    """Is a ``struct file`` an end of a pipe or FIFO (its ``f_op`` is one of their tables)?"""
    return file_fops_name(file, _PIPE_FOPS) is not None


#: a FIFO's file operations; an anonymous pipe's too before 6.15
FIFO_FOPS = ("pipefifo_fops",)
#: an anonymous pipe's since 6.15, which leave its times alone (the ISF has it or not)
ANON_PIPE_FOPS = ("pipeanon_fops", *FIFO_FOPS)
_PIPE_FOPS = frozenset(ANON_PIPE_FOPS)


def pipe_ring(pipe: Pointer | Struct) -> tuple[int, int, int, int]:
    """(head, tail, ring_size, max_usage) of a ``struct pipe_inode_info``, checked:
    ring_size a power of 2 up to MAX_RING_SIZE, max_usage at most ring_size, and no more
    than ring_size slots occupied."""
    addr = int(pipe) if isinstance(pipe, Pointer) else pipe.address_
    head, tail, ring_size, max_usage = pipe.head, pipe.tail, pipe.ring_size, pipe.max_usage
    if not 0 < ring_size <= MAX_RING_SIZE or ring_size & (ring_size - 1):
        raise GuestDataError(f"pipe_inode_info at 0x{addr:x} has an impossible ring_size {ring_size}")
    if max_usage > ring_size:
        raise GuestDataError(f"pipe_inode_info at 0x{addr:x} has max_usage {max_usage} > ring_size {ring_size}")
    if (head - tail) % U32 > ring_size:
        raise GuestDataError(
            f"pipe_inode_info at 0x{addr:x}: head {head} and tail {tail} are more than "
            f"ring_size {ring_size} slots apart"
        )
    return head, tail, ring_size, max_usage


def pipe_size(pipe: Pointer | Struct) -> int:
    """What F_GETPIPE_SZ answers for the pipe: its capacity in bytes."""
    return pipe_ring(pipe)[3] * PAGE_SIZE


def pipe_buffers(prog: Program, pipe: Pointer | Struct) -> list[PipeBuffer]:
    """The occupied ``struct pipe_buffer``s of a pipe, oldest (next to be read) first."""
    addr = int(pipe) if isinstance(pipe, Pointer) else pipe.address_
    head, tail, ring_size, _ = pipe_ring(pipe)
    used = (head - tail) % U32
    if not used:
        return []
    bufs = pipe.bufs
    if not bufs:
        raise GuestDataError(f"pipe_inode_info at 0x{addr:x} holds {used} buffers but has no bufs array")
    out = []
    for i in range(used):
        slot = (tail + i) % U32 & (ring_size - 1)
        buf = bufs[slot]
        offset, length = buf.offset, buf.len
        if offset > PAGE_SIZE or length > PAGE_SIZE - offset:
            raise GuestDataError(
                f"pipe_inode_info at 0x{addr:x}: buffer {slot} has {length} bytes at offset {offset}, outside its page"
            )
        page = int(buf.page)
        if not page and length:
            raise GuestDataError(f"pipe_inode_info at 0x{addr:x}: buffer {slot} has {length} bytes and no page")
        try:
            paddr = page_to_phys(prog, page) + offset if page else 0
        except GuestDataError as e:
            raise GuestDataError(f"pipe_inode_info at 0x{addr:x}: buffer {slot}: {e}") from None
        out.append(PipeBuffer(slot=slot, paddr=paddr, length=length, flags=buf.flags))
    return out


def pipe_read_data(prog: Program, pipe: Pointer | Struct) -> bytes:
    """The bytes buffered in a pipe, in the order a reader would get them (what tee(2)
    copies out without consuming them)."""
    addr = int(pipe) if isinstance(pipe, Pointer) else pipe.address_
    out = bytearray()
    for buf in pipe_buffers(prog, pipe):
        if not buf.length:
            continue
        try:
            out += prog.source.read(buf.paddr, buf.length)
        except SourceError as e:
            raise GuestDataError(
                f"pipe_inode_info at 0x{addr:x}: buffer {buf.slot} page at 0x{buf.paddr:x} is not readable: {e}"
            ) from None
    return bytes(out)
