"""IPv4/IPv6 sockets: ``struct inet_sock`` (ports, addresses, IP options), ``struct tcp_sock``
and ``struct udp_sock``, read as inet_diag and getsockopt() report them.

An AF_INET/AF_INET6 ``struct sock`` is the first member of its ``struct inet_sock``, which
is the first member of ``struct inet_connection_sock`` (then ``struct tcp_sock``) for TCP
and of ``struct udp_sock`` for UDP: the same address. Ports and IPv4 addresses are kept in
network byte order (``__be16``/``__be32``).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ...errors import GuestDataError, SymbolError
from ..core.objects import Struct
from .sock import AF_INET, AF_INET6

if TYPE_CHECKING:
    from ..core.memory import Program

__all__ = [
    "AF_INET",
    "AF_INET6",
    "TCP_STATE_NAMES",
    "inet_addresses",
    "inet_dport",
    "inet_freebind",
    "inet_ip_options",
    "inet_sport",
    "sk_ipv6only",
    "sock_inet",
    "tcp_backoff",
    "tcp_diag_queues",
    "tcp_keepalive",
    "tcp_nagle",
    "udp_corked",
    "udp_queued",
]

#: include/net/tcp_states.h
TCP_STATE_NAMES = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECV",
    4: "FIN_WAIT1",
    5: "FIN_WAIT2",
    6: "TIME_WAIT",
    7: "CLOSE",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
    12: "NEW_SYN_RECV",
}
TCP_LISTEN = 10


def _flag_bit(prog: Program, constant: str) -> int:
    """A bit number from an anonymous enum (include/net/inet_sock.h's INET_FLAGS_*,
    include/linux/udp.h's UDP_FLAGS_*), read from the ISF as every layout is."""
    bit = prog.symbols.enumerator(constant)
    if bit is None:
        raise SymbolError(
            f"{prog.symbols.name} has a flags word but no enumerator {constant}: this layout is not supported"
        )
    return bit


def sock_inet(sk: Struct) -> Struct:
    """The ``struct inet_sock`` a ``struct sock`` of family AF_INET or AF_INET6 begins."""
    family = sk.__sk_common.skc_family
    if family not in (AF_INET, AF_INET6):
        raise GuestDataError(f"sock at 0x{sk.address_:x} is of family {family}, not AF_INET/AF_INET6")
    return sk.prog_.struct("inet_sock", sk.address_)


def _ntohs(value: int) -> int:
    return ((value & 0xFF) << 8) | (value >> 8 & 0xFF)


def inet_sport(inet: Struct) -> int:
    """The local port of an ``struct inet_sock`` (0 when unbound), in host order."""
    return _ntohs(inet.inet_sport)


def inet_dport(sk: Struct) -> int:
    """The peer's port of a ``struct sock`` (0 when unconnected), in host order."""
    return _ntohs(sk.__sk_common.skc_dport)


def inet_addresses(sk: Struct) -> tuple[list[int], list[int]]:
    """The bound (``rcv_saddr``) and peer addresses of a ``struct sock`` as inet_diag reports
    them and CRIU stores them: an IPv4 address as one 32-bit word, an IPv6 one as four, each
    word the address bytes in memory order."""
    common = sk.__sk_common
    if common.skc_family == AF_INET:
        return [common.skc_rcv_saddr], [common.skc_daddr]
    prog = sk.prog_

    def in6(member: str) -> list[int]:
        return list(struct.unpack("<4I", prog.read(common.member_address_(member), 16)))

    return in6("skc_v6_rcv_saddr"), in6("skc_v6_daddr")


def sk_ipv6only(sk: Struct) -> bool:
    """IPV6_V6ONLY of an AF_INET6 ``struct sock``."""
    return bool(sk.__sk_common.skc_ipv6only)


def inet_freebind(inet: Struct) -> bool:
    """IP_FREEBIND of a ``struct inet_sock``: a bit-field up to 6.5, a bit of ``inet_flags``
    after."""
    if inet.has_member_("freebind"):
        return bool(inet.freebind)
    return bool(inet.inet_flags >> _flag_bit(inet.prog_, "INET_FLAGS_FREEBIND") & 1)


# include/net/inet_sock.h: IP_CMSG_PKTINFO, a bit of cmsg_flags before 6.6
IP_CMSG_PKTINFO = 1 << 0


def inet_ip_options(sk: Struct) -> tuple[bool, int, int]:
    """(IP_PKTINFO or IPV6_RECVPKTINFO, IP_TOS, IP_TTL) of an AF_INET or AF_INET6 ``struct
    sock``, as getsockopt returns them; an AF_INET6 socket's TOS and TTL are 0 (CRIU 4.x asks
    for them on IPv4 sockets only). A TTL left unset (-1) reads as the namespace's default."""
    inet = sock_inet(sk)
    if sk.__sk_common.skc_family == AF_INET6:
        return bool(inet.pinet6.deref().rxopt.bits.rxinfo), 0, 0
    if inet.has_member_("cmsg_flags"):
        pktinfo = bool(inet.cmsg_flags & IP_CMSG_PKTINFO)
    else:
        pktinfo = bool(inet.inet_flags >> _flag_bit(inet.prog_, "INET_FLAGS_PKTINFO") & 1)
    ttl = inet.uc_ttl
    if ttl < 0:
        ttl = sk.__sk_common.skc_net.net.deref().ipv4.sysctl_ip_default_ttl
    return pktinfo, int(inet.tos), int(ttl)


def tcp_diag_queues(sk: Struct) -> tuple[int, int]:
    """tcp_diag_get_info()'s (rqueue, wqueue) of a TCP ``struct sock``: for a listener the
    connections waiting for accept() and the listen backlog; else the bytes received and not
    read, and the bytes written and not yet acknowledged."""
    if sk.__sk_common.skc_state == TCP_LISTEN:
        return sk.sk_ack_backlog, sk.sk_max_ack_backlog
    tp = sk.prog_.struct("tcp_sock", sk.address_)
    unread = (tp.rcv_nxt - tp.copied_seq) & 0xFFFFFFFF
    return (0 if unread >= 1 << 31 else unread), (tp.write_seq - tp.snd_una) & 0xFFFFFFFF  # max_t(int, ..., 0)


def tcp_backoff(sk: Struct) -> int:
    """TCP_INFO's tcpi_backoff of a TCP ``struct sock`` (``icsk_backoff``)."""
    return sk.prog_.struct("inet_connection_sock", sk.address_).icsk_backoff


def udp_corked(sk: Struct) -> bool:
    """UDP_CORK of a UDP ``struct sock``: a bit of ``udp_flags`` since 6.5 (and in later 6.1
    stable releases), ``corkflag`` before."""
    up = sk.prog_.struct("udp_sock", sk.address_)
    if up.has_member_("udp_flags"):
        return bool(up.udp_flags >> _flag_bit(sk.prog_, "UDP_FLAGS_CORK") & 1)
    return bool(up.corkflag)


def udp_queued(sk: Struct) -> tuple[int, int]:
    """The datagrams waiting to be read on a UDP ``struct sock`` (its receive queue and the
    reader queue recvmsg() moves them to) and the bytes udp_diag reports for them
    (``sk_rmem_alloc`` less the ``forward_deficit`` not yet released)."""
    up = sk.prog_.struct("udp_sock", sk.address_)
    count = sk.sk_receive_queue.qlen + up.reader_queue.qlen
    rmem = sk.sk_backlog.rmem_alloc.counter - up.forward_deficit
    return count, max(rmem, 0)


# include/net/tcp.h
TCP_NAGLE_OFF, TCP_NAGLE_CORK = 1, 2


def tcp_nagle(sk: Struct) -> tuple[bool, bool]:
    """What TCP_NODELAY and TCP_CORK return for a TCP ``struct sock`` (tcp_sock.nonagle)."""
    nonagle = int(sk.prog_.struct("tcp_sock", sk.address_).nonagle)
    return bool(nonagle & TCP_NAGLE_OFF), bool(nonagle & TCP_NAGLE_CORK)


def tcp_keepalive(sk: Struct) -> tuple[int, int, int]:
    """What TCP_KEEPCNT, TCP_KEEPIDLE and TCP_KEEPINTVL return for a TCP ``struct sock``:
    the socket's own settings, or its network namespace's sysctls where it has none (times
    in seconds, kept in jiffies)."""
    from ..task.timers import tick_nsec

    prog = sk.prog_
    tp = prog.struct("tcp_sock", sk.address_)
    net = sk.__sk_common.skc_net.net.deref().ipv4
    hz = round(1_000_000_000 / tick_nsec(prog))
    probes = tp.keepalive_probes or net.sysctl_tcp_keepalive_probes
    idle = tp.keepalive_time or net.sysctl_tcp_keepalive_time
    intvl = tp.keepalive_intvl or net.sysctl_tcp_keepalive_intvl
    return probes, idle // hz, intvl // hz
