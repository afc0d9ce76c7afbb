"""A runc container's id from runc's state in the guest (workload `runc`, whose runc keeps its
root in a sysroot tmpfs, as one run from a chroot does): found, and not taken when the state
no longer describes a live container or is not what a state file is."""

from __future__ import annotations

import logging

import pytest

from corpus import kernels
from ovm_offline import inventory, sources
from ovm_offline.extract import runtimes
from ovm_offline.extract.runtimes import RUNC_ROOTS, runc_container_ids
from ovm_offline.kernel.fs.dcache import inode_size, real_mount
from ovm_offline.kernel.fs.namei import WalkBudget, dentry_children, lookup_cached, mount_tree
from ovm_offline.kernel.mm.mmap import page_cache_pfn
from ovm_offline.kernel.task.tasks import find_task
from tests.support.mutate import PatchedSource

pytestmark = pytest.mark.guest


def _state_file(prog):
    """The ``struct dentry`` of run/runc/ovm-runc/state.json below the sysroot mount."""
    init = find_task(prog, 1)
    budget = WalkBudget()
    tree = mount_tree(real_mount(init.fs.root.mnt), budget)
    for mount in tree.mounts:
        hit = lookup_cached(tree, mount, mount.mnt.mnt_root.deref(), f"{RUNC_ROOTS[0]}/ovm-runc/state.json", budget)
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
        assert sorted(c.d_name.name.string_() for c in dentry_children(state_dir, WalkBudget())) == [b"state.json"]

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


@pytest.mark.parametrize("kernel", list(kernels.KERNELS))
def test_a_looping_mount_tree_or_a_search_past_its_budget_only_costs_the_runtime_id(
    recording, kernel, caplog, monkeypatch
):
    """ps lists every process either way and says in one warning why runc's state went unread."""
    rec = recording(kernel, "runc")
    with sources.open_source(rec.elf) as source:
        everyone = {p.pid for p in inventory.list_processes(inventory.open_kernel(source))}
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        top = real_mount(find_task(prog, 1).fs.root.mnt)
        looped = int(top.mnt_child.address_of_()).to_bytes(8, "little")  # the top mount's first child: itself
        source.patch_virtual(prog, int(top.mnt_mounts.address_of_()), looped)
        with caplog.at_level(logging.WARNING, logger="ovm_offline"):
            listed = inventory.list_processes(inventory.open_kernel(source))
    assert {p.pid for p in listed} == everyone and {p.runtime_id for p in listed} == {None}
    assert f"runc's state not read: mount 0x{top.address_:x} is below itself" in caplog.text

    caplog.clear()
    monkeypatch.setattr(runtimes, "WalkBudget", lambda: WalkBudget(left=20, total=20))
    with sources.open_source(rec.elf) as source, caplog.at_level(logging.WARNING, logger="ovm_offline"):
        listed = inventory.list_processes(inventory.open_kernel(source))
    assert {p.pid for p in listed} == everyone and {p.runtime_id for p in listed} == {None}
    assert "more than 20 entries read in one search" in caplog.text
