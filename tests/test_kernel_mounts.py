"""The mounts of a mount namespace read from guest memory, line for line against the
/proc/PID/mountinfo the guest itself printed for each process a moment before the snapshot
(the record job keeps it in /run/ovm/facts, a tmpfs, so the dump holds it in the page cache):
the runc container's 19 mounts (bind mounts of subdirectories, masked and read-only paths, a
cgroup2 mount rooted at the container's cgroup), a tree in mount and network namespaces of its
own, and the guest's initial namespace. A namespace whose count of mounts its list does not
match, or a mount that names another namespace, is refused."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline import inventory, sources
from ovm_offline.errors import GuestDataError
from ovm_offline.kernel.fs.dcache import inode_size, real_mount
from ovm_offline.kernel.fs.fs_options import tmpfs_defaults_to_inode64
from ovm_offline.kernel.fs.fs_struct import fs_root, task_fs
from ovm_offline.kernel.fs.mounts import mnt_namespace_mounts, mount_info, mountinfo_line, task_mnt_ns
from ovm_offline.kernel.fs.namei import WalkBudget, lookup_cached, mount_tree
from ovm_offline.kernel.mm.pagecache import read_cached
from ovm_offline.kernel.task.tasks import find_task
from tests.support.mutate import PatchedSource

pytestmark = pytest.mark.guest

KERNELS = list(kernels.KERNELS)


def _guest_file(prog, path: str) -> bytes:
    """A file the guest wrote on a tmpfs, from its page cache, looked up from PID 1's root."""
    root = fs_root(task_fs(find_task(prog, 1)))
    budget = WalkBudget()
    top = real_mount(root.mnt)
    hit = lookup_cached(mount_tree(top, budget), top, root.dentry.deref(), path.lstrip("/"), budget)
    assert hit is not None, f"{path} is not in the guest's dcache"
    inode = hit[1].d_inode
    data = read_cached(prog, inode, 0, inode_size(inode))
    assert data is not None, f"{path} is not all in the page cache"
    return data


def _our_lines(prog, task) -> list[str]:
    root = fs_root(task_fs(task))
    infos = (mount_info(mount, root) for mount in mnt_namespace_mounts(task_mnt_ns(task)))
    return [line for info in infos if (line := mountinfo_line(info)) is not None]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", ["runc", "container-unsaved", "counter"])
def test_the_mounts_of_each_process_are_those_its_mountinfo_showed(recording, kernel, workload):
    rec = recording(kernel, workload)
    with sources.open_source(rec.elf) as source:
        prog = inventory.open_kernel(source)
        for pid in rec.manifest["member_details"]:
            theirs = _guest_file(prog, f"/run/ovm/facts/proc/{pid}/mountinfo").decode().splitlines()
            ours = _our_lines(prog, find_task(prog, int(pid)))
            assert len(ours) == len(theirs) and theirs, f"PID {pid}: {len(ours)} mounts, mountinfo shows {len(theirs)}"
            for mine, kernels_line in zip(ours, theirs):
                assert mine == kernels_line, f"PID {pid}:\n ours   {mine}\n kernel {kernels_line}"


def _count_member(prog) -> tuple[str, int, int]:
    """(name, offset, size) of the member that counts a namespace's mounts."""
    t = prog.struct_type("mnt_namespace")
    member = t.member("nr_mounts" if t.has_member("nr_mounts") else "mounts")
    return member.name, member.offset, member.type.size


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_namespace_whose_mounts_do_not_add_up_is_refused(recording, kernel):
    rec = recording(kernel, "runc")
    init = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        ns = task_mnt_ns(find_task(prog, init)).deref()
        member, offset, size = _count_member(prog)
        count = int(getattr(ns, member))
        source.patch_virtual(prog, ns.address_ + offset, (count + 1).to_bytes(size, "little"))
        with pytest.raises(GuestDataError, match=f"the namespace counts {count + 1}, its list holds {count}"):
            mnt_namespace_mounts(ns)
        source.patch_virtual(prog, ns.address_ + offset, (1 << 30).to_bytes(size, "little"))
        with pytest.raises(GuestDataError, match="1 to 16384 are possible"):
            mnt_namespace_mounts(ns)

    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        ns = task_mnt_ns(find_task(prog, init)).deref()
        mounts = mnt_namespace_mounts(ns)
        other = task_mnt_ns(find_task(prog, 1))
        stray = mounts[len(mounts) // 2]
        where = stray.address_ + prog.member_offset("mount", "mnt_ns")
        source.patch_virtual(prog, where, int(other).to_bytes(8, "little"))
        with pytest.raises(GuestDataError, match=f"mount 0x{stray.address_:x} belongs to namespace 0x{int(other):x}"):
            mnt_namespace_mounts(ns)


@pytest.mark.parametrize("kernel", KERNELS)
def test_options_a_file_system_shows_that_are_not_rendered_leave_them_unknown(recording, kernel):
    """cgroup2's root flags come out as the kernel names them; a tmpfs with a NUMA policy
    (which this module does not render) has options None, and its line stops at rw/ro rather
    than showing fewer options than the kernel would."""
    rec = recording(kernel, "runc")
    init = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        task = find_task(prog, init)
        root = fs_root(task_fs(task))
        by_point = {
            info.mount_point: info for m in mnt_namespace_mounts(task_mnt_ns(task)) if (info := mount_info(m, root))
        }
        # inode64 where the kernel defaults to it (Debian 12's; Debian 11's 5.10 shows none)
        inode64 = ",inode64" if tmpfs_defaults_to_inode64(prog) else ""
        assert inode64 or kernel == "5.10"
        assert by_point["/dev"].fs_options == "size=65536k,mode=755" + inode64
        assert by_point["/sys/fs/cgroup"].fs_options == ""
        flags = prog["cgrp_dfl_root"].address_ + prog.member_offset("cgroup_root", "flags")
        delegate, recursive = (
            prog.symbols.enumerator(n) for n in ("CGRP_ROOT_NS_DELEGATE", "CGRP_ROOT_MEMORY_RECURSIVE_PROT")
        )
        assert delegate is not None and recursive is not None
        bits = delegate | recursive
        source.patch_virtual(prog, flags, bits.to_bytes(4, "little"))
        dev = next(m for m in mnt_namespace_mounts(task_mnt_ns(task)) if mount_info(m, root).mount_point == "/dev")
        sbinfo = int(dev.mnt.mnt_sb.s_fs_info)
        source.patch_virtual(
            prog, sbinfo + prog.member_offset("shmem_sb_info", "mpol"), (1 << 63).to_bytes(8, "little")
        )
        by_point = {
            info.mount_point: info for m in mnt_namespace_mounts(task_mnt_ns(task)) if (info := mount_info(m, root))
        }
        assert by_point["/sys/fs/cgroup"].fs_options == "nsdelegate,memory_recursiveprot"
        assert by_point["/dev"].fs_options is None
        assert mountinfo_line(by_point["/dev"]).endswith(" /dev rw,nosuid - tmpfs tmpfs rw")
