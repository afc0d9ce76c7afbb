"""fd tables, files, ttys and fs_structs built in fake memory from the real 6.1 and 6.12
ISFs: layouts that differ between the kernels (f_owner embedded or a pointer), file
kinds, and hostile data (absurd max_fds, bogus pointers) that must end in one-line
GuestDataErrors instead of huge reads or tracebacks."""

from __future__ import annotations

import pytest

from ovm_offline.errors import GuestDataError
from ovm_offline.extract.files import (
    F_OWNER_PGRP,
    F_OWNER_PID,
    extract_files,
    file_owner_state,
)
from ovm_offline.filekinds import classify
from ovm_offline.kernel.core.objects import Pointer
from ovm_offline.kernel.fs.fdtable import (
    PIPEFS_MAGIC,
    S_IFCHR,
    S_IFIFO,
    S_IFREG,
    cloexec_fds,
    fd_is_cloexec,
    files_fdtable,
    for_each_file,
    max_fds_limit,
)
from ovm_offline.kernel.fs.fs_struct import fs_umask
from ovm_offline.kernel.fs.tty import file_tty
from ovm_offline.state import Owner
from tests.support.memory import FAKE_POB, FakeKernelMemory


def file_kind(file) -> str:
    return classify(file).name


NR_OPEN = 1 << 20
BOGUS = 0x0000_DEAD_BEEF_0000  # a user address: not mapped in the (empty) kernel page tables


class Fake(FakeKernelMemory):
    """Files, fd tables, ttys and fs_structs in fake memory."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        self.write_symbol_u32("sysctl_nr_open", NR_OPEN)

    def write_symbol_u32(self, name: str, value: int) -> None:
        self.write(self.prog.symbol_address(name), value.to_bytes(4, "little"))

    # --- objects
    def inode(self, mode: int, magic: int = 0) -> int:
        sb = self.alloc("super_block")
        self.set(sb, "super_block", "s_magic", magic)
        inode = self.alloc("inode")
        self.set(inode, "inode", "i_mode", mode)
        self.set(inode, "inode", "i_sb", sb)
        return inode

    def file(self, inode: int, fops: str = "bad_file_ops", flags: int = 0) -> int:
        """A file with `fops` (one no file kind claims unless given): no open file's f_op is NULL."""
        f = self.alloc("file")
        self.set(f, "file", "f_inode", inode)
        self.set(f, "file", "f_flags", flags)
        self.set(f, "file", "f_op", self.symbols.symbol_address(fops))
        return f

    def files(
        self,
        max_fds: int,
        fds: dict[int, int],
        cloexec: set[int] = frozenset(),
        array: int | None = None,
        open_fds: int | None = None,
    ) -> int:
        """A files_struct whose fdtable has `max_fds` slots holding `fds` (fd -> file)."""
        files = self.alloc("files_struct")
        fdt = self.alloc("fdtable")
        nbytes = max(8, (max_fds + 7) // 8)
        if array is None:
            array = self.alloc(max(8, max_fds * 8))
            for fd, f in fds.items():
                self.write_u64(array + fd * 8, f)
        if open_fds is None:
            open_fds = self.alloc(nbytes)
            for fd in fds:
                self.src.write(
                    open_fds - FAKE_POB + fd // 8,
                    bytes([self.src.read(open_fds - FAKE_POB + fd // 8, 1)[0] | 1 << fd % 8]),
                )
        coe = self.alloc(nbytes)
        for fd in cloexec:
            self.src.write(
                coe - FAKE_POB + fd // 8, bytes([self.src.read(coe - FAKE_POB + fd // 8, 1)[0] | 1 << fd % 8])
            )
        self.set(fdt, "fdtable", "max_fds", max_fds)
        self.set(fdt, "fdtable", "fd", array)
        self.set(fdt, "fdtable", "open_fds", open_fds)
        self.set(fdt, "fdtable", "close_on_exec", coe)
        self.set(files, "files_struct", "fdt", fdt)
        return files

    def task(self, pid: int, files: int) -> int:
        t = self.alloc("task_struct")
        self.set(t, "task_struct", "pid", pid)
        self.set(t, "task_struct", "tgid", pid)
        self.set(t, "task_struct", "files", files)
        return t

    def pid_ns(self) -> int:
        ns = self.alloc("pid_namespace")
        self.set(ns, "pid_namespace", "level", 0)
        return ns

    def pid(self, nr: int, ns: int) -> int:
        p = self.alloc("pid", extra=64)
        self.set(p, "pid", "level", 0)
        self.src.write(
            p - FAKE_POB + self.prog.member_offset("pid", "numbers"),
            nr.to_bytes(4, "little") + bytes(4) + ns.to_bytes(8, "little"),
        )
        return p


@pytest.fixture(params=["6.1", "6.12", "7.2"])
def fake(request):
    return Fake(request.param)


def task_of(fake: Fake, files: int, pid: int = 4242):
    return fake.prog.struct("task_struct", fake.task(pid, files))


def raises_one_line(fn, *words: str) -> str:
    with pytest.raises(GuestDataError) as exc:
        fn()
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 300, msg
    for w in words:
        assert w in msg, msg
    return msg


# --- well-formed tables


def test_walk_and_cloexec(fake):
    reg = fake.file(fake.inode(S_IFREG | 0o644))
    files = fake.files(128, {0: reg, 5: reg, 100: reg}, cloexec={5, 100})
    f = fake.prog.pointer("files_struct", files)
    got = list(for_each_file(f))
    assert [fd for fd, _ in got] == [0, 5, 100]
    assert all(int(p) == reg for _, p in got)
    fdt = files_fdtable(f)
    assert [fd_is_cloexec(fdt, n) for n in (0, 5, 100, 127, 500)] == [False, True, True, False, False]


def test_big_sparse_table_reads_little(fake):
    """A legal table of sysctl_nr_open slots costs reads only where fds are open."""
    reg = fake.file(fake.inode(S_IFREG | 0o600))
    files = fake.files(NR_OPEN, {3: reg, NR_OPEN - 1: reg})
    before = fake.src.reads
    assert [fd for fd, _ in for_each_file(fake.prog.pointer("files_struct", files))] == [3, NR_OPEN - 1]
    assert fake.src.reads - before < 16


def test_file_kinds(fake):
    def kind(mode: int, fops: str | None = None, magic: int = 0) -> str:
        return file_kind(fake.prog.pointer("file", fake.file(fake.inode(mode, magic), fops or "bad_file_ops")))

    assert kind(S_IFREG | 0o644, "shmem_file_operations") == "reg"
    assert kind(S_IFCHR | 0o666, "null_fops") == "reg"  # CRIU saves /dev/null as a regular file
    assert kind(S_IFCHR | 0o620, "tty_fops") == "tty"
    assert kind(S_IFCHR | 0o666, "ptmx_fops") == "tty"
    assert kind(S_IFIFO | 0o600, "pipefifo_fops", PIPEFS_MAGIC) == "pipe"
    if fake.prog.symbols.has_symbol("pipeanon_fops"):  # 6.15+: an anonymous pipe's own table
        assert kind(S_IFIFO | 0o600, "pipeanon_fops", PIPEFS_MAGIC) == "pipe"
    assert kind(S_IFIFO | 0o644, "pipefifo_fops", 0x01021994) == "fifo"  # a FIFO on tmpfs
    assert kind(0o600, "eventfd_fops") == "eventfd"
    assert kind(0o600, "eventpoll_fops") == "eventpoll"
    assert kind(0o600, "signalfd_fops") == "signalfd"
    assert kind(0o600, "timerfd_fops") == "timerfd"
    assert kind(0o600) == "anon"
    # An anon-inode file of a kind not in the table, even if its inode says S_IFREG.
    mnt = fake.alloc("vfsmount")
    fake.write_u64(fake.prog.symbol_address("anon_inode_mnt"), mnt)
    f = fake.file(fake.inode(S_IFREG | 0o600), "shmem_file_operations")
    fake.set(f, "file", "f_path.mnt", mnt)
    assert file_kind(fake.prog.pointer("file", f)) == "anon"
    # A memfd: a shmem file on the internal shm_mnt whose dentry is named "memfd:...".
    shm = fake.alloc("vfsmount")
    fake.write_u64(fake.prog.symbol_address("shm_mnt"), shm)
    name = fake.alloc(16)
    fake.write(name, b"memfd:buf\0")
    dentry = fake.alloc("dentry")
    fake.set(dentry, "dentry", "d_name.name", name)
    fake.set(dentry, "dentry", "d_name.len", 9)
    f = fake.file(fake.inode(S_IFREG | 0o777), "shmem_file_operations")
    fake.set(f, "file", "f_path.mnt", shm)
    fake.set(f, "file", "f_path.dentry", dentry)
    assert file_kind(fake.prog.pointer("file", f)) == "memfd"


def test_owner_embedded_or_pointer(fake):
    """f_owner is embedded in struct file on 6.1, a pointer (NULL until F_SETOWN) since 6.12."""
    ns = fake.pid_ns()
    f = fake.file(fake.inode(S_IFREG | 0o644))
    fp = fake.prog.pointer("file", f)
    nsp = fake.prog.pointer("pid_namespace", ns)
    assert file_owner_state(fp, nsp) == Owner()
    if isinstance(fake.prog.struct("file", f).f_owner, Pointer):
        fown = fake.alloc("fown_struct")
        fake.set(f, "file", "f_owner", fown)
    else:
        fown = f + fake.prog.member_offset("file", "f_owner")
    assert file_owner_state(fp, nsp) == Owner()  # set up but no pid: F_GETOWN_EX says 0
    fake.set(fown, "fown_struct", "pid", fake.pid(77, ns))
    fake.set(fown, "fown_struct", "pid_type", 1)  # PIDTYPE_TGID
    fake.set(fown, "fown_struct", "uid", 1000)
    fake.set(fown, "fown_struct", "euid", 1001)
    fake.set(fown, "fown_struct", "signum", 29)
    assert file_owner_state(fp, nsp) == Owner(uid=1000, euid=1001, signum=29, pid_type=F_OWNER_PID, pid=77)
    fake.set(fown, "fown_struct", "pid_type", 2)  # PIDTYPE_PGID
    assert file_owner_state(fp, nsp).pid_type == F_OWNER_PGRP
    fake.set(fown, "fown_struct", "pid_type", 9)
    raises_one_line(lambda: file_owner_state(fp, nsp), "pid_type 9")


def test_max_fds_limit_follows_sysctl(fake):
    assert max_fds_limit(fake.prog) == NR_OPEN
    fake.write_symbol_u32("sysctl_nr_open", 1000)
    assert max_fds_limit(fake.prog) == 1024  # rounded up to BITS_PER_LONG, as alloc_fdtable


# --- hostile tables


@pytest.mark.parametrize("max_fds", [0, 100, NR_OPEN + 64, 0x7FFF_FFC0, 0xFFFF_FFC0])
def test_absurd_max_fds(fake, max_fds):
    files = fake.files(64, {})
    fake.set(fake.prog.struct("files_struct", files).fdt.value_(), "fdtable", "max_fds", max_fds)
    before = fake.src.reads
    raises_one_line(lambda: extract_files(fake.prog, task_of(fake, files), None, classify), "max_fds", str(max_fds))
    assert fake.src.reads - before < 64  # refused before any big read


def test_bogus_fd_array(fake):
    reg = fake.file(fake.inode(S_IFREG))
    files = fake.files(64, {1: reg}, array=BOGUS)
    raises_one_line(
        lambda: extract_files(fake.prog, task_of(fake, files), None, classify), "fd array", f"0x{BOGUS:x}", "unreadable"
    )


def test_null_fd_array(fake):
    files = fake.files(64, {1: 1}, array=0)
    raises_one_line(
        lambda: extract_files(fake.prog, task_of(fake, files), None, classify), "has a NULL fd, which no kernel"
    )


def test_bogus_open_fds_bitmap(fake):
    files = fake.files(64, {}, open_fds=BOGUS)
    raises_one_line(lambda: list(for_each_file(fake.prog.pointer("files_struct", files))), "open_fds", "unreadable")


def test_null_fdtable(fake):
    files = fake.alloc("files_struct")
    raises_one_line(
        lambda: extract_files(fake.prog, task_of(fake, files), None, classify), "has a NULL fdt, which no kernel"
    )


def test_bogus_file_pointer(fake):
    files = fake.files(64, {2: BOGUS})
    raises_one_line(
        lambda: extract_files(fake.prog, task_of(fake, files, pid=31337), None, classify), "pid 31337", f"0x{BOGUS:x}"
    )


def test_file_without_inode(fake):
    f = fake.file(0)
    files = fake.files(64, {0: f})
    raises_one_line(
        lambda: extract_files(fake.prog, task_of(fake, files, pid=555), None, classify),
        "pid 555",
        "has a NULL f_inode, which no kernel",
    )


def test_tty_private_data_not_pointing_back(fake):
    f = fake.file(fake.inode(S_IFCHR | 0o620), "tty_fops")
    priv = fake.alloc("tty_file_private")
    fake.set(priv, "tty_file_private", "tty", fake.alloc("tty_struct"))
    fake.set(priv, "tty_file_private", "file", f + 0x100)
    fake.set(f, "file", "private_data", priv)
    raises_one_line(lambda: file_tty(fake.prog.pointer("file", f)), "tty_file_private", "point back")
    fake.set(f, "file", "private_data", BOGUS)
    raises_one_line(lambda: file_tty(fake.prog.pointer("file", f)), "unreadable")


def test_absurd_umask(fake):
    fs = fake.alloc("fs_struct")
    fake.set(fs, "fs_struct", "umask", 0o22)
    assert fs_umask(fake.prog.pointer("fs_struct", fs)) == 0o22
    fake.set(fs, "fs_struct", "umask", 0x10000)
    raises_one_line(lambda: fs_umask(fake.prog.pointer("fs_struct", fs)), "umask")


def test_cloexec_set_across_a_big_table(fake):
    reg = fake.file(fake.inode(S_IFREG))
    files = fake.files(NR_OPEN, {n: reg for n in (0, 63, 64, 4095, 4096, NR_OPEN - 1)}, cloexec={63, 4096, NR_OPEN - 1})
    f = fake.prog.pointer("files_struct", files)
    coe = cloexec_fds(files_fdtable(f))
    assert coe == {63, 4096, NR_OPEN - 1}
    assert [fd for fd, _ in for_each_file(f)] == [0, 63, 64, 4095, 4096, NR_OPEN - 1]
