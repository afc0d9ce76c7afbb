"""UNIX domain sockets held by the dumped processes, as CRIU saves them.

`attach_unix_sockets` gives every `OpenFile` of kind "unix" its `UnixSocketState`: what
sock_diag reports to CRIU (inode, type, state, peer inode, backlog, bound name and the
socket file's permissions), the SOL_SOCKET options getsockopt() would return, and the
bytes queued for reading, cut into packets the way CRIU's MSG_PEEK loop reads them.

What CRIU cannot save either, or what ovm-offline does not save yet, is refused with
UnsupportedError naming the process and fd: sockets with file descriptors in flight
(SCM_RIGHTS), listeners with connections not yet accepted, out-of-band data, BPF
socket filters and sockets bound to a network device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import GuestDataError, UnsupportedError
from ..kernel.core.objects import Struct
from ..kernel.fs import dcache
from ..kernel.net.unix import (
    SOCK_BUF_LOCK_MASK,
    SOCK_PASSCRED,
    SOCK_PASSSEC,
    TCP_LISTEN,
    file_socket,
    sk_wmem_alloc_get,
    sock_flag,
    sock_flag_bit,
    sock_socket_ino,
    sock_timeout,
    sock_unix,
    socket_sock,
    unix_bound_inode,
    unix_name,
    unix_peer,
    unix_receive_queue,
)
from ..kernel.ns.nsproxy import ns_inum
from ..state import Fd, QueuedPacket, SocketOptions, UnixSocketState

if TYPE_CHECKING:
    from ..kernel.core.memory import Program

SOCK_STREAM = 1
#: CRIU peeks at a queue with a buffer of SO_RCVBUF minus this many bytes (sk-queue.c)
CRIU_PEEK_SLACK = 32


def socket_options(prog: Program, sock: Struct, sk: Struct) -> SocketOptions:
    """getsockopt(SOL_SOCKET, ...) of a ``struct socket`` and its ``struct sock``."""
    common = sk.__sk_common

    def flag(name: str) -> bool:
        return sock_flag(sk, sock_flag_bit(prog, name))

    return SocketOptions(
        sndbuf=sk.sk_sndbuf,
        rcvbuf=sk.sk_rcvbuf,
        snd_timeout=sock_timeout(prog, sk.sk_sndtimeo),
        rcv_timeout=sock_timeout(prog, sk.sk_rcvtimeo),
        reuseaddr=bool(common.skc_reuse),
        priority=sk.sk_priority,
        rcvlowat=sk.sk_rcvlowat,
        mark=sk.sk_mark,
        passcred=bool(sock.flags >> SOCK_PASSCRED & 1),
        passsec=bool(sock.flags >> SOCK_PASSSEC & 1),
        dontroute=flag("SOCK_LOCALROUTE"),
        no_check=bool(sk.sk_no_check_tx),
        reuseport=bool(common.skc_reuseport),
        broadcast=flag("SOCK_BROADCAST"),
        keepalive=flag("SOCK_KEEPOPEN"),
        oobinline=flag("SOCK_URGINLINE"),
        buf_lock=sk.sk_userlocks & SOCK_BUF_LOCK_MASK,
    )


def queued_packets(u: Struct, rcvbuf: int, where: str) -> list[QueuedPacket]:
    """The receive queue of a ``struct unix_sock`` as CRIU's peeking reads return it: one
    packet per datagram; for a stream, the bytes of consecutive skbs from one writer (the
    kernel never glues different writers' bytes in one read) in reads of at most
    SO_RCVBUF - 32 bytes."""
    skbs = unix_receive_queue(u)
    for skb in skbs:
        if skb.has_fds:
            raise UnsupportedError(f"{where} has file descriptors in flight (SCM_RIGHTS)")
    if u.sk.sk_type != SOCK_STREAM:
        return [QueuedPacket(s.data) for s in skbs]
    chunk = max(rcvbuf - CRIU_PEEK_SLACK, 1)
    out: list[QueuedPacket] = []
    run, writer = b"", None
    for s in skbs:
        if run and (s.pid, s.uid, s.gid) != writer:
            out += [QueuedPacket(run[i : i + chunk]) for i in range(0, len(run), chunk)]
            run = b""
        writer = (s.pid, s.uid, s.gid)
        run += s.data
    if run:
        out += [QueuedPacket(run[i : i + chunk]) for i in range(0, len(run), chunk)]
    return out


def unix_socket_state(prog: Program, file, where: str) -> UnixSocketState:
    """The `UnixSocketState` of a UNIX socket ``struct file *``; `where` names it in errors."""
    sock = file_socket(file)
    sk = socket_sock(sock)
    u = sock_unix(sk)
    common = sk.__sk_common
    state = common.skc_state
    if common.skc_bound_dev_if:
        raise UnsupportedError(f"{where} is bound to a network device")
    if sk.sk_filter:
        raise UnsupportedError(f"{where} has a BPF socket filter attached")
    if u.has_member_("oob_skb") and u.oob_skb:
        raise UnsupportedError(f"{where} has out-of-band data queued")
    if state == TCP_LISTEN and sk.sk_receive_queue.qlen:
        raise UnsupportedError(f"{where} is a listener with connections not yet accepted")
    name = unix_name(u)
    bound = None
    deleted = False
    if name and name[0] != 0:
        inode = unix_bound_inode(u)
        if inode is not None:
            bound = (inode.i_mode, inode.i_uid.val, inode.i_gid.val)
            deleted = dcache.d_unlinked(u.path.dentry)
    peer = unix_peer(u)
    opts = socket_options(prog, sock, sk)
    queue = [] if state == TCP_LISTEN else queued_packets(u, opts.rcvbuf, where)
    return UnixSocketState(
        ino=sock_socket_ino(sk),
        type=sk.sk_type,
        state=state,
        peer=sock_socket_ino(peer) if peer is not None else 0,
        backlog=sk.sk_max_ack_backlog if state == TCP_LISTEN else sk_wmem_alloc_get(sk),
        shutdown=sk.sk_shutdown,
        name=name,
        options=opts,
        net_ns=ns_inum(common.skc_net.net),
        bound=bound,
        name_deleted=deleted,
        queue=queue,
    )


def attach_unix_sockets(
    prog: Program, fds: list[Fd], *, pid: int, comm: str, cache: dict[int, UnixSocketState]
) -> None:
    """Fill `OpenFile.unix` of the UNIX socket fds of process `pid`; `cache` (file address
    -> state) is shared by all processes of a dump."""
    for fd in fds:
        f = fd.file
        if f.kind != "unix" or f.unix is not None:
            continue
        state = cache.get(f.key)
        if state is None:
            where = f"a UNIX socket (socket:[{f.identity.ino}])"
            try:
                state = cache[f.key] = unix_socket_state(prog, prog.pointer("file", f.key), where)
            except GuestDataError as e:
                raise GuestDataError(f"PID {pid} ({comm}) fd {fd.fd}, {where}: {e}") from None
        f.unix = state
