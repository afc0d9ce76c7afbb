"""IPv4/IPv6 TCP and UDP sockets (inetsk entries in files.img), as `criu dump` saves them:
TCP listeners and TCP sockets not connected (created, or bound and not listening), and UDP
sockets, bound or not, connected or not.

`InetSocketState` is what CRIU learns from inet_diag (ports, addresses, state, queue lengths,
shutdown) or, for a socket inet_diag does not list (an unbound or bound-only TCP socket, an
unbound UDP one), from getsockname()/getpeername()/TCP_INFO, plus the options getsockopt()
returns. A socket in a TCP state past LISTEN/CLOSE (a connection, established or on its way
in or out) is refused by name: saving one needs its tcp-stream image, which ovm-offline does
not write yet. Like CRIU, a listener with connections waiting for accept() and a corked UDP
socket are refused; the datagrams queued on a UDP socket are dropped (CRIU drops them too,
and UDP may lose them anyway), with a warning naming the socket.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, cast

from ..criu import images
from ..criu.build.common import NET, F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.net.inet import (
    AF_INET,
    AF_INET6,
    TCP_STATE_NAMES,
    inet_addresses,
    inet_dport,
    inet_freebind,
    inet_ip_options,
    inet_sport,
    sk_ipv6only,
    sock_inet,
    tcp_backoff,
    tcp_diag_queues,
    tcp_keepalive,
    tcp_nagle,
    udp_corked,
    udp_queued,
)
from ..kernel.net.sock import file_socket, sk_wmem_alloc_get, socket_sock
from ..kernel.net.tcp import (
    TCPI_OPT_TIMESTAMPS,
    TCPI_OPT_WSCALE,
    TcpRepairState,
    tcp_receive_queue_bytes,
    tcp_repair_state,
    tcp_send_queue_bytes,
    tcp_unsaveable_reason,
)
from ..kernel.task.timekeeping import ktime_get_ns
from ..state import FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved
from .refused import SOCKET
from .socket import SocketOptions, sk_opts_entry, socket_options
from .unix import sock_net_inum

__all__ = ["KIND", "InetSocketState", "inet_socket_state"]

log = logging.getLogger("ovm_offline")

SOCK_STREAM, SOCK_DGRAM = 1, 2
IPPROTO_TCP, IPPROTO_UDP, IPPROTO_UDPLITE = 6, 17, 136
TCP_ESTABLISHED, TCP_CLOSE, TCP_LISTEN = 1, 7, 10
#: sk_shutdown bits, as poll() shows them for a TCP socket not in inet_diag
RCV_SHUTDOWN = 1
PROTOCOL_NAMES = {IPPROTO_TCP: "TCP", IPPROTO_UDP: "UDP", IPPROTO_UDPLITE: "UDP-Lite"}


@dataclasses.dataclass
class InetSocketState(FileState):
    """An IPv4/IPv6 socket as CRIU sees it. Addresses are 32-bit words in memory order (one
    for IPv4, four for IPv6); `backlog` is inet_diag's wqueue (a listener's backlog, the
    bytes a UDP socket has sent and not yet freed) or TCP_INFO's backoff for a TCP socket
    inet_diag does not list; `in_diag` says whether inet_diag lists it (CRIU then records its
    network namespace)."""

    ino: int
    family: int
    type: int
    proto: int
    state: int
    src_port: int
    dst_port: int
    src_addr: list[int]
    dst_addr: list[int]
    backlog: int
    shutdown: int
    v6only: bool | None  # None for AF_INET
    freebind: bool
    options: SocketOptions
    net_ns: int
    in_diag: bool
    tcp_keepalive: tuple[int, int, int] | None = None  # TCP_KEEPCNT, TCP_KEEPIDLE, TCP_KEEPINTVL
    tcp_nagle: tuple[bool, bool] | None = None  # TCP_NODELAY, TCP_CORK
    ip_options: tuple[bool, int, int] = (False, 0, 0)  # IP_PKTINFO/IPV6_RECVPKTINFO, IP_TOS, IP_TTL
    stream: TcpStream | None = None  # an established connection's tcp-stream image
    ifname: str | None = None  # the device an IPv6 link-local address is bound on


@dataclasses.dataclass
class TcpStream:
    """An established connection as `criu dump --tcp-established` saves it: what repair mode
    reports, the bytes received and not read, and the bytes written and not acknowledged."""

    repair: TcpRepairState
    inq: bytes
    outq: bytes


def _describe(family: int, proto: int, ino: int) -> str:
    ip = "IPv6" if family == AF_INET6 else "IPv4"
    return f"an {ip} {PROTOCOL_NAMES.get(proto, f'protocol {proto}')} socket (socket:[{ino}])"


def inet_socket_state(ctx: ExtractContext, file: Pointer, ino: int) -> InetSocketState:
    """The `InetSocketState` of an IPv4/IPv6 socket ``struct file *`` whose inode is `ino`;
    raises UnsupportedError for what CRIU or ovm-offline cannot save."""
    sock = file_socket(file)
    sk = socket_sock(sock)
    inet = sock_inet(sk)
    common = sk.__sk_common
    family, sk_type, proto, state = common.skc_family, sk.sk_type, sk.sk_protocol, common.skc_state
    where = _describe(family, proto, ino)
    if sk_type not in (SOCK_STREAM, SOCK_DGRAM):
        kind = "a raw IP socket" if sk_type == 3 else f"an IP socket of type {sk_type}"
        raise UnsupportedError(f"{kind} (socket:[{ino}]): only TCP and UDP sockets are saved")
    if proto not in PROTOCOL_NAMES or (proto == IPPROTO_TCP) != (sk_type == SOCK_STREAM):
        raise UnsupportedError(f"{where}: only TCP and UDP sockets are saved")
    if sk.sk_filter:
        raise UnsupportedError(f"{where} has a BPF socket filter attached")
    src, dst = inet_addresses(sk)
    options = socket_options(ctx.prog, sock, sk, where)
    ifname = None
    if family == AF_INET6 and _needs_scope_id(src) and inet_sport(inet):
        # criu names the device a link-local address is bound on, to bind it there again
        if options.bound_dev is None:
            raise UnsupportedError(f"{where} is bound to a link-local address on no device")
        ifname = options.bound_dev
    stream = None
    if proto == IPPROTO_TCP:
        backlog, shutdown, in_diag = _tcp_as_criu_sees_it(sk, where)
        if common.skc_state == TCP_ESTABLISHED:
            stream = _tcp_stream(ctx, sk, where)
    else:
        backlog, shutdown, in_diag = _udp_as_criu_sees_it(ctx, sk, inet, where)
    return InetSocketState(
        ino=ino,
        family=family,
        type=sk_type,
        proto=proto,
        state=state,
        src_port=inet_sport(inet),
        dst_port=inet_dport(sk),
        src_addr=src,
        dst_addr=dst,
        backlog=backlog,
        shutdown=shutdown,
        v6only=sk_ipv6only(sk) if family == AF_INET6 else None,
        freebind=inet_freebind(inet),
        options=options,
        ifname=ifname,
        net_ns=sock_net_inum(sk, where),
        in_diag=in_diag,
        tcp_keepalive=tcp_keepalive(sk) if proto == IPPROTO_TCP else None,
        tcp_nagle=tcp_nagle(sk) if proto == IPPROTO_TCP else None,
        ip_options=inet_ip_options(sk),
        stream=stream,
    )


def _tcp_as_criu_sees_it(sk: Struct, where: str) -> tuple[int, int, bool]:
    """(backlog, shutdown, listed by inet_diag) of a TCP ``struct sock`` CRIU can save."""
    state = sk.__sk_common.skc_state
    if state == TCP_LISTEN:
        waiting, backlog = tcp_diag_queues(sk)
        if waiting:
            raise UnsupportedError(f"{where} is a listener with {waiting} connection(s) not yet accepted")
        return backlog, sk.sk_shutdown, True
    if state == TCP_CLOSE:
        # not in inet_diag: CRIU asks TCP_INFO for the backoff and poll() for a read shutdown
        return tcp_backoff(sk), sk.sk_shutdown & RCV_SHUTDOWN, False
    if state == TCP_ESTABLISHED:
        return tcp_diag_queues(sk)[1], sk.sk_shutdown, True
    name = TCP_STATE_NAMES.get(state, str(state))
    raise UnsupportedError(f"{where} is a TCP connection in state {name}: only established connections are saved")


def _tcp_stream(ctx: ExtractContext, sk: Struct, where: str) -> TcpStream:
    """The tcp-stream image of an established connection, at the moment the guest was paused."""
    why = tcp_unsaveable_reason(sk)
    if why:
        raise UnsupportedError(f"{where} {why}")
    repair = tcp_repair_state(sk, ktime_get_ns(ctx.prog))
    return TcpStream(
        repair=repair,
        inq=tcp_receive_queue_bytes(sk, repair.inq_len),
        outq=tcp_send_queue_bytes(sk, repair.outq_len),
    )


def _udp_as_criu_sees_it(ctx: ExtractContext, sk: Struct, inet: Struct, where: str) -> tuple[int, int, bool]:
    """(backlog, shutdown, listed by inet_diag) of a UDP ``struct sock`` CRIU can save; warns
    of the datagrams queued on it, which CRIU drops."""
    if udp_corked(sk):
        raise UnsupportedError(f"{where} is corked (UDP_CORK)")
    in_diag = bool(inet_sport(inet))  # udp_diag lists the sockets hashed by their port
    count, size = udp_queued(sk)
    if count:
        log.warning(
            "pid %d (%s): %s has %d datagram(s) (%d bytes) queued; they are dropped, as criu dump drops them",
            ctx.pid, ctx.comm, where, count, size,
        )  # fmt: skip
    if not in_diag:
        return 0, 0, False
    return sk_wmem_alloc_get(sk), sk.sk_shutdown, True


def _needs_scope_id(addr: list[int]) -> bool:
    """Link-local unicast (fe80::/10) and link- or node-local multicast need an interface to
    bind to, which CRIU saves as an interface name ovm-offline does not read yet."""
    first = addr[0].to_bytes(4, "little")
    link_local = first[0] == 0xFE and first[1] & 0xC0 == 0x80
    local_multicast = first[0] == 0xFF and first[1] & 0x0F in (1, 2)  # the scope nibble
    return link_local or local_multicast


def extract_inet(ctx: ExtractContext, f: OpenFile, file: Pointer) -> InetSocketState:
    """An IPv4/IPv6 socket's state, read once for all the fds (of all processes) holding it."""
    return ctx.once("inet", f.key, lambda: inet_socket_state(ctx, file, f.identity.ino))


class InetWriter:
    """files.img entries of IPv4/IPv6 sockets, written when met, and a tcp-stream image per
    established connection (named by its socket inode in hex, as CRIU names it)."""

    fd_type = F.INETSK

    def __init__(self) -> None:
        self._streams: list[ExtraImage] = []

    def write(self, table: FileTable, f: OpenFile) -> int:
        s = f.state
        assert isinstance(s, InetSocketState)
        fid = table.next_id()
        table.entries.append(F.file_entry(type=F.INETSK, id=fid, isk=self._entry(table, fid, f, s)))
        if s.stream is not None:
            entry = tcp_stream_entry(s.stream.repair)
            self._streams.append(ExtraImage(images.TCP_STREAM, [entry], [s.stream.inq + s.stream.outq], f"{s.ino:x}"))
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        return self._streams

    @staticmethod
    def _entry(table: FileTable, fid: int, f: OpenFile, s: InetSocketState) -> NET.inet_sk_entry:
        entry = NET.inet_sk_entry(
            id=fid,
            ino=s.ino,
            family=s.family,
            type=s.type,
            proto=s.proto,
            state=s.state,
            src_port=s.src_port,
            dst_port=s.dst_port,
            flags=f.flags,
            backlog=s.backlog,
            src_addr=s.src_addr,
            dst_addr=s.dst_addr,
            fown=fown(f.owner),
            opts=sk_opts_entry(s.options),
        )
        entry.ip_opts.SetInParent()  # CRIU always writes ip_opts, empty unless IP_FREEBIND is set
        if s.tcp_keepalive is not None:
            entry.opts.tcp_keepcnt, entry.opts.tcp_keepidle, entry.opts.tcp_keepintvl = s.tcp_keepalive
        entry.tcp_opts.SetInParent()  # CRIU 4.x writes one for every inet socket, empty but for TCP's
        if s.tcp_keepalive is not None and s.tcp_nagle is not None:
            entry.tcp_opts.CopyFrom(tcp_opts_entry(s.tcp_nagle, s.tcp_keepalive))
        if s.freebind:
            entry.ip_opts.freebind = True
        pktinfo, tos, ttl = s.ip_options  # CRIU 4.x's, each left out at 0 as it leaves them
        if pktinfo:
            entry.ip_opts.pktinfo = True
        if tos:
            entry.ip_opts.tos = tos
        if ttl:
            entry.ip_opts.ttl = ttl
        if s.v6only is not None:
            entry.v6only = s.v6only
        if s.ifname is not None:
            entry.ifname = s.ifname
        if s.in_diag or table.inet_ns_ids:
            entry.ns_id = table.net_ns_id(s.net_ns)
        if s.shutdown:
            entry.shutdown = cast(Any, s.shutdown)  # RCV_SHUTDOWN 1 | SEND_SHUTDOWN 2, as sk_shutdown's values
        return entry


def tcp_opts_entry(nagle: tuple[bool, bool], keepalive: tuple[int, int, int]) -> NET.tcp_opts_entry:
    """CRIU 4.x's tcp_opts of a TCP socket (dump_tcp_opts): each option as getsockopt returns
    it, left out where it is 0. 3.x reads the keepalive triple from sk_opts and ignores this."""
    (nodelay, cork), (keepcnt, keepidle, keepintvl) = nagle, keepalive
    entry = NET.tcp_opts_entry()
    for name, value in (("nodelay", nodelay), ("cork", cork)):
        if value:
            setattr(entry, name, True)
    for name, number in (("keepcnt", keepcnt), ("keepidle", keepidle), ("keepintvl", keepintvl)):
        if number:
            setattr(entry, name, number)
    return entry


def tcp_stream_entry(r: TcpRepairState) -> NET.tcp_stream_entry:
    """The tcp_stream_entry CRIU's dump_tcp_conn_state() fills from libsoccr's data."""
    entry = NET.tcp_stream_entry(
        inq_len=r.inq_len,
        inq_seq=r.inq_seq,
        outq_len=r.outq_len,
        outq_seq=r.outq_seq,
        unsq_len=r.unsq_len,
        mss_clamp=r.mss_clamp,
        opt_mask=r.opt_mask,
        snd_wscale=r.snd_wscale,
        snd_wl1=r.snd_wl1,
        snd_wnd=r.snd_wnd,
        max_window=r.max_window,
        rcv_wnd=r.rcv_wnd,
        rcv_wup=r.rcv_wup,
    )
    if r.opt_mask & TCPI_OPT_WSCALE:
        entry.rcv_wscale = r.rcv_wscale
    if r.opt_mask & TCPI_OPT_TIMESTAMPS:
        entry.timestamp = r.timestamp
    if r.nodelay:
        entry.nodelay = True
    if r.cork:
        entry.cork = True
    return entry


KIND = FileKind(
    name="inet",
    noun="an IPv4/IPv6 socket",
    marks=Marks(SOCKET.fops, SOCKET.modes, families=(AF_INET, AF_INET6)),
    saved=Saved(
        writer=InetWriter,
        fd_type=F.INETSK,
        in_flight=False,
        state_type=InetSocketState,
        extract=extract_inet,
    ),
)
