"""`ovm-offline dump` of process trees: pipes with data buffered in them (pipetree) and a
PID-namespace container in its own cgroup (container). The images must match `criu dump`'s
of the same stopped tree, be byte-identical from every source, and restore; the pipe ring
walk must survive hostile rings with one-line errors."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline.criu import images
from ovm_offline.errors import GuestDataError
from ovm_offline.kernel.fs.pipe import (
    MAX_RING_SIZE,
    pipe_buffers,
    pipe_read_data,
    pipe_size,
)
from tests.support.checks import assert_one_line_error
from tests.support.pipes import VMEMMAP, FakePipes

KERNELS = list(kernels.KERNELS)


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_pipetree_saves_the_buffered_bytes_in_criu_order(dumped, kernel):
    """pipes-data.img: every pipe once, in the order its read end is first met, with the
    tokens queued in p1 (at least LAG=2 of 24 bytes) and the 64 KiB default capacity."""
    img = images.read_image(dumped(kernel, "pipetree") / images.PIPES_DATA.filename())
    assert len(img.entries) == 4
    assert all(e.size == 65536 and e.bytes == len(p) for e, p in zip(img.entries, img.payloads))
    assert max(e.bytes for e in img.entries) >= 48
    files = images.read_image(dumped(kernel, "pipetree") / images.FILES.filename())
    pipe_ids = {e.pipe.pipe_id for e in files.entries if e.HasField("pipe")}
    assert pipe_ids == {e.pipe_id for e in img.entries}


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_container_is_saved_with_inner_pids_and_its_cgroup(dumped, kernel):
    d = dumped(kernel, "container")
    pstree = images.read_image(d / images.PSTREE.filename()).entries
    assert [(e.pid, e.ppid) for e in pstree] == [(1, 0), (2, 1)]
    cg = images.read_image(d / images.CGROUP.filename()).entries[0]
    assert [(s.ctls[0].name, s.ctls[0].path) for s in cg.sets] == [("", "/ovmbox")]
    assert cg.controllers[0].dirs[0].dir_name == "ovmbox"
    for pid in (1, 2):
        core = images.read_image(d / images.CORE.filename(pid)).entries[0]
        assert core.tc.cg_set == cg.sets[0].id
        ids = images.read_image(d / images.IDS.filename(pid)).entries[0]
        inv = images.read_image(d / images.INVENTORY.filename()).entries[0]
        assert ids.pid_ns_id != inv.root_ids.pid_ns_id and ids.net_ns_id == inv.root_ids.net_ns_id
    assert inv.root_cg_set != cg.sets[0].id


# --- the pipe ring, in fake memory laid out by the real ISFs ----------------------------------


@pytest.fixture(params=["6.1", "6.12"])
def fake(request):
    return FakePipes(request.param)


def test_ring_gives_the_buffered_bytes_in_read_order_across_the_wrap(fake):
    # head and tail run free and wrap at 2^32: slots 15, 0, 1 are occupied
    tail = 2**32 - 1
    pipe = fake.pipe(
        head=(tail + 3) % 2**32,
        tail=tail,
        bufs={
            15: (fake.data_page(b"first-", 100), 100, 6),
            0: (fake.data_page(b"second-"), 0, 7),
            1: (fake.data_page(b"xxthird", 0), 2, 5),
        },
    )
    assert pipe_read_data(fake.prog, pipe) == b"first-second-third"
    assert [b.slot for b in pipe_buffers(fake.prog, pipe)] == [15, 0, 1]
    assert pipe_size(pipe) == 16 * 4096


def test_empty_pipe_reads_nothing(fake):
    pipe = fake.pipe(head=7, tail=7, bufs_addr=0)
    assert pipe_read_data(fake.prog, pipe) == b""
    assert pipe_size(pipe) == 16 * 4096


@pytest.mark.parametrize("ring_size", [0, 12, MAX_RING_SIZE * 2, 2**31])
def test_absurd_ring_sizes_are_refused(fake, ring_size):
    pipe = fake.pipe(head=1, tail=0, ring_size=ring_size, bufs_addr=0)
    assert_one_line_error(lambda: pipe_read_data(fake.prog, pipe), "impossible ring_size")


def test_head_far_from_tail_is_refused_before_any_buffer_is_read(fake):
    pipe = fake.pipe(head=0x7FFF_FFFF, tail=3, bufs_addr=0xDEAD_0000)
    before = fake.src.reads
    assert_one_line_error(lambda: pipe_read_data(fake.prog, pipe), "more than ring_size 16 slots apart")
    assert fake.src.reads - before < 16  # the pipe_inode_info fields only
    # tail ahead of head is the same thing seen mod 2^32
    pipe = fake.pipe(head=3, tail=5, bufs_addr=0xDEAD_0000)
    assert_one_line_error(lambda: pipe_read_data(fake.prog, pipe), "slots apart")


def test_max_usage_above_ring_size_is_refused(fake):
    pipe = fake.pipe(head=0, tail=0, ring_size=16, max_usage=17, bufs_addr=0)
    assert_one_line_error(lambda: pipe_size(pipe), "max_usage 17 > ring_size 16")


@pytest.mark.parametrize("offset,length", [(0, 4097), (4000, 200), (2**32 - 1, 2), (5000, 0)])
def test_buffers_outside_their_page_are_refused(fake, offset, length):
    pipe = fake.pipe(head=1, tail=0, bufs={0: (fake.data_page(b"x"), offset, length)})
    assert_one_line_error(lambda: pipe_read_data(fake.prog, pipe), "outside its page")


def test_bogus_buffer_pages_are_one_line_errors(fake):
    pipe = fake.pipe(head=1, tail=0, bufs={0: (0, 0, 10)})
    assert_one_line_error(lambda: pipe_read_data(fake.prog, pipe), "no page")
    pipe = fake.pipe(head=1, tail=0, bufs={0: (VMEMMAP + 3, 0, 10)})
    assert_one_line_error(lambda: pipe_read_data(fake.prog, pipe), "not a struct page")
    pipe = fake.pipe(head=1, tail=0, bufs={0: (VMEMMAP + (1 << 20) * fake.page_size, 0, 10)})
    assert_one_line_error(lambda: pipe_read_data(fake.prog, pipe), "not readable")


def test_unmapped_bufs_array_is_a_one_line_error(fake):
    pipe = fake.pipe(head=2, tail=0, bufs_addr=0x0000_DEAD_BEEF_0000)
    with pytest.raises(GuestDataError) as e:
        pipe_read_data(fake.prog, pipe)
    assert "\n" not in str(e.value)


# --- refusals and CRIU's cgroup layout, without a guest -------------------------------------


def test_packet_mode_pipes_are_refused_like_criu_does():
    from types import SimpleNamespace

    from ovm_offline.errors import UnsupportedError
    from ovm_offline.kernel.fs.fdtable import O_DIRECT
    from ovm_offline.state import Fd, FileIdentity, OpenFile
    from tests.support.filekinds import attach_or_refuse

    f = OpenFile(key=0x1000, kind="pipe", identity=FileIdentity("pipe:[77]", 0, 77, 0, 0o10600), flags=O_DIRECT, pos=0)
    no_memory = SimpleNamespace(pointer=lambda type, address: None)  # refused before anything is read
    with pytest.raises(UnsupportedError, match=r"fd 5: a packet-mode \(O_DIRECT\) pipe"):
        attach_or_refuse(no_memory, [Fd(fd=5, file=f, cloexec=False)])


def _cg(path: str, *children):
    from ovm_offline.state import CgroupDir, CgroupPerms, CgroupProperty

    return CgroupDir(
        path=path,
        perms=CgroupPerms(0o40755, 0, 0),
        children=list(children),
        properties=[CgroupProperty("cgroup.procs", "", CgroupPerms(0o100644, 0, 0))],
    )


def _cg_image(paths: list[str], dirs: dict):
    from ovm_offline.criu.build.cgroup import CgroupSets

    class P:
        def __init__(self, cgroup):
            self.cgroup = cgroup

    sets = CgroupSets(dirs)
    ids = [sets.set_of(P(p)) for p in paths]
    return ids, sets.image(ids[0])


def _names(dirs) -> list:
    return [(d.dir_name, _names(d.children)) for d in dirs]


def test_no_cgroup_image_when_every_task_is_in_criu_cgroup():
    assert _cg_image(["/", "/"], {}) == ([1, 1], None)


def test_cgroup_sets_and_dirs_follow_criu_collect_order():
    # a task in /a/b, then one in /a: CRIU's ftw from /a meets /a/b as already collected
    dirs = {"/a/b": _cg("/a/b", _cg("/a/b/c")), "/a": _cg("/a", _cg("/a/b", _cg("/a/b/c")), _cg("/a/d"))}
    ids, img = _cg_image(["/a/b", "/a", "/a/b", "/"], dirs)
    assert ids == [2, 3, 2, 1]
    assert [(s.id, s.ctls[0].path) for s in img.sets] == [(2, "/a/b"), (3, "/a")]
    assert _names(img.controllers[0].dirs) == [("a/b", [("c", [])]), ("a", [("d", [])])]
    assert img.controllers[0].dirs[0].properties[0].perms.mode == 0o100644
    # the other way round, /a/b ends up below /a
    ids, img = _cg_image(["/a", "/a/b"], dirs)
    assert _names(img.controllers[0].dirs) == [("a", [("b", [("c", [])]), ("d", [])])]
    # the root task in criu's cgroup and a child elsewhere: the image is written
    ids, img = _cg_image(["/", "/a/b"], dirs)
    assert ids == [1, 2] and [s.id for s in img.sets] == [2]
