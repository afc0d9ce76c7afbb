"""Pipes held by the dumped processes, as CRIU saves them.

`attach_pipes` gives every `OpenFile` of kind "pipe" its `PipeState`: the pipe's inode
number (CRIU's pipe_id, shared by both ends), its capacity (F_GETPIPE_SZ) and the bytes
buffered in it, read from the ring of the ``struct pipe_inode_info`` (ovm_offline.kernel.fs.pipe)
without consuming them, as CRIU's tee(2) does. Files of one pipe share one PipeState.

Packet-mode pipes (O_DIRECT) are refused, as CRIU refuses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.fs.dcache import inode_ino
from ..kernel.fs.fdtable import O_DIRECT
from ..kernel.fs.pipe import file_pipe, pipe_read_data, pipe_size
from ..state import Fd, PipeState

if TYPE_CHECKING:
    from ..kernel.core.memory import Program


def pipe_state(prog: Program, file) -> PipeState:
    """The `PipeState` of the pipe a ``struct file *`` is an end of."""
    pipe = file_pipe(file)
    return PipeState(pipe_id=inode_ino(file.f_inode), size=pipe_size(pipe), data=pipe_read_data(prog, pipe))


def attach_pipes(prog: Program, fds: list[Fd], *, pid: int, comm: str, cache: dict[int, PipeState]) -> None:
    """Fill `OpenFile.pipe` of the pipe fds of process `pid` (for messages); `cache`
    (pipe_inode_info address -> PipeState) is shared by all processes of a dump."""
    for fd in fds:
        f = fd.file
        if f.kind not in ("pipe", "fifo") or f.pipe is not None:
            continue
        if f.flags & O_DIRECT:
            raise UnsupportedError(
                f"PID {pid} ({comm}) fd {fd.fd} is a packet-mode (O_DIRECT) pipe "
                f"({f.identity.path}); CRIU cannot save those either"
            )
        file = prog.pointer("file", f.key)
        try:
            key = int(file_pipe(file))
            state = cache.get(key)
            if state is None:
                state = cache[key] = pipe_state(prog, file)
        except GuestDataError as e:
            raise GuestDataError(f"pid {pid} fd {fd.fd} ({f.identity.path}): {e}") from None
        f.pipe = state
