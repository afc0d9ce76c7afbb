"""Namespace files held open (/proc/PID/ns/*, nsfs): CRIU 3.17 saves one as an NS entry in
files.img naming the namespace by its id in the dump (criu/namespaces.c dump_one_ns_file), which
restore reopens from a restored task in that namespace. Only namespaces the dump knows have an
id: the guest's initial ones (criu's own) and the dumped tree's (its root's); a file on any
other namespace is refused, as criu's dump fails on it ("No NS ID with kid").
"""

from __future__ import annotations

import dataclasses

from ..criu.build.common import F
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer
from ..kernel.ns.nsproxy import nsfs_file_namespace, task_namespaces
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved

__all__ = ["KIND", "NsfsState"]


@dataclasses.dataclass
class NsfsState(FileState):
    kind: str  # "net", "pid", ... as NamespaceInodes names them
    inum: int
    clone_flag: int  # CLONE_NEW*


def extract_nsfs(ctx: ExtractContext, f: OpenFile, file: Pointer) -> NsfsState:
    kind, inum, flag = nsfs_file_namespace(file)
    known = {getattr(task_namespaces(t), kind) for t in (ctx.prog["init_task"], ctx.task)}
    if inum not in known:
        raise UnsupportedError(
            f"a namespace file of {kind}:[{inum}], a namespace neither the dumped tree's nor the guest's"
            " initial one (criu's images name only those)"
        )
    return NsfsState(kind=kind, inum=inum, clone_flag=flag)


class NsfsWriter:
    fd_type = F.NS

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, NsfsState)
        fid = table.next_id()
        entry = F.ns_file_entry(
            id=fid, ns_id=table.ns_id(f.state.kind, f.state.inum), ns_cflag=f.state.clone_flag, flags=f.flags
        )
        table.entries.append(F.file_entry(type=F.NS, id=fid, nsf=entry))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return []


KIND = FileKind(
    name="nsfs",
    noun="a namespace file",
    marks=Marks(fops=("ns_file_operations",)),
    saved=Saved(writer=NsfsWriter, fd_type=F.NS, state_type=NsfsState, extract=extract_nsfs),
)
