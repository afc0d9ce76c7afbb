"""Namespaces of a dumped tree: a UTS namespace of the tree's own is saved as criu saves it
(utsns-N.img, restored with its names: tests/test_dump.py runs container-uts through every
gate), and a tree in namespaces ovm-offline cannot save is refused by name, every one of them
in one error, before anything is written (container-unsaved: mount and network namespaces of
its own, a child in nested user, UTS and time namespaces). A container runc made has its mount,
network and cgroup namespaces saved as `runc checkpoint` saves them."""

from __future__ import annotations

import json
import shutil

import pytest

from corpus import kernels
from corpus.restore import restore
from ovm_offline.criu import images
from ovm_offline.errors import ExitCode
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm, tree_digest

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest


def _ids(directory, pid: int):
    return images.read_image(directory / images.IDS.filename(pid)).entries[0]


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_trees_own_uts_namespace_is_saved_with_its_names(dumped, recording, kernel):
    out = dumped(kernel, "container-uts")
    root, child = _ids(out, 1), _ids(out, 2)
    assert root.uts_ns_id == child.uts_ns_id
    inventory = images.read_image(out / images.INVENTORY.filename()).entries[0]
    assert root.uts_ns_id != inventory.root_ids.uts_ns_id, "the tree's UTS namespace is not the guest's"
    uts = images.read_image(out / images.UTSNS.filename(root.uts_ns_id)).entries
    assert [(e.nodename, e.domainname) for e in uts] == [("ovmbox", "ovm.example")]
    # and what the guest itself said of the namespace
    rec = recording(kernel, "container-uts")
    procs = {p["pid"]: p for p in rec.manifest["processes"]}
    init = procs[rec.manifest["root_pid"]]
    assert init["ns"]["uts"] != procs[1]["ns"]["uts"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_tree_sharing_the_guests_uts_namespace_has_no_utsns_image(dumped, kernel):
    out = dumped(kernel, "container")
    assert not list(out.glob("utsns-*.img"))
    inventory = images.read_image(out / images.INVENTORY.filename()).entries[0]
    assert _ids(out, 1).uts_ns_id == inventory.root_ids.uts_ns_id


@pytest.mark.parametrize("kernel", KERNELS)
def test_namespaces_that_cannot_be_saved_are_each_refused_by_name(recording, tmp_path, kernel):
    rec = recording(kernel, "container-unsaved")
    m = rec.manifest
    init = m["root_pid"]
    (child,) = [p for p in m["members"] if p != init]
    procs = {p["pid"]: p for p in m["processes"]}
    ns_init, ns_child = procs[init]["ns"], procs[child]["ns"]
    out = tmp_path / "out"
    for source in (rec.elf, *rec.kdumps.values(), rec.live_dir):
        result = ovm("dump", str(source), "--pid", str(init), "-D", str(out))
        assert result.returncode == ExitCode.UNSUPPORTED
        needles = [
            f"PID {init} (container) is in a mount namespace of its own (mnt:[{ns_init['mnt']}]);"
            " ovm-offline saves one only for a container runc made",
            f"PID {init} (container) is in a network namespace of its own (net:[{ns_init['net']}]);"
            " ovm-offline saves one only for a container runc made",
            f"PID {child} (container) is in another UTS namespace (uts:[{ns_child['uts']}]) than the dumped tree's"
            f" root PID {init} (uts:[{ns_init['uts']}]): nested UTS namespaces cannot be saved",
            f"PID {child} (container) is in another user namespace (user:[{ns_child['user']}])",
        ]
        if "time_for_children" in ns_child and ns_child["time_for_children"] != ns_child["time"]:
            needles.append(
                f"PID {child} (container) has unshared a time namespace (time:[{ns_child['time_for_children']}])"
                " for the children it forks next"
            )
        assert_one_line_failure(result, *needles)
        # what can be saved is not named: the tree's own PID and UTS namespaces, its child's IPC one
        assert "PID namespace" not in result.stderr and "IPC namespace" not in result.stderr
        assert "UTS namespace of its own" not in result.stderr
        assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_container_runc_made_is_one_container_and_its_namespaces_are_saved_as_runc_checkpoint_saves_them(
    recording, dumped, tmp_path, kernel
):
    """runc's default spec (workload `runc`): `ps` groups the container's processes as one
    container named by its runc id, and `dump --container` of that id writes the images of its
    init's tree: mount namespace (mountpoints, tmpfs archives), cgroup namespace prefix, a
    network namespace by id alone (runc recreates it), descriptors.json for `runc restore`.
    tests/test_dump.py holds them to runc checkpoint's images and restores them with runc."""
    rec = recording(kernel, "runc")
    m = rec.manifest
    init = m["root_pid"]
    procs = {p["pid"]: p for p in m["processes"]}
    ns = procs[init]["ns"]
    assert all(procs[pid]["ns"] == ns for pid in m["members"]) and len(m["members"]) == 4
    assert all(ns[kind] != procs[1]["ns"][kind] for kind in ("mnt", "uts", "ipc", "net", "pid", "cgroup"))

    listed = [json.loads(line) for line in ovm("ps", str(rec.elf), "--json").stdout.splitlines()]
    container = f"pidns:{ns['pid']} cgroup:/ovm-runc"
    assert sorted(p["pid"] for p in listed if p["container"] == container) == sorted(m["members"])
    assert {p["ns_pid"] for p in listed if p["pid"] == init} == {1}
    # runc's cgroupfs default names no runtime; its state directory does
    assert {p["runtime_id"] for p in listed if p["container"] == container} == {"runc:ovm-runc"}
    assert {p["runtime_id"] for p in listed if p["container"] != container} == {None}

    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--container", "runc:ovm-runc", "-D", str(out))
    assert result.returncode == 0, result.stderr
    assert tree_digest(out) == tree_digest(dumped(kernel, "runc"))
    ids = _ids(out, 1)
    inventory = images.read_image(out / images.INVENTORY.filename()).entries[0]
    for kind in ("mnt", "net", "cgroup", "pid", "ipc", "uts"):
        assert getattr(ids, f"{kind}_ns_id") != getattr(inventory.root_ids, f"{kind}_ns_id"), kind
    assert [p.name for p in out.glob("mountpoints-*.img")] == [f"mountpoints-{ids.mnt_ns_id}.img"]
    assert not list(out.glob("netns-*.img")), "runc recreates the network namespace: nothing of it is saved"
    cgroup = images.read_image(out / images.CGROUP.filename()).entries[0]
    assert {(c.path, c.cgns_prefix) for s in cgroup.sets for c in s.ctls} == {("/ovm-runc", len("/ovm-runc"))}
    stdio = json.loads((out / "descriptors.json").read_text())
    assert len(stdio) == 3 and all(d.startswith("pipe:[") for d in stdio)


@pytest.mark.slow
def test_the_runc_containers_check_sees_a_host_name_the_restore_changed(recording, dumped, tmp_path):
    """The gate's check has teeth: our images with another host name in utsns-N restore under
    `runc restore`, and the container's own check names the change."""
    rec = recording("6.1", "runc")
    ours = tmp_path / "images"
    shutil.copytree(dumped("6.1", "runc"), ours)
    (uts_file,) = ours.glob("utsns-*.img")
    image = images.read_image(uts_file)
    image.entries[0].nodename = "elsewhere"
    images.write_image(uts_file, image.kind, image.entries)
    result = restore(rec, ours, log=lambda m: None)
    assert not result.ok and "host name elsewhere, was ovm-runc" in result.detail, result.detail
