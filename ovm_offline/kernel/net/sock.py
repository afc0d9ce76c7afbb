"""Sockets of every family: ``struct socket``, ``struct sock`` and the ``struct sk_buff``s
queued on them.

A socket file's ``private_data`` is its ``struct socket``; ``socket->sk`` the protocol
``struct sock``, which is the first member of the family's own sock (``struct unix_sock``,
``struct inet_sock``...: the same address). The socket's inode (what /proc and sock_diag call
its inode number) is the ``vfs_inode`` right after the ``struct socket`` in its
``struct socket_alloc``.

Queues are ``struct sk_buff_head`` rings: ``next``/``prev`` at the start of the head and
of every ``struct sk_buff``; the walk stops at the head and is bounded by ``qlen`` (and
MAX_QUEUED_SKBS), so a hostile ring ends in GuestDataError, never a hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError, SourceError
from ..core.objects import Pointer, Struct
from ..mm.pagecache import page_to_phys

__all__ = [
    "AF_INET",
    "AF_INET6",
    "AF_NETLINK",
    "AF_PACKET",
    "AF_UNIX",
    "MAX_QUEUED_SKBS",
    "SOCK_BUF_LOCK_MASK",
    "SOCK_PASSCRED",
    "SOCK_PASSSEC",
    "file_socket",
    "sk_wmem_alloc_get",
    "skb_data",
    "skb_queue",
    "sock_flag",
    "sock_scm_options",
    "sock_flag_bit",
    "sock_socket_ino",
    "sock_timeout",
    "socket_sock",
]

if TYPE_CHECKING:
    from ..core.memory import Program

#: include/linux/net.h: bits of socket->flags
SOCK_PASSCRED, SOCK_PASSSEC = 3, 4
#: include/linux/socket.h: the address families, for every module that tells sockets apart
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
#: include/net/sock.h: SOCK_SNDBUF_LOCK | SOCK_RCVBUF_LOCK
SOCK_BUF_LOCK_MASK = 0x3
MAX_SCHEDULE_TIMEOUT = (1 << 63) - 1
#: A socket's receive buffer is at most INT_MAX bytes and every skb costs more than
#: 256 bytes of it, so no sane queue is longer than this.
MAX_QUEUED_SKBS = 1 << 23
#: An skb of a UNIX or loopback socket holds at most a few dozen KiB (unix_stream_sendmsg caps
#: it near 32 KiB plus a page of header; a datagram or a GSO packet at 64 KiB); anything over
#: this is garbage.
MAX_SKB_LEN = 1 << 24


def file_socket(file: Pointer | Struct) -> Struct:
    """The ``struct socket`` of a socket ``struct file`` (its ``private_data``)."""
    f = file.deref() if isinstance(file, Pointer) else file
    addr = int(f.private_data)
    if not addr:
        raise GuestDataError(f"socket file at 0x{f.address_:x} has no struct socket")
    return f.prog_.struct("socket", addr)


def socket_sock(sock: Struct) -> Struct:
    """The ``struct sock`` of a ``struct socket``."""
    sk = sock.sk
    if not sk:
        raise GuestDataError(f"struct socket at 0x{sock.address_:x} has no sock")
    return sk.deref()


def sock_socket_ino(sk: Struct) -> int:
    """sock_i_ino(): the inode number of the ``struct socket`` a ``struct sock`` belongs
    to (0 for a sock with no socket, such as a connection not yet accepted)."""
    sock = sk.sk_socket
    if not sock:
        return 0
    return sk.prog_.container_of(sock, "socket_alloc", "socket").vfs_inode.i_ino


def sock_scm_options(sock: Struct, sk: Struct, family: int) -> tuple[bool, bool]:
    """(SO_PASSCRED, SO_PASSSEC) of a ``struct socket`` of `family` and its ``struct sock``:
    bits of ``socket->flags``, or where ``struct sock`` has them as its own bits (6.16+),
    ``sk_scm_credentials``/``sk_scm_security``, which only UNIX and netlink sockets have (the
    bits are something else in other families, and getsockopt refuses them there)."""
    if sk.has_member_("sk_scm_credentials"):
        if family not in (AF_UNIX, AF_NETLINK):
            return False, False
        return bool(sk.sk_scm_credentials), bool(sk.sk_scm_security)
    return bool(sock.flags >> SOCK_PASSCRED & 1), bool(sock.flags >> SOCK_PASSSEC & 1)


def sock_flag(sk: Struct, bit: int) -> bool:
    """sock_flag(): is SOCK_* flag `bit` (enum sock_flags) set in ``sk_flags``?"""
    return bool(sk.__sk_common.skc_flags >> bit & 1)


def sock_flag_bit(prog: Program, name: str) -> int:
    """The bit number of enum sock_flags constant `name` in this kernel."""
    return prog.symbols.enum_value("sock_flags", name)


def sock_timeout(prog: Program, jiffies: int) -> tuple[int, int]:
    """What SO_RCVTIMEO_OLD/SO_SNDTIMEO_OLD report for a timeout of `jiffies`: (sec, usec),
    0 for none (MAX_SCHEDULE_TIMEOUT)."""
    from ..task.timers import tick_nsec

    if jiffies in (0, MAX_SCHEDULE_TIMEOUT) or jiffies < 0:
        return 0, 0
    hz = round(1_000_000_000 / tick_nsec(prog))
    return jiffies // hz, (jiffies % hz) * 1_000_000 // hz


def sk_wmem_alloc_get(sk: Struct) -> int:
    """sk_wmem_alloc_get(): bytes (skb truesize) this sock has sent and its peer has not
    yet consumed (the refcount starts at 1)."""
    return max(sk.sk_wmem_alloc.refs.counter - 1, 0)


def skb_queue(head_addr: int, prog: Program, what: str) -> Iterator[Struct]:
    """The ``struct sk_buff``s of the ``struct sk_buff_head`` at `head_addr`, in order."""
    head = prog.struct("sk_buff_head", head_addr)
    qlen = head.qlen
    if qlen > MAX_QUEUED_SKBS:
        raise GuestDataError(f"{what} at 0x{head_addr:x} claims {qlen} queued skbs")
    node = prog.read_u64(head_addr)
    seen = 0
    while node != head_addr:
        if seen >= qlen or not node:
            raise GuestDataError(f"{what} at 0x{head_addr:x}: the ring does not close after {qlen} skbs")
        yield prog.struct("sk_buff", node)
        seen += 1
        node = prog.read_u64(node)
    if seen != qlen:
        raise GuestDataError(f"{what} at 0x{head_addr:x} holds {seen} skbs, qlen says {qlen}")


def skb_shinfo(skb: Struct) -> Struct:
    """skb_shinfo(): the ``struct skb_shared_info`` at the end of an skb's buffer
    (``head + end``: end is an offset on 64-bit kernels)."""
    return skb.prog_.struct("skb_shared_info", int(skb.head) + skb.end)


def skb_frag_phys(frag: Struct) -> int:
    """Guest-physical address of the first byte of an ``skb_frag_t`` (a bio_vec up to 6.6,
    later a netmem reference: a ``struct page *`` unless its low bit marks a net_iov)."""
    prog = frag.prog_
    if frag.has_member_("bv_page"):
        page, offset = int(frag.bv_page), frag.bv_offset
    else:
        page, offset = frag.netmem, frag.offset
        if page & 1:
            raise GuestDataError(f"skb fragment at 0x{frag.address_:x} is device memory (net_iov), not a page")
    return page_to_phys(prog, page) + offset


def skb_frag_len(frag: Struct) -> int:
    return frag.bv_len if frag.has_member_("bv_len") else frag.len


def skb_data(skb: Struct, offset: int = 0) -> bytes:
    """The bytes of an skb from `offset` on: its linear part, then its page fragments (a
    fragment lies in one, possibly compound, page, so it is contiguous in guest memory)."""
    prog = skb.prog_
    length, data_len = skb.len, skb.data_len
    if length > MAX_SKB_LEN or data_len > length or offset > length:
        raise GuestDataError(
            f"sk_buff at 0x{skb.address_:x} has an impossible length {length} (paged {data_len}, offset {offset})"
        )
    try:
        out = bytearray(prog.read(int(skb.data), length - data_len) if length > data_len else b"")
        if data_len:
            shinfo = skb_shinfo(skb)
            if shinfo.frag_list:
                raise GuestDataError(f"sk_buff at 0x{skb.address_:x} has a frag_list, which UNIX sockets never build")
            frags = shinfo.frags
            nr = shinfo.nr_frags
            if nr > len(frags):
                raise GuestDataError(f"sk_buff at 0x{skb.address_:x} claims {nr} page fragments")
            for i in range(nr):
                frag = frags[i]
                flen = skb_frag_len(frag)
                if flen > data_len:
                    raise GuestDataError(
                        f"sk_buff at 0x{skb.address_:x}: fragment {i} of {flen} bytes exceeds "
                        f"the skb's {data_len} paged bytes"
                    )
                out += prog.source.read(skb_frag_phys(frag), flen)
    except SourceError as e:
        raise GuestDataError(f"sk_buff at 0x{skb.address_:x}: data is not readable: {e}") from None
    if len(out) != length:
        raise GuestDataError(f"sk_buff at 0x{skb.address_:x} holds {len(out)} bytes, its len says {length}")
    return bytes(out[offset:])
