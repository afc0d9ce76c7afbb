"""UNIX domain sockets (unixsk entries in files.img) and the bytes queued for reading
(sk-queues.img), as CRIU saves them.

`UnixSocketState` is what sock_diag reports to CRIU (inode, type, state, peer inode, backlog,
bound name and the socket file's permissions), the SOL_SOCKET options getsockopt() would
return, and the bytes queued for reading, cut into packets the way CRIU's MSG_PEEK loop reads
them, with the files in flight (SCM_RIGHTS). What CRIU cannot save either, or ovm-offline
does not save yet, is refused: connections not yet accepted that hold bytes sent,
out-of-band data, BPF socket filters, and a socket whose
peer no dumped process holds (CRIU needs both ends, or --ext-unix-sk).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, cast

from ..criu import images
from ..criu.build.common import NET, F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.memory import Program
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs import dcache
from ..kernel.net.sock import (
    AF_UNIX,
    file_socket,
    sk_wmem_alloc_get,
    sock_flag,
    sock_flag_bit,
    sock_socket_ino,
    socket_sock,
)
from ..kernel.net.unix import (
    TCP_LISTEN,
    QueuedSkb,
    sock_unix,
    unix_bound_inode,
    unix_name,
    unix_peer,
    unix_pending_connections,
    unix_receive_queue,
)
from ..kernel.ns.nsproxy import ns_inum
from ..state import Fd, FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved
from .refused import SOCKET
from .socket import SocketOptions, sk_opts_entry, socket_options

__all__ = ["KIND", "QueuedPacket", "UnixSocketState", "unix_socket_state"]

SOCK_STREAM = 1
#: include/linux/socket.h: scm_entry.type of files in flight
SCM_RIGHTS = 1
#: CRIU peeks at a queue with a buffer of SO_RCVBUF minus this many bytes (sk-queue.c)
CRIU_PEEK_SLACK = 32


@dataclasses.dataclass
class QueuedPacket:
    """Bytes waiting in a socket's receive queue: one datagram, or a run of stream bytes
    a single read would return."""

    data: bytes
    # the files in flight with it (SCM_RIGHTS), in the order sent: addresses of their struct
    # files, then (extract_unix) their OpenFiles
    files: tuple[int, ...] = ()
    rights: list[OpenFile] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class UnixSocketState(FileState):
    """A UNIX domain socket as sock_diag shows it to CRIU. `ino`/`peer` are socket inode
    numbers (the peer's is 0 when unconnected); `name` the bound address as the binder
    gave it; `bound` the mode/uid/gid of the socket file a path name refers to."""

    ino: int
    type: int  # SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET
    state: int  # TCP_ESTABLISHED, TCP_CLOSE, TCP_LISTEN
    peer: int
    backlog: int  # listen backlog for a listener, else bytes sent and not yet read by the peer
    shutdown: int  # sk_shutdown: RCV_SHUTDOWN 1 | SEND_SHUTDOWN 2
    name: bytes
    options: SocketOptions
    net_ns: int  # inode number of the socket's network namespace
    bound: tuple[int, int, int] | None = None  # (mode, uid, gid)
    name_deleted: bool = False  # the bound path was unlinked
    queue: list[QueuedPacket] = dataclasses.field(default_factory=list)
    # a listener's connections not yet accepted: the inodes of the sockets that connected
    pending: list[int] = dataclasses.field(default_factory=list)
    # a connecting socket whose connection its listener has not accepted yet (its peer is the
    # new sock in the listener's queue, which has no inode): criu names the listener its peer
    awaiting_accept: bool = False


def queued_packets(u: Struct, rcvbuf: int, passcred: bool) -> list[QueuedPacket]:
    """The receive queue of a ``struct unix_sock`` as packets criu's restore sends: one per
    datagram; for a stream, `stream_reads` of its skbs."""
    skbs = unix_receive_queue(u)
    if u.sk.sk_type != SOCK_STREAM:
        return [QueuedPacket(s.data, s.files) for s in skbs]
    return stream_reads(skbs, max(rcvbuf - CRIU_PEEK_SLACK, 1), passcred)


def stream_reads(skbs: Sequence[QueuedSkb], chunk: int, passcred: bool) -> list[QueuedPacket]:
    """A stream's queued skbs as packets whose sends rebuild what its reader sees: runs of
    bytes in reads of at most `chunk` (SO_RCVBUF - 32, criu's peek), glued across writers as
    unix_stream_read_generic glues them unless the socket has SO_PASSCRED (then one read holds
    one writer's bytes), and each skb carrying files a packet of its own.

    criu's peek, which stops after an skb with files, would glue the bytes queued before it into
    that packet: its restore then hands the files to the read of those earlier bytes, and a
    reader taking them without room for files loses the files (MSG_CTRUNC). Restore sends a
    packet's files with its first skb, so a packet starting at the skb keeps them where they
    were."""
    out: list[QueuedPacket] = []
    run, writer = b"", None

    def flush() -> None:
        nonlocal run
        out.extend(QueuedPacket(run[i : i + chunk]) for i in range(0, len(run), chunk))
        run = b""

    for s in skbs:
        if s.files or (passcred and (s.pid, s.uid, s.gid) != writer):
            flush()
        writer = (s.pid, s.uid, s.gid)
        if s.files:
            out.append(QueuedPacket(s.data, s.files))
        else:
            run += s.data
    flush()
    return out


def unix_socket_state(prog: Program, file: Pointer, where: str) -> UnixSocketState:
    """The `UnixSocketState` of a UNIX socket ``struct file *``; `where` names it in errors."""
    sock = file_socket(file)
    sk = socket_sock(sock)
    u = sock_unix(sk)
    common = sk.__sk_common
    state = common.skc_state
    if sk.sk_filter:
        raise UnsupportedError(f"{where} has a BPF socket filter attached")
    if u.has_member_("oob_skb") and u.oob_skb:
        raise UnsupportedError(f"{where} has out-of-band data queued")
    pending = listener_pending_connections(u, where) if state == TCP_LISTEN else []
    name = unix_name(u)
    bound = None
    deleted = False
    if name and name[0] != 0:
        inode = unix_bound_inode(u)
        if inode is not None:
            bound = (inode.i_mode, inode.i_uid.val, inode.i_gid.val)
            deleted = dcache.d_unlinked(u.path.dentry)
    peer = unix_peer(u)
    # a peer with no socket that is not dead: the new sock of a connection not yet accepted
    awaiting = peer is not None and not peer.sk_socket and not sock_flag(peer, sock_flag_bit(prog, "SOCK_DEAD"))
    opts = socket_options(prog, sock, sk, where)
    queue = [] if state == TCP_LISTEN else queued_packets(u, opts.rcvbuf, opts.passcred)
    return UnixSocketState(
        ino=sock_socket_ino(sk),
        type=sk.sk_type,
        state=state,
        peer=sock_socket_ino(peer) if peer is not None else 0,
        backlog=sk.sk_max_ack_backlog if state == TCP_LISTEN else sk_wmem_alloc_get(sk),
        shutdown=sk.sk_shutdown,
        name=name,
        options=opts,
        net_ns=sock_net_inum(sk, where),
        bound=bound,
        name_deleted=deleted,
        queue=queue,
        pending=pending,
        awaiting_accept=awaiting,
    )


def listener_pending_connections(u: Struct, where: str) -> list[int]:
    """The inodes of the sockets whose connections listening ``struct unix_sock`` `u` has not
    accepted, which criu's restore connects again (its "icons"). UnsupportedError for what that
    would lose: bytes a client sent before the accept (criu saves none), a client gone."""
    pending = []
    for conn in unix_pending_connections(u):
        if conn.sk_receive_queue.qlen:
            raise UnsupportedError(f"{where} is a listener with a connection not yet accepted that holds bytes sent")
        client = unix_peer(sock_unix(conn))
        ino = sock_socket_ino(client) if client is not None else 0
        if not ino:
            raise UnsupportedError(f"{where} is a listener with a connection not yet accepted whose socket is closed")
        pending.append(ino)
    return pending


def sock_net_inum(sk: Struct, where: str) -> int:
    """The inode number of the network namespace a ``struct sock`` belongs to."""
    inum = ns_inum(sk.__sk_common.skc_net.net)
    if inum is None:
        raise GuestDataError(f"{where} belongs to no network namespace")
    return inum


def extract_unix(ctx: ExtractContext, f: OpenFile, file: Pointer) -> UnixSocketState:
    """A UNIX socket's state, read once for all the fds (of all processes) that hold its file."""
    where = f"a UNIX socket (socket:[{f.identity.ino}])"
    return ctx.once("unix", f.key, lambda: _with_files_in_flight(ctx, unix_socket_state(ctx.prog, file, where), where))


def _with_files_in_flight(ctx: ExtractContext, state: UnixSocketState, where: str) -> UnixSocketState:
    """`state` with each queued packet's files in flight opened as the files they are."""
    from .extract import open_in_flight  # extract.py imports the registry, which imports this module

    for p in state.queue:
        p.rights = [open_in_flight(ctx, address, where) for address in p.files]
    return state


def dangling_peers(tree: Sequence[Fd]) -> Callable[[Fd, Sequence[Fd]], str | None]:
    """A socket connected to a socket no dumped process holds; a listener with a connection not
    yet accepted from one, or a socket connecting to a listener no dumped process holds."""
    states = [fd.file.state for fd in tree if isinstance(fd.file.state, UnixSocketState)]
    held = {u.ino for u in states}
    accepting = {client for u in states for client in u.pending}

    def check(fd: Fd, process_fds: Sequence[Fd]) -> str | None:
        u = fd.file.state
        assert isinstance(u, UnixSocketState)
        where = f"a UNIX socket (socket:[{u.ino}])"
        if u.peer and u.peer not in held:
            return f"{where} connected to socket:[{u.peer}], which no dumped process holds"
        outside = [client for client in u.pending if client not in held]
        if outside:
            return f"{where} listening, with a connection not yet accepted from socket:[{outside[0]}], which no dumped process holds"
        if u.awaiting_accept and u.ino not in accepting:
            return f"{where} connecting to a listener no dumped process holds"
        return None

    return check


class UnixWriter:
    """files.img entries and sk-queues.img of UNIX sockets, in CRIU's order. A socket gets
    its file id when met; its entry is written then unless its peer has not been met yet,
    in which case it waits and is written right after that peer (CRIU's postponed
    sockets). Queued bytes are saved when a socket is met."""

    fd_type = F.UNIXSK

    def __init__(self) -> None:
        self._seen: set[int] = set()  # socket inodes met
        self._waiting: dict[int, list[F.file_entry]] = {}  # peer inode -> entries waiting for it
        self._listener_of: dict[int, int] = {}  # connecting socket -> the listener not accepting it yet
        self._connecting: dict[int, F.file_entry] = {}  # its entry, until that listener is met
        self.queues: list[tuple[NET.sk_packet_entry, bytes]] = []

    def write(self, table: FileTable, f: OpenFile) -> int:
        u = f.state
        assert isinstance(u, UnixSocketState)
        fid = table.next_id()
        entry = F.file_entry(type=F.UNIXSK, id=fid, usk=self._entry(table, fid, f, u))
        self._seen.add(u.ino)
        for p in u.queue:
            # criu dumps the files in flight as it peeks at each packet, before the socket's
            # own entry: their ids and entries come next
            packet = NET.sk_packet_entry(id_for=fid, length=len(p.data))
            if p.rights:
                packet.scm.add(type=SCM_RIGHTS, rights=[table.open_file(of) for of in p.rights])
            self.queues.append((packet, p.data))
        for client in u.pending:
            self._listener_of[client] = u.ino
            waiting = self._connecting.pop(client, None)
            if waiting is not None:
                waiting.usk.peer = u.ino
                table.entries.append(waiting)
        if u.awaiting_accept:
            # criu's "icons": the peer of a connection not yet accepted is its listener, which
            # restore connects it to again (the entry waits until the listener is met)
            if u.ino not in self._listener_of:
                self._connecting[u.ino] = entry
                return fid
            entry.usk.peer = self._listener_of[u.ino]
        elif u.peer and u.peer not in self._seen:
            self._waiting.setdefault(u.peer, []).append(entry)
            return fid
        table.entries.append(entry)
        table.entries.extend(self._waiting.pop(u.ino, []))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        # the dump leaves out sockets whose peer is not dumped (dangling_peers) before writing
        assert not self._waiting, f"UNIX sockets wait for peers never met: {sorted(self._waiting)}"
        assert not self._connecting, f"UNIX sockets wait for listeners never met: {sorted(self._connecting)}"
        return [ExtraImage(images.SK_QUEUES, [e for e, _ in self.queues], [d for _, d in self.queues])]

    @staticmethod
    def _entry(table: FileTable, fid: int, f: OpenFile, u: UnixSocketState) -> NET.unix_sk_entry:
        entry = NET.unix_sk_entry(
            id=fid,
            ino=u.ino,
            type=u.type,
            state=u.state,
            flags=f.flags,
            uflags=0,
            backlog=u.backlog,
            peer=u.peer,
            fown=fown(f.owner),
            opts=sk_opts_entry(u.options),
            name=u.name,
            ns_id=table.net_ns_id(u.net_ns),
        )
        if u.shutdown:
            entry.shutdown = cast(Any, u.shutdown)  # RCV_SHUTDOWN 1 | SEND_SHUTDOWN 2, as sk_shutdown's values
        if u.bound is not None:
            entry.file_perms.mode, entry.file_perms.uid, entry.file_perms.gid = u.bound
        if u.name_deleted:
            entry.deleted = True
        return entry


KIND = FileKind(
    name="unix",
    noun="a UNIX socket",
    marks=Marks(SOCKET.fops, SOCKET.modes, families=(AF_UNIX,)),
    saved=Saved(
        writer=UnixWriter,
        fd_type=F.UNIXSK,
        in_flight=False,
        state_type=UnixSocketState,
        extract=extract_unix,
        dangling=dangling_peers,
    ),
)
