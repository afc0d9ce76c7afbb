"""UNIX domain sockets: ``struct unix_sock``, its peer and bound name, and the
``struct sk_buff``s queued on it with their senders (``UNIXCB``)."""

from __future__ import annotations

import dataclasses
import struct

from ...errors import GuestDataError
from ..core.objects import Struct
from .sock import AF_UNIX, skb_data, skb_queue

__all__ = [
    "TCP_ESTABLISHED",
    "TCP_LISTEN",
    "QueuedSkb",
    "sock_unix",
    "unix_bound_inode",
    "unix_name",
    "unix_peer",
    "unix_pending_connections",
    "unix_receive_queue",
    "unix_skb_files",
]

#: include/net/tcp_states.h (UNIX sockets use the TCP state names too)
TCP_ESTABLISHED, TCP_LISTEN = 1, 10
#: include/net/scm.h: the most files one SCM_RIGHTS message carries
SCM_MAX_FD = 253


def sock_unix(sk: Struct) -> Struct:
    """The ``struct unix_sock`` a ``struct sock`` of family AF_UNIX is embedded in."""
    family = sk.__sk_common.skc_family
    if family != AF_UNIX:
        raise GuestDataError(f"sock at 0x{sk.address_:x} is of family {family}, not AF_UNIX")
    return sk.prog_.struct("unix_sock", sk.address_)


def unix_peer(u: Struct) -> Struct | None:
    """unix_peer(): the ``struct sock`` a UNIX socket is connected to, or None."""
    peer = u.peer
    return peer.deref() if peer else None


def unix_name(u: Struct) -> bytes:
    """The address a UNIX socket is bound to (an accepted socket shares its listener's):
    sun_path up to the length given at bind time, b"" when unbound. Abstract names start
    with a NUL byte; a path name keeps the NUL the binder passed, as sock_diag reports it."""
    addr = u.addr
    if not addr:
        return b""
    a = addr.deref()
    length = a.len - 2  # sizeof(sa_family_t)
    if not 0 <= length <= 108:
        raise GuestDataError(f"unix_address at 0x{a.address_:x} has an impossible length {a.len}")
    if not length:
        return b""
    return a.prog_.read(a.member_address_("name") + 2, length)


def unix_bound_inode(u: Struct) -> Struct | None:
    """The ``struct inode`` of the file a UNIX socket is bound to (its ``path``), or None
    for unbound and abstract sockets."""
    dentry = u.path.dentry
    if not dentry:
        return None
    inode = dentry.d_inode
    return inode.deref() if inode else None


@dataclasses.dataclass(frozen=True)
class QueuedSkb:
    """One ``struct sk_buff`` of a receive queue: its unread bytes and who sent them."""

    address: int
    data: bytes
    sender: int  # the sending ``struct sock`` (skb->sk), 0 if none
    pid: int  # UNIXCB(skb).pid: the sender's ``struct pid`` address
    uid: int
    gid: int
    files: tuple[int, ...]  # UNIXCB(skb).fp: the ``struct file``s in flight with it (SCM_RIGHTS)


def unix_receive_queue(u: Struct) -> list[QueuedSkb]:
    """The skbs queued for reading on a UNIX socket, with their unread bytes (a stream
    skb partly read already has UNIXCB(skb).consumed bytes gone)."""
    prog = u.prog_
    sk = u.sk
    stream = sk.sk_type == 1  # SOCK_STREAM
    out = []
    for skb in skb_queue(sk.member_address_("sk_receive_queue"), prog, "sk_receive_queue"):
        cb = prog.struct("unix_skb_parms", skb.member_address_("cb"))
        consumed = cb.consumed if stream else 0
        out.append(
            QueuedSkb(
                address=skb.address_,
                data=skb_data(skb, consumed),
                sender=int(skb.sk),
                pid=int(cb.pid),
                uid=cb.uid.val,
                gid=cb.gid.val,
                files=unix_skb_files(cb),
            )
        )
    return out


def unix_skb_files(cb: Struct) -> tuple[int, ...]:
    """The addresses of the ``struct file``s a ``struct unix_skb_parms`` (UNIXCB) carries in
    flight (its ``scm_fp_list``), in the order the sender passed them; () when none."""
    fp = cb.fp
    if not fp:
        return ()
    fpl = fp.deref()
    count = int(fpl.count)
    if not 0 < count <= SCM_MAX_FD:
        raise GuestDataError(f"scm_fp_list at 0x{int(fp):x} holds {count} files (at most {SCM_MAX_FD})")
    raw = fpl.prog_.read(fpl.member_address_("fp"), 8 * count)
    files = struct.unpack(f"<{count}Q", raw)
    if not all(files):
        raise GuestDataError(f"scm_fp_list at 0x{int(fp):x} has a NULL file among its {count}")
    return files


def unix_pending_connections(u: Struct) -> list[Struct]:
    """The ``struct sock``s of the connections a listening UNIX socket has not accepted yet:
    unix_stream_connect queues one skb per connection, owned by the new sock (skb->sk), whose
    peer is the connecting socket."""
    prog = u.prog_
    socks = []
    for skb in unix_receive_queue(u):
        if not skb.sender:
            raise GuestDataError(f"listening unix_sock at 0x{u.address_:x} has a queued connection with no sock")
        socks.append(prog.struct("sock", skb.sender))
    return socks
