"""d_path (ovm_offline.kernel.fs.dcache) on dentries and mounts built in fake memory with the
real 6.1 and 6.12 layouts: names across mounts, unlinked files, pseudo files named by
d_op->d_dname, and hostile chains (loops, absurd names) as one-line GuestDataErrors.
Real paths are checked against golden images in test_extract_mm.py (mapped files)."""

from __future__ import annotations

import pytest

from ovm_offline.errors import GuestDataError
from ovm_offline.kernel.fs.dcache import (
    d_path,
    d_path_info,
    dentry_path,
    file_identity,
    file_path,
)
from tests.support.memory import FakeKernelMemory


class FakeFs(FakeKernelMemory):
    """Dentries, mounts, paths, inodes and files in fake memory."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        self.sb = self.alloc("super_block")  # one file system's: a path's dentry is its mount's

    def dentry(self, name: bytes, parent: int | None, hashed: bool = True, inode: int = 0) -> int:
        d = self.alloc("dentry")
        self.set(d, "dentry", "d_sb", self.sb)
        self.set(d, "dentry", "d_name.name", self.string(name))
        self.set(d, "dentry", "d_name.len", len(name))
        self.set(d, "dentry", "d_parent", parent if parent is not None else d)
        self.set(d, "dentry", "d_hash.pprev", 0xDEAD if hashed else 0)
        self.set(d, "dentry", "d_inode", inode)
        return d

    def mount(self, root: int, parent: int | None, mountpoint: int | None) -> int:
        m = self.alloc("mount")
        self.set(m, "mount", "mnt.mnt_root", root)
        self.set(m, "mount", "mnt.mnt_sb", self.sb)
        self.set(m, "mount", "mnt_parent", parent if parent is not None else m)
        self.set(m, "mount", "mnt_mountpoint", mountpoint if mountpoint is not None else root)
        self.set(m, "mount", "mnt_ns", 0xFFFF_8880_0FFF_0000)
        return m

    def vfsmount(self, m: int) -> int:
        return m + self.prog.member_offset("mount", "mnt")

    def path(self, m: int, d: int):
        p = self.alloc("path")
        self.set(p, "path", "mnt", self.vfsmount(m))
        self.set(p, "path", "dentry", d)
        return self.prog.struct("path", p)

    def inode(self, ino: int, size: int, mode: int, dev: int) -> int:
        i = self.alloc("inode")
        sb = self.alloc("super_block")
        self.set(sb, "super_block", "s_dev", dev)
        self.set(i, "inode", "i_ino", ino)
        self.set(i, "inode", "i_size", size)
        self.set(i, "inode", "i_mode", mode)
        self.set(i, "inode", "i_sb", sb)
        return i

    def file(self, m: int, d: int, inode: int) -> int:
        f = self.alloc("file")
        self.set(f, "file", "f_path.mnt", self.vfsmount(m))
        self.set(f, "file", "f_path.dentry", d)
        self.set(f, "file", "f_inode", inode)
        self.set(f, "file", "f_op", self.prog.symbol_address("bad_file_ops"))
        return f


def tree(fs: FakeFs):
    """/ (rootfs) with /run/ovm, and a tmpfs mounted on /run/ovm holding data/x.txt."""
    root = fs.dentry(b"/", None)
    run = fs.dentry(b"run", root)
    ovm = fs.dentry(b"ovm", run)
    m0 = fs.mount(root, None, None)
    troot = fs.dentry(b"/", None)
    data = fs.dentry(b"data", troot)
    m1 = fs.mount(troot, m0, ovm)
    return root, m0, m1, troot, data


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_paths_cross_mounts_and_flag_unlinked(kernel):
    fs = FakeFs(kernel)
    root, m0, m1, troot, data = tree(fs)
    x = fs.dentry(b"x.txt", data)
    assert d_path(fs.path(m1, x)) == "/run/ovm/data/x.txt"
    assert d_path(fs.path(m1, troot)) == "/run/ovm"
    assert d_path(fs.path(m0, root)) == "/"
    assert dentry_path(fs.prog.struct("dentry", x)) == "/data/x.txt"
    gone = fs.dentry(b"old.log", data, hashed=False)
    info = d_path_info(fs.path(m1, gone))
    assert (info.path, info.unlinked, info.pseudo) == ("/run/ovm/data/old.log", True, False)
    assert d_path(fs.path(m1, gone)) == "/run/ovm/data/old.log (deleted)"
    # Relative to a root inside the tmpfs (a chroot there), as that task sees it.
    assert d_path(fs.path(m1, x), root=fs.path(m1, data)) == "/x.txt"


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_file_identity(kernel):
    fs = FakeFs(kernel)
    _root, _m0, m1, _troot, data = tree(fs)
    x = fs.dentry(b"x.txt", data)
    inode = fs.inode(42, 10000, 0o100640, (0 << 20) | 0x16)
    f = fs.prog.pointer("file", fs.file(m1, x, inode))
    assert file_path(f) == "/run/ovm/data/x.txt"
    ident = file_identity(f)
    assert (ident.path, ident.ino, ident.size, ident.mode, ident.dev, ident.deleted) == (
        "/run/ovm/data/x.txt",
        42,
        10000,
        0o100640,
        0x16,
        False,
    )


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_pseudo_files_are_named_by_their_d_dname(kernel):
    fs = FakeFs(kernel)
    _root, m0, _m1, _troot, _data = tree(fs)
    proot = fs.dentry(b"pipe:", None)
    inode = fs.inode(1234, 0, 0o010600, 0xC)
    pipe = fs.dentry(b"", proot, hashed=False, inode=inode)
    ops = fs.alloc("dentry_operations")
    fs.set(ops, "dentry_operations", "d_dname", fs.prog.symbol_address("pipefs_dname"))
    fs.set(pipe, "dentry", "d_op", ops)
    pm = fs.mount(proot, None, None)
    info = d_path_info(fs.path(pm, pipe))
    assert (info.path, info.pseudo) == ("pipe:[1234]", True)
    # Shared anonymous memory: a shmem file "dev/zero", its own parent, named by simple_dname.
    zero = fs.dentry(b"dev/zero", None, hashed=False)
    sops = fs.alloc("dentry_operations")
    fs.set(sops, "dentry_operations", "d_dname", fs.prog.symbol_address("simple_dname"))
    fs.set(zero, "dentry", "d_op", sops)
    shm = fs.mount(zero, None, None)
    assert d_path(fs.path(shm, zero)) == "/dev/zero (deleted)"


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_hostile_chains_are_guest_data_errors(kernel):
    fs = FakeFs(kernel)
    root, m0, m1, troot, data = tree(fs)
    # Two dentries that are each other's parent.
    a = fs.dentry(b"a", None)
    b = fs.dentry(b"b", a)
    fs.set(a, "dentry", "d_parent", b)
    with pytest.raises(GuestDataError) as e:
        d_path(fs.path(m1, a))
    assert "\n" not in str(e.value)
    # A name longer than NAME_MAX.
    long = fs.dentry(b"n" * 10, data)
    fs.set(long, "dentry", "d_name.len", 300)
    with pytest.raises(GuestDataError, match="NAME_MAX"):
        d_path(fs.path(m1, long))
    # Mounts that are each other's parent.
    r2, r3 = fs.dentry(b"/", None), fs.dentry(b"/", None)
    m2 = fs.mount(r2, None, None)
    m3 = fs.mount(r3, m2, r2)
    fs.set(m2, "mount", "mnt_parent", m3)
    fs.set(m2, "mount", "mnt_mountpoint", r3)
    with pytest.raises(GuestDataError, match="mount"):
        d_path(fs.path(m3, r3))
