"""`ovm-offline dump` of IPv4/IPv6 sockets (the inet workloads): each socket's entry holds what
the workload set, the datagrams criu drops are named in a warning, and what is not saved yet
(an established connection) is refused by name. The general gates (diff against criu's
images, byte-identical from every source, crit, criu restore) run in tests/test_dump.py."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from corpus import kernels
from corpus.restore import restore
from corpus.workloads import get_workload
from ovm_offline.criu import images
from ovm_offline.criu.diff import diff_dirs
from ovm_offline.errors import ExitCode, UnsupportedError
from ovm_offline.extract.syscall import _overlap
from ovm_offline.filekinds.inet import _needs_scope_id, _tcp_as_criu_sees_it, tcp_opts_entry
from ovm_offline.filekinds.socket import sk_opts_entry, socket_options
from ovm_offline.kernel.core.features import kernel_has
from ovm_offline.kernel.core.objects import Struct
from ovm_offline.kernel.core.symbols import load_isf
from ovm_offline.kernel.net.inet import inet_ip_options, tcp_keepalive, tcp_nagle
from ovm_offline.kernel.net.tcp import (
    tcp_inq,
    tcp_outq_len,
    tcp_receive_queue_bytes,
    tcp_send_queue_bytes,
    tcp_timestamp,
    tcp_unsaveable_reason,
)
from tests.support.checks import assert_one_line_error
from tests.support.cli import MOMENT_REFUSAL, dump_from, ovm, tree_digest, vcpu_state_of
from tests.support.dumped_files import process_files
from tests.support.memory import FakeKernelMemory
from tests.support.paths import ISF

KERNELS = list(kernels.KERNELS)
# include/uapi/linux/in.h, socket.h, tcp_states.h; the workload's fds and ports (inet.c, in order after 0-2)
AF_INET, AF_INET6 = 2, 10
SOCK_STREAM, SOCK_DGRAM = 1, 2
IPPROTO_TCP, IPPROTO_UDP = 6, 17
TCP_ESTABLISHED, TCP_LISTEN, TCP_CLOSE = 1, 10, 7
O_RDWR, O_NONBLOCK = 0o2, 0o4000
L4, L6, DUAL, BOUND, FRESH, U4, U6, U6C, UFRESH = 3, 4, 5, 6, 7, 8, 9, 10, 11
EST_CLIENT, EST_SERVER, OUTSIDE, BULK_READER, BULK_WRITER = 12, 13, 14, 15, 16


def _address(family: int, words) -> str:
    raw = b"".join(struct.pack("<I", w) for w in words)
    return str(ipaddress.ip_address(raw if family == AF_INET6 else raw[:4]))


def _sockets_by_fd(directory) -> dict[int, object]:
    files, fdinfo = process_files(directory)
    return {fd: files[e.id].isk for fd, e in fdinfo.items() if files[e.id].HasField("isk")}


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
    assert sk[L4].opts.reuseaddr and sk[L4].opts.so_rcvbuf == 2 * 65536
    # SO_RCVBUF's lock, which SO_BUF_LOCK shows and criu writes where the kernel has it (5.14+)
    if kernel_has(load_isf(ISF[kernel]), "has_sockopt_buf_lock"):
        assert sk[L4].opts.so_buf_lock == 2
    else:
        assert not sk[L4].opts.HasField("so_buf_lock")
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


def _streams(directory) -> dict[int, tuple[object, bytes, bytes]]:
    """fd -> (tcp_stream_entry, unread bytes, unacknowledged bytes) of the connected sockets."""
    out = {}
    for fd, isk in _sockets_by_fd(directory).items():
        path = directory / images.TCP_STREAM.filename(f"{isk.ino:x}")
        if path.exists():
            image = images.read_image(path)
            entry, payload = image.entries[0], image.payloads[0]
            out[fd] = (entry, payload[: entry.inq_len], payload[entry.inq_len :])
    return out


@pytest.fixture(scope="module")
def established(tmp_path_factory):
    """our images of inet-established, per kernel, made with --network-lock nftables as criu's were"""
    made = {}

    def get(recording, kernel):
        if kernel not in made:
            rec = recording(kernel, "inet-established")
            out = tmp_path_factory.mktemp(f"established-{kernel}") / "images"
            result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out), "--network-lock", "nftables")
            assert result.returncode == 0, result.stderr
            made[kernel] = out
        return made[kernel]

    return get


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_established_connections_match_criu_dump_tcp_established(recording, established, kernel):
    result = diff_dirs(established(recording, kernel), recording(kernel, "inet-established").golden)
    assert result.same, result.report()


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_source_gives_the_same_connections(recording, established, tmp_path, kernel):
    """The timestamp is the guest's clock at the pause, the same moment in every source."""
    rec = recording(kernel, "inet-established")
    reference = tree_digest(established(recording, kernel))
    for name, source in {**rec.kdumps, "live": rec.live_dir}.items():
        out = dump_from(source, 10000, tmp_path / name, "--network-lock", "nftables")
        assert tree_digest(out) == reference, f"{name} differs from the ELF dump's images"


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_each_end_holds_the_bytes_its_peer_sent_and_its_reader_had_not_read(recording, established, kernel):
    rec = recording(kernel, "inet-established")
    bulk = int(rec.manifest["ready"].split("bulk=")[1].split()[0])  # bytes the writer wrote before READY
    streams = _streams(established(recording, kernel))
    # fds in the order inet.c makes them: the 127.0.0.1 pair, then the outside client's server
    # end where the bulk writer's first fd was, then the [::1] bulk reader and writer
    client, server, outside, reader, writer = EST_CLIENT, EST_SERVER, OUTSIDE, BULK_READER, BULK_WRITER
    assert sorted(streams) == [client, server, outside, reader, writer]
    assert (streams[server][1], streams[client][1], streams[outside][1]) == (b"hello", b"world", b"outside")
    assert all(not streams[fd][2] for fd in (client, server, outside, reader))
    w, r = streams[writer][0], streams[reader][0]
    unread, unacked = streams[reader][1], streams[writer][2]
    # everything the reader's end received it acknowledged: the writer's unacknowledged bytes
    # begin where the reader's unread ones end; some were sent (and dropped at the full
    # receiver), the rest never left the writer
    assert (w.outq_seq - w.outq_len) & 0xFFFFFFFF == r.inq_seq
    assert 0 < w.unsq_len <= w.outq_len and unread and unacked
    sent = unread + unacked
    assert sent == bytes((i * 7 + i // 251) & 0xFF for i in range(len(sent)))  # inet.c's pattern(), from byte 0
    assert len(sent) == bulk
    assert w.nodelay and w.opt_mask & 0x7 == 0x7  # timestamps, SACK and window scaling negotiated


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
def test_criu_restore_of_established_connections_carries_every_byte(recording, established, kernel):
    """Restored in a fresh guest: each pair reads its unread bytes once, the bulk reader reads
    exactly what the writer had written (the unsent part sent after the restore), the server
    end of the outside client still has that client's bytes, and every listener accepts."""
    rec = recording(kernel, "inet-established")
    result = restore(rec, established(recording, kernel), log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"


#: write() and its orig_ax (arch/x86/entry/syscalls/syscall_64.tbl); the stream writer's size
WRITE, STREAM_WRITE = 1, 3000


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("take", range(3))
@pytest.mark.parametrize("workload", ["inet-stream-asis", "inet-bursts-asis", "runc-inet-stream-asis"])
def test_a_stream_paused_with_bytes_in_flight_restores_with_none_lost_or_doubled(
    recording, tmp_path, kernel, take, workload
):
    """The guest is paused at a random moment of a TCP stream from a fast writer thread to a
    slow reader thread (bursts: to a reader that keeps up). The writer is mostly asleep in
    write() for room, often with part of its bytes moved into the send queue already: that
    call ends as a signal would end it, returning what it moved, and the writer goes on from
    there. Either the dump is refused for its moment alone (a thread inside write() or read()
    on a vCPU or runnable there: how much it moved is not in memory), or the restored reader
    gets every byte once and in order, those queued at the pause included."""
    rec = recording(kernel, workload, take)
    out = tmp_path / "images"
    root = rec.manifest["root_pid"]
    # criu's lock as the workload's restore takes it (runc restore: criu's default, iptables)
    lock = ("--network-lock", "nftables") if "nftables" in get_workload(workload).criu_options else ()
    result = ovm("dump", str(rec.elf), "--pid", str(root), "-D", str(out), *lock, *vcpu_state_of(rec))
    if result.returncode != 0:
        refusal = result.stderr.strip().splitlines()[-1]
        assert MOMENT_REFUSAL.search(refusal) and result.returncode == ExitCode.MOMENT, refusal
        assert not out.exists()
        return
    dumped = images.ImageDir(out)
    ended_short = [  # every thread by its id in the images (in a container, its PID namespace's)
        regs.ax
        for process in images.read_image(out / images.PSTREE.filename()).entries
        for tid in process.threads
        if (regs := dumped.entry(images.CORE, tid).thread_info.gpregs).orig_ax == WRITE and 0 < regs.ax < STREAM_WRITE
    ]
    restored = restore(rec, out, log=lambda m: None)
    assert restored.ok, (
        f"paused {rec.manifest['pause_delay_seconds']} s after ready, a write ended after {ended_short} bytes:"
        f" {restored.detail}\n{restored.restore_log[-3000:]}"
    )


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


# ---- a hostile or unusual guest, on fake memory laid out by each real ISF -----------------


class FakeTcp(FakeKernelMemory):
    def sock(self, state: int, family: int = AF_INET) -> Struct:
        a = self.alloc("tcp_sock")
        self.set(a, "sock", "__sk_common.skc_family", family)
        self.set(a, "sock", "__sk_common.skc_state", state)
        self.set(a, "sock", "sk_type", SOCK_STREAM)
        self.set(a, "sock", "sk_protocol", IPPROTO_TCP)
        self.ring(a + self.symbols.struct_type("sock").member("sk_receive_queue").offset, [])
        return self.prog.struct("sock", a)

    def ring(self, head: int, skbs: list[int], qlen: int | None = None) -> None:
        nodes = [head, *skbs, head]
        for a, b in zip(nodes, nodes[1:]):
            self.write_u64(a, b)  # next
            self.write_u64(b + 8, a)  # prev
        self.set(head, "sk_buff_head", "qlen", len(skbs) if qlen is None else qlen)

    def skb(self, seq: int, data: bytes) -> int:
        skb = self.alloc("sk_buff")
        buf = self.alloc(max(len(data), 1))
        self.write(buf, data)
        self.set(skb, "sk_buff", "len", len(data))
        self.set(skb, "sk_buff", "data", buf)
        self.set(skb + self.symbols.struct_type("sk_buff").member("cb").offset, "tcp_skb_cb", "seq", seq)
        return skb


@pytest.fixture(params=KERNELS)
def fake(request):
    return FakeTcp(request.param)


@pytest.mark.parametrize("state,name", [(2, "SYN_SENT"), (4, "FIN_WAIT1"), (6, "TIME_WAIT"), (8, "CLOSE_WAIT")])
def test_a_connection_in_a_state_other_than_established_is_refused_naming_it(fake, state, name):
    assert_one_line_error(
        lambda: _tcp_as_criu_sees_it(fake.sock(state), "an IPv4 TCP socket (socket:[7])"),
        f"an IPv4 TCP socket (socket:[7]) is a TCP connection in state {name}: only established",
        UnsupportedError,
    )


def test_a_listener_with_connections_not_yet_accepted_is_refused(fake):
    sk = fake.sock(TCP_LISTEN)
    fake.set(sk.address_, "sock", "sk_ack_backlog", 2)
    fake.set(sk.address_, "sock", "sk_max_ack_backlog", 16)
    assert_one_line_error(
        lambda: _tcp_as_criu_sees_it(sk, "x"), "x is a listener with 2 connection(s)", UnsupportedError
    )
    fake.set(sk.address_, "sock", "sk_ack_backlog", 0)
    assert _tcp_as_criu_sees_it(sk, "x") == (16, 0, True)


@pytest.mark.parametrize(
    "member,value,reason",
    [
        ("repair", 1, "TCP repair mode"),
        ("fastopen_rsk", 0xFFFF888000001000, "Fast Open"),
        ("urg_data", 0x100, "urgent"),
        ("out_of_order_queue.rb_node", 0xFFFF888000002000, "out of order"),
    ],
)
def test_an_established_connection_criu_could_not_save_either_is_refused(fake, member, value, reason):
    sk = fake.sock(TCP_ESTABLISHED)
    assert tcp_unsaveable_reason(sk) is None
    fake.set(sk.address_, "tcp_sock", member, value)
    assert reason in (tcp_unsaveable_reason(sk) or "")


def test_unread_bytes_start_at_copied_seq_across_skbs_and_sequence_wrap(fake):
    sk = fake.sock(TCP_ESTABLISHED)
    start = 0xFFFFFFFC  # the sequence space wraps inside the second skb
    skbs = [fake.skb(start - 6, b"oldold"), fake.skb(start, b"abcdef"), fake.skb((start + 6) & 0xFFFFFFFF, b"gh")]
    fake.ring(sk.address_ + fake.symbols.struct_type("sock").member("sk_receive_queue").offset, skbs)
    fake.set(sk.address_, "tcp_sock", "copied_seq", (start + 2) & 0xFFFFFFFF)
    fake.set(sk.address_, "tcp_sock", "rcv_nxt", (start + 8) & 0xFFFFFFFF)
    assert tcp_inq(sk) == 6
    assert tcp_receive_queue_bytes(sk, 6) == b"cdefgh"
    assert_one_line_error(lambda: tcp_receive_queue_bytes(sk, 9), "holds 6 of 9 bytes")


def test_a_received_fin_is_not_a_byte_to_read(fake):
    sk = fake.sock(TCP_ESTABLISHED)
    fake.set(sk.address_, "tcp_sock", "copied_seq", 10)
    fake.set(sk.address_, "tcp_sock", "rcv_nxt", 14)
    assert tcp_inq(sk) == 4
    done = fake.symbols.enum_value("sock_flags", "SOCK_DONE")
    fake.set(sk.address_, "sock", "__sk_common.skc_flags", 1 << done)
    assert tcp_inq(sk) == 3


def test_a_receive_queue_that_never_closes_is_a_one_line_error(fake):
    sk = fake.sock(TCP_ESTABLISHED)
    head = sk.address_ + fake.symbols.struct_type("sock").member("sk_receive_queue").offset
    a, b = fake.skb(0, b"x"), fake.skb(1, b"y")
    fake.ring(head, [a, b], qlen=2)
    fake.write_u64(b, a)  # b -> a: a loop that never reaches the head
    fake.set(sk.address_, "tcp_sock", "rcv_nxt", 5)
    assert_one_line_error(lambda: tcp_receive_queue_bytes(sk, 5), "does not close")


def test_the_timestamp_is_the_connections_clock_at_the_pause(fake):
    sk = fake.sock(TCP_ESTABLISHED)
    tp = fake.prog.struct("tcp_sock", sk.address_)
    fake.set(sk.address_, "tcp_sock", "tsoffset", 0xFFFFFF00)
    assert tcp_timestamp(tp, 5_000_000_000) == (5000 + 0xFFFFFF00) & 0xFFFFFFFF  # ms, wrapping
    if tp.has_member_("tcp_usec_ts"):  # 6.7+: microseconds where negotiated, marked by the low bit
        fake.set(sk.address_, "tcp_sock", "tcp_usec_ts", 1)
        assert tcp_timestamp(tp, 5_000_000_000) == ((5_000_000 + 0xFFFFFF00) & 0xFFFFFFFF) | 1


@pytest.mark.parametrize(
    "flags,passcred,passsec", [(1 << 2, False, False), (1 << 3, True, False), (1 << 4, False, True)]
)
def test_so_passcred_and_so_passsec_are_their_own_socket_flags(fake, flags, passcred, passsec):
    """include/linux/net.h: bit 2 is SOCK_NOSPACE (a writer waited for room), 3 SOCK_PASSCRED,
    4 SOCK_PASSSEC; reading bits 1 and 2 saved a socket whose writer had blocked as SO_PASSSEC."""
    sk = fake.sock(TCP_LISTEN)
    sock = fake.alloc("socket")
    fake.set(sock, "socket", "flags", flags)
    opts = socket_options(fake.prog, fake.prog.struct("socket", sock), sk, "a socket")
    if sk.has_member_("sk_scm_credentials"):
        # 6.16+: bits of struct sock that UNIX and netlink sockets alone have; an inet socket has
        # neither, whatever its socket's flags hold
        assert (opts.passcred, opts.passsec) == (False, False)
    else:
        assert (opts.passcred, opts.passsec) == (passcred, passsec)


def _devices(fake: FakeTcp, sk: Struct, names: list[bytes]) -> list[int]:
    """A network namespace for `sk` whose device list holds `names` (ifindex 1, 2, ...)."""
    net = fake.alloc("net")
    head = net + fake.symbols.struct_type("net").member("dev_base_head").offset
    link = fake.symbols.struct_type("net_device").member("dev_list").offset
    devs = []
    for index, name in enumerate(names, 1):
        dev = fake.alloc("net_device")
        fake.set(dev, "net_device", "ifindex", index)
        fake.set(dev, "net_device", "name", name + b"\0")
        devs.append(dev)
    chain = [head, *(d + link for d in devs)]
    for a, b in zip(chain, chain[1:] + [head]):
        fake.write_u64(a, b)
        fake.write_u64(b + 8, a)
    fake.set(sk.address_, "sock", "__sk_common.skc_net.net", net)
    return devs


def test_so_bindtodevice_is_the_device_name_in_the_sockets_namespace(fake):
    """zdtm sock_opts01: criu saves SO_BINDTODEVICE as the device's name (so_bound_dev) and binds
    the restored socket there; a device index its namespace lacks is refused (getsockopt fails)."""
    sk = fake.sock(TCP_LISTEN)
    sock = fake.prog.struct("socket", fake.alloc("socket"))
    devs = _devices(fake, sk, [b"lo", b"eth0"])
    assert socket_options(fake.prog, sock, sk, "a socket").bound_dev is None
    fake.set(sk.address_, "sock", "__sk_common.skc_bound_dev_if", 2)
    assert socket_options(fake.prog, sock, sk, "a socket").bound_dev == "eth0"
    assert sk_opts_entry(socket_options(fake.prog, sock, sk, "a socket")).so_bound_dev == "eth0"
    fake.set(sk.address_, "sock", "__sk_common.skc_bound_dev_if", 7)
    assert_one_line_error(
        lambda: socket_options(fake.prog, sock, sk, "a socket"),
        "a socket is bound to network device 7, which its network namespace lacks",
        UnsupportedError,
    )
    link = fake.symbols.struct_type("net_device").member("dev_list").offset
    fake.write_u64(devs[1] + link, devs[0] + link)  # eth0 -> lo: a loop that never reaches the head
    assert_one_line_error(lambda: socket_options(fake.prog, sock, sk, "a socket"), "devices of net namespace")


def test_a_queue_longer_than_its_buffer_could_hold_is_a_one_line_error(fake):
    sk = fake.sock(TCP_ESTABLISHED)
    fake.set(sk.address_, "sock", "sk_sndbuf", 4096)
    fake.set(sk.address_, "tcp_sock", "write_seq", 0xF0000000)  # 4 GiB unacknowledged, says the guest
    assert_one_line_error(lambda: tcp_send_queue_bytes(sk, tcp_outq_len(sk)), "which a buffer of 4096 cannot hold")


def test_overlap_is_the_longest_tail_of_one_that_heads_the_other():
    assert [_overlap(b"xxabc", h) for h in (b"abcdef", b"bcd", b"cab", b"zz")] == [3, 2, 1, 0]
    assert (_overlap(b"ababa", b"aba"), _overlap(b"", b"a"), _overlap(b"aaaa", b"aab")) == (3, 0, 2)


def _in_namespace(fake: FakeTcp, sk: Struct, default_ttl: int) -> None:
    net = fake.alloc("net")
    fake.set(net, "net", "ipv4.sysctl_ip_default_ttl", default_ttl)
    fake.set(sk.address_, "sock", "__sk_common.skc_net.net", net)


def test_ip_options_read_as_getsockopt_returns_them(fake):
    """CRIU 4.x's ip_opts: IP_TTL of a socket that never set one is its namespace's default;
    IP_PKTINFO is a bit of cmsg_flags before 6.6 and of inet_flags after; an IPv6 socket's
    IPV6_RECVPKTINFO is a bit of its ipv6_pinfo."""
    sk = fake.sock(TCP_LISTEN)
    _in_namespace(fake, sk, 61)
    fake.set(sk.address_, "inet_sock", "uc_ttl", -1)
    assert inet_ip_options(sk) == (False, 0, 61)
    fake.set(sk.address_, "inet_sock", "uc_ttl", 7)
    fake.set(sk.address_, "inet_sock", "tos", 0x10)
    inet = fake.prog.struct("inet_sock", sk.address_)
    if inet.has_member_("cmsg_flags"):
        fake.set(sk.address_, "inet_sock", "cmsg_flags", 1)
    else:
        fake.set(sk.address_, "inet_sock", "inet_flags", 1 << fake.symbols.enumerator("INET_FLAGS_PKTINFO"))
    assert inet_ip_options(sk) == (True, 0x10, 7)

    sk6 = fake.sock(TCP_LISTEN, family=10)  # AF_INET6
    pinfo = fake.alloc("ipv6_pinfo")
    fake.set(sk6.address_, "inet_sock", "pinet6", pinfo)
    assert inet_ip_options(sk6) == (False, 0, 0)
    fake.set(pinfo, "ipv6_pinfo", "rxopt.bits.rxinfo", 1)
    assert inet_ip_options(sk6) == (True, 0, 0)


def test_tcp_opts_hold_what_tcp_getsockopt_returns_leaving_zeros_out(fake):
    sk = fake.sock(TCP_ESTABLISHED)
    net = fake.alloc("net")
    for name, value in (("probes", 9), ("time", 7200 * 250), ("intvl", 75 * 250)):
        fake.set(net, "net", f"ipv4.sysctl_tcp_keepalive_{name}", value)
    fake.set(sk.address_, "sock", "__sk_common.skc_net.net", net)
    fake.set(sk.address_, "tcp_sock", "nonagle", 2)  # TCP_NAGLE_CORK
    fake.set(sk.address_, "tcp_sock", "keepalive_probes", 3)
    assert tcp_nagle(sk) == (False, True)
    entry = tcp_opts_entry(tcp_nagle(sk), (3, 7200, 75))
    assert (entry.cork, entry.HasField("nodelay"), entry.keepcnt, entry.keepidle) == (True, False, 3, 7200)
    assert tcp_keepalive(sk)[0] == 3
