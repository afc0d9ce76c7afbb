"""Pipes and FIFOs, and the data still buffered in them (pipes-data.img, fifo-data.img).

A pipe's `PipeState` is the pipe's inode number (CRIU's pipe_id, shared by both ends), its
capacity (F_GETPIPE_SZ) and the bytes buffered in it, read from the ring of the ``struct
pipe_inode_info`` (ovm_offline.kernel.fs.pipe) without consuming them, as CRIU's tee(2) does.
Files of one pipe share one PipeState. Packet-mode pipes (O_DIRECT) are refused, as CRIU
refuses them.
"""

from __future__ import annotations

import dataclasses

from ..criu import images
from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.memory import Program
from ..kernel.core.objects import Pointer
from ..kernel.fs.dcache import inode_ino
from ..kernel.fs.fdtable import O_DIRECT
from ..kernel.fs.pipe import ANON_PIPE_FOPS, FIFO_FOPS, file_pipe, pipe_read_data, pipe_size
from ..state import FileState, OpenFile
from .base import S_IFIFO, ExtractContext, FileKind, Marks, Saved

__all__ = ["FIFO", "PIPE", "PipeState", "pipe_state"]

O_ACCMODE, O_WRONLY = 0o3, 0o1


@dataclasses.dataclass
class PipeState(FileState):
    """A pipe (struct pipe_inode_info) as CRIU saves it: the inode number both ends share,
    the capacity F_GETPIPE_SZ gives, and the bytes written to it and not yet read."""

    pipe_id: int
    size: int
    data: bytes


def pipe_state(prog: Program, file: Pointer) -> PipeState:
    """The `PipeState` of the pipe a ``struct file *`` is an end of."""
    pipe = file_pipe(file)
    return PipeState(pipe_id=inode_ino(file.f_inode), size=pipe_size(pipe), data=pipe_read_data(prog, pipe))


def extract_pipe(ctx: ExtractContext, f: OpenFile, file: Pointer) -> PipeState:
    """The pipe an end of a pipe or FIFO belongs to, read once for all the files on it."""
    if f.flags & O_DIRECT:
        raise UnsupportedError(f"a packet-mode (O_DIRECT) pipe ({f.identity.path}); CRIU cannot save those either")
    return ctx.once("pipe", int(file_pipe(file)), lambda: pipe_state(ctx.prog, file))


def _readable(f: OpenFile) -> bool:
    return (f.flags & O_ACCMODE) != O_WRONLY


def _data_image(kind: images.ImageKind, pipes: dict[int, PipeState]) -> ExtraImage:
    entries = [F.pipe_data_entry(pipe_id=p.pipe_id, bytes=len(p.data), size=p.size) for p in pipes.values()]
    return ExtraImage(kind, list(entries), [p.data for p in pipes.values()])


class PipeWriter:
    """A pipe's entry; its data is saved once, when the pipe is first met through an end that
    can read (CRIU's dump_one_pipe_data: it could not be read through a write-only one)."""

    fd_type = F.PIPE

    def __init__(self) -> None:
        self.data: dict[int, PipeState] = {}  # pipe_id -> pipe, in pipes-data.img order

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, PipeState)
        fid = table.next_id()
        entry = F.pipe_entry(id=fid, pipe_id=f.state.pipe_id, flags=f.flags, fown=fown(f.owner))
        table.entries.append(F.file_entry(type=F.PIPE, id=fid, pipe=entry))
        if _readable(f):
            self.data.setdefault(f.state.pipe_id, f.state)
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return [_data_image(images.PIPES_DATA, self.data)]


class FifoWriter:
    """A FIFO's path entry, then the FIFO naming it (CRIU's order), and fifo-data.img."""

    fd_type = F.FIFO

    def __init__(self) -> None:
        self.data: dict[int, PipeState] = {}

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, PipeState)
        fid = table.next_id()
        regf = table.regular(f.identity, f.flags, f.pos, key=("fifo-path", f.key))
        entry = F.fifo_entry(id=fid, pipe_id=f.state.pipe_id, regf_id=regf)
        table.entries.append(F.file_entry(type=F.FIFO, id=fid, fifo=entry))
        if _readable(f):
            self.data.setdefault(f.state.pipe_id, f.state)
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return [_data_image(images.FIFO_DATA, self.data)]


PIPE = FileKind(
    name="pipe",
    noun="a pipe",
    marks=Marks(fops=ANON_PIPE_FOPS, modes=(S_IFIFO,), pipefs=True),
    saved=Saved(writer=PipeWriter, fd_type=F.PIPE, state_type=PipeState, extract=extract_pipe),
)
FIFO = FileKind(
    name="fifo",
    noun="a FIFO",
    marks=Marks(fops=FIFO_FOPS, modes=(S_IFIFO,), pipefs=False),
    saved=Saved(writer=FifoWriter, fd_type=F.FIFO, state_type=PipeState, extract=extract_pipe),
)
