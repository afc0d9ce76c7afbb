"""A runc container's recording with its mounts and tmpfs files rewritten as a hostile guest
has them: each case is refused by name before anything is written (the `mountns` fuzz family
tries such rewrites at random; these are the ones it found or that matter most)."""

from __future__ import annotations

import re
import stat

import pytest

from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.errors import GuestDataError, UnsupportedError
from ovm_offline.extract.runtimes import _state_roots
from ovm_offline.kernel.fs.dcache import dentry_name
from ovm_offline.kernel.fs.fs_struct import fs_root, task_fs
from ovm_offline.kernel.fs.mounts import mnt_namespace_mounts, mount_info, task_mnt_ns
from ovm_offline.kernel.fs.namei import WalkBudget, dentry_children
from ovm_offline.kernel.ns.nsproxy import task_user_ns
from ovm_offline.kernel.task.tasks import find_task
from tests.support.mutate import PatchedSource

pytestmark = pytest.mark.guest


def _mount_at(prog, pid: int, point: str):
    """The ``struct mount`` the container's init sees at `point`."""
    task = find_task(prog, pid)
    root = fs_root(task_fs(task))
    return next(m for m in mnt_namespace_mounts(task_mnt_ns(task)) if mount_info(m, root).mount_point == point)


def _refused(rec, out, mutate, error=UnsupportedError) -> str:
    """What the dump of `rec`'s root raises (`error`) once `mutate(source, prog)` rewrote the
    guest's memory; nothing is written."""
    with PatchedSource(sources.open_source(rec.elf)) as source:
        mutate(source, inventory.open_kernel(source))
        with pytest.raises(error) as refused:
            dumping.dump(source, inventory.open_kernel(source), rec.manifest["root_pid"], out)
    assert not out.exists()
    return str(refused.value)


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_mount_source_that_is_not_utf8_is_refused_by_name(recording, tmp_path, kernel):
    rec = recording(kernel, "runc")
    pid = rec.manifest["root_pid"]
    seen = {}

    def mutate(source, prog):
        mount = _mount_at(prog, pid, "/dev/mqueue")
        seen["id"] = int(mount.mnt_id)
        name = int(mount.mnt_devname)
        assert prog.read(name, 6) == b"mqueue"
        source.patch_virtual(prog, name, b"mq\xffeue")

    message = _refused(rec, tmp_path / "images", mutate)
    assert f"is in a mount namespace with mount {seen['id']} whose source b'mq\\xffeue' is not valid UTF-8" in message


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_tmpfs_file_of_absurd_size_is_refused_by_name_not_read(recording, tmp_path, kernel):
    """/dev/null made a regular file of 1 TiB: the archive would hold it, so the dump refuses
    it by its path before reading (or allocating) a byte of it."""
    rec = recording(kernel, "runc")
    pid = rec.manifest["root_pid"]

    def mutate(source, prog):
        dev = _mount_at(prog, pid, "/dev")
        null = next(d for d in dentry_children(dev.mnt.mnt_root.deref(), WalkBudget()) if dentry_name(d) == b"null")
        inode = null.d_inode.deref()
        mode = prog.member_offset("inode", "i_mode")
        source.patch_virtual(prog, inode.address_ + mode, (stat.S_IFREG | 0o644).to_bytes(2, "little"))
        size = prog.member_offset("inode", "i_size")
        source.patch_virtual(prog, inode.address_ + size, (1 << 40).to_bytes(8, "little"))

    message = _refused(rec, tmp_path / "images", mutate)
    root = rec.manifest["root_pid"]
    assert (
        f"PID {root} (pipetree) is in a mount namespace whose tmpfs on /dev/null holds 1099511627776 bytes:"
        " more tmpfs data than the 64 MiB a dump archives"
    ) in message


@pytest.mark.parametrize(("flag", "name"), [(0x80, "nosymfollow"), (0x2000, "unbindable")])
def test_a_mount_flag_criu_cannot_carry_is_refused_by_name(recording, tmp_path, flag, name):
    """nosymfollow has no bit in criu 3.17's mount flags and mnt_entry no field for
    unbindable: written without them, the restored mount would behave otherwise."""
    rec = recording("6.12", "runc")
    pid = rec.manifest["root_pid"]
    seen = {}

    def mutate(source, prog):
        mount = _mount_at(prog, pid, "/dev/mqueue")
        seen["id"] = int(mount.mnt_id)
        flags = mount.address_ + prog.member_offset("mount", "mnt") + prog.member_offset("vfsmount", "mnt_flags")
        value = int.from_bytes(prog.read(flags, 4), "little")
        source.patch_virtual(prog, flags, (value | flag).to_bytes(4, "little"))

    message = _refused(rec, tmp_path / "images", mutate)
    assert (
        f"is in a mount namespace with mount {seen['id']} (mqueue on /dev/mqueue): {name},"
        " which criu 3.17's images do not carry"
    ) in message


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_user_namespace_nested_in_another_is_refused_by_name(recording, tmp_path, kernel):
    """The container's user namespace made its own parent (a loop, as a hostile guest may
    make it): criu saves one level below the guest's, so the dump refuses it, and ends."""
    rec = recording(kernel, "runc-userns")
    pid = rec.manifest["root_pid"]
    seen = {}

    def mutate(source, prog):
        ns = task_user_ns(find_task(prog, pid)).deref()
        seen["inum"] = int(ns.ns.inum)
        parent = ns.address_ + prog.member_offset("user_namespace", "parent")
        source.patch_virtual(prog, parent, ns.address_.to_bytes(8, "little"))

    message = _refused(rec, tmp_path / "images", mutate)
    assert (
        f"is in a user namespace of its own (user:[{seen['inum']}]);"
        " it is nested in another user namespace, which ovm-offline cannot save"
    ) in message


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_user_namespace_map_of_absurd_length_is_bad_guest_data(recording, tmp_path, kernel):
    rec = recording(kernel, "runc-userns")
    pid = rec.manifest["root_pid"]

    def mutate(source, prog):
        ns = task_user_ns(find_task(prog, pid)).deref()
        count = (
            ns.address_
            + prog.member_offset("user_namespace", "uid_map")
            + prog.member_offset("uid_gid_map", "nr_extents")
        )
        source.patch_virtual(prog, count, (1 << 31).to_bytes(4, "little"))

    message = _refused(rec, tmp_path / "images", mutate, GuestDataError)
    assert re.search(r"has 2147483648 extents \(max 340\)", message), message


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_container_whose_runc_state_is_gone_has_each_namespace_only_runc_restores_refused(
    recording, tmp_path, kernel
):
    """runc-userns with its state.json renamed in the guest: no runtime names the tree, so
    each namespace only `runc restore` is known to restore from our images (mount, network,
    user, cgroup) is refused by name, in one error, before anything is written."""
    rec = recording(kernel, "runc-userns")

    def mutate(source, prog):
        budget = WalkBudget()
        (state_root,) = _state_roots(prog, budget)
        (container,) = dentry_children(state_root, budget)
        state = next(d for d in dentry_children(container, budget) if dentry_name(d) == b"state.json")
        source.patch_virtual(prog, int(state.d_name.name), b"statX.json")

    message = _refused(rec, tmp_path / "images", mutate)
    for kind in ("mount namespace", "network namespace", "user namespace", "cgroup namespace"):
        assert f"is in a {kind} of its own" in message, kind
    assert message.count("ovm-offline saves one only for a container runc made") == 4, message
