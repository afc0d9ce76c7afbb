"""TCP connections: a ``struct tcp_sock``'s sequence numbers, windows and negotiated options,
and the bytes on its queues, read as TCP repair mode (TCP_INFO, TCP_QUEUE_SEQ,
TCP_REPAIR_WINDOW, SIOCINQ/SIOCOUTQ and MSG_PEEK on each queue) reports them to CRIU.

Received bytes not yet read sit in ``sk_receive_queue`` skbs from ``copied_seq`` to
``rcv_nxt`` (``TCP_SKB_CB(skb)->seq`` is an skb's first sequence number); bytes written and not
yet acknowledged sit in the retransmit rb-tree ``tcp_rtx_queue`` (sent), then in
``sk_write_queue`` (not sent yet), from ``snd_una`` to ``write_seq``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from ..ds.rbtree import rb_inorder
from .inet import AF_INET, AF_INET6, tcp_nagle
from .sock import MAX_QUEUED_SKBS, file_socket, skb_data, skb_queue, sock_flag, sock_flag_bit, socket_sock

if TYPE_CHECKING:
    pass

__all__ = [
    "TCPI_OPT_TIMESTAMPS",
    "TCPI_OPT_WSCALE",
    "TcpRepairState",
    "tcp_inq",
    "tcp_outq_len",
    "tcp_receive_queue_bytes",
    "tcp_repair_state",
    "tcp_send_queue_bytes",
    "tcp_sock_of_file",
    "tcp_timestamp",
    "tcp_unsaveable_reason",
]

# include/uapi/linux/tcp.h: tcpi_options bits
TCPI_OPT_TIMESTAMPS, TCPI_OPT_SACK, TCPI_OPT_WSCALE = 1, 2, 4
TCPI_OPT_ECN, TCPI_OPT_ECN_SEEN, TCPI_OPT_SYN_DATA, TCPI_OPT_USEC_TS = 8, 16, 32, 64
# include/net/tcp.h
TCP_ECN_OK, TCP_ECN_SEEN = 1, 8
NSEC_PER_MSEC, NSEC_PER_USEC = 1_000_000, 1_000
SOCK_STREAM, IPPROTO_TCP, TCP_ESTABLISHED = 1, 6, 1
U32 = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class TcpRepairState:
    """What CRIU's libsoccr reads of a connection in repair mode."""

    inq_len: int  # SIOCINQ: received, not read
    inq_seq: int  # TCP_QUEUE_SEQ of the receive queue: rcv_nxt
    outq_len: int  # SIOCOUTQ: written, not acknowledged
    unsq_len: int  # SIOCOUTQNSD: written, not sent
    outq_seq: int  # TCP_QUEUE_SEQ of the send queue: write_seq
    opt_mask: int  # tcpi_options
    snd_wscale: int
    rcv_wscale: int
    mss_clamp: int  # TCP_MAXSEG in repair mode
    timestamp: int  # TCP_TIMESTAMP
    snd_wl1: int
    snd_wnd: int
    max_window: int
    rcv_wnd: int
    rcv_wup: int
    nodelay: bool
    cork: bool


def tcp_sock_of_file(file: Pointer) -> Struct | None:
    """The ``struct sock`` of an established TCP socket ``struct file *``, or None for any
    other file (a socket's ``f_op`` is socket_file_ops)."""
    prog = file.prog_
    f = file.deref()
    if not prog.has_symbol("socket_file_ops") or int(f.f_op) != prog.symbol_address("socket_file_ops"):
        return None
    sk = socket_sock(file_socket(f))
    common = sk.__sk_common
    if common.skc_family not in (AF_INET, AF_INET6) or (sk.sk_type, sk.sk_protocol) != (SOCK_STREAM, IPPROTO_TCP):
        return None
    return sk if common.skc_state == TCP_ESTABLISHED else None  # other states are refused as files


def _tcp_sock(sk: Struct) -> Struct:
    return sk.prog_.struct("tcp_sock", sk.address_)


def _before(a: int, b: int) -> bool:
    """before(): sequence number `a` comes before `b` (mod 2^32)."""
    return ((a - b) & U32) >= 1 << 31


def tcp_inq(sk: Struct) -> int:
    """tcp_inq() (SIOCINQ): bytes received and not yet read, less a received FIN, or up to the
    urgent byte when one is pending out of line."""
    tp = _tcp_sock(sk)
    copied, rcv_nxt = tp.copied_seq, tp.rcv_nxt
    if tp.urg_data and not sock_flag(sk, sock_flag_bit(sk.prog_, "SOCK_URGINLINE")):
        urg = tp.urg_seq
        if not _before(urg, copied) and _before(urg, rcv_nxt):
            return (urg - copied) & U32
    answ = (rcv_nxt - copied) & U32
    if answ and sock_flag(sk, sock_flag_bit(sk.prog_, "SOCK_DONE")):
        answ -= 1
    return answ


def tcp_outq_len(sk: Struct) -> int:
    """SIOCOUTQ: bytes written to a TCP ``struct sock`` and not yet acknowledged."""
    tp = _tcp_sock(sk)
    return (tp.write_seq - tp.snd_una) & U32


def tcp_timestamp(tp: Struct, monotonic_ns: int) -> int:
    """TCP_TIMESTAMP at CLOCK_MONOTONIC `monotonic_ns`: the connection's timestamp clock
    (milliseconds, or microseconds with its lowest bit set where negotiated, 6.7+), offset by
    its ``tsoffset``."""
    if tp.has_member_("tcp_usec_ts"):
        usec = bool(tp.tcp_usec_ts)
        val = (monotonic_ns // (NSEC_PER_USEC if usec else NSEC_PER_MSEC) + tp.tsoffset) & U32
        return val | 1 if usec else val & ~1
    return (monotonic_ns // NSEC_PER_MSEC + tp.tsoffset) & U32


def tcp_info_options(tp: Struct) -> int:
    """tcpi_options of TCP_INFO."""
    rx = tp.rx_opt
    mask = (TCPI_OPT_TIMESTAMPS if rx.tstamp_ok else 0) | (TCPI_OPT_SACK if rx.sack_ok else 0)
    mask |= TCPI_OPT_WSCALE if rx.wscale_ok else 0
    mask |= (TCPI_OPT_ECN if tp.ecn_flags & TCP_ECN_OK else 0) | (
        TCPI_OPT_ECN_SEEN if tp.ecn_flags & TCP_ECN_SEEN else 0
    )
    mask |= TCPI_OPT_SYN_DATA if tp.syn_data_acked else 0
    if tp.has_member_("tcp_usec_ts") and tp.tcp_usec_ts:
        mask |= TCPI_OPT_USEC_TS
    return mask


def tcp_unsaveable_reason(sk: Struct) -> str | None:
    """Why an established TCP ``struct sock`` cannot be saved as CRIU saves one, or None."""
    tp = _tcp_sock(sk)
    if tp.repair:
        return "is in TCP repair mode (another checkpointing tool holds it)"
    if tp.fastopen_rsk:
        return "is a TCP Fast Open connection whose handshake has not completed"
    if tp.out_of_order_queue.rb_node:
        # CRIU drops them and the peer, which saw them SACKed, may never send them again
        return "has segments received out of order queued"
    if tp.urg_data:
        return "has urgent (out-of-band) data pending"
    return None


def tcp_repair_state(sk: Struct, monotonic_ns: int) -> TcpRepairState:
    """The `TcpRepairState` of a connected TCP ``struct sock`` at CLOCK_MONOTONIC
    `monotonic_ns` (the moment the guest was paused, as the timekeeper last saw it; the
    connection's own clock cache is used when later, so the saved timestamp never goes back
    behind one already sent)."""
    tp = _tcp_sock(sk)
    monotonic_ns = max(monotonic_ns, tp.tcp_clock_cache)
    rx = tp.rx_opt
    opt_mask = tcp_info_options(tp)
    wscale = bool(opt_mask & TCPI_OPT_WSCALE)
    nodelay, cork = tcp_nagle(sk)
    return TcpRepairState(
        inq_len=tcp_inq(sk),
        inq_seq=tp.rcv_nxt,
        outq_len=tcp_outq_len(sk),
        unsq_len=(tp.write_seq - tp.snd_nxt) & U32,
        outq_seq=tp.write_seq,
        opt_mask=opt_mask,
        snd_wscale=rx.snd_wscale if wscale else 0,
        rcv_wscale=rx.rcv_wscale if wscale else 0,
        mss_clamp=rx.mss_clamp,
        timestamp=tcp_timestamp(tp, monotonic_ns) if opt_mask & TCPI_OPT_TIMESTAMPS else 0,
        snd_wl1=tp.snd_wl1,
        snd_wnd=tp.snd_wnd,
        max_window=tp.max_window,
        rcv_wnd=tp.rcv_wnd,
        rcv_wup=tp.rcv_wup,
        nodelay=nodelay,
        cork=cork,
    )


def _skb_seq(skb: Struct) -> int:
    """TCP_SKB_CB(skb)->seq: the sequence number of an skb's first byte."""
    return skb.prog_.struct("tcp_skb_cb", skb.member_address_("cb")).seq


#: the bytes a TCP queue may hold beyond twice its socket's buffer size (skbs are charged by
#: truesize, which is never less than their data, but one may overshoot the limit)
QUEUE_SLACK = 16 << 20


def _check_queue_length(sk: Struct, length: int, buffer: int, what: str) -> None:
    if not 0 <= length <= 2 * max(buffer, 0) + QUEUE_SLACK:
        raise GuestDataError(
            f"TCP socket at 0x{sk.address_:x}: {length} bytes in its {what}, which a buffer of {buffer} cannot hold"
        )


def tcp_receive_queue_bytes(sk: Struct, length: int) -> bytes:
    """The `length` bytes from ``copied_seq`` on in a TCP socket's receive queue (what a
    MSG_PEEK of the receive queue in repair mode returns)."""
    _check_queue_length(sk, length, sk.sk_rcvbuf, "receive queue")
    prog = sk.prog_
    seq = _tcp_sock(sk).copied_seq
    out = bytearray()
    for skb in skb_queue(sk.member_address_("sk_receive_queue"), prog, "sk_receive_queue"):
        if len(out) >= length:
            break
        offset = (seq - _skb_seq(skb)) & U32
        if offset >= skb.len:
            continue  # read already (or a bare FIN)
        chunk = skb_data(skb, offset)
        out += chunk
        seq = (seq + len(chunk)) & U32
    if len(out) < length:
        raise GuestDataError(f"TCP socket at 0x{sk.address_:x}: its receive queue holds {len(out)} of {length} bytes")
    return bytes(out[:length])


def tcp_send_queue_bytes(sk: Struct, length: int) -> bytes:
    """The `length` bytes written and not acknowledged (tcp_peek_sndq(): every skb of the
    retransmit tree in order, then of the write queue)."""
    _check_queue_length(sk, length, sk.sk_sndbuf, "send queues")
    prog = sk.prog_
    skbs: list[Struct] = []
    root = int(prog.struct("rb_root", sk.member_address_("tcp_rtx_queue")).rb_node)
    rbnode = prog.struct_type("sk_buff").member("rbnode").offset
    for node in rb_inorder(prog, root, name="tcp_rtx_queue", limit=MAX_QUEUED_SKBS):
        skbs.append(prog.struct("sk_buff", node - rbnode))
    skbs += skb_queue(sk.member_address_("sk_write_queue"), prog, "sk_write_queue")
    out = bytearray()
    for skb in skbs:
        out += skb_data(skb)
        if len(out) > length:
            break
    if len(out) != length:
        raise GuestDataError(f"TCP socket at 0x{sk.address_:x}: its send queues hold {len(out)} bytes, not {length}")
    return bytes(out)
