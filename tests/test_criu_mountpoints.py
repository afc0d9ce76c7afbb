"""mountpoints-N.img of the runc container, written from the mounts read in guest memory,
entry for entry against the one `runc checkpoint` (criu 3.17 underneath) wrote of the same
container on both kernels."""

from __future__ import annotations

import dataclasses

import pytest
from google.protobuf import json_format

from corpus import kernels
from ovm_offline import inventory, sources
from ovm_offline.criu import images
from ovm_offline.criu.build.mnt import UnsavedMount, mnt_entry, mountpoints_entries
from ovm_offline.extract.runtimes import runc_containers, runc_external_mounts
from ovm_offline.kernel.core.symbols import load_isf
from ovm_offline.kernel.fs.fs_struct import fs_root, task_fs
from ovm_offline.kernel.fs.mounts import mnt_namespace_mounts, mount_info, task_mnt_ns
from ovm_offline.kernel.task.tasks import find_task
from tests.support.paths import ISF

pytestmark = pytest.mark.guest

KERNELS = list(kernels.KERNELS)
#: the cgroup the corpus's runc container lives in, the root of its cgroup namespace
RUNC_CGROUP = "/ovm-runc"


def _container(rec):
    """(the container's mounts, its runc container) as the guest's memory holds them."""
    with sources.open_source(rec.elf) as source:
        prog = inventory.open_kernel(source)
        task = find_task(prog, rec.manifest["root_pid"])
        root = fs_root(task_fs(task))
        mounts = [mount_info(mount, root) for mount in mnt_namespace_mounts(task_mnt_ns(task))]
        return mounts, runc_containers(prog)[rec.manifest["root_pid"]]


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_runc_containers_mountpoints_are_those_runc_checkpoint_wrote(recording, kernel):
    rec = recording(kernel, "runc")
    mounts, container = _container(rec)
    reachable = [m for m in mounts if m.mount_point is not None]
    external = runc_external_mounts(container, reachable)
    # runc masks the paths of its spec that exist: /proc/sched_debug too before 5.13 moved it
    # to debugfs (its procfs initcall is in the ISF)
    sched_debug = load_isf(ISF[kernel]).has_symbol("init_sched_debug_procfs")
    masked_paths = ("/proc/kcore", "/proc/keys", "/proc/timer_list") + (("/proc/sched_debug",) if sched_debug else ())
    masked = {p: "/dev/null" for p in masked_paths}
    assert external == {**masked, "/data": "/data"}  # and the config's bind mount, by its destination
    ours = mountpoints_entries(reachable, RUNC_CGROUP, external)
    (golden_file,) = rec.golden.glob("mountpoints-*.img")
    golden = images.read_image(golden_file).entries
    assert len(ours) == len(golden) == 19 + sched_debug
    for mine, theirs in zip(ours, golden):
        assert json_format.MessageToDict(mine) == json_format.MessageToDict(theirs), theirs.mountpoint


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_mount_outside_the_containers_root_or_of_an_unknown_file_system_is_refused(recording, kernel):
    mounts, _ = _container(recording(kernel, "runc"))
    outside = next(m for m in mounts if m.mount_point is None)
    with pytest.raises(UnsavedMount, match=f"mount {outside.mnt_id} .*outside the tree's root"):
        mnt_entry(outside)
    proc = next(m for m in mounts if m.fstype == "proc" and m.mount_point == "/proc")
    with pytest.raises(UnsavedMount, match="ext4 on /proc\\): a file system not saved"):
        mnt_entry(dataclasses.replace(proc, fstype="ext4"))
