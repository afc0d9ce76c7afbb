"""Open files, fs_struct and ttys extracted from real QEMU dumps, against the in-guest
`criu dump` of the same stopped tree (golden files.img, fdinfo, fs and tty-info images,
decoded by Debian's crit) and the manifest's /proc view.

CRIU's ids are arbitrary: fds are matched by number, files by path (and by which fds
share an id), never by id value.
"""

from __future__ import annotations

import functools
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from corpus.recorder import Recording
from ovm_offline.dump import classify
from ovm_offline.extract.files import extract_files, extract_fs
from ovm_offline.kernel import open_kernel
from ovm_offline.kernel.fs.dcache import new_encode_dev
from ovm_offline.kernel.fs.fdtable import O_CLOEXEC
from ovm_offline.kernel.task.pid import task_active_pid_ns
from ovm_offline.kernel.task.tasks import for_each_process
from ovm_offline.sources import open_source
from ovm_offline.state import Fd, FsState, OpenFile, Owner
from tests.support.filekinds import attach_states
from tests.support.mutate import PatchedSource

pytestmark = [
    pytest.mark.guest,
    pytest.mark.skipif(shutil.which("crit") is None, reason="crit (Debian package criu) is not installed"),
]

KERNELS = ["6.1", "6.12"]
WORKLOADS = ["counter", "filemap", "ptyprog", "pipetree"]
FORMATS = ["elf", "kdump-zlib"]
KINDS = {"REG": "reg", "PIPE": "pipe", "TTY": "tty"}
FD_CLOEXEC = 1


@functools.cache
def crit(path: Path) -> list[dict]:
    """The entries of one CRIU image, as `crit decode` (numbers, not flag names) gives them."""
    res = subprocess.run(["crit", "decode", "-i", str(path)], check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"crit decode {path.name}: {res.stderr.strip()}"
    return json.loads(res.stdout)["entries"]


class Golden:
    """The golden images of one recording, indexed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = {e["id"]: e for e in crit(root / "files.img")}
        tty = root / "tty-info.img"
        self.tty_info = {e["id"]: e for e in crit(tty)} if tty.exists() else {}

    def fdinfo(self, pid: int) -> dict[int, dict]:
        files_id = crit(self.root / f"ids-{pid}.img")[0]["files_id"]
        return {e["fd"]: e for e in crit(self.root / f"fdinfo-{files_id}.img")}

    def fs(self, pid: int) -> dict:
        return crit(self.root / f"fs-{pid}.img")[0]

    def body(self, file_id: int) -> dict:
        e = self.files[file_id]
        return e[e["type"].lower()]


@pytest.fixture(scope="module", params=[(k, w) for k in KERNELS for w in WORKLOADS], ids=lambda p: f"{p[0]}-{p[1]}")
def rec(request, recording):
    return recording(*request.param)


@functools.cache
def extract_recording(rec: Recording, fmt: str) -> tuple[dict[int, list[Fd]], dict[int, FsState]]:
    """(pid -> fds, pid -> FsState) of every member of the recorded tree, from one dump format."""
    src = open_source(str(rec.elf if fmt == "elf" else rec.kdumps[fmt]))
    try:
        prog = open_kernel(src)
        members = set(rec.manifest["members"])
        tasks = {t.pid: t for t in for_each_process(prog) if t.pid in members}
        assert set(tasks) == members
        cache: dict[int, OpenFile] = {}
        fds = {pid: extract_files(prog, t, task_active_pid_ns(t), classify, cache=cache) for pid, t in tasks.items()}
        shared: dict = {}
        for pid, t in tasks.items():  # each kind's own state, as dump reads it (every fd is kept in `fds`)
            attach_states(prog, list(fds[pid]), pid=pid, comm="", task=t, pid_ns=task_active_pid_ns(t), shared=shared)
        fs = {pid: extract_fs(prog, t) for pid, t in tasks.items()}
    finally:
        src.close()
    return fds, fs


@pytest.fixture(scope="module", params=FORMATS)
def extracted(request, rec):
    return extract_recording(rec, request.param)


def _by_fd(fds: list[Fd]) -> dict[int, Fd]:
    return {f.fd: f for f in fds}


def _cc(words: list[int]) -> bytes:
    """The kernel's 19 c_cc bytes out of CRIU's c_cc: CRIU memcpy()s glibc's 32-byte c_cc
    into its u32 array, so the bytes are packed 4 to a word; only the first 19 come from
    the kernel (the rest of glibc's array, and CRIU's words 8..18, are uninitialised)."""
    return struct.pack(f"<{len(words)}I", *words)[:19]


def test_fds_match_golden(rec, extracted):
    fds, _ = extracted
    golden = Golden(rec.golden)
    for pid, ours in fds.items():
        info = golden.fdinfo(pid)
        by_fd = _by_fd(ours)
        assert set(by_fd) == set(info), f"pid {pid}"
        for n, gi in info.items():
            fd = by_fd[n]
            of = fd.file
            where = f"pid {pid} fd {n} ({of.identity.path})"
            assert fd.cloexec == bool(gi["flags"] & FD_CLOEXEC), where
            assert of.kind == KINDS[gi["type"]], where
            body = golden.body(gi["id"])
            assert of.flags == body["flags"], where
            assert Owner(**body["fown"]) == of.owner, where
            if gi["type"] == "PIPE":
                assert body["pipe_id"] == of.identity.ino, where
                assert of.identity.path == f"pipe:[{of.identity.ino}]", where
                continue
            # A tty's path, mode and position are in the regular-file entry it refers to.
            reg = golden.body(body["regf_id"]) if gi["type"] == "TTY" else body
            assert reg["name"] == of.identity.path, where
            assert reg["pos"] == of.pos, where
            assert reg["mode"] == of.identity.mode, where
            assert not of.identity.deleted, where
            if "size" in reg:  # CRIU leaves it out for non-regular files and append-only logs
                assert reg["size"] == of.identity.size, where


def test_shared_files_match_golden(rec, extracted):
    """fds share an OpenFile exactly where CRIU gave them one file id (dup, fork)."""
    fds, _ = extracted
    golden = Golden(rec.golden)
    id_to_key: dict[int, int] = {}
    key_to_id: dict[int, int] = {}
    objects: dict[int, OpenFile] = {}
    for pid, ours in fds.items():
        info = golden.fdinfo(pid)
        for fd in ours:
            gid = info[fd.fd]["id"]
            assert id_to_key.setdefault(gid, fd.file.key) == fd.file.key, f"pid {pid} fd {fd.fd}"
            assert key_to_id.setdefault(fd.file.key, gid) == gid, f"pid {pid} fd {fd.fd}"
            assert objects.setdefault(fd.file.key, fd.file) is fd.file


def test_fds_match_proc(rec, extracted):
    """The manifest's /proc/PID/fd and fdinfo view: readlink target, pos, flags (fdinfo
    adds O_CLOEXEC for a close-on-exec fd)."""
    fds, _ = extracted
    details = rec.manifest["member_details"]
    for pid, ours in fds.items():
        by_fd = _by_fd(ours)
        proc = {e["fd"]: e for e in details[str(pid)]["fds"]}
        assert set(by_fd) == set(proc), f"pid {pid}"
        for n, e in proc.items():
            fd = by_fd[n]
            where = f"pid {pid} fd {n}"
            assert e["target"] == fd.file.identity.path, where
            assert e["pos"] == fd.file.pos, where
            assert e["flags"] == fd.file.flags | (O_CLOEXEC if fd.cloexec else 0), where


def test_workload_files_match_manifest(rec, extracted):
    """Sizes and modes of the files the workload made, as stat() saw them in the guest."""
    fds, _ = extracted
    made = {f["path"]: f for f in rec.manifest["files"] if f["type"] == "file"}
    seen = 0
    for ours in fds.values():
        for fd in ours:
            f = made.get(fd.file.identity.path)
            if f is not None:
                seen += 1
                assert (fd.file.identity.size, fd.file.identity.mode & 0o7777) == (f["size"], f["mode"]), f["path"]
    assert seen


def test_fs_matches_golden_and_proc(rec, extracted):
    _, fs = extracted
    golden = Golden(rec.golden)
    details = rec.manifest["member_details"]
    for pid, state in fs.items():
        g = golden.fs(pid)
        assert state.umask == g["umask"], f"pid {pid}"
        for ours, gid in ((state.cwd, g["cwd_id"]), (state.root, g["root_id"])):
            reg = golden.body(gid)
            assert (ours.path, ours.mode) == (reg["name"], reg["mode"]), f"pid {pid}"
        d = details[str(pid)]
        assert (state.cwd.path, state.root.path) == (d["cwd"], d["root"])
        assert state.umask == int(d["status"]["Umask"], 8)


def test_ttys_match_golden_tty_info(rec, extracted):
    fds, _ = extracted
    golden = Golden(rec.golden)
    ttys = 0
    for pid, ours in fds.items():
        info = golden.fdinfo(pid)
        for fd in ours:
            if fd.file.kind != "tty":
                continue
            ttys += 1
            t = fd.file.state
            assert t is not None
            g = golden.tty_info[golden.body(info[fd.fd]["id"])["tty_info_id"]]
            where = f"pid {pid} fd {fd.fd} ({fd.file.identity.path})"
            if t.driver == "ctty":  # /dev/tty: criu's own index, no pty part
                assert (g["type"], "pty" in g, t.index) == ("CTTY", False, 1006), where
            else:
                assert g["type"] == "PTY" and t.driver in ("pty-master", "pty-slave"), where
                assert g["pty"]["index"] == t.index, where
            assert g["rdev"] == new_encode_dev(t.rdev), where
            assert g["dev"] == new_encode_dev(fd.file.identity.dev), where
            assert (g["uid"], g["gid"]) == (t.uid, t.gid), where
            assert (g["sid"], g["pgrp"]) == (t.sid, t.pgrp), where
            assert (g["locked"], g["exclusive"], g["packet_mode"]) == (t.locked, t.exclusive, t.packet_mode), where
            w = g["winsize"]
            assert (w["ws_row"], w["ws_col"], w["ws_xpixel"], w["ws_ypixel"]) == t.winsize, where
            for gt, values, cc in (
                (g["termios"], t.termios, t.cc),
                (g["termios_locked"], t.termios_locked, t.cc_locked),
            ):
                # c_ispeed/c_ospeed: CRIU's TCGETS fills glibc's struct termios, whose speed
                # fields the kernel does not write: they stay 0 in the image.
                assert [gt["c_iflag"], gt["c_oflag"], gt["c_cflag"], gt["c_lflag"], gt["c_line"]] == values[:5], where
                assert _cc(gt["c_cc"]) == cc, where
    assert ttys == (3 if rec.manifest["workload"] == "ptyprog" else 0)
    assert ttys == len(golden.tty_info)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_ptyprog_pty_pair(recording, kernel, fmt):
    """The pty pair of ptyprog: the slave is the controlling tty, both ends and /dev/tty report
    the slave's settings (33x101) and session."""
    fds, _ = extract_recording(recording(kernel, "ptyprog"), fmt)
    (ours,) = fds.values()
    by_fd = _by_fd(ours)
    master, slave, ctty = by_fd[3].file, by_fd[4].file, by_fd[5].file
    assert (master.identity.path, slave.identity.path, ctty.identity.path) == ("/dev/ptmx", "/dev/pts/0", "/dev/tty")
    assert (master.state.driver, slave.state.driver, ctty.state.driver) == ("pty-master", "pty-slave", "ctty")
    assert master.state.winsize[:2] == slave.state.winsize[:2] == ctty.state.winsize[:2] == (33, 101)
    assert master.state.termios == slave.state.termios == ctty.state.termios
    assert ctty.state.sid == ctty.state.pgrp == slave.state.sid != 0
    assert ctty.state.rdev == 5 << 20 and not ctty.state.locked and not ctty.state.packet_mode
    assert master.state.termios[5] == master.state.termios[6] == 38400  # the kernel's speed


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "member,value,words",
    [
        ("max_fds", (0xFFFF_FFC0).to_bytes(4, "little"), ["max_fds 4294967232"]),
        ("fd", (0xFFFF_8000_DEAD_0000).to_bytes(8, "little"), ["fd array at 0xffff8000dead0000", "unreadable"]),
    ],
)
def test_hostile_fdtable_in_real_dump(recording, kernel, member, value, words):
    """A real counter dump whose fdtable is overwritten: one line, no traceback, no huge read."""
    from ovm_offline.errors import GuestDataError

    rec = recording(kernel, "counter")
    src = open_source(str(rec.elf))
    try:
        prog = open_kernel(src)
        pid = rec.manifest["members"][0]
        task = next(t for t in for_each_process(prog) if t.pid == pid)
        fdt = task.files.fdt
        paddr = prog.translate(int(fdt) + prog.member_offset("fdtable", member))
        bad = open_kernel(PatchedSource(src, {paddr: value}))
        task = next(t for t in for_each_process(bad) if t.pid == pid)
        with pytest.raises(GuestDataError) as exc:
            extract_files(bad, task, task_active_pid_ns(task), classify)
        msg = str(exc.value)
        assert "\n" not in msg and all(w in msg for w in words), msg
    finally:
        src.close()
