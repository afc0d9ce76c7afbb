"""A runc container's id from runc's state in the guest (workload `runc`, whose runc keeps its
root in a sysroot tmpfs, as one run from a chroot does): found, and not taken when the state
no longer describes a live container or is not what a state file is."""

from __future__ import annotations

import logging

import pytest

from corpus import kernels
from ovm_offline import inventory, sources
from ovm_offline.extract.runtimes import RUNC_ROOTS, runc_container_ids
from ovm_offline.kernel.fs.dcache import inode_size
from ovm_offline.kernel.fs.namei import dentry_children, lookup_cached, mount_subtree
from ovm_offline.kernel.mm.mmap import page_cache_pfn
from ovm_offline.kernel.task.tasks import find_task
from tests.support.mutate import PatchedSource

pytestmark = pytest.mark.guest


def _state_file(prog):
    """The ``struct dentry`` of run/runc/ovm-runc/state.json below the sysroot mount."""
    init = find_task(prog, 1)
    top = prog.container_of(int(init.fs.root.mnt), "mount", "mnt")
    for mount in mount_subtree(top):
        hit = lookup_cached(mount, mount.mnt.mnt_root.deref(), f"{RUNC_ROOTS[0]}/ovm-runc/state.json")
        if hit is not None:
            return hit[1]
    raise AssertionError("no state.json of ovm-runc")


@pytest.mark.parametrize("kernel", list(kernels.KERNELS))
def test_runcs_state_names_the_container_only_while_its_first_process_lives(recording, kernel, caplog):
    rec = recording(kernel, "runc")
    init = rec.manifest["root_pid"]
    with sources.open_source(rec.elf) as source:
        prog = inventory.open_kernel(source)
        assert runc_container_ids(prog) == {init: "ovm-runc"}
        state_dir = _state_file(prog).d_parent.deref()
        assert sorted(c.d_name.name.string_() for c in dentry_children(state_dir)) == [b"state.json"]

    # the same PID started later: a container that exited, its PID taken by another process
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        task = find_task(prog, init)
        later = (int(task.start_boottime) + 10**9).to_bytes(8, "little")
        source.patch_virtual(prog, task.address_ + prog.member_offset("task_struct", "start_boottime"), later)
        assert runc_container_ids(prog) == {}
        listed = inventory.list_processes(inventory.open_kernel(source))
        assert {p.runtime_id for p in listed} == {None}

    # a state file a hostile guest made absurdly large: skipped with a warning, ps goes on
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        inode = _state_file(prog).d_inode
        source.patch_virtual(prog, int(inode) + prog.member_offset("inode", "i_size"), (1 << 40).to_bytes(8, "little"))
        with caplog.at_level(logging.WARNING, logger="ovm_offline"):
            listed = inventory.list_processes(inventory.open_kernel(source))
        assert {p.runtime_id for p in listed} == {None}
        assert "runc state of container 'ovm-runc' skipped: it has 1099511627776 bytes" in caplog.text

    # one nested deeper than a JSON parser recurses: not JSON, skipped with a warning
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        inode = _state_file(prog).d_inode
        assert inode_size(inode) > 4096  # its first page alone nests deep enough
        source.patches[page_cache_pfn(inode.i_mapping, 0) * 4096] = b"[" * 4096
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="ovm_offline"):
            assert runc_container_ids(inventory.open_kernel(source)) == {}
        assert "runc state of container 'ovm-runc' skipped: it is not JSON (RecursionError)" in caplog.text
