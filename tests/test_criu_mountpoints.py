"""mountpoints-N.img of the runc container, written from the mounts read in guest memory,
entry for entry against the one `runc checkpoint` (criu 3.17 underneath) wrote of the same
container on both kernels."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from corpus import initramfs, kernels
from ovm_offline import inventory, sources
from ovm_offline.criu import images
from ovm_offline.criu.build.mnt import UnsavedMount, mnt_entry, mountpoints_entries
from ovm_offline.kernel.fs.fs_struct import fs_root, task_fs
from ovm_offline.kernel.fs.mounts import mnt_namespace_mounts, mount_info, task_mnt_ns
from ovm_offline.kernel.task.tasks import find_task

pytestmark = pytest.mark.guest

KERNELS = list(kernels.KERNELS)
#: the cgroup the corpus's runc container lives in, the root of its cgroup namespace
RUNC_CGROUP = "/ovm-runc"


def _container_mounts(rec):
    with sources.open_source(rec.elf) as source:
        prog = inventory.open_kernel(source)
        task = find_task(prog, rec.manifest["root_pid"])
        root = fs_root(task_fs(task))
        return [mount_info(mount, root) for mount in mnt_namespace_mounts(task_mnt_ns(task))]


def _runc_external(mounts) -> dict[str, str]:
    """What runc checkpoint asks criu to treat as external: each masked path that is a file,
    hidden by a bind mount of /dev/null (a masked directory gets a tmpfs of its own)."""
    config = json.loads(initramfs.RUNC_CONFIG.read_text())
    masked = set(config["linux"]["maskedPaths"])
    return {m.mount_point: "/dev/null" for m in mounts if m.mount_point in masked and m.root == "/null"}


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_runc_containers_mountpoints_are_those_runc_checkpoint_wrote(recording, kernel):
    rec = recording(kernel, "runc")
    mounts = _container_mounts(rec)
    reachable = [m for m in mounts if m.mount_point is not None]
    ours = mountpoints_entries(reachable, RUNC_CGROUP, _runc_external(reachable))
    (golden_file,) = rec.golden.glob("mountpoints-*.img")
    golden = images.read_image(golden_file).entries
    assert len(ours) == len(golden) == 18
    for mine, theirs in zip(ours, golden):
        assert json_format.MessageToDict(mine) == json_format.MessageToDict(theirs), theirs.mountpoint


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_mount_outside_the_containers_root_or_of_an_unknown_file_system_is_refused(recording, kernel):
    mounts = _container_mounts(recording(kernel, "runc"))
    outside = next(m for m in mounts if m.mount_point is None)
    with pytest.raises(UnsavedMount, match=f"mount {outside.mnt_id} .*outside the tree's root"):
        mnt_entry(outside)
    proc = next(m for m in mounts if m.fstype == "proc" and m.mount_point == "/proc")
    with pytest.raises(UnsavedMount, match="ext4 on /proc\\): a file system not saved"):
        mnt_entry(type(proc)(**{**proc.__dict__, "fstype": "ext4"}))
