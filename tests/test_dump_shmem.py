"""`ovm-offline dump` of shared memory: anonymous shared memory and a shared file mapping
between a parent and its child (shmem), System V shared memory in the tree's own IPC
namespace (sysvshm): what the images hold, and the page-cache and IPC walks on hostile
guest data (one-line errors). The general gates (diff against criu's images, byte-identical
from every source, crit, criu restore) run in tests/test_dump.py for every workload."""

from __future__ import annotations

import struct

import pytest

from corpus import kernels
from ovm_offline.criu import images, pb
from ovm_offline.criu.build import files as build_files
from ovm_offline.criu.build import mm as build_mm
from ovm_offline.criu.build.common import Written
from ovm_offline.errors import GuestDataError, UnsupportedError
from ovm_offline.filekinds import new_writers
from ovm_offline.kernel.core.memory import START_KERNEL_MAP
from ovm_offline.kernel.ds.xarray import xa_for_each
from ovm_offline.kernel.mm.shmem import shmem_data_pages
from ovm_offline.kernel.ns.ipc import IPC_MSG_IDS, IPC_SHM_IDS, ipc_for_each, ipc_ids
from ovm_offline.state import PageRun, SharedMemory, Vma
from tests.support.checks import assert_one_line_error
from tests.support.memory import FAKE_POB, FakeKernelMemory

KERNELS = list(kernels.KERNELS)

PAGE = 4096


def _pattern(tag: str, n: int) -> bytes:
    """The first 64 bytes the workloads' fill() writes into a page."""
    return f"{tag} page {n} offset 0".encode().ljust(64, b"\0")


def _vmas(d, pid: int) -> list:
    return list(images.read_image(d / images.MM.filename(pid)).entries[0].vmas)


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_shmem_both_processes_map_one_memfd_with_only_the_touched_pages(dumped, kernel):
    d = dumped(kernel, "shmem")
    pids = [e.pid for e in images.read_image(d / images.PSTREE.filename()).entries]
    assert len(pids) == 2
    memfds = images.read_image(d / images.MEMFD_INODE.filename()).entries
    assert [(m.name, m.size, m.seals, m.inode_id) for m in memfds] == [("/dev/zero", 16 * PAGE, 1, 1)]
    files = {e.id: e for e in images.read_image(d / images.FILES.filename()).entries}
    memfd_file = next(e for e in files.values() if e.HasField("memfd"))
    shared_file = next(e for e in files.values() if e.HasField("reg") and e.reg.name.endswith("/shared.dat"))
    assert shared_file.reg.flags == 0  # the open mode is the VMAs' fdflags, as dump_filemap leaves it
    for pid in pids:
        anon = [v for v in _vmas(d, pid) if v.status & build_mm.VMA_AREA_MEMFD]
        assert [(v.shmid, v.flags, v.end - v.start) for v in anon] == [(memfd_file.id, 0x01, 16 * PAGE)]
        filemaps = [v for v in _vmas(d, pid) if v.shmid == shared_file.id]
        assert all(
            v.status == build_mm.VMA_AREA_REGULAR | build_mm.VMA_FILE_SHARED and v.fdflags == 2 for v in filemaps
        )
        # the child also maps file pages 2-4 on its own
        assert sorted(v.pgoff for v in filemaps) == ([0] if pid == pids[0] else [0, 2 * PAGE])
        # nothing of the shared VMAs is in the process's own pages
        shared = [
            (v.start, v.end) for v in _vmas(d, pid) if v.status & (build_mm.VMA_FILE_SHARED | build_mm.VMA_ANON_SHARED)
        ]
        assert not [p for p in images.ImageDir(d).pages(pid) if any(s <= p.vaddr < e for s, e in shared)]
    pages = list(images.ImageDir(d).pages(memfds[0].shmid, images.SHMEM_PAGEMAP))
    assert [p.vaddr // PAGE for p in pages] == [0, 1, 2, 3, 8, 9, 10, 11]  # what R and K wrote, no more
    for p in pages:
        n = p.vaddr // PAGE
        assert p.data[:64] == _pattern("R-anon" if n < 4 else "K-anon", n)


@pytest.mark.guest
@pytest.mark.parametrize("kernel", KERNELS)
def test_sysvshm_saves_the_ipc_namespace_with_both_segments(dumped, kernel):
    d = dumped(kernel, "sysvshm")
    inv = images.read_image(d / images.INVENTORY.filename()).entries[0]
    pids = [e.pid for e in images.read_image(d / images.PSTREE.filename()).entries]
    ns_ids = {images.read_image(d / images.IDS.filename(pid)).entries[0].ipc_ns_id for pid in pids}
    assert len(ns_ids) == 1 and inv.root_ids.ipc_ns_id not in ns_ids
    ns_id = ns_ids.pop()
    var = images.read_image(d / images.IPCNS_VAR.filename(ns_id)).entries[0]
    assert len(var.sem_ctls) == 4 and var.shm_ctlmni > 0
    segs = images.read_image(d / images.IPCNS_SHM.filename(ns_id)).entries
    assert [(s.desc.key, s.size, s.desc.mode & 0o777, s.in_pagemaps) for s in segs] == [
        (0, 5 * PAGE, 0o600, True),
        (0x4F564D, 2 * PAGE, 0o640, True),
    ]
    a, b = (s.desc.id for s in segs)
    idir = images.ImageDir(d)
    pages_a = {p.vaddr // PAGE: p.data for p in idir.pages(a, images.SHMEM_PAGEMAP)}
    assert sorted(pages_a) == [0, 1, 3]  # R wrote 0 and 1, K wrote 3; 2 and 4 were never touched
    assert [pages_a[n][:64] for n in (0, 1, 3)] == [_pattern("R", 0), _pattern("R", 1), _pattern("K", 3)]
    pages_b = {p.vaddr // PAGE: p.data for p in idir.pages(b, images.SHMEM_PAGEMAP)}
    assert list(pages_b) == [0] and pages_b[0][:64] == _pattern("B", 0)
    for pid in pids:  # both attach A (inherited over fork); B is detached
        sysv = [v for v in _vmas(d, pid) if v.status & build_mm.VMA_AREA_SYSVIPC]
        assert [(v.shmid, v.status, v.flags) for v in sysv] == [
            (a, build_mm.VMA_AREA_REGULAR | build_mm.VMA_ANON_SHARED | build_mm.VMA_AREA_SYSVIPC, 0x21)
        ]


# --- the CRIU side without a guest: memfd numbering ---------------------------------------------


def _shm(ino: int, size: int, pages: list[PageRun] | None = None) -> SharedMemory:
    return SharedMemory(
        ino=ino, name=f"/memfd:m{ino}", uid=0, gid=0, size=size, seals=1, mode=0o100777, pages=pages or []
    )


def test_memfd_inodes_are_numbered_once_and_empty_ones_have_no_pagemap(tmp_path):
    files = build_files.FileTable(new_writers())
    written = Written()
    dumped_pages: list[int] = []

    def write_pages(shm, path):
        dumped_pages.append(shm.ino)
        path.write_bytes(b"")
        return [(r.vaddr, r.length // PAGE, 4) for r in shm.pages]

    ids = iter(range(1, 100))
    shmem = build_mm.ShmemImages(tmp_path, files, ids.__next__, write_pages, written)
    a = _shm(7, 3 * PAGE, [PageRun(PAGE, 0x5000, PAGE)])
    empty = _shm(9, 0)

    def vma(shm: SharedMemory) -> Vma:
        return Vma(start=0, end=PAGE, pgoff=0, prot=3, flags=1, kind="file", shared=True, shmem=shm, file_flags=2)

    entries = [
        pb.criu_mm_pb2.vma_entry(start=0, end=PAGE, pgoff=0, shmid=0, prot=3, flags=1, status=0, fd=-1)
        for _ in range(3)
    ]
    for e, shm in zip(entries, (a, empty, a)):
        shmem.map(vma(shm), e)
    assert [e.shmid for e in entries] == [1, 2, 1] and all(e.fdflags == 2 for e in entries)
    assert [(m.shmid, m.inode_id, m.name) for m in shmem.inode_entries()] == [(7, 1, "/memfd:m7"), (9, 2, "/memfd:m9")]
    assert dumped_pages == [7] and sorted(p.name for p in tmp_path.iterdir()) == ["pagemap-shmem-7.img", "pages-1.img"]
    head, run = images.read_image(tmp_path / "pagemap-shmem-7.img").entries
    assert (head.pages_id, run.vaddr, run.nr_pages) == (1, PAGE, 1)


def test_a_memfd_entry_lands_in_its_own_slot_after_a_postponed_socket(tmp_path):
    """File ids are not indices into files.img: a UNIX socket whose peer is not met yet has
    its id but no entry. A memfd met then must still get its own entry, not another's."""
    from ovm_offline.filekinds.socket import SocketOptions
    from ovm_offline.filekinds.unix import UnixSocketState
    from ovm_offline.state import FileIdentity, OpenFile

    files = build_files.FileTable(new_writers())
    opts = SocketOptions(
        sndbuf=1,
        rcvbuf=1,
        snd_timeout=(0, 0),
        rcv_timeout=(0, 0),
        reuseaddr=False,
        priority=0,
        rcvlowat=1,
        mark=0,
        passcred=False,
        passsec=False,
        dontroute=False,
        no_check=False,
        reuseport=False,
        broadcast=False,
        keepalive=False,
        oobinline=False,
        buf_lock=0,
    )

    def sock(key: int, ino: int, peer: int) -> OpenFile:
        return OpenFile(
            key=key,
            kind="unix",
            identity=FileIdentity(path=f"socket:[{ino}]", dev=0, ino=ino, size=0, mode=0o140777),
            flags=2,
            pos=0,
            state=UnixSocketState(
                ino=ino, type=1, state=1, peer=peer, backlog=0, shutdown=0, name=b"", options=opts, net_ns=1
            ),
        )

    assert files.open_file(sock(1, 100, 101)) == 1  # postponed: its peer comes later
    shmem = build_mm.ShmemImages(tmp_path, files, iter(range(1, 9)).__next__, lambda shm, path: [], Written())
    entry = pb.criu_mm_pb2.vma_entry(start=0, end=PAGE, pgoff=0, shmid=0, prot=3, flags=1, status=0, fd=-1)
    shmem.map(
        Vma(start=0, end=PAGE, pgoff=0, prot=3, flags=1, kind="file", shared=True, shmem=_shm(7, 0), file_flags=2),
        entry,
    )
    assert entry.shmid == 2
    assert files.open_file(sock(2, 101, 100)) == 3
    assert [(e.type, e.id) for e in files.entries] == [
        (pb.criu_files_pb2.MEMFD, 2),
        (pb.criu_files_pb2.UNIXSK, 3),
        (pb.criu_files_pb2.UNIXSK, 1),
    ]


# --- page caches and IPC ids in fake memory laid out by the real ISFs ----------------------------

#: Where the fake struct pages live: the fake has no page tables for the real vmemmap, so
#: the Program is told that the vmemmap starts here, inside the direct map.
STRUCT_PAGES = FAKE_POB + 0x4000_0000


class FakeKernel(FakeKernelMemory):
    """xarrays, struct pages and IPC objects in fake memory."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        self.src.write_u64(self.symbols.symbol_address("vmemmap_base") - START_KERNEL_MAP, STRUCT_PAGES)
        self.src.write(self.symbols.symbol_address("ipc_mni") - START_KERNEL_MAP, struct.pack("<I", 1 << 15))
        self.page_size = self.symbols.struct_type("page").size
        self.uptodate = self.symbols.enum_value("pageflags", "PG_uptodate")

    put = FakeKernelMemory.set

    def node(self, shift: int, slots: dict[int, int]) -> int:
        """An xa_node; returns it as an xarray entry (address | 2)."""
        node = self.alloc(self.symbols.struct_type("xa_node").size)
        self.put(node, "xa_node", "shift", shift)
        base = self.symbols.struct_type("xa_node").member("slots").offset
        for i, entry in slots.items():
            self.src.write_u64(node - FAKE_POB + base + 8 * i, entry)
        return node | 2

    def xarray(self, head: int):
        xa = self.alloc(self.symbols.struct_type("xarray").size)
        self.put(xa, "xarray", "xa_head", head)
        return self.prog.struct("xarray", xa)

    def page(self, pfn: int, index: int, uptodate: bool = True) -> int:
        """The struct page of frame `pfn`, a page-cache page at file index `index`."""
        page = STRUCT_PAGES + pfn * self.page_size
        self.put(page, "page", "flags", (1 << self.uptodate) if uptodate else 0)
        self.put(page, "page", "index", index)
        return page

    def mapping(self, head: int):
        """A struct address_space whose i_pages has xa_head `head`."""
        mapping = self.alloc(self.symbols.struct_type("address_space").size)
        off = self.symbols.struct_type("address_space").member("i_pages").offset
        self.src.write_u64(mapping - FAKE_POB + off + self.symbols.struct_type("xarray").member("xa_head").offset, head)
        return self.prog.pointer("address_space", mapping)


@pytest.fixture(params=["6.1", "6.12"])
def fake(request):
    return FakeKernel(request.param)


def test_xarray_walk_gives_entries_in_index_order_with_multi_index_entries(fake):
    leaf = fake.node(0, {3: 0x1000_0000, 5: 0x41})  # a pointer and a value entry
    big = 0x2000_0000
    root = fake.node(6, {0: leaf, 2: big, 3: (2 << 2) | 2})  # slot 3: sibling of slot 2
    xa = fake.xarray(root)
    assert list(xa_for_each(fake.prog, xa, 1 << 20)) == [
        (3, 1, 0x1000_0000),
        (5, 1, 0x41),
        (128, 64, big),
        (192, 64, big),
    ]
    assert list(xa_for_each(fake.prog, xa, 150)) == [(3, 1, 0x1000_0000), (5, 1, 0x41), (128, 64, big)]
    assert list(xa_for_each(fake.prog, fake.xarray(0x1000_0000), 10)) == [(0, 1, 0x1000_0000)]
    assert list(xa_for_each(fake.prog, fake.xarray(0), 10)) == []


def test_hostile_xarrays_are_one_line_errors(fake):
    lying = fake.node(12, {0: 0x1000_0000})  # says shift 12 below a shift-6 root
    assert_one_line_error(
        lambda: list(xa_for_each(fake.prog, fake.xarray(fake.node(6, {1: lying})), 1 << 20)), "shift 12"
    )
    assert_one_line_error(lambda: list(xa_for_each(fake.prog, fake.xarray(fake.node(7, {})), 10)), "bad shift 7")
    forward = fake.node(0, {1: (5 << 2) | 2, 5: 0x1000_0000})
    assert_one_line_error(lambda: list(xa_for_each(fake.prog, fake.xarray(forward), 10)), "sibling of slot 5")
    below = fake.node(0, {0: fake.node(0, {})})
    assert_one_line_error(lambda: list(xa_for_each(fake.prog, fake.xarray(below), 10)), "below shift 0")
    many = fake.node(0, {i: 0x1000_0000 + 8 * i for i in range(64)})
    assert_one_line_error(lambda: list(xa_for_each(fake.prog, fake.xarray(many), 100, limit=10)), "more than 10")
    unmapped = fake.xarray(0x0000_DEAD_BEEF_0000 | 2)
    with pytest.raises(GuestDataError) as e:
        list(xa_for_each(fake.prog, unmapped, 10))
    assert "\n" not in str(e.value)


def test_shmem_data_pages_are_the_uptodate_cached_pages(fake):
    leaf = fake.node(
        0,
        {
            0: fake.page(0x100, 0),
            1: fake.page(0x101, 1, uptodate=False),
            2: (77 << 1) | 1,
            3: fake.page(0x200, 3),
            9: fake.page(0x300, 9),
        },
    )
    data = shmem_data_pages(fake.prog, fake.mapping(leaf), 8)  # index 9 is beyond the file
    assert data.pages == [(0, 0x100), (3, 0x200)] and data.swapped == 1


def test_a_page_cache_slot_holding_a_far_folio_is_refused(fake):
    leaf = fake.node(0, {4: fake.page(0x100, 4000)})
    assert_one_line_error(lambda: shmem_data_pages(fake.prog, fake.mapping(leaf), 8), "folio starting at index 4000")


def _ipc_ns(fake, objects: dict[int, dict[int, int]], in_use: dict[int, int] | None = None):
    """A struct ipc_namespace whose ids[which] hold kern_ipc_perm objects {index: id}."""
    t = fake.symbols.struct_type("ipc_namespace")
    ids_t = fake.symbols.struct_type("ipc_ids")
    ns = fake.alloc(t.size)
    for which in range(3):
        objs = objects.get(which, {})
        ids = ns + t.member("ids").offset + which * ids_t.size
        slots = {}
        for index, ipc_id in objs.items():
            perm = fake.alloc(fake.symbols.struct_type("shmid_kernel").size)
            fake.put(perm, "kern_ipc_perm", "id", ipc_id)
            slots[index] = perm
        fake.put(ids, "ipc_ids", "in_use", (in_use or {}).get(which, len(objs)))
        fake.put(ids, "ipc_ids", "max_idx", max(objs, default=-1))
        fake.put(ids, "ipc_ids", "next_id", -1)
        xa = ids + ids_t.member("ipcs_idr").offset
        if slots:
            fake.put(xa, "xarray", "xa_head", fake.node(0, slots))
    fake.put(ns, "ipc_namespace", "ns", 0)
    return fake.prog.pointer("ipc_namespace", ns)


def test_ipc_ids_walk_checks_ids_and_counts(fake):
    ns = _ipc_ns(fake, {IPC_SHM_IDS: {0: 0, 3: 32768 + 3}})
    assert [p.id for p in ipc_for_each(fake.prog, ipc_ids(ns, IPC_SHM_IDS))] == [0, 32771]
    ns = _ipc_ns(fake, {IPC_SHM_IDS: {2: 5}})
    assert_one_line_error(
        lambda: list(ipc_for_each(fake.prog, ipc_ids(ns, IPC_SHM_IDS))), "has id 5 but sits at IDR index 2"
    )
    ns = _ipc_ns(fake, {IPC_SHM_IDS: {1: 1}}, in_use={IPC_SHM_IDS: 3})
    assert_one_line_error(lambda: list(ipc_for_each(fake.prog, ipc_ids(ns, IPC_SHM_IDS))), "in_use 3 but 1 objects")
    ns = _ipc_ns(fake, {}, in_use={IPC_SHM_IDS: 1 << 30})
    assert_one_line_error(lambda: list(ipc_for_each(fake.prog, ipc_ids(ns, IPC_SHM_IDS))), "beyond ipc_mni")


def test_ipc_namespace_with_message_queues_is_refused_by_name(fake):
    from ovm_offline.extract.ipc import extract_ipc_namespace

    ns = _ipc_ns(fake, {IPC_MSG_IDS: {0: 0, 1: 1}})
    assert_one_line_error(
        lambda: extract_ipc_namespace(fake.prog, ns, {}), "2 message queue(s) (id 0, 1)", UnsupportedError
    )
