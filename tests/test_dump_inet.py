"""`ovm-offline dump` of IPv4/IPv6 sockets (the inet workloads): each socket's entry holds what
the workload set, the datagrams criu drops are named in a warning, and what is not saved yet
(an established connection) is refused by name. The general gates (diff against criu's
images, byte-identical from every source, crit, criu restore) run in tests/test_dump.py."""

from __future__ import annotations

import ipaddress
import struct
import subprocess

import pytest

from corpus import kernels
from ovm_offline.criu import images
from ovm_offline.errors import ExitCode
from ovm_offline.filekinds.inet import _needs_scope_id
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm

KERNELS = list(kernels.KERNELS)
# include/uapi/linux/in.h, socket.h, tcp_states.h; the workload's fds and ports (inet.c, in order after 0-2)
AF_INET, AF_INET6 = 2, 10
SOCK_STREAM, SOCK_DGRAM = 1, 2
IPPROTO_TCP, IPPROTO_UDP = 6, 17
TCP_LISTEN, TCP_CLOSE = 10, 7
O_RDWR, O_NONBLOCK = 0o2, 0o4000
L4, L6, DUAL, BOUND, FRESH, U4, U6, U6C, UFRESH = 3, 4, 5, 6, 7, 8, 9, 10, 11


def _address(family: int, words) -> str:
    raw = b"".join(struct.pack("<I", w) for w in words)
    return str(ipaddress.ip_address(raw if family == AF_INET6 else raw[:4]))


def _sockets_by_fd(directory) -> dict[int, object]:
    files = {e.id: e for e in images.read_image(directory / images.FILES.filename()).entries}
    ids = images.read_image(directory / images.IDS.filename(10000)).entries[0]
    fdinfo = images.read_image(directory / images.FDINFO.filename(ids.files_id)).entries
    return {e.fd: files[e.id].isk for e in fdinfo if files[e.id].HasField("isk")}


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_socket_holds_the_address_state_and_options_the_workload_set(dumped, kernel):
    sk = _sockets_by_fd(dumped(kernel, "inet"))
    assert sorted(sk) == [L4, L6, DUAL, BOUND, FRESH, U4, U6, U6C, UFRESH]

    def shape(fd):
        e = sk[fd]
        return (e.family, e.type, e.proto, e.state, _address(e.family, e.src_addr), e.src_port, e.dst_port)

    assert shape(L4) == (AF_INET, SOCK_STREAM, IPPROTO_TCP, TCP_LISTEN, "127.0.0.1", 7101, 0)
    assert shape(L6) == (AF_INET6, SOCK_STREAM, IPPROTO_TCP, TCP_LISTEN, "::", 7102, 0)
    assert shape(DUAL) == (AF_INET6, SOCK_STREAM, IPPROTO_TCP, TCP_LISTEN, "::", 7103, 0)
    assert shape(BOUND) == (AF_INET, SOCK_STREAM, IPPROTO_TCP, TCP_CLOSE, "127.0.0.1", 7104, 0)
    assert shape(FRESH) == (AF_INET6, SOCK_STREAM, IPPROTO_TCP, TCP_CLOSE, "::", 0, 0)
    assert shape(U4) == (AF_INET, SOCK_DGRAM, IPPROTO_UDP, TCP_CLOSE, "127.0.0.1", 7105, 0)
    assert shape(U6) == (AF_INET6, SOCK_DGRAM, IPPROTO_UDP, TCP_CLOSE, "::1", 7107, 0)
    assert shape(U6C)[:6] == (AF_INET6, SOCK_DGRAM, IPPROTO_UDP, 1, "::1", 7106)  # TCP_ESTABLISHED: connected
    assert (_address(AF_INET6, sk[U6C].dst_addr), sk[U6C].dst_port) == ("::1", 7107)
    assert shape(UFRESH) == (AF_INET, SOCK_DGRAM, IPPROTO_UDP, TCP_CLOSE, "0.0.0.0", 0, 0)

    # listen backlogs, and the options set
    assert (sk[L4].backlog, sk[L6].backlog, sk[DUAL].backlog) == (7, 3, 5)
    assert sk[L4].opts.reuseaddr and sk[L4].opts.so_rcvbuf == 2 * 65536 and sk[L4].opts.so_buf_lock == 2
    assert (sk[L6].v6only, sk[DUAL].v6only, sk[U6].v6only, sk[FRESH].v6only) == (True, False, True, False)
    assert not sk[L4].HasField("v6only")
    assert sk[L6].opts.so_keepalive and not sk[L4].opts.so_keepalive
    assert sk[BOUND].ip_opts.freebind and not sk[L4].ip_opts.HasField("freebind")
    assert sk[U4].opts.so_broadcast
    assert sk[UFRESH].flags == O_RDWR | O_NONBLOCK and sk[L4].flags == O_RDWR
    # TCP_KEEP* of a socket that set none are its namespace's defaults (sysctl net.ipv4.tcp_keepalive_*)
    assert (sk[L4].opts.tcp_keepcnt, sk[L4].opts.tcp_keepidle, sk[L4].opts.tcp_keepintvl) == (9, 7200, 75)
    assert not sk[U4].opts.HasField("tcp_keepcnt")
    # inet_diag lists listeners and bound UDP sockets (their network namespace is recorded), not
    # TCP sockets that are not listening nor UDP ones never bound
    assert {fd for fd, e in sk.items() if e.HasField("ns_id")} == {L4, L6, DUAL, U4, U6, U6C}


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_datagrams_criu_drops_are_named_in_a_warning(recording, tmp_path, kernel):
    rec = recording(kernel, "inet")
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "queued" in line]
    assert len(warnings) == 1, result.stderr
    assert "an IPv4 UDP socket (socket:[" in warnings[0] and "has 3 datagram(s)" in warnings[0]
    assert "dropped, as criu dump drops them" in warnings[0]


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_an_established_connection_is_refused_by_name_and_nothing_is_written(recording, tmp_path, kernel):
    rec = recording(kernel, "inet-established")
    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out))
    # the dropped datagrams' warning comes first: the refusal is decided after every file is read
    warning, refusal = result.stderr.strip().splitlines()
    assert "ovm-offline: warning:" in warning and "datagram(s)" in warning
    refused = subprocess.CompletedProcess(result.args, result.returncode, result.stdout, refusal)
    assert_one_line_failure(refused, "fd 12: an IPv4 TCP socket", "fd 13: an IPv4 TCP socket")
    assert result.stderr.count("is a TCP connection in state ESTABLISHED: connections are not saved yet") == 2
    assert result.returncode == ExitCode.UNSUPPORTED
    assert not out.exists()


@pytest.mark.parametrize(
    "address,needs",
    [
        ("fe80::1", True),
        ("febf::1", True),
        ("fec0::1", False),
        ("ff02::1", True),  # link-local multicast
        ("ff01::1", True),  # node-local multicast
        ("ff05::1", False),  # site-local multicast
        ("::1", False),
        ("2001:db8::1", False),
        ("::ffff:127.0.0.1", False),
    ],
)
def test_which_ipv6_addresses_need_an_interface_to_bind_to(address, needs):
    words = list(struct.unpack("<4I", ipaddress.IPv6Address(address).packed))
    assert _needs_scope_id(words) is needs
