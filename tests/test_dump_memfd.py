"""`ovm-offline dump` of memfds held open (the memfd workload, zdtm memfd00/memfd01/shmemfd's
state): each open file of the kernel's shmem mount is a MEMFD entry with its flags and offset,
naming its inode in memfd.img with its seals and contents, once per inode however many fds and
mappings share it. Before, a memfd held open was refused, and a shared anonymous mapping's file
opened through map_files was saved as a regular file "/dev/zero", which restore opened as the
zero device. The general gates (diff against criu's images, byte-identical from every source,
crit, criu restore with the workload's check of every offset, seal and byte) run in
tests/test_dump.py."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline.criu import images
from tests.support.dumped_files import process_files

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

PAGE = 4096
O_RDWR, O_APPEND = 0o2, 0o2000
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW = 1, 2, 4
# memfd.c's fds after 0-2: a, its dup, b, z
A, A2, B, Z = 3, 4, 5, 6


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_open_shmem_file_is_a_memfd_entry_naming_its_inode(dumped, kernel):
    d = dumped(kernel, "memfd")
    files, fdinfo = process_files(d)
    by_fd = {fd: files[e.id] for fd, e in fdinfo.items()}
    inodes = {m.inode_id: m for m in images.read_image(d / images.MEMFD_INODE.filename()).entries}
    assert all(by_fd[fd].HasField("memfd") for fd in (A, A2, B, Z))
    assert by_fd[A].id == by_fd[A2].id  # one open file, two fds
    a, b, z = (inodes[by_fd[fd].memfd.inode_id] for fd in (A, B, Z))
    assert (a.name, a.size, a.seals) == ("ovm-a", 10000, F_SEAL_SHRINK | F_SEAL_GROW)
    assert (b.name, b.size, b.seals) == ("ovm-b", 3 * PAGE, F_SEAL_SEAL)  # no MFD_ALLOW_SEALING
    assert (z.name, z.size) == ("/dev/zero", 5)
    assert by_fd[A].memfd.pos == 1234 and by_fd[Z].memfd.pos == 3
    assert by_fd[Z].memfd.flags & (O_APPEND | O_RDWR) == O_APPEND | O_RDWR
    # b is mapped too: the mapping's memfd file entry names the same inode, dumped once
    mapped = [e for e in files.values() if e.HasField("memfd") and e.id not in {by_fd[fd].id for fd in (A, B, Z)}]
    assert [inodes[e.memfd.inode_id].name for e in mapped] == ["ovm-b"]
    assert len(inodes) == 3
    shm_pages = images.ImageDir(d).pages
    pages = {m.name: b"".join(p.data or b"" for p in shm_pages(m.shmid, images.SHMEM_PAGEMAP)) for m in inodes.values()}
    assert pages["ovm-a"][:10000] == bytes((i * 31 + 7) & 0xFF for i in range(10000))
    assert pages["/dev/zero"][:5] == b"hello"
