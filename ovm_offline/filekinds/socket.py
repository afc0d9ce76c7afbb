"""What every kind of socket shares: the SOL_SOCKET options CRIU records (getsockopt's
answers, SO_BINDTODEVICE's device name too) and their sk_opts_entry."""

from __future__ import annotations

import dataclasses

from ..criu.build.common import NET
from ..errors import UnsupportedError
from ..kernel.core.features import kernel_has
from ..kernel.core.memory import Program
from ..kernel.core.objects import Struct
from ..kernel.net.netdev import net_device_name
from ..kernel.net.sock import SOCK_BUF_LOCK_MASK, sock_flag, sock_flag_bit, sock_scm_options, sock_timeout

__all__ = ["SocketOptions", "sk_opts_entry", "socket_bound_device", "socket_options"]


@dataclasses.dataclass
class SocketOptions:
    """The SOL_SOCKET options CRIU records for every socket (getsockopt's answers)."""

    sndbuf: int
    rcvbuf: int
    snd_timeout: tuple[int, int]  # (sec, usec), (0, 0) for none
    rcv_timeout: tuple[int, int]
    reuseaddr: bool
    priority: int
    rcvlowat: int
    mark: int
    passcred: bool
    passsec: bool
    dontroute: bool
    no_check: bool
    reuseport: bool
    broadcast: bool
    keepalive: bool
    oobinline: bool
    buf_lock: int | None  # None: the kernel has no SO_BUF_LOCK (before 5.14)
    bound_dev: str | None = None  # SO_BINDTODEVICE: the device's name


def socket_bound_device(sk: Struct, where: str) -> str | None:
    """SO_BINDTODEVICE of a ``struct sock``: the name of the device it is bound to in its network
    namespace, None when it is bound to none. UnsupportedError when the namespace has no device
    of that index (getsockopt fails then, and so would criu's dump)."""
    common = sk.__sk_common
    ifindex = int(common.skc_bound_dev_if)
    if not ifindex:
        return None
    name = net_device_name(common.skc_net.net, ifindex)
    if name is None:
        raise UnsupportedError(f"{where} is bound to network device {ifindex}, which its network namespace lacks")
    return name


def socket_options(prog: Program, sock: Struct, sk: Struct, where: str) -> SocketOptions:
    """getsockopt(SOL_SOCKET, ...) of a ``struct socket`` and its ``struct sock`` (`where` names
    the socket in errors)."""
    common = sk.__sk_common

    def flag(name: str) -> bool:
        return sock_flag(sk, sock_flag_bit(prog, name))

    passcred, passsec = sock_scm_options(sock, sk, common.skc_family)
    return SocketOptions(
        sndbuf=sk.sk_sndbuf,
        rcvbuf=sk.sk_rcvbuf,
        snd_timeout=sock_timeout(prog, sk.sk_sndtimeo),
        rcv_timeout=sock_timeout(prog, sk.sk_rcvtimeo),
        reuseaddr=bool(common.skc_reuse),
        priority=sk.sk_priority,
        rcvlowat=sk.sk_rcvlowat,
        mark=sk.sk_mark,
        passcred=passcred,
        passsec=passsec,
        dontroute=flag("SOCK_LOCALROUTE"),
        no_check=bool(sk.sk_no_check_tx),
        reuseport=bool(common.skc_reuseport),
        broadcast=flag("SOCK_BROADCAST"),
        keepalive=flag("SOCK_KEEPOPEN"),
        oobinline=flag("SOCK_URGINLINE"),
        buf_lock=sk.sk_userlocks & SOCK_BUF_LOCK_MASK if kernel_has(prog.symbols, "has_sockopt_buf_lock") else None,
        bound_dev=socket_bound_device(sk, where),
    )


def sk_opts_entry(o: SocketOptions) -> NET.sk_opts_entry:
    return NET.sk_opts_entry(
        so_sndbuf=o.sndbuf,
        so_rcvbuf=o.rcvbuf,
        so_snd_tmo_sec=o.snd_timeout[0],
        so_snd_tmo_usec=o.snd_timeout[1],
        so_rcv_tmo_sec=o.rcv_timeout[0],
        so_rcv_tmo_usec=o.rcv_timeout[1],
        reuseaddr=o.reuseaddr,
        so_priority=o.priority,
        so_rcvlowat=o.rcvlowat,
        so_mark=o.mark,
        so_passcred=o.passcred,
        so_passsec=o.passsec,
        so_dontroute=o.dontroute,
        so_no_check=o.no_check,
        so_reuseport=o.reuseport,
        so_broadcast=o.broadcast,
        so_keepalive=o.keepalive,
        so_oobinline=int(o.oobinline),
        so_buf_lock=o.buf_lock,  # None leaves it unset, as criu on a kernel without SO_BUF_LOCK
        so_bound_dev=o.bound_dev,  # None leaves it unset, as criu for a socket bound to no device
    )
