"""The corpus recorder and the restore harness, on real guests of both pinned kernels."""

from __future__ import annotations

import dataclasses
import io
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from corpus import initramfs, jobs, kernels, matrix, recorder
from corpus.cache import cache_root
from corpus.errors import CorpusError, GuestBroken, GuestError, GuestStuck
from corpus.guest import Guest, KernelConsole, kernel_failure
from corpus.restore import restore
from corpus.workloads import get_workload

CASES = matrix.cases()
IDS = [f"{k}-{w}" for k, w in CASES]
GOLDEN = [(k, w) for k, w in CASES if get_workload(w).golden]
#: the recordings whose golden images this run has criu restore
GOLDEN_RESTORES = [(k, w) for k, w in GOLDEN if matrix.restores_golden(k, w)]


def golden_pids(golden: Path) -> set[int]:
    return {int(m.group(1)) for p in golden.iterdir() if (m := re.fullmatch(r"core-(\d+)\.img", p.name))}


def _descendants(procs: dict[int, dict], root: int) -> set[int]:
    """The pids below `root` in the facts' process table, by their ppids."""
    below: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, p in procs.items() if p.get("ppid") in frontier} - below
        below |= frontier
    return below


@pytest.mark.guest
@pytest.mark.parametrize("kernel,workload", CASES, ids=IDS)
def test_recording_is_complete_and_consistent(recording, kernel, workload):
    rec = recording(kernel, workload)
    m = rec.manifest
    ram = m["ram_mib"] << 20

    # the dumps QEMU offers, of the whole RAM
    assert m["qemu_status_when_dumped"] == "paused"
    assert "elf" in m["dumps"] and "kdump-zlib" in m["dumps"]
    assert set(m["dumps"]) <= {"elf", *(f for f in m["qemu_dump_formats"] if f.startswith("kdump"))}
    assert rec.elf.stat().st_size > ram
    with open(rec.elf, "rb") as f:
        head = f.read(1 << 16)
    assert head[:4] == b"\x7fELF" and struct.unpack_from("<H", head, 18)[0] == 62  # x86-64
    assert b"OSRELEASE=" + m["uname"].encode() in head, "VMCOREINFO note missing from the ELF dump"
    for path in rec.kdumps.values():
        with open(path, "rb") as f:
            assert f.read(12) == b"makedumpfile"

    # the disk the recorder plans for (a CI run refuses up front what would not fit)
    kept = recorder._disk_used_mib(rec.root)
    assert (
        0.75 * recorder.disk_kept_mib(get_workload(workload), kernel)
        <= kept
        <= 1.1 * recorder.disk_kept_mib(get_workload(workload), kernel)
    )

    # what a live reader needs
    assert (rec.live_dir / "guest-ram").stat().st_size == ram
    registers = (rec.live_dir / "registers.txt").read_text()
    assert len(re.findall(r"CR3=[0-9a-f]{16}", registers)) == 2  # one per vCPU (-smp 2)
    assert "ram0" in (rec.live_dir / "mtree.txt").read_text()

    # the in-guest facts describe the workload criu dumped: stopped, or running on as-is
    assert m["uname"] == kernels.get_kernel(kernel).release
    assert m["moment"] == get_workload(workload).moment
    procs = {p["pid"]: p for p in m["processes"]}
    root = procs[m["root_pid"]]
    assert root["pid"] >= 10000 and root["sid"] == root["pid"] == root["pgid"]
    for pid in m["members"]:
        stopped = procs[pid]["state"] in ("T", "Z")  # a zombie has ended: it stays as it is
        assert stopped == (m["moment"] == "stopped"), (
            f"member {pid} in state {procs[pid]['state']}, moment {m['moment']}"
        )
        assert procs[pid]["pgid"] == root["pid"]
    # criu writes a core image per thread, named by the id seen inside the tree's PID namespace
    # (the facts give a thread's id in the process's PID namespace for its leader alone)
    expected, other_threads_in_a_namespace = set(), 0
    for pid in m["members"]:
        tids = [t["pid"] for t in m["member_details"][str(pid)]["tasks"]]
        assert tids and tids[0] == pid and len(tids) == procs[pid]["threads"]
        depth = len(procs[pid]["nspid"]) - 1
        expected |= {procs[pid]["nspid"][-1]} if depth else set(tids)
        other_threads_in_a_namespace += len(tids) - 1 if depth else 0
    # processes of the tree in a process group of their own (sigstate's stopped child) are no
    # members, but criu dumps them with the tree: one core per thread
    outside = sum(procs[pid]["threads"] for pid in _descendants(procs, root["pid"]) if pid not in m["members"])
    assert "criu_dump_rc=0" in m["criu"]
    if get_workload(workload).golden:
        cores = golden_pids(rec.golden)
        assert expected <= cores and len(cores) == len(expected) + other_threads_in_a_namespace + outside
        for name in (
            "inventory.img",
            "pstree.img",
            f"core-{root['nspid'][-1]}.img",
            f"mm-{root['nspid'][-1]}.img",
            "files.img",
        ):
            assert (rec.golden / name).exists(), name
    else:
        assert not any(rec.golden.iterdir()), "a workload criu refuses has golden images"

    # the files the restore harness recreates are those the workload has open
    files = {f["path"]: f for f in m["files"]}
    log = files[f"/run/ovm/{workload}.log"]
    stdout = next(fd for fd in m["member_details"][str(root["pid"])]["fds"] if fd["fd"] == 1)
    if get_workload(workload).golden_tool == "runc":
        # runc's container writes to a pipe that a cat outside appends to the log (criu cannot
        # checkpoint a file outside the container's mounts)
        assert stdout["target"].startswith("pipe:["), stdout
    else:
        assert stdout["target"] == log["path"]
        # the log is copied after criu's dump: a tree that runs on may have written more by then
        assert stdout["pos"] == log["size"] if m["moment"] == "stopped" else stdout["pos"] <= log["size"]
    assert m["ready"].startswith("READY")


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("kernel,workload", GOLDEN_RESTORES, ids=[f"{k}-{w}" for k, w in GOLDEN_RESTORES])
def test_golden_images_restore_and_pass_the_workload_check(recording, kernel, workload):
    rec = recording(kernel, workload)
    result = restore(rec, rec.golden, log=lambda m: None)
    fails = get_workload(workload).golden_check_fails
    if fails:  # criu's dump loses this state: its own images restore into a failing check
        assert not result.ok and fails in result.detail, f"{result.detail}\n{result.restore_log[-2000:]}"
        return
    assert result.ok, f"{result.detail}\n{result.restore_log[-2000:]}"


def run_corpus(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "corpus", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args,message",
    [
        (["record", "--kernel", "4.19", "--workload", "counter"], "unknown kernel '4.19'"),
        (["record", "--kernel", "6.1", "--workload", "nosuch"], "unknown workload 'nosuch'"),
    ],
)
def test_unknown_kernel_or_workload_is_a_one_line_error(args, message):
    result = run_corpus(*args)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_recording_the_disk_cannot_hold_is_refused_before_qemu_starts(tmp_path):
    """A full disk ended a CI run in a traceback halfway through the corpus: the recorder now
    refuses up front, saying how much it needs and where."""
    free_mib = shutil.disk_usage(tmp_path).free // 2**20
    huge = dataclasses.replace(get_workload("counter"), ram_mib=free_mib)
    with pytest.raises(CorpusError, match=rf"MiB free under {re.escape(str(tmp_path))}; recording counter needs about"):
        recorder._check_disk_space(tmp_path, huge)
    recorder._check_disk_space(tmp_path, get_workload("counter"))  # the usual one fits
    assert not list(tmp_path.iterdir())


@pytest.mark.guest
def test_a_corpus_the_disk_cannot_hold_is_refused_before_anything_is_recorded(monkeypatch):
    """A CI run with 22 GiB free recorded for ten minutes before the disk ran out: the whole
    plan is weighed first, counting what the recordings missing from the cache will keep."""
    wanted = matrix.recordings()
    recorder.check_disk_for(wanted, 2, force=False)  # the cache the guest tests read holds them all
    total = sum(recorder.disk_kept_mib(get_workload(w), k) for k, w, _ in wanted)
    # 43 GiB measured on f875cd7's corpus of 6.1 and 6.12 (132 recordings)
    assert 300 * len(wanted) < total < 360 * len(wanted)
    usage = shutil.disk_usage(cache_root())
    monkeypatch.setattr(recorder.shutil, "disk_usage", lambda _: usage._replace(free=(total - 1024) << 20))
    with pytest.raises(CorpusError, match=rf"the {len(wanted)} recordings missing from the cache need about \d+ GiB"):
        recorder.check_disk_for(wanted, 2, force=True)
    with pytest.raises(CorpusError):  # nothing recorded: record_many refuses before its first guest
        next(recorder.record_many(wanted, 2, force=True))


def qemu_processes_using(path: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "qemu-system"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(path) in line]


def _qemu_socket_dirs() -> set[Path]:
    return set(Path("/tmp").glob("ovm-qemu-*"))


def test_a_guest_makes_its_socket_directory_when_it_starts_and_removes_it_when_qemu_fails(tmp_path):
    """A Guest made and never started leaves no /tmp/ovm-qemu-* behind; one whose QEMU exits
    at once (no such kernel) removes the directory it made."""
    before = _qemu_socket_dirs()
    guest = Guest(tmp_path, tmp_path / "no-such-vmlinuz", tmp_path / "no-such-initrd", 64, [])
    assert guest.socket_dir is None and _qemu_socket_dirs() == before
    with pytest.raises(GuestError, match="QEMU exited"):
        guest.start()
    assert guest.socket_dir is None and _qemu_socket_dirs() - before == set()


@pytest.mark.guest
@pytest.mark.slow
def test_guest_that_fails_to_boot_reports_its_serial_log_and_leaves_no_qemu(tmp_path):
    kernel = kernels.unpack(kernels.get_kernel("6.1"))
    bogus = tmp_path / "not-an-initramfs.gz"
    bogus.write_bytes(b"this is no cpio archive")
    jobs.blank_output_disk(tmp_path / "d.img", 1)
    with pytest.raises(GuestError) as err:
        with Guest(tmp_path, kernel.vmlinuz, bogus, 256, [tmp_path / "d.img"]) as guest:
            guest.expect("READY", 120, "booting a guest with no init")
    # the console's panic seen first (GuestBroken), or QEMU already gone (-no-reboot), or neither in time
    said = str(err.value)
    assert "the guest kernel failed" in said or "QEMU exited" in said or "timed out" in said
    assert "Kernel panic" in err.value.log_tail
    assert qemu_processes_using(tmp_path) == []


@pytest.mark.guest
def test_a_guest_that_never_starts_its_job_is_stuck_and_says_where_its_vcpus_are(tmp_path):
    """init hangs before the job (here: it is a sleep), as a guest once did under TCG with
    nothing on its console: a GuestStuck, which the harness tries once more, naming each vCPU's
    place; QEMU is ended."""
    kernel = kernels.unpack(kernels.get_kernel("6.1"))
    image = initramfs.build(kernel)
    jobs.write_input_disk(tmp_path / "in.img", {"job.sh": b"true\n"})
    sleeping_init = "rdinit=/bin/busybox -- sleep 600"
    with pytest.raises(GuestStuck) as stuck:
        with Guest(tmp_path, kernel.vmlinuz, image, 256, [tmp_path / "in.img"], cmdline_extra=sleeping_init) as guest:
            guest.wait_for_job(15, "booting a guest whose init sleeps")
    message = str(stuck.value).splitlines()[0]
    assert message.startswith("the guest did not start its job within 15 s while booting a guest whose init sleeps")
    assert re.search(r"QEMU running, vCPU 0: RIP [0-9a-f]{16} CPL 0( halted)?, vCPU 1: RIP [0-9a-f]{16} CPL", message)
    assert qemu_processes_using(tmp_path) == []


@pytest.mark.guest
def test_a_guest_whose_kernel_says_it_failed_is_broken_at_once_and_qemu_is_ended(tmp_path):
    """The job's guest kernel logs an oops (written here through /dev/kmsg at KERN_CRIT, as the
    kernel's own would be) and runs on: the wait ends with a GuestBroken naming that console
    line, which the harness tries once more, not at its timeout."""
    kernel = kernels.unpack(kernels.get_kernel("6.1"))
    image = initramfs.build(kernel)
    oops = "ovm-offline test: Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"
    jobs.write_input_disk(tmp_path / "in.img", {"job.sh": f"echo '<2>{oops}' > /dev/kmsg\nsleep 600\n".encode()})
    started = time.monotonic()
    with pytest.raises(GuestBroken) as broken:
        with Guest(tmp_path, kernel.vmlinuz, image, 256, [tmp_path / "in.img"]) as guest:
            guest.expect("NEVER", 300, "waiting for nothing")
    assert time.monotonic() - started < 200
    message = str(broken.value).splitlines()[0]
    assert message.startswith("the guest kernel failed while waiting for nothing: [") and message.endswith(oops)
    assert qemu_processes_using(tmp_path) == []


@pytest.mark.parametrize(
    "line,failed",
    [
        ("[  496.659739] watchdog: BUG: soft lockup - CPU#0 stuck for 458s! [runc:168]", True),
        ("[   52.101232] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [criu:176]", False),
        ("[    7.260749] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI", True),
        ("[    7.261100] Kernel panic - not syncing: Fatal exception in interrupt", True),
        ("[    3.000000] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:", False),
    ],
)
def test_a_kernel_failure_is_a_console_line_a_short_soft_lockup_is_not(line, failed):
    """Lines from CI runs' consoles: a CPU stuck for minutes, an oops or a panic is a broken
    guest; a soft lockup of seconds is a vCPU the loaded host starved, which goes on."""
    console = f"[    1.0] booting\n{line}\n[  600.0] later\n".encode()
    assert kernel_failure(console) == (line if failed else None)


# a 5.10 guest of a CI run (both vCPUs stuck in runc; 5.10 restarts its count at each report)
_REPORTS_OF_5_10 = """\
[  116.987981] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [runc:10088]
[  124.795766] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [runc:10069]
[  144.992056] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [runc:10088]
[  152.800022] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [runc:10069]
[  154.119646] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:
[  172.987981] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [runc:10088]
[  180.795766] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [runc:10069]
[  200.992056] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [runc:10088]
[  208.800022] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [runc:10069]
"""


def test_a_lockup_reported_again_and_again_for_seconds_each_is_a_hang_of_minutes():
    """5.10's reports each say ~22 s; the console clock says CPU#1 was stuck from 94 s to 201 s,
    and CPU#0 from 102 s to 208 s: the first report past two minutes is the failure."""
    assert kernel_failure(_REPORTS_OF_5_10.encode()) is None
    later = _REPORTS_OF_5_10 + "[  228.992348] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [runc:10088]\n"
    assert kernel_failure(later.encode()) == later.splitlines()[-1]


def test_a_lockup_is_measured_across_reads_of_the_console():
    """The guest reads its console in pieces as it grows: a lockup's reports add up across them."""
    console = KernelConsole()
    lines = _REPORTS_OF_5_10.encode().splitlines(keepends=True)
    assert all(console.failure(line) is None for line in lines)
    assert console.failure(b"[  236.8] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [runc:10069]\n") is not None


@pytest.mark.parametrize(
    "reports",
    [
        # 6.1 and later give the whole time stuck in each report: 74 s is 74 s, not 22+48+74
        [(100, 0, 22, "criu:176"), (126, 0, 48, "criu:176"), (152, 0, 74, "criu:176")],
        # short lockups of one CPU, each ended before the next (a loaded host starving a vCPU)
        [(50, 1, 22, "criu:176"), (150, 1, 23, "criu:176"), (250, 1, 22, "criu:176"), (350, 1, 22, "criu:176")],
        # one CPU stuck in a new task at each report: each task ran, only the CPU was starved
        [(50, 0, 22, "runc:1"), (74, 0, 22, "runc:2"), (98, 0, 22, "runc:3"), (122, 0, 22, "runc:4")],
    ],
)
def test_lockups_that_end_are_not_added_together(reports):
    lines = "".join(
        f"[{at:5d}.000000] watchdog: BUG: soft lockup - CPU#{cpu} stuck for {s}s! [{task}]\n"
        for at, cpu, s, task in reports
    )
    assert kernel_failure(lines.encode()) is None


def test_a_recording_whose_guest_is_stuck_is_made_once_more(tmp_path, monkeypatch):
    """The recorder's retry of a lost guest (its boot is faked here; the stuck guest itself is
    the test above): the second attempt is the recording, the first one's error is kept."""
    attempts: list[Path] = []

    def stuck_the_first_time(path, *args):
        attempts.append(path)
        path.mkdir(parents=True, exist_ok=True)
        if len(attempts) == 1:
            raise GuestStuck("the guest did not start its job within 180 s while booting", "no console")
        return recorder.Recording(path)

    monkeypatch.setenv("OVM_CORPUS_CACHE", str(tmp_path))
    monkeypatch.setattr(recorder, "_record_into", stuck_the_first_time)
    monkeypatch.setattr(recorder.kernels, "unpack", lambda kernel: kernel)
    monkeypatch.setattr(recorder.initramfs, "build", lambda kernel: tmp_path / "initramfs")
    monkeypatch.setattr(recorder, "recording_key", lambda *args: "key")
    said: list[str] = []
    rec = recorder.record("6.1", "counter", log=said.append)
    path = tmp_path / "recordings" / "6.1-counter-key"
    assert attempts == [path, path] and rec.root == path
    assert said == [
        "guest lost while recording counter on 6.1 (the guest did not start its job within 180 s while"
        " booting); trying once more"
    ]
    assert "no console" in (path / "first-attempt.log").read_text()


@pytest.mark.guest
@pytest.mark.slow
def test_guest_job_timeout_is_an_error_and_qemu_is_ended(tmp_path):
    kernel = kernels.unpack(kernels.get_kernel("6.1"))
    image = initramfs.build(kernel)
    jobs.write_input_disk(tmp_path / "in.img", {"job.sh": b"sleep 600\n"})
    with pytest.raises(GuestError, match="timed out after 20 s waiting for nothing"):
        with Guest(tmp_path, kernel.vmlinuz, image, 256, [tmp_path / "in.img"]) as guest:
            guest.expect("NEVER", 20, "waiting for nothing")
    assert qemu_processes_using(tmp_path) == []


def test_a_restore_cuts_a_file_the_tree_only_appends_to_at_the_offset_its_images_hold(tmp_path):
    """runc-asis's /data/log grew between the snapshot and files.tar; restore gets it as it was
    at the snapshot (the offset the images hold it open at), every other member as it is."""
    from corpus.restore import files_at_images_moment
    from ovm_offline.criu import images
    from ovm_offline.criu.pb import criu_files_pb2 as files_pb

    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "manifest.json").write_text('{"workload": "runc-asis"}')
    with tarfile.open(rec / "files.tar", "w") as tar:
        for name, data in {"runc-asis.log": b"READY\n" * 9, "runc-box.files/log": b"seq 1\nseq 2\nseq 3\n"}.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    held = tmp_path / "images"
    held.mkdir()
    reg = files_pb.reg_file_entry(id=1, flags=0o2001, pos=12, name="/data/log")
    reg.fown.uid = reg.fown.euid = reg.fown.signum = reg.fown.pid_type = reg.fown.pid = 0
    images.write_image(held / "files.img", images.FILES, [files_pb.file_entry(type=1, id=1, reg=reg)])
    work = tmp_path / "work"
    work.mkdir()
    with tarfile.open(files_at_images_moment(recorder.Recording(rec), held, work)) as tar:
        assert tar.extractfile("runc-box.files/log").read() == b"seq 1\nseq 2\n"
        assert tar.extractfile("runc-asis.log").read() == b"READY\n" * 9


def _module(root: Path, rel: str, *fields: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF junk\0" + b"\0".join(f.encode() for f in fields) + b"\0")


@pytest.mark.parametrize("crc32c_built_in", [False, True])
def test_a_modules_softdep_loads_first_found_by_alias_generic_crypto_before_arch(tmp_path, crc32c_built_in):
    """PREEMPT_RT's generic build has crc32c as a module, which libcrc32c asks the crypto API for
    at its init (softdep=pre: crc32c); no modprobe in the initramfs loads it on demand. The
    generic one is taken: crc32c-intel needs SSE4.2, which TCG's CPU lacks."""
    kernel = kernels.get_kernel("6.1-rt")
    modules = tmp_path / "lib" / "modules" / kernel.release
    _module(modules, "kernel/lib/libcrc32c.ko", "softdep=pre: crc32c", "depends=")
    _module(modules, "kernel/net/netfilter/nf_tables.ko", "depends=nfnetlink,libcrc32c")
    _module(modules, "kernel/net/netfilter/nfnetlink.ko", "depends=")
    _module(modules, "kernel/arch/x86/crypto/crc32c-intel.ko", "alias=crc32c", "depends=")
    _module(modules, "kernel/crypto/crc32c_generic.ko", "alias=crypto-crc32c", "alias=crc32c", "depends=")
    (modules / "modules.builtin.modinfo").write_bytes(
        b"crc32c_generic.alias=crc32c\0" if crc32c_built_in else b"ext4.alias=fs-ext4\0"
    )
    unpacked = kernels.UnpackedKernel(kernel, tmp_path)
    order = unpacked.modules_in_load_order(["nf_tables"])
    if crc32c_built_in:
        assert order == ["nfnetlink", "libcrc32c", "nf_tables"]
    else:
        assert order == ["nfnetlink", "crc32c_generic", "libcrc32c", "nf_tables"]
    assert unpacked.module_by_alias("no-such-alias") is None
