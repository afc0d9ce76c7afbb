"""Guest RAM from every memory backend a user's QEMU may have, found through QMP alone: a memfd
(libvirt's shared memory), equal-sized memfds of two NUMA nodes, a file made in a directory (as
on hugetlbfs), RAM above 4 GiB, a DIMM plugged in while the guest runs; and what cannot be
read (QEMU's private memory, a file mapped privately, a --mem that is not this guest's),
refused by name. A kernel-less QEMU is enough: what QEMU itself reads (pmemsave) is the truth."""

from __future__ import annotations

import io
import mmap
import os
import time
from pathlib import Path

import pytest

from ovm_offline.errors import SourceError
from ovm_offline.sources import LiveSource
from ovm_offline.sources.live import single_ram_file
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm
from tests.test_sources_live import QEMU, Qemu

PATTERN_OFFSETS = (0, 0x1234000, (32 << 20) - 4096)


def _qemu(tmp_path: Path, memory: list[str]) -> Qemu:
    if QEMU is None:
        pytest.skip("qemu-system-x86_64 not installed")
    return Qemu(tmp_path, memory=["-machine", "pc,accel=tcg", *memory])


@pytest.fixture
def vms():
    started: list[Qemu] = []
    yield started
    for vm in started:
        vm.kill()


def _memfds(pid: int) -> list[str]:
    fd_dir = Path(f"/proc/{pid}/fd")
    return sorted(str(p) for p in fd_dir.iterdir() if os.readlink(p).startswith("/memfd:memory-backend-memfd"))


def _stamp(path: str, offset: int, tag: bytes) -> bytes:
    """Write a recognisable page into a backend's file (shared with the guest)."""
    data = (tag * (4096 // len(tag) + 1))[:4096]
    fd = os.open(path, os.O_RDWR)
    try:  # through a mapping, as QEMU writes it: hugetlbfs has no write()
        with mmap.mmap(fd, os.fstat(fd).st_size) as mapped:
            mapped[offset : offset + len(data)] = data
    finally:
        os.close(fd)
    return data


def _same_as_qemu(vm: Qemu, src: LiveSource, tmp_path: Path, paddr: int, expected: bytes) -> None:
    assert vm.pmemsave(tmp_path, paddr, len(expected)) == expected, f"QEMU does not see the stamp at {paddr:#x}"
    assert src.read(paddr, len(expected)) == expected, f"guest-physical {paddr:#x}"


def test_a_memfd_guest_is_read_with_qmp_alone(tmp_path, vms):
    vm = _qemu(tmp_path, ["-object", "memory-backend-memfd,id=ram0,size=64M,share=on", "-machine", "memory-backend=ram0", "-m", "64M"])  # fmt: skip
    vms.append(vm)
    (memfd,) = _memfds(vm.proc.pid)
    stamps = {off: _stamp(memfd, off, b"memfd-%x " % off) for off in PATTERN_OFFSETS}
    with LiveSource(vm.qmp_path) as src:
        assert src.memdevs == ["ram0"] and src.memory_file.startswith(f"/proc/{vm.proc.pid}/fd/")
        for off, data in stamps.items():
            _same_as_qemu(vm, src, tmp_path, off, data)
    # the memfd named as QEMU's descriptor is accepted as --mem, as one of its backends
    with LiveSource(vm.qmp_path, memfd) as src:
        assert src.memory_file == memfd


def test_equal_memfds_of_two_numa_nodes_are_told_apart_by_the_guests_bytes(tmp_path, vms):
    vm = _qemu(tmp_path, [
        "-object", "memory-backend-memfd,id=m0,size=32M,share=on", "-object", "memory-backend-memfd,id=m1,size=32M,share=on",
        "-numa", "node,nodeid=0,memdev=m0", "-numa", "node,nodeid=1,memdev=m1", "-m", "64M", "-smp", "2",
    ])  # fmt: skip
    vms.append(vm)
    fds = _memfds(vm.proc.pid)
    assert len(fds) == 2
    # until the firmware runs both are zeros: no byte tells them apart, and a guess is refused
    with pytest.raises(SourceError, match=r"memory backends m0, m1 are memfds of 32 MiB each, and the guest's bytes"):
        LiveSource(vm.qmp_path)
    assert vm.status()["status"] == "prelaunch"
    # one stamp in each, at the same offset: QEMU shows m0's at 0x1234000 and m1's 32 MiB above
    first, second = (_stamp(fd, 0x1234000, b"node-%d " % i) for i, fd in enumerate(fds))
    with LiveSource(vm.qmp_path) as src:
        assert sorted(src.memdevs) == ["m0", "m1"]
        seen = {src.read(0x1234000, 4096), src.read((32 << 20) + 0x1234000, 4096)}
        assert seen == {first, second}
        _same_as_qemu(vm, src, tmp_path, 0x1234000, vm.pmemsave(tmp_path, 0x1234000, 4096))
        _same_as_qemu(vm, src, tmp_path, (32 << 20) + 0x1234000, vm.pmemsave(tmp_path, (32 << 20) + 0x1234000, 4096))


def test_ram_above_4g_of_a_q35_guest(tmp_path, vms):
    ram = tmp_path / "ram"
    vm = _qemu(tmp_path, [
        "-machine", "q35,memory-backend=ram0", "-object", f"memory-backend-file,id=ram0,size=3G,mem-path={ram},share=on", "-m", "3G",
    ])  # fmt: skip
    vms.append(vm)
    # q35 puts 2 GiB below the PCI hole and the third at 4 GiB
    below, above = _stamp(str(ram), (2 << 30) - 4096, b"below "), _stamp(str(ram), 2 << 30, b"above ")
    with LiveSource(vm.qmp_path) as src:
        assert src.runs()[-1].start == 4 << 30 and src.runs()[-1].length == 1 << 30
        _same_as_qemu(vm, src, tmp_path, (2 << 30) - 4096, below)
        _same_as_qemu(vm, src, tmp_path, 4 << 30, above)


def test_a_file_qemu_made_in_a_directory_and_a_dimm_plugged_in_later(tmp_path, vms):
    """mem-path a directory: QEMU makes and unlinks qemu_back_mem.ID.XXXXXX there (what it does
    on hugetlbfs); a pc-dimm hot-plugged with its own backend shows at the device-memory area."""
    ram_dir = tmp_path / "ramdir"
    ram_dir.mkdir()
    vm = _qemu(tmp_path, [
        "-machine", "memory-backend=ram0", "-object", f"memory-backend-file,id=ram0,size=64M,mem-path={ram_dir},share=on",
        "-m", "64M,slots=2,maxmem=1G",
    ])  # fmt: skip
    vms.append(vm)
    assert not list(ram_dir.iterdir()), "QEMU left its file linked: the test proves nothing"
    vm.cmd("object-add", **{"qom-type": "memory-backend-memfd", "id": "dimm0", "size": 128 << 20, "share": True})
    vm.cmd("device_add", driver="pc-dimm", id="d0", memdev="dimm0")
    with LiveSource(vm.qmp_path) as src:
        assert sorted(src.memdevs) == ["dimm0", "ram0"]
        dimm = src.runs()[-1]
        assert dimm.length == 128 << 20 and dimm.start >= 4 << 30
        file_of = dict(zip(src.memdevs, (f.name for f in src._files)))
    stamped = {
        0x100000: _stamp(file_of["ram0"], 0x100000, b"ram0 "),
        dimm.start + 0x5000: _stamp(file_of["dimm0"], 0x5000, b"dimm0 "),
    }
    with LiveSource(vm.qmp_path) as src:
        for paddr, data in stamped.items():
            _same_as_qemu(vm, src, tmp_path, paddr, data)


@pytest.mark.skipif(
    not os.path.isdir("/dev/hugepages") or int(Path("/proc/sys/vm/nr_hugepages").read_text()) < 32,
    reason="no hugetlbfs at /dev/hugepages with 32 huge pages reserved",
)
def test_a_hugetlbfs_backend(tmp_path, vms):
    vm = _qemu(tmp_path, [
        "-machine", "memory-backend=ram0", "-object", "memory-backend-file,id=ram0,size=64M,mem-path=/dev/hugepages,share=on", "-m", "64M",
    ])  # fmt: skip
    vms.append(vm)
    with LiveSource(vm.qmp_path) as src:
        path = src.memory_file
    data = _stamp(path, 0x200000, b"huge ")
    with LiveSource(vm.qmp_path) as src:
        _same_as_qemu(vm, src, tmp_path, 0x200000, data)
        # the big reads and the bulk copy take other paths than the small ones (pread, not the map)
        big = vm.pmemsave(tmp_path, 0x100000, 8 << 20)
        out = io.BytesIO()
        src.copy_to(0x100000, 8 << 20, out)
        assert src.read(0x100000, 8 << 20) == big == out.getvalue() and data in big


@pytest.mark.skipif(int(Path("/proc/sys/vm/nr_hugepages").read_text()) < 32, reason="fewer than 32 huge pages reserved")
def test_a_hugetlb_memfd_backend(tmp_path, vms):
    vm = _qemu(tmp_path, [
        "-machine", "memory-backend=ram0", "-object", "memory-backend-memfd,id=ram0,size=64M,share=on,hugetlb=on,hugetlbsize=2M",
        "-m", "64M",
    ])  # fmt: skip
    vms.append(vm)
    (memfd,) = _memfds(vm.proc.pid)
    data = _stamp(memfd, 0x400000, b"huge memfd ")
    with LiveSource(vm.qmp_path) as src:
        assert src.memory_file == memfd
        _same_as_qemu(vm, src, tmp_path, 0x400000, data)


@pytest.mark.parametrize(
    "memory,said",
    [
        (
            ["-m", "64M"],
            r"guest RAM is in memory backend pc\.ram \(memory-backend-ram, 64 MiB\), QEMU's private memory",
        ),
        (
            ["-object", "memory-backend-ram,id=r,size=64M", "-machine", "memory-backend=r", "-m", "64M"],
            r"memory backend r \(memory-backend-ram, 64 MiB\), QEMU's private memory.*memory-backend-memfd",
        ),
        (
            [
                "-object",
                "memory-backend-file,id=f,size=64M,mem-path={ram}",
                "-machine",
                "memory-backend=f",
                "-m",
                "64M",
            ],
            r"memory backend f \(memory-backend-file, 64 MiB\) is mapped privately \(share=off\)",
        ),
    ],
    ids=["plain-m", "memory-backend-ram", "file-share-off"],
)
def test_memory_no_other_process_sees_is_refused_by_name(tmp_path, vms, memory, said):
    vm = _qemu(tmp_path, [m.format(ram=tmp_path / "ram") for m in memory])
    vms.append(vm)
    vm.cmd("cont")
    with pytest.raises(SourceError, match=said) as e:
        LiveSource(vm.qmp_path)
    assert "\n" not in str(e.value) and vm.status()["running"]


def test_a_mem_that_is_not_this_guests_is_refused_by_name(tmp_path, vms):
    vm = _qemu(tmp_path, ["-object", "memory-backend-memfd,id=ram0,size=64M,share=on", "-machine", "memory-backend=ram0", "-m", "64M"])  # fmt: skip
    vms.append(vm)
    other = os.memfd_create("memory-backend-memfd")
    try:
        os.ftruncate(other, 64 << 20)
        mine = f"/proc/{os.getpid()}/fd/{other}"
        with pytest.raises(SourceError, match=r"is not the memory of any memory backend of this QEMU \(backends: ram0 \(memory-backend-memfd, 64 MiB\)\)"):  # fmt: skip
            LiveSource(vm.qmp_path, mine)
    finally:
        os.close(other)
    assert vm.status()["status"] == "prelaunch"


def test_the_guest_runs_while_its_ram_is_found_and_stops_at_pause(tmp_path, vms):
    vm = _qemu(tmp_path, ["-object", "memory-backend-memfd,id=ram0,size=64M,share=on", "-machine", "memory-backend=ram0", "-m", "64M"])  # fmt: skip
    vms.append(vm)
    vm.cmd("cont")
    time.sleep(0.5)
    with LiveSource(vm.qmp_path, pause=False) as src:
        assert vm.status()["running"] and src.vcpus() == []
        src.pause()
        assert not vm.status()["running"] and len(src.vcpus()) == 1
    assert vm.status()["running"]


def test_a_snapshot_streams_the_one_backend_and_refuses_several_by_name(tmp_path, vms):
    """--precopy and --background stream one RAM block: without --mem it is the one backend's."""
    vm = _qemu(tmp_path, ["-object", "memory-backend-memfd,id=ram0,size=64M,share=on", "-machine", "memory-backend=ram0", "-m", "64M"])  # fmt: skip
    vms.append(vm)
    assert single_ram_file(vm.qmp_path, "pre-copy") == _memfds(vm.proc.pid)[0]
    two = tmp_path / "two"
    two.mkdir()
    vm2 = _qemu(two, [
        "-object", "memory-backend-memfd,id=m0,size=32M,share=on", "-object", "memory-backend-memfd,id=m1,size=48M,share=on",
        "-numa", "node,nodeid=0,memdev=m0", "-numa", "node,nodeid=1,memdev=m1", "-m", "80M",
    ])  # fmt: skip
    vms.append(vm2)
    with LiveSource(vm2.qmp_path) as src:  # memfds of different sizes: told by their size
        assert sorted(src.memdevs) == ["m0", "m1"] and src.runs()[-1].start + src.runs()[-1].length == 80 << 20
    with pytest.raises(
        SourceError, match=r"guest RAM is in 2 memory backends \(m0, m1\), and a pre-copy snapshot streams one"
    ):
        single_ram_file(vm2.qmp_path, "pre-copy")


def test_a_file_backend_is_the_file_qemu_holds_not_what_its_path_names_now(tmp_path, vms):
    """Unlinked, it is still read through QEMU's descriptor; replaced by another file at the same
    path (or a path another mount namespace shows otherwise), that other file is refused."""
    ram = tmp_path / "ram"
    vm = _qemu(tmp_path, ["-object", f"memory-backend-file,id=ram0,size=64M,mem-path={ram},share=on", "-machine", "memory-backend=ram0", "-m", "64M"])  # fmt: skip
    vms.append(vm)
    data = _stamp(str(ram), 0x3000, b"the guest's ")
    ram.rename(tmp_path / "moved")
    ram.write_bytes(bytes(64 << 20))  # same name, same size: another guest's file, to a path check
    with pytest.raises(SourceError, match=r"mem-path .*/ram, and QEMU \(pid \d+\) holds no file of that name open"):
        LiveSource(vm.qmp_path)
    ram.unlink()
    (tmp_path / "moved").rename(ram)
    with LiveSource(vm.qmp_path) as src:
        assert src.memory_file == str(ram)
    ram.unlink()  # QEMU's descriptor still holds it: "(deleted)"
    with LiveSource(vm.qmp_path) as src:
        assert src.memory_file.startswith(f"/proc/{vm.proc.pid}/fd/")
        _same_as_qemu(vm, src, tmp_path, 0x3000, data)


def test_qemu_pid_stands_in_for_a_peer_out_of_sight_and_is_checked_against_it(tmp_path, vms, monkeypatch):
    vm = _qemu(tmp_path, ["-object", "memory-backend-memfd,id=ram0,size=64M,share=on", "-machine", "memory-backend=ram0", "-m", "64M"])  # fmt: skip
    vms.append(vm)
    assert_one_line_failure(
        ovm("ps", "--live", "--qmp", str(vm.qmp_path), "--qemu-pid", "1"),
        f"--qemu-pid 1 is not the QEMU behind this QMP socket (its pid is {vm.proc.pid})",
    )
    from ovm_offline.sources import qmp

    monkeypatch.setattr(qmp, "_peer_pid", lambda sock: None)  # as for a QEMU in another pid namespace
    with pytest.raises(SourceError, match=r"memory backend ram0 is a memfd, found through QEMU's /proc/PID/fd, but the QMP socket's peer \(QEMU\) has no pid here"):  # fmt: skip
        LiveSource(vm.qmp_path)
    with LiveSource(vm.qmp_path, qemu_pid=vm.proc.pid) as src:
        assert src.memory_file.startswith(f"/proc/{vm.proc.pid}/fd/")
