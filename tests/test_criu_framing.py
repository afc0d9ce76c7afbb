"""Property tests of the image framing: random entries round-trip exactly, and truncated or
corrupted images fail only with ImageError (one line), never with another exception."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ovm_offline.criu import images, pb, show
from ovm_offline.criu.build.files import GHOST_CHUNKS_THRESH, ghost_image
from ovm_offline.criu.images import ImageError
from ovm_offline.state import GhostFile

task_pb, mm_pb, files_pb, net_pb = pb.criu_task_pb2, pb.criu_mm_pb2, pb.criu_files_pb2, pb.criu_net_pb2

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)

pstree = st.builds(
    lambda pid, ppid, threads: task_pb.pstree_entry(pid=pid, ppid=ppid, pgid=pid, sid=pid, threads=[pid, *threads]),
    u32, u32, st.lists(u32, max_size=5),
)  # fmt: skip
fdinfo = st.builds(
    lambda i, fl, t, fd: files_pb.fdinfo_entry(id=i, flags=fl, type=t, fd=fd),
    u32, st.integers(0, 1), st.sampled_from([v.number for v in files_pb.fd_types.DESCRIPTOR.values]), u32,
)  # fmt: skip
reg_file = st.builds(
    lambda i, name, pos, size: files_pb.file_entry(
        type=files_pb.REG, id=i,
        reg=files_pb.reg_file_entry(
            id=i, flags=0o100000, pos=pos, name=name, size=size, mode=0o100644,
            fown=pb.criu_common_pb2.fown_entry(uid=0, euid=0, signum=0, pid_type=0, pid=0),
        ),
    ),
    u32, st.text(max_size=40), u64, u64,
)  # fmt: skip
pipe_data = st.binary(max_size=300).flatmap(
    lambda data: st.builds(lambda pid: (files_pb.pipe_data_entry(pipe_id=pid, bytes=len(data), size=65536), data), u32)
)
sk_queue = st.binary(max_size=200).map(lambda data: (net_pb.sk_packet_entry(id_for=3, length=len(data)), data))
pagemap_runs = st.lists(
    st.builds(lambda v, n, f: mm_pb.pagemap_entry(vaddr=v * 4096, nr_pages=n, flags=f), u32, u32, st.sampled_from([1, 2, 4, 6])),
    max_size=20,
)  # fmt: skip
core = st.builds(
    lambda comm, sigset, st_: task_pb.core_entry(
        mtype=task_pb.core_entry.X86_64,
        tc=task_pb.task_core_entry(task_state=st_, exit_code=0, personality=0, flags=0, blk_sigset=sigset, comm=comm),
    ),
    st.text(max_size=16), u64, st.sampled_from([1, 2, 3, 6]),
)  # fmt: skip


@st.composite
def ghost(draw) -> GhostFile:
    """A ghost file's inode: a directory, or a regular file of up to 10 pages with stretches of
    data (page-aligned, as a tmpfs's page cache holds them) and holes."""
    times = st.tuples(st.integers(0, 2**40), st.integers(0, 999_999_999))
    common = dict(
        dev=draw(u32), ino=draw(u64), uid=draw(u32), gid=draw(u32), rdev=0, atime=draw(times), mtime=draw(times)
    )
    if draw(st.booleans()):
        return GhostFile(mode=0o040755, size=4096, **common)
    size = draw(st.integers(0, 10 * 4096))
    pages = sorted(draw(st.sets(st.integers(0, max(0, (size - 1) // 4096)), max_size=10))) if size else []
    data: list[tuple[int, bytes]] = []
    for p in pages:
        piece = bytes([p + 1]) * (min(size, (p + 1) * 4096) - p * 4096)
        if data and data[-1][0] + len(data[-1][1]) == p * 4096:
            data[-1] = (data[-1][0], data[-1][1] + piece)
        else:
            data.append((p * 4096, piece))
    return GhostFile(mode=0o100600, size=size, data=data, **common)


def _ghost_case(g: GhostFile):
    image = ghost_image(1, g)
    return image.kind, image.entries, image.payloads


def cases() -> st.SearchStrategy[tuple[images.ImageKind, list, list[bytes] | None]]:
    return st.one_of(
        st.lists(pstree, max_size=8).map(lambda es: (images.PSTREE, es, None)),
        st.lists(fdinfo, max_size=8).map(lambda es: (images.FDINFO, es, None)),
        st.lists(reg_file, max_size=6).map(lambda es: (images.FILES, es, None)),
        st.lists(pipe_data, max_size=6).map(lambda ps: (images.PIPES_DATA, [e for e, _ in ps], [d for _, d in ps])),
        st.lists(sk_queue, max_size=6).map(lambda ps: (images.SK_QUEUES, [e for e, _ in ps], [d for _, d in ps])),
        pagemap_runs.map(lambda rs: (images.PAGEMAP, [mm_pb.pagemap_head(pages_id=1), *rs], None)),
        core.map(lambda c: (images.CORE, [c], None)),
        st.just((images.INVENTORY, [task_pb.inventory_entry(img_version=2, ns_per_id=True)], None)),
        st.just((images.STATS, [task_pb.stats_entry()], None)),
        ghost().map(_ghost_case),
    )


@settings(max_examples=300, deadline=None)
@given(cases())
def test_random_entries_round_trip(case):
    kind, entries, payloads = case
    data = images.encode_image(kind, entries, payloads)
    img = images.decode_image(data, kind.pattern)
    assert img.kind is kind
    assert img.entries == entries
    assert img.payloads == (payloads if payloads is not None else [b""] * len(entries))
    assert images.encode_image(kind, img.entries, img.payloads) == data


def decode_or_image_error(data: bytes, name: str) -> None:
    try:
        img = images.decode_image(data, name)
    except ImageError as e:
        assert "\n" not in str(e)
        return
    show.image_to_dict(img, "pretty")  # whatever decodes must also render
    show.image_to_dict(img, "crit")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.data())
def test_truncation_gives_only_image_errors(case, data):
    kind, entries, payloads = case
    blob = images.encode_image(kind, entries, payloads)
    cut = data.draw(st.integers(0, len(blob)))
    decode_or_image_error(blob[:cut], kind.pattern)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.data())
def test_corruption_gives_only_image_errors(case, data):
    kind, entries, payloads = case
    blob = bytearray(images.encode_image(kind, entries, payloads))
    for _ in range(data.draw(st.integers(1, 8))):
        if not blob:
            break
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    decode_or_image_error(bytes(blob), kind.pattern)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([images.COMMON_MAGIC, images.SERVICE_MAGIC, None]))
def test_random_bytes_give_only_image_errors(tail, prefix):
    head = b"" if prefix is None else prefix.to_bytes(4, "little")
    decode_or_image_error(head + tail, "random.img")


@pytest.mark.parametrize("kind", [k for k in images.KINDS if not k.raw], ids=lambda k: k.name)
def test_every_kind_has_a_distinct_magic_and_a_matching_name(kind):
    assert images.KINDS_BY_MAGIC[kind.magic] is kind
    name = kind.filename(123) if "{id}" in kind.pattern else kind.pattern
    assert images.kind_for_filename(name) is kind
    empty = [] if not kind.single else None
    if empty is not None and kind.head is None:
        assert images.decode_image(images.encode_image(kind, []), name).entries == []


@settings(max_examples=200, deadline=None)
@given(ghost())
def test_a_ghost_file_holds_its_contents_whole_or_as_chunks_as_criu_writes_them(g):
    """criu's dump_ghost_file: under GHOST_CHUNKS_THRESH the whole file follows the entry, holes
    as zeros; from it on, a chunk entry before each stretch of data, holes left out."""
    image = images.decode_image(images.encode_image(*_ghost_case(g)), "ghost-file-1.img")
    head, whole = image.entries[0], bytearray(g.size)
    for off, data in g.data:
        whole[off : off + len(data)] = data
    if g.mode & 0o170000 != 0o100000:
        assert (head.chunks, image.entries[1:], image.payloads) == (False, [], [b""])
    elif g.size < GHOST_CHUNKS_THRESH:
        assert (head.chunks, image.payloads) == (False, [bytes(whole)])
    else:
        assert (head.chunks, head.size) == (True, g.size)
        assert [(c.off, d) for c, d in zip(image.entries[1:], image.payloads[1:])] == g.data
    assert (head.mtim.tv_sec, head.mtim.tv_usec) == (g.mtime[0], g.mtime[1] // 1000)
