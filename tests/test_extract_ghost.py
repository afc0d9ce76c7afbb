"""Ghost files (extract/ghost.py) over fake memory laid out by the real ISFs of every pinned
kernel: the inode's times read from whichever members the kernel has, and every case criu would
save otherwise, or that memory cannot give whole, refused by name, never written as something
else. The guest is untrusted: an impossible time is a one-line error."""

from __future__ import annotations

import stat

import pytest

from corpus import kernels
from ovm_offline.errors import UnsupportedError
from ovm_offline.extract.ghost import Ghosts
from ovm_offline.state import FileIdentity
from tests.support.checks import assert_one_line_error
from tests.support.memory import FakeKernelMemory

KERNELS = list(kernels.KERNELS)


class FakeInodes(FakeKernelMemory):
    def inode(
        self, mode: int, *, nlink: int = 0, size: int = 0, atime=(0, 0), mtime=(0, 0), magic: int = 0xEF53
    ) -> int:
        """A ``struct inode`` on a disk-like file system (not shmem) with an empty page cache."""
        fstype = self.alloc("file_system_type")
        self.set(fstype, "file_system_type", "name", self.string(b"ext4"))
        sb = self.alloc("super_block")
        self.set(sb, "super_block", "s_type", fstype)
        self.set(sb, "super_block", "s_dev", (8 << 20) | 1)
        self.set(sb, "super_block", "s_magic", magic)
        mapping = self.alloc("address_space")
        inode = self.alloc("inode")
        for member, value in (("i_mode", mode), ("i_nlink", nlink), ("i_size", size), ("i_ino", 77)):
            self.set(inode, "inode", member, value)
        self.set(inode, "inode", "i_sb", sb)
        self.set(inode, "inode", "i_mapping", mapping)
        self.set(inode, "inode", "i_uid.val", 1000)
        self.set(inode, "inode", "i_gid.val", 100)
        for which, (sec, nsec) in (("a", atime), ("m", mtime)):
            if self.prog.struct_type("inode").has_member(f"i_{which}time_sec"):
                self.set(inode, "inode", f"i_{which}time_sec", sec)
                self.set(inode, "inode", f"i_{which}time_nsec", nsec)
            else:
                name = (
                    f"i_{which}time"
                    if self.prog.struct_type("inode").has_member(f"i_{which}time")
                    else f"__i_{which}time"
                )
                self.set(inode, "inode", f"{name}.tv_sec", sec)
                self.set(inode, "inode", f"{name}.tv_nsec", nsec)
        return inode

    def named(self, ghosts: Ghosts, inode: int, path: str = "/data/x"):
        identity = FileIdentity(path=path, dev=0, ino=77, size=0, mode=0, deleted=True)
        return ghosts.named(identity, self.prog.pointer("inode", inode))


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_removed_directory_is_a_ghost_with_its_owner_mode_and_times(kernel):
    fake = FakeInodes(kernel)
    inode = fake.inode(stat.S_IFDIR | 0o750, atime=(2000000000, 123456789), mtime=(1100000000, 987654321))
    ghost = fake.named(Ghosts(), inode).ghost
    assert (ghost.mode, ghost.uid, ghost.gid, ghost.ino, ghost.dev) == (stat.S_IFDIR | 0o750, 1000, 100, 77, 0x801)
    assert (ghost.atime, ghost.mtime, ghost.data) == ((2000000000, 123456789), (1100000000, 987654321), [])
    # a name that is still there needs no ghost
    kept = FileIdentity(path="/data/y", dev=0, ino=77, size=0, mode=0)
    assert Ghosts().named(kept, fake.prog.pointer("inode", inode)).ghost is None


@pytest.mark.parametrize("kernel", KERNELS)
def test_what_criu_saves_otherwise_or_memory_lacks_is_refused_by_name(kernel):
    fake = FakeInodes(kernel)
    linked = fake.inode(stat.S_IFREG | 0o644, nlink=1, size=10)
    assert_one_line_error(
        lambda: fake.named(Ghosts(), linked),
        "the file /data/x, unlinked, is still linked under 1 other name(s); CRIU links it back",
        UnsupportedError,
    )
    big = fake.inode(stat.S_IFREG | 0o644, size=5000)
    assert_one_line_error(
        lambda: fake.named(Ghosts(limit=4096), big),
        "holds 5000 bytes, more than the 4096 a ghost file may hold (--ghost-limit",
        UnsupportedError,
    )
    huge = fake.inode(stat.S_IFREG | 0o644, size=5000, magic=0x958458F6)  # hugetlbfs: huge-page indexed
    assert_one_line_error(
        lambda: fake.named(Ghosts(), huge), "is on hugetlbfs, whose contents a dump does not read yet", UnsupportedError
    )
    assert_one_line_error(  # on ext4, and nothing of it in the page cache
        lambda: fake.named(Ghosts(), big),
        "is on ext4 and not all of its 5000 bytes are in the page cache",
        UnsupportedError,
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_an_impossible_time_is_bad_guest_data(kernel):
    fake = FakeInodes(kernel)
    inode = fake.inode(stat.S_IFDIR | 0o755, mtime=(1, 1_000_000_000))
    assert_one_line_error(lambda: fake.named(Ghosts(), inode), "has a time of 1000000000 nanoseconds past a second")
