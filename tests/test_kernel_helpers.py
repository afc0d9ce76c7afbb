"""Kernel helpers on constructed kernel objects (6.1 and 6.12 layouts): task states,
PID namespaces, cgroup paths, namespace inodes, containers.

The sample guests have every process in the initial namespaces and the root
cgroup; these tests build the nested cases in fake memory from the real ISFs.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ovm_offline.errors import GuestDataError
from ovm_offline.inventory import ProcessInfo, container_ids, matches_container, runtime_id
from ovm_offline.kernel.ns.cgroup import kernfs_path, task_cgroup_path
from ovm_offline.kernel.ns.nsproxy import NamespaceInodes, task_namespaces
from ovm_offline.kernel.task.pid import pid_nr_ns, task_active_pid_ns, task_ns_pid, task_pgid, task_sid
from ovm_offline.kernel.task.tasks import task_state
from tests.support.memory import FakeKernelMemory


class Fake(FakeKernelMemory):
    """PID namespaces, pids, kernfs nodes, cgroups and tasks in fake memory."""

    def pid_ns(self, level: int, inum: int, parent: int = 0) -> int:
        ns = self.alloc("pid_namespace")
        self.set(ns, "pid_namespace", "level", level)
        self.set(ns, "pid_namespace", "ns.inum", inum)
        self.set(ns, "pid_namespace", "parent", parent)
        return ns

    def pid(self, numbers: list[tuple[int, int]]) -> int:
        """A struct pid with (nr, ns) per level."""
        upid = self.symbols.struct_type("upid").size
        p = self.alloc("pid", extra=upid * len(numbers))
        self.set(p, "pid", "level", len(numbers) - 1)
        base = self.prog.member_offset("pid", "numbers")
        for i, (nr, ns) in enumerate(numbers):
            self.write(p + base + i * upid, nr.to_bytes(4, "little") + bytes(4) + ns.to_bytes(8, "little"))
        return p

    def kernfs(self, name: bytes, parent: int) -> int:
        kn = self.alloc("kernfs_node")
        self.set(kn, "kernfs_node", "name", self.string(name))
        self.set(kn, "kernfs_node", "parent", parent)
        return kn

    def cgroup(self, kn: int) -> int:
        cg = self.alloc("cgroup")
        self.set(cg, "cgroup", "kn", kn)
        return cg

    def task(
        self,
        pid: int,
        tgid: int,
        spid: int,
        pgid: int = 0,
        sid: int = 0,
        state: int = 0,
        exit_state: int = 0,
        cgrp: int = 0,
        nsproxy: int = 0,
    ) -> int:
        t = self.alloc("task_struct")
        self.set(t, "task_struct", "pid", pid)
        self.set(t, "task_struct", "tgid", tgid)
        self.set(t, "task_struct", "thread_pid", spid)
        self.set(t, "task_struct", "__state", state)
        self.set(t, "task_struct", "exit_state", exit_state)
        sig = self.alloc("signal_struct")
        self.set(t, "task_struct", "signal", sig)
        ptr = 8
        pids = self.prog.member_offset("signal_struct", "pids")
        for i, p in enumerate([spid, spid, pgid, sid]):
            self.write(sig + pids + i * ptr, p.to_bytes(8, "little"))
        if cgrp:
            cset = self.alloc("css_set")
            self.set(cset, "css_set", "dfl_cgrp", cgrp)
            self.set(t, "task_struct", "cgroups", cset)
        self.set(t, "task_struct", "nsproxy", nsproxy)
        cred = self.alloc("cred")  # no task's cred or its user_ns is NULL
        self.set(cred, "cred", "user_ns", self.prog.symbol_address("init_user_ns"))
        self.set(t, "task_struct", "cred", cred)
        self.set(t, "task_struct", "real_cred", cred)
        return t


@pytest.fixture(scope="module", params=["6.1", "6.12"])
def fake(request):
    return Fake(request.param)


# fs/proc/array.c: what ps shows for each raw state
STATES = [
    (0x0, 0, "R"),
    (0x1, 0, "S"),
    (0x2, 0, "D"),
    (0x4, 0, "T"),
    (0x8, 0, "t"),
    (0x0, 0x10, "X"),
    (0x0, 0x20, "Z"),
    (0x40, 0, "P"),
    (0x402, 0, "I"),  # TASK_IDLE
    (0x8000 | 0x1, 0, "D"),  # frozen tasks report as uninterruptible
    (0x1000, 0, "D"),  # TASK_RTLOCK_WAIT
    (0x101, 0, "S"),  # TASK_WAKEKILL | INTERRUPTIBLE (TASK_KILLABLE-like)
    (0x102, 0, "D"),  # TASK_KILLABLE
]


@pytest.mark.parametrize("state,exit_state,letter", STATES)
def test_task_state_letters(fake, state, exit_state, letter):
    t = fake.task(10, 10, 0, state=state, exit_state=exit_state)
    assert task_state(fake.prog.struct("task_struct", t)) == letter


def test_nested_pid_namespaces(fake):
    init_ns = fake.pid_ns(0, 0xEFFFFFFC)
    child_ns = fake.pid_ns(1, 4026532300, init_ns)
    grandchild_ns = fake.pid_ns(2, 4026532400, child_ns)
    spid = fake.pid([(500, init_ns), (7, child_ns), (1, grandchild_ns)])
    pgrp = fake.pid([(499, init_ns), (6, child_ns)])
    t = fake.prog.struct("task_struct", fake.task(500, 500, spid, pgid=pgrp, sid=pgrp))
    assert task_ns_pid(t) == 1
    assert int(task_active_pid_ns(t)) == grandchild_ns
    p = t.thread_pid
    assert pid_nr_ns(p, fake.prog.pointer("pid_namespace", init_ns)) == 500
    assert pid_nr_ns(p, fake.prog.pointer("pid_namespace", child_ns)) == 7
    assert pid_nr_ns(p, fake.prog.pointer("pid_namespace", grandchild_ns)) == 1
    other = fake.pid_ns(1, 4026532999, init_ns)
    assert pid_nr_ns(p, fake.prog.pointer("pid_namespace", other)) == 0  # not visible there
    assert task_pgid(t) == 499 and task_sid(t) == 499
    assert task_pgid(t, fake.prog.pointer("pid_namespace", child_ns)) == 6
    assert task_pgid(t, fake.prog.pointer("pid_namespace", grandchild_ns)) == 0
    ns = task_namespaces(t)
    assert ns.pid == 4026532400 and ns.mnt is None  # no nsproxy: an exiting task


def test_impossible_pid_level(fake):
    init_ns = fake.pid_ns(0, 0xEFFFFFFC)
    spid = fake.pid([(5, init_ns)])
    fake.set(spid, "pid", "level", 1000)
    t = fake.prog.struct("task_struct", fake.task(5, 5, spid))
    with pytest.raises(
        GuestDataError,
        match="its level is 1000, which breaks the kernel's invariant pid.level: at most MAX_PID_NS_LEVEL",
    ):
        task_ns_pid(t)


def test_namespace_inodes_from_nsproxy(fake):
    nsp = fake.alloc("nsproxy")
    inums = {}
    for i, (member, type_name) in enumerate(
        [
            ("mnt_ns", "mnt_namespace"),
            ("net_ns", "net"),
            ("uts_ns", "uts_namespace"),
            ("ipc_ns", "ipc_namespace"),
            ("cgroup_ns", "cgroup_namespace"),
            ("time_ns", "time_namespace"),
            ("time_ns_for_children", "time_namespace"),
            ("pid_ns_for_children", "pid_namespace"),
        ]
    ):
        obj = fake.alloc(type_name)
        fake.set(obj, type_name, "ns.inum", 4026532000 + i)
        fake.set(nsp, "nsproxy", member, obj)
        inums[member] = 4026532000 + i
    init_ns = fake.pid_ns(0, 0xEFFFFFFC)
    t = fake.task(42, 42, fake.pid([(42, init_ns)]), nsproxy=nsp)
    cred = fake.alloc("cred")
    user_ns = fake.alloc("user_namespace")
    fake.set(user_ns, "user_namespace", "ns.inum", 0xEFFFFFFD)
    fake.set(cred, "cred", "user_ns", user_ns)
    fake.set(t, "task_struct", "real_cred", cred)
    ns = task_namespaces(fake.prog.struct("task_struct", t))
    assert ns == NamespaceInodes(
        pid=0xEFFFFFFC,
        pid_for_children=inums["pid_ns_for_children"],
        mnt=inums["mnt_ns"],
        net=inums["net_ns"],
        uts=inums["uts_ns"],
        ipc=inums["ipc_ns"],
        user=0xEFFFFFFD,
        cgroup=inums["cgroup_ns"],
        time=inums["time_ns"],
        time_for_children=inums["time_ns_for_children"],
    )


@settings(max_examples=25, deadline=None)
@given(
    parts=st.lists(
        st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="/"), min_size=1, max_size=20),
        max_size=8,
    )
)
def test_cgroup_paths(parts):
    fake = Fake("6.1")
    node = fake.kernfs(b"", 0)  # the hierarchy root: no parent, empty name
    for p in parts:
        node = fake.kernfs(p.encode(), node)
    t = fake.prog.struct("task_struct", fake.task(1, 1, 0, cgrp=fake.cgroup(node)))
    assert task_cgroup_path(t) == "/" + "/".join(parts)


def test_cgroup_path_loop_and_length(fake):
    a = fake.kernfs(b"a", 0)
    b = fake.kernfs(b"b", a)
    fake.set(a, "kernfs_node", "parent", b)  # a <-> b
    with pytest.raises(GuestDataError, match="parent chain loops"):
        kernfs_path(fake.prog.pointer("kernfs_node", b))
    root = fake.kernfs(b"", 0)
    node = root
    for _ in range(20):
        node = fake.kernfs(b"x" * 255, node)
    with pytest.raises(GuestDataError, match="path longer than 4096"):
        kernfs_path(fake.prog.pointer("kernfs_node", node))


def _proc(pid, cgroup, kthread=False):
    return ProcessInfo(
        pid=pid,
        tgid=pid,
        ppid=1,
        nthreads=1,
        comm="x",
        state="S",
        uid=0,
        euid=0,
        gid=0,
        egid=0,
        pgid=pid,
        sid=pid,
        ns_pid=pid,
        pidns_inum=None,
        pidns_level=None,
        namespaces=NamespaceInodes(),
        cgroup=cgroup,
        container=None,
        kthread=kthread,
        task_address=0,
    )


def test_container_ids():
    init = 0xEFFFFFFC
    procs = [
        (_proc(1, "/"), init),
        (_proc(2, "/", kthread=True), init),
        (_proc(300, "/ovmbox"), 4026532500),  # container init
        (_proc(301, "/ovmbox/sub"), 4026532500),  # a nested cgroup, same container
        (_proc(302, "/ovmbox"), 4026532500),
        (_proc(400, "/system.slice/foo.service"), init),  # cgroup-only grouping
        (_proc(500, "/"), 4026532600),  # pid namespace in the root cgroup
    ]
    assert container_ids(procs, init) == [
        None,
        None,
        "pidns:4026532500 cgroup:/ovmbox",
        "pidns:4026532500 cgroup:/ovmbox",
        "pidns:4026532500 cgroup:/ovmbox",
        "cgroup:/system.slice/foo.service",
        "pidns:4026532600",
    ]


RUNTIME_HEX = "3f2a9c" + "0123456789" * 5 + "abcdefab"


@pytest.mark.parametrize(
    "cgroup,expected",
    [
        (f"/system.slice/docker-{RUNTIME_HEX}.scope", f"docker:{RUNTIME_HEX}"),
        (f"/docker/{RUNTIME_HEX}", f"docker:{RUNTIME_HEX}"),
        (f"/machine.slice/libpod-{RUNTIME_HEX}.scope/container", f"podman:{RUNTIME_HEX}"),
        (
            f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{RUNTIME_HEX}.scope",
            f"podman:{RUNTIME_HEX}",
        ),
        (f"/kubepods.slice/kubepods-pod1.slice/cri-containerd-{RUNTIME_HEX}.scope", f"containerd:{RUNTIME_HEX}"),
        (f"/kubepods/besteffort/pod12ab-cd/{RUNTIME_HEX}", f"kubepods:{RUNTIME_HEX}"),
        (f"/kubepods.slice/crio-{RUNTIME_HEX}.scope", f"cri-o:{RUNTIME_HEX}"),
        ("/system.slice/runc-mybox.scope", "runc:mybox"),
        ("/lxc.payload.web/init.scope", "lxc:web"),
        ("/ovmbox", None),  # runc's cgroupfs default looks like any first-level cgroup: no id
        (f"/system.slice/docker-{RUNTIME_HEX[:12]}.scope", None),  # not a full id
        ("/", None),
        (None, None),
    ],
)
def test_runtime_ids_come_from_the_cgroup_names_runtimes_give(cgroup, expected):
    assert runtime_id(cgroup) == expected


def test_a_container_is_matched_by_its_id_its_runtime_id_or_12_characters_of_it():
    p = dataclasses.replace(
        _proc(300, f"/system.slice/docker-{RUNTIME_HEX}.scope"),
        container=f"pidns:4026532500 cgroup:/system.slice/docker-{RUNTIME_HEX}.scope",
        runtime_id=f"docker:{RUNTIME_HEX}",
    )
    for wanted in (p.container, p.runtime_id, RUNTIME_HEX, RUNTIME_HEX[:12], f"docker:{RUNTIME_HEX[:12]}"):
        assert matches_container(p, wanted), wanted
    for wanted in (RUNTIME_HEX[:11], "podman:" + RUNTIME_HEX, RUNTIME_HEX[1:13], "cgroup:/system.slice"):
        assert not matches_container(p, wanted), wanted
    assert not matches_container(_proc(1, "/"), "/")
