"""`ovm-offline dump` of FIFOs and UNIX domain sockets (the ipc workload: a FIFO, stream
and datagram socket pairs, a named listener with an accepted connection and a named
datagram socket, each with data queued), and the skb queue walk on hostile memory.

The general gates (diff against criu's images, byte-identical from every source, crit,
criu restore) run for ipc in tests/test_dump.py like for every workload."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline.criu import images, pb
from ovm_offline.kernel.net.sock import MAX_QUEUED_SKBS, skb_queue
from ovm_offline.kernel.net.unix import unix_name, unix_receive_queue
from tests.support.checks import assert_one_line_error
from tests.support.cli import ovm
from tests.support.memory import FAKE_POB
from tests.support.pipes import FakePipes

KERNELS = list(kernels.KERNELS)

# what corpus/workloads/ipc.c queues before it is checkpointed
FIFO_MSG = b"fifo: queued by the child before the checkpoint"
DGRAMS_TO_R = [b"dpair-1", b"dpair-2: a longer datagram", b"dpair-3:x"]
NAMED_DGRAMS = [b"named-dgram-one", b"named-dgram-two!"]
RECORDS = [b"seqpacket-1", b"seqpacket-two"]
ABSTRACT = [b"abstract-hello"]
BIG = bytes(ord("a") + (i * 7 + i // 26) % 26 for i in range(12000))  # kept partly in page fragments
STREAMS = {
    b"spair: stream bytes the child wrote for the root",
    b"spair: stream bytes the root wrote for the child, twice as long as needed",
    b"listener: the client's bytes, waiting in the accepted socket" + BIG,
    b"listener: the accepted socket's bytes, waiting in the client",
}
SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 5
TCP_ESTABLISHED, TCP_LISTEN = 1, 10


def _usks(d):
    files = images.read_image(d / images.FILES.filename()).entries
    return {e.id: e.usk for e in files if e.HasField("usk")}


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_fifo_is_saved_with_its_path_and_queued_bytes(dumped, kernel):
    d = dumped(kernel, "ipc")
    files = images.read_image(d / images.FILES.filename()).entries
    fifos = [e.fifo for e in files if e.HasField("fifo")]
    regs = {e.id: e.reg for e in files if e.HasField("reg")}
    assert len(fifos) == 2 and len({f.pipe_id for f in fifos}) == 1  # both ends of one FIFO
    assert {regs[f.regf_id].name for f in fifos} == {"/run/ovm/ipc/fifo"}
    assert all(regs[f.regf_id].mode == 0o10640 for f in fifos)
    data = images.read_image(d / images.FIFO_DATA.filename())
    assert [(e.pipe_id, p) for e, p in zip(data.entries, data.payloads)] == [(fifos[0].pipe_id, FIFO_MSG)]


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_unix_sockets_pair_up_and_keep_their_queues_and_boundaries(dumped, kernel):
    d = dumped(kernel, "ipc")
    usk = _usks(d)
    by_ino = {u.ino: u for u in usk.values()}
    # every connected socket's peer is dumped too; pairs point at each other
    for u in usk.values():
        if u.peer:
            peer = by_ino[u.peer]
            assert peer.peer == u.ino or peer.name, (u, peer)
    listener = [u for u in usk.values() if u.state == TCP_LISTEN]
    assert len(listener) == 1 and listener[0].name == b"/run/ovm/ipc/stream.sock\0"
    # the connection the listener has not accepted (zdtm sockets00): its client names the
    # listener as its peer, as criu writes it, and restore connects it there again
    assert [u.state for u in usk.values() if u.peer == listener[0].ino] == [TCP_ESTABLISHED]
    assert listener[0].backlog == 4 and listener[0].file_perms.mode & 0o170000 == 0o140000
    named_dgram = [u for u in usk.values() if u.name == b"/run/ovm/ipc/dgram.sock\0"]
    assert len(named_dgram) == 1 and named_dgram[0].type == SOCK_DGRAM

    queues = images.read_image(d / images.SK_QUEUES.filename())
    got: dict[int, list[bytes]] = {}
    for e, payload in zip(queues.entries, queues.payloads):
        assert e.length == len(payload)
        got.setdefault(e.id_for, []).append(payload)
    dgram_queues = sorted(v for k, v in got.items() if usk[k].type == SOCK_DGRAM)
    assert dgram_queues == sorted([DGRAMS_TO_R, NAMED_DGRAMS, ABSTRACT])  # one entry per datagram, in order
    assert got[named_dgram[0].id] == NAMED_DGRAMS
    abstract = [u for u in usk.values() if u.name == b"\0ovm-ipc-abstract"]
    assert len(abstract) == 1 and not abstract[0].HasField("file_perms") and got[abstract[0].id] == ABSTRACT
    assert [v for k, v in got.items() if usk[k].type == SOCK_SEQPACKET] == [RECORDS]
    assert {b"".join(v) for k, v in got.items() if usk[k].type == SOCK_STREAM} == STREAMS
    # a sender's backlog is the truesize of what it sent and its peer has not read
    for u in usk.values():
        if u.state == TCP_ESTABLISHED and u.peer in by_ino and by_ino[u.peer].id in got:
            assert u.backlog > 0


@pytest.mark.guest
def test_sockets_connected_outside_the_dump_are_named_and_can_be_left_out(recording, tmp_path):
    """Dumping only the child leaves its connected sockets' peers behind: refused, naming
    each fd, unless asked to skip them; the FIFO and pipe ends are saved either way."""
    rec = recording("6.1", "ipc")
    child = next(pid for pid in rec.manifest["members"] if pid != rec.manifest["root_pid"])
    out = tmp_path / "out"
    refused = ovm("dump", str(rec.elf), "--pid", str(child), "-D", str(out))
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and "cannot save 6 open file(s)" in line, line
    assert line.count("which no dumped process holds") == 5
    assert line.count("connecting to a listener no dumped process holds") == 1  # its pending connection
    assert not out.exists()
    skipped = ovm("dump", str(rec.elf), "--pid", str(child), "-D", str(out), "--skip-unsupported")
    assert skipped.returncode == 0, skipped.stderr
    kinds = [e.type for e in images.read_image(out / images.FILES.filename()).entries]
    # only the unconnected datagram socket it sends to the abstract name with stays
    assert kinds.count(pb.criu_files_pb2.UNIXSK) == 1 and pb.criu_files_pb2.FIFO in kinds


# --- skb queues in fake memory laid out by the real ISFs ---------------------------------------


class FakeSockets(FakePipes):
    def sk_buff_head(self, skbs: list[int], qlen: int | None = None) -> int:
        head = self.alloc(64)
        ring = [head, *skbs, head]
        for a, b in zip(ring, ring[1:]):
            self.src.write_u64(a - FAKE_POB, b)  # next
            self.src.write_u64(b - FAKE_POB + 8, a)  # prev
        self.set(head, "sk_buff_head", "qlen", len(skbs) if qlen is None else qlen)
        return head

    def skb(self, data: bytes, consumed: int = 0) -> int:
        skb = self.alloc(self.symbols.struct_type("sk_buff").size)
        buf = self.alloc(max(len(data), 1))
        self.src.write(buf - FAKE_POB, data)
        self.set(skb, "sk_buff", "len", len(data))
        self.set(skb, "sk_buff", "data", buf)
        cb = skb + self.symbols.struct_type("sk_buff").member("cb").offset
        self.set(cb, "unix_skb_parms", "consumed", consumed)
        return skb

    def paged_skb(self, head: bytes, frags: list[tuple[bytes, int]]) -> int:
        """An skb with `head` in its linear part and page fragments (data, offset in page)."""
        skb = self.skb(head)
        total = len(head) + sum(len(d) for d, _ in frags)
        self.set(skb, "sk_buff", "len", total)
        self.set(skb, "sk_buff", "data_len", total - len(head))
        buf = self.alloc(4096)
        shinfo = buf + 1024
        self.set(skb, "sk_buff", "head", buf)
        self.set(skb, "sk_buff", "end", 1024)
        self.set(shinfo, "skb_shared_info", "nr_frags", len(frags))
        frag_t = self.symbols.struct_type("skb_frag_t")
        frags_at = shinfo + self.symbols.struct_type("skb_shared_info").member("frags").offset
        page_field = "bv_page" if frag_t.has_member("bv_page") else "netmem"
        len_field, off_field = ("bv_len", "bv_offset") if frag_t.has_member("bv_len") else ("len", "offset")
        for i, (data, offset) in enumerate(frags):
            f = frags_at + i * frag_t.size
            self.set(f, "skb_frag_t", page_field, self.data_page(data, offset))
            self.set(f, "skb_frag_t", len_field, len(data))
            self.set(f, "skb_frag_t", off_field, offset)
        return skb

    def unix_sock(self, sk_type: int, skbs: list[int], qlen: int | None = None) -> object:
        u = self.alloc(self.symbols.struct_type("unix_sock").size)
        head = self.sk_buff_head(skbs, qlen)
        q = self.symbols.struct_type("sock").member("sk_receive_queue").offset
        # copy the head into the sock: next/prev/qlen, and make the ring close on it
        raw = self.src.read(head - FAKE_POB, 24)
        self.src.write(u - FAKE_POB + q, raw)
        first, last = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little")
        if first != head:
            self.src.write_u64(last - FAKE_POB, u + q)
            self.src.write_u64(first - FAKE_POB + 8, u + q)
        else:
            self.src.write_u64(u - FAKE_POB + q, u + q)
            self.src.write_u64(u - FAKE_POB + q + 8, u + q)
        self.set(u, "sock", "sk_type", sk_type)
        return self.prog.struct("unix_sock", u)


@pytest.fixture(params=KERNELS)
def fake(request):
    return FakeSockets(request.param)


def test_stream_queue_skips_consumed_bytes(fake):
    u = fake.unix_sock(SOCK_STREAM, [fake.skb(b"xxxhello", consumed=3), fake.skb(b" world")])
    assert [s.data for s in unix_receive_queue(u)] == [b"hello", b" world"]


def test_paged_skbs_give_their_head_then_their_page_fragments(fake):
    skb = fake.paged_skb(b"head|", [(b"first fragment|", 100), (b"second", 0)])
    u = fake.unix_sock(SOCK_STREAM, [skb])
    assert [s.data for s in unix_receive_queue(u)] == [b"head|first fragment|second"]


def test_a_fragment_longer_than_the_paged_bytes_is_refused(fake):
    skb = fake.paged_skb(b"head|", [(b"abc", 0)])
    fake.set(skb, "sk_buff", "data_len", 2)
    fake.set(skb, "sk_buff", "len", 7)
    u = fake.unix_sock(SOCK_STREAM, [skb])
    assert_one_line_error(lambda: unix_receive_queue(u), "exceeds")


def test_dgram_queue_keeps_every_datagram(fake):
    u = fake.unix_sock(SOCK_DGRAM, [fake.skb(b"one"), fake.skb(b""), fake.skb(b"three")])
    assert [s.data for s in unix_receive_queue(u)] == [b"one", b"", b"three"]


def test_a_queue_that_does_not_close_is_refused(fake):
    a, b = fake.skb(b"a"), fake.skb(b"b")
    u = fake.unix_sock(SOCK_DGRAM, [a, b])
    fake.src.write_u64(b - FAKE_POB, a)  # b -> a: a loop that never reaches the head again
    assert_one_line_error(lambda: unix_receive_queue(u), "does not close")


def test_an_absurd_queue_length_is_refused_before_walking(fake):
    head = fake.sk_buff_head([], qlen=MAX_QUEUED_SKBS + 1)
    assert_one_line_error(lambda: list(skb_queue(head, fake.prog, "sk_receive_queue")), "claims")


def test_an_absurd_skb_length_is_refused(fake):
    skb = fake.skb(b"x")
    fake.set(skb, "sk_buff", "len", 1 << 30)
    u = fake.unix_sock(SOCK_DGRAM, [skb])
    assert_one_line_error(lambda: unix_receive_queue(u), "impossible length")


def test_an_absurd_address_length_is_refused(fake):
    u = fake.unix_sock(SOCK_STREAM, [])
    addr = fake.alloc(256)
    fake.set(addr, "unix_address", "len", 4000)
    fake.set(u.address_, "unix_sock", "addr", addr)
    assert_one_line_error(lambda: unix_name(u), "impossible length")


def test_refusals_name_what_kind_of_file_cannot_be_saved():
    from ovm_offline.filekinds import describe, kind_named
    from ovm_offline.state import FileIdentity, OpenFile

    def f(kind, path: str) -> OpenFile:
        identity = FileIdentity(path=path, dev=0, ino=9, size=0, mode=0o140777)
        return OpenFile(key=1, kind=kind, identity=identity, flags=2, pos=0)

    assert describe(kind_named("inet"), f("inet", "socket:[9]")) == "an IPv4/IPv6 socket (socket:[9])"
    assert describe(kind_named("netlink"), f("netlink", "socket:[9]")) == "a netlink socket (socket:[9])"
    assert describe(kind_named("anon"), f("anon", "anon_inode:[x]")) == "an anonymous-inode file (anon_inode:[x])"
    assert kind_named("inet").saved is not None and kind_named("netlink").saved is None


def test_leaving_out_a_socket_takes_out_the_epoll_watching_it():
    """A socket connected outside the dump is left out; an epoll watching it would make
    criu's restore fail, so it is left out too, and named."""
    from types import SimpleNamespace as NS

    from ovm_offline.filekinds import leave_out_dangling_files
    from ovm_offline.filekinds.eventpoll import EpollState, EpollTarget
    from ovm_offline.filekinds.unix import UnixSocketState
    from ovm_offline.state import Fd, FileIdentity, OpenFile

    def fd(n, kind, state):
        identity = FileIdentity(path=f"x:[{n}]", dev=0, ino=n, size=0, mode=0)
        return Fd(fd=n, file=OpenFile(key=n, kind=kind, identity=identity, flags=2, pos=0, state=state), cloexec=False)

    def sock(n, ino, peer):
        state = UnixSocketState(ino, 1, 1, peer, 0, 0, b"", options=NS(), net_ns=1)
        return fd(n, "unix", state)

    def epoll(n, target):
        return fd(n, "eventpoll", EpollState(targets=[EpollTarget(fd=target, events=1, data=0, dev=0, ino=1, pos=0)]))

    lonely = sock(3, 100, 999)  # its peer is in no dumped process
    pair = [sock(4, 200, 201), sock(5, 201, 200)]
    proc = NS(global_pid=10, comm="x", fds=[lonely, *pair, epoll(6, 3), epoll(7, 6)])
    refusals: list = []
    leave_out_dangling_files([proc], refusals)
    assert [f.fd for f in proc.fds] == [4, 5]
    assert [str(r) for r in refusals] == [
        "PID 10 (x) fd 3: a UNIX socket (socket:[100]) connected to socket:[999], which no dumped process holds",
        "PID 10 (x) fd 6: an epoll watching fd 3, which is left out",
        "PID 10 (x) fd 7: an epoll watching fd 6, which is left out",
    ]


def test_a_connection_not_yet_accepted_names_its_listener_and_both_must_be_dumped():
    """criu's "icons": a listening socket's connections not yet accepted are the sockets that
    connected; each of those is written with the listener as its peer (whichever is met first),
    and either without the other is left out, named."""
    from types import SimpleNamespace as NS

    from ovm_offline.criu.build.files import FileTable
    from ovm_offline.filekinds import leave_out_dangling_files
    from ovm_offline.filekinds.unix import UnixSocketState, UnixWriter
    from ovm_offline.state import Fd, FileIdentity, OpenFile, Owner

    options = NS(sndbuf=0, rcvbuf=0, snd_timeout=(0, 0), rcv_timeout=(0, 0), reuseaddr=False, priority=0,
                 rcvlowat=0, mark=0, passcred=False, passsec=False, dontroute=False, no_check=False,
                 reuseport=False, broadcast=False, keepalive=False, oobinline=False, buf_lock=None, bound_dev=None)  # fmt: skip

    def fd(n, state):
        identity = FileIdentity(path=f"socket:[{state.ino}]", dev=0, ino=state.ino, size=0, mode=0o140777)
        return Fd(n, OpenFile(key=n, kind="unix", identity=identity, flags=2, pos=0, owner=Owner(), state=state), False)

    listener = UnixSocketState(100, 1, TCP_LISTEN, 0, 4, 0, b"/l\0", options=options, net_ns=1, pending=[201])
    client = UnixSocketState(201, 1, TCP_ESTABLISHED, 0, 0, 0, b"", options=options, net_ns=1, awaiting_accept=True)
    for order in ([client, listener], [listener, client]):
        table = FileTable({"unix": UnixWriter()})
        ids = [table.open_file(fd(i, s).file) for i, s in enumerate(order, 3)]
        entries = {e.id: e.usk for e in table.entries}
        assert entries[ids[order.index(client)]].peer == 100 and entries[ids[order.index(listener)]].peer == 0
        assert table.images() is not None
    said = []
    for alone in (listener, client):
        proc = NS(global_pid=10, comm="x", fds=[fd(3, alone)])
        refusals: list = []
        leave_out_dangling_files([proc], refusals)
        assert proc.fds == [] and len(refusals) == 1
        said.append(str(refusals[0]))
    assert said == [
        "PID 10 (x) fd 3: a UNIX socket (socket:[100]) listening, with a connection not yet accepted from"
        " socket:[201], which no dumped process holds",
        "PID 10 (x) fd 3: a UNIX socket (socket:[201]) connecting to a listener no dumped process holds",
    ]
