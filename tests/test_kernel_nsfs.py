"""Which namespace an nsfs file (/proc/PID/ns/*) is open on (kernel/ns/nsproxy.py
`nsfs_file_namespace`), on fake memory laid out by each pinned ISF: the type is the namespace's
``ns_common.ns_type`` since 6.18, its ``ops->type`` before."""

from __future__ import annotations

import pytest

from ovm_offline.errors import GuestDataError
from ovm_offline.kernel.fs.dcache import _d_dname_name
from ovm_offline.kernel.ns.nsproxy import nsfs_file_namespace
from tests.support.memory import FakeKernelMemory
from tests.support.paths import ISF

CLONE_NEWNET = 0x40000000
INUM = 4026531840


def _nsfs_file(fake: FakeKernelMemory, flag: int, inum: int = INUM) -> int:
    common = fake.alloc("ns_common")
    ops = fake.alloc("proc_ns_operations")
    fake.set(common, "ns_common", "ops", ops)
    fake.set(common, "ns_common", "inum", inum)
    if fake.prog.struct("ns_common", common).has_member_("ns_type"):
        fake.set(common, "ns_common", "ns_type", flag)
    else:
        fake.set(ops, "proc_ns_operations", "type", flag)
    inode = fake.alloc("inode")
    fake.set(inode, "inode", "i_private", common)
    fake.set(inode, "inode", "i_ino", INUM)
    file = fake.alloc("file")
    fake.set(file, "file", "f_inode", inode)
    return file


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_a_namespace_file_names_its_namespace_in_either_layout(kernel):
    fake = FakeKernelMemory(kernel)
    file = fake.prog.pointer("file", _nsfs_file(fake, CLONE_NEWNET))
    assert nsfs_file_namespace(file) == ("net", INUM, CLONE_NEWNET)


def test_each_pinned_isf_says_where_the_type_is():
    own = {k for k in ISF if FakeKernelMemory(k).prog.struct("ns_common", 0).has_member_("ns_type")}
    assert own == {"7.2"}


@pytest.mark.parametrize("kernel", ["6.1", "7.2"])
def test_a_type_that_is_no_namespace_or_an_inode_naming_another_is_guest_data_error(kernel):
    fake = FakeKernelMemory(kernel)
    with pytest.raises(GuestDataError, match="namespace type 0x3, which is no CLONE_NEW"):
        nsfs_file_namespace(fake.prog.pointer("file", _nsfs_file(fake, 3)))
    with pytest.raises(GuestDataError, match="names namespace 7"):
        nsfs_file_namespace(fake.prog.pointer("file", _nsfs_file(fake, CLONE_NEWNET, inum=7)))


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_a_namespace_dentry_is_named_by_its_namespace_type(kernel):
    """ns_dname() names an nsfs dentry "<type>:[inode]" from the inode's namespace, whose ops name
    the type (the dentry's d_fsdata held them too before 6.9, and no longer does)."""
    fake = FakeKernelMemory(kernel)
    file = _nsfs_file(fake, CLONE_NEWNET)
    inode = fake.prog.struct("file", file).f_inode
    common = fake.prog.struct("ns_common", int(inode.i_private))
    fake.set(int(common.ops), "proc_ns_operations", "name", fake.string(b"net"))
    d_op = fake.alloc("dentry_operations")
    fake.set(d_op, "dentry_operations", "d_dname", fake.prog.symbol_address("ns_dname"))
    dentry = fake.alloc("dentry")
    fake.set(dentry, "dentry", "d_op", d_op)
    fake.set(dentry, "dentry", "d_inode", int(inode))
    assert _d_dname_name(fake.prog, fake.prog.struct("dentry", dentry)) == (f"net:[{INUM}]", False)
