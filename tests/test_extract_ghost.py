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

    def dentry(self, name: bytes, parent: int | None, sb: int, *, inode: int = 0, hashed: bool = True) -> int:
        """A ``struct dentry`` named `name` below `parent` (its own parent when None)."""
        dentry = self.alloc("dentry")
        self.set(dentry, "dentry", "d_name.name", self.string(name))
        self.set(dentry, "dentry", "d_name.len", len(name))
        self.set(dentry, "dentry", "d_parent", dentry if parent is None else parent)
        self.set(dentry, "dentry", "d_sb", sb)
        self.set(dentry, "dentry", "d_inode", inode)
        self.set(dentry, "dentry", "d_hash.pprev", 0x1000 if hashed else 0)  # any non-NULL: in the hash
        return dentry

    def path_to(self, dentry: int):
        path = self.alloc("path")
        self.set(path, "path", "dentry", dentry)
        return self.prog.struct("path", path)

    def named(self, ghosts: Ghosts, inode: int, path: str = "/data/x"):
        identity = FileIdentity(path=path, dev=0, ino=77, size=0, mode=0, deleted=True)
        sb = int(self.prog.pointer("inode", inode).i_sb)
        return ghosts.named(identity, self.path_to(self.dentry(b"x", None, sb, inode=inode, hashed=False)))


class FakeProc(FakeInodes):
    """A procfs mount of one PID namespace: /proc, /proc/123 (its process released when
    `gone`), /proc/123/status and /proc/meminfo."""

    def __init__(self, kernel: str, *, gone: bool) -> None:
        super().__init__(kernel)
        self.pid_ns = self.alloc("pid_namespace")
        info = self.alloc("proc_fs_info")
        self.set(info, "proc_fs_info", "pid_ns", self.pid_ns)
        self.sb = self.alloc("super_block")
        self.set(self.sb, "super_block", "s_magic", 0x9FA0)
        self.set(self.sb, "super_block", "s_fs_info", info)
        self.root = self.dentry(b"/", None, self.sb)
        self.set(self.sb, "super_block", "s_root", self.root)
        self.pid_dir = self.dentry(b"123", self.root, self.sb, hashed=not gone)
        self.status = self.dentry(b"status", self.pid_dir, self.sb)
        self.meminfo = self.dentry(b"meminfo", self.root, self.sb)

    def named_at(self, ghosts: Ghosts, dentry: int, path: str, *, deleted: bool = False):
        identity = FileIdentity(path=path, dev=0, ino=5, size=0, mode=stat.S_IFDIR | 0o555, deleted=deleted)
        return ghosts.named(identity, self.path_to(dentry))


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_removed_directory_is_a_ghost_with_its_owner_mode_and_times(kernel):
    fake = FakeInodes(kernel)
    inode = fake.inode(stat.S_IFDIR | 0o750, atime=(2000000000, 123456789), mtime=(1100000000, 987654321))
    ghost = fake.named(Ghosts(), inode).ghost
    assert (ghost.mode, ghost.uid, ghost.gid, ghost.ino, ghost.dev) == (stat.S_IFDIR | 0o750, 1000, 100, 77, 0x801)
    assert (ghost.atime, ghost.mtime, ghost.data) == ((2000000000, 123456789), (1100000000, 987654321), [])
    # a name that is still there needs no ghost
    kept = FileIdentity(path="/data/y", dev=0, ino=77, size=0, mode=0)
    sb = int(fake.prog.pointer("inode", inode).i_sb)
    assert Ghosts().named(kept, fake.path_to(fake.dentry(b"y", None, sb, inode=inode))).ghost is None


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


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_file_in_an_exited_process_proc_directory_is_remapped_to_its_pid(kernel):
    fake = FakeProc(kernel, gone=True)
    ghosts = Ghosts(pid_ns=fake.prog.pointer("pid_namespace", fake.pid_ns))
    # the cwd left in /proc/123 (its dentry unhashed), and a file opened below it (still hashed)
    cwd = fake.named_at(ghosts, fake.pid_dir, "/proc/123", deleted=True)
    assert (cwd.dead_pid, cwd.ghost, cwd.path) == (123, None, "/proc/123")
    assert fake.named_at(ghosts, fake.status, "/proc/123/status").dead_pid == 123
    # not below a PID's directory: kept as it is
    assert fake.named_at(ghosts, fake.meminfo, "/proc/meminfo").dead_pid is None
    assert fake.named_at(ghosts, fake.root, "/proc").dead_pid is None


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_live_process_proc_files_are_kept_and_what_restore_could_not_open_is_refused(kernel):
    fake = FakeProc(kernel, gone=False)
    ghosts = Ghosts(pid_ns=fake.prog.pointer("pid_namespace", fake.pid_ns))
    kept = fake.named_at(ghosts, fake.status, "/proc/123/status")
    assert (kept.dead_pid, kept.ghost) == (None, None)
    # gone from /proc while its process directory is not (an exited thread's /proc/123/task/124)
    task = fake.dentry(b"task", fake.pid_dir, fake.sb)
    thread = fake.dentry(b"124", task, fake.sb, hashed=False)
    assert_one_line_error(
        lambda: fake.named_at(ghosts, thread, "/proc/123/task/124", deleted=True),
        "/proc/123/task/124 is gone from /proc (a thread or an entry that has exited) while its process directory",
        UnsupportedError,
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_an_exited_process_of_another_pid_namespace_or_a_parent_loop_is_refused(kernel):
    fake = FakeProc(kernel, gone=True)
    other = Ghosts(pid_ns=fake.prog.pointer("pid_namespace", fake.alloc("pid_namespace")))
    assert_one_line_error(
        lambda: fake.named_at(other, fake.pid_dir, "/proc/123", deleted=True),
        "/proc/123 is in the /proc directory of PID 123, which has exited, on a proc mount of another PID namespace",
        UnsupportedError,
    )
    # a hostile guest's dentries that are each other's parents, never reaching the root
    a = fake.dentry(b"a", None, fake.sb)
    b = fake.dentry(b"b", a, fake.sb)
    fake.set(a, "dentry", "d_parent", b)
    assert_one_line_error(lambda: fake.named_at(other, a, "/proc/a"), "parents (a loop)")
