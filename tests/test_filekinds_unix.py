"""A UNIX stream socket's queue as the packets criu's restore sends again (filekinds/unix.py
`stream_reads`): the same bytes in the same order, each skb carrying files (SCM_RIGHTS) a
packet of its own so the files come with the bytes they were sent with, fd-less runs in reads
no longer than criu's peek, and with SO_PASSCRED one writer's bytes per read. The guest side is
the scmrights-stream workload (tests/test_dump_scmrights.py), whose check reads each message
with exactly its files after restore."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ovm_offline.filekinds.unix import stream_reads
from ovm_offline.kernel.net.unix import QueuedSkb


def skb(data: bytes, files: tuple[int, ...] = (), pid: int = 1) -> QueuedSkb:
    return QueuedSkb(address=0, data=data, sender=0, pid=pid, uid=0, gid=0, files=files)


def test_bytes_before_files_are_not_glued_to_them():
    """criu's peek would read "hdxyz" with the files and "wk" with the second: its restore hands
    the files to the read of "hd"."""
    queue = [skb(b"hd"), skb(b"xyz", (0xA, 0xB)), skb(b"w"), skb(b"k", (0xA,))]
    reads = stream_reads(queue, chunk=1000, passcred=False)
    assert [(p.data, p.files) for p in reads] == [(b"hd", ()), (b"xyz", (0xA, 0xB)), (b"w", ()), (b"k", (0xA,))]


def test_runs_without_files_are_glued_across_writers_and_cut_at_the_peek_size():
    reads = stream_reads([skb(b"abc", pid=1), skb(b"defg", pid=2)], chunk=3, passcred=False)
    assert [p.data for p in reads] == [b"abc", b"def", b"g"]
    reads = stream_reads([skb(b"abc", pid=1), skb(b"defg", pid=2)], chunk=3, passcred=True)
    assert [p.data for p in reads] == [b"abc", b"def", b"g"]
    reads = stream_reads([skb(b"ab", pid=1), skb(b"cd", pid=2), skb(b"e", pid=2)], chunk=10, passcred=True)
    assert [p.data for p in reads] == [b"ab", b"cde"]


skbs = st.lists(
    st.builds(
        skb,
        st.binary(min_size=1, max_size=20),
        st.lists(st.integers(1, 50), max_size=3).map(tuple),
        st.integers(1, 3),
    ),
    max_size=12,
)


@given(skbs, st.integers(1, 30), st.booleans())
def test_every_queue_keeps_its_bytes_and_each_skbs_files_with_its_own_bytes(queue, chunk, passcred):
    reads = stream_reads(queue, chunk, passcred)
    assert b"".join(p.data for p in reads) == b"".join(s.data for s in queue)
    assert [(p.data, p.files) for p in reads if p.files] == [(s.data, s.files) for s in queue if s.files]
    assert all(0 < len(p.data) <= chunk for p in reads if not p.files)
    if passcred:  # one read holds one writer's bytes
        writer_of_byte = [s.pid for s in queue for _ in s.data]
        offset = 0
        for p in reads:
            assert len(set(writer_of_byte[offset : offset + len(p.data)])) == 1
            offset += len(p.data)
