"""The kernel layer on real QEMU dumps of booted 6.1 and 6.12 guests (the corpus's counter
guest, through ovm_offline.sources.open_source).

Ground truth is Volatility 3's linux.pslist, run once per kernel per session.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

from ovm_offline.errors import SymbolError
from ovm_offline.inventory import list_processes, open_kernel
from ovm_offline.kernel.core.paging import Run
from ovm_offline.kernel.ns.cgroup import task_cgroup_path
from ovm_offline.kernel.task.pid import task_active_pid_ns, task_ns_pid
from ovm_offline.kernel.task.tasks import for_each_process, for_each_task, task_page_tables, task_state
from ovm_offline.sources import open_source
from tests.support.paths import ISF, SYMBOLS
from tests.support.volatility import vol_command

pytestmark = pytest.mark.guest
KERNELS = ["6.1", "6.12"]
MASK48 = (1 << 48) - 1  # Volatility prints task offsets without the sign extension


class HiddenVmcoreinfo:
    """Wraps any source and pretends it has no VMCOREINFO."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.format_name = getattr(inner, "format_name", "?")

    def vmcoreinfo(self):
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.fixture(scope="session")
def sample(recording):
    """sample(kernel) -> the ELF dump of the corpus's counter guest on `kernel`."""
    return lambda kernel: recording(kernel, "counter").elf


@functools.cache
def vol_pslist(dump: Path) -> list[dict]:
    """Volatility's linux.pslist of a dump, once per test session."""
    out = subprocess.run(
        vol_command() + ["-q", "-r", "json", "-f", str(dump), "-s", str(SYMBOLS), "linux.pslist"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        pytest.fail(f"vol failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


@pytest.fixture(scope="module", params=KERNELS)
def kernel(request):
    return request.param


@pytest.fixture(scope="module")
def source(kernel, sample):
    src = open_source(str(sample(kernel)))
    yield src
    src.close()


def test_sample_sources_have_what_the_kernel_layer_uses(sample):
    src = open_source(str(sample("6.1")))
    try:
        vmci = src.vmcoreinfo()
        assert vmci is not None and vmci["OSRELEASE"] == "6.1.0-56-cloud-amd64"
        assert {"KERNELOFFSET", "NUMBER(phys_base)", "SYMBOL(swapper_pg_dir)"} <= set(vmci)
        assert len(src.vcpus()) >= 1 and src.vcpus()[0].cr3
        assert sum(r.length for r in src.runs()) > 256 << 20
    finally:
        src.close()


@pytest.fixture(scope="module")
def prog(source):
    return open_kernel(source)


def test_layout_from_vmcoreinfo(kernel, source, prog):
    vmci = source.vmcoreinfo()
    assert prog.layout_from == "vmcoreinfo"
    assert prog.kaslr_offset == int(vmci["KERNELOFFSET"], 16)
    assert prog.pgtable_levels == 4
    assert prog.symbols.path.name == ISF[kernel].name
    assert prog["init_task"].comm.string_() == b"swapper/0"


def test_process_list_matches_volatility(kernel, sample, prog):
    vol = vol_pslist(sample(kernel))
    ours = list_processes(prog)
    assert len(ours) == len(vol)
    by_pid = {p.pid: p for p in ours}
    assert set(by_pid) == {r["PID"] for r in vol}
    for r in vol:
        p = by_pid[r["PID"]]
        assert (p.ppid, p.comm, p.uid, p.gid, p.euid, p.egid) == (
            r["PPID"],
            r["COMM"],
            r["UID"],
            r["GID"],
            r["EUID"],
            r["EGID"],
        ), r
        assert p.task_address & MASK48 == r["OFFSET (V)"] & MASK48
        assert p.tgid == p.pid == r["TID"]


def test_process_details(kernel, prog):
    procs = {p.pid: p for p in list_processes(prog)}
    init = procs[1]
    assert init.comm == "init" and not init.kthread and init.ppid == 0
    assert init.ns_pid == 1 and init.pidns_level == 0 and init.pidns_inum == 0xEFFFFFFC
    assert init.namespaces.pid == 0xEFFFFFFC and init.namespaces.user == 0xEFFFFFFD
    assert init.cgroup == "/" and init.container is None and init.nthreads == 1
    kthreadd = procs[2]
    assert kthreadd.kthread and kthreadd.comm == "kthreadd"
    assert all(p.kthread for p in procs.values() if p.ppid == 2)
    assert all(p.state in "RSDTtXZPI" for p in procs.values())
    assert any(p.state == "I" for p in procs.values())  # idle kworkers (TASK_IDLE)
    assert all(not p.problems for p in procs.values())
    shells = [p for p in procs.values() if p.comm == "sh"]
    assert shells and shells[0].ppid == 1 and shells[0].state in "RS"
    # Every task of every process appears once.
    tids = [t.pid for t in for_each_task(prog)]
    assert len(tids) == len(set(tids)) == sum(p.nthreads for p in procs.values())


def test_helpers_directly(prog):
    for task in for_each_process(prog):
        assert task_ns_pid(task) == task.pid  # everything lives in init_pid_ns here
        assert int(task_active_pid_ns(task)) == prog.symbol_address("init_pid_ns")
        assert task_cgroup_path(task) == "/"
        assert task_state(task) in "RSDTtXZPI"


def _layout(p):
    return (p.kaslr_offset, p.phys_base, p.page_offset_base, p.kernel_root, p.pgtable_levels, p.symbols.path)


def test_kaslr_without_vmcoreinfo_gives_same_layout(kernel, source, prog):
    blind = open_kernel(HiddenVmcoreinfo(source))
    assert blind.layout_from == "banner scan"
    assert _layout(blind) == _layout(prog)
    assert list_processes(blind) == list_processes(prog)


class NoVcpus(HiddenVmcoreinfo):
    def vcpus(self):
        return []


def test_kaslr_without_vmcoreinfo_or_vcpus(kernel, source, prog):
    # The 6.1 sample also holds a stale kernel image from an earlier boot; without
    # vCPU registers the intact task list must decide.
    blind = open_kernel(NoVcpus(source))
    assert _layout(blind) == _layout(prog)


@pytest.mark.parametrize("hide", [False, True], ids=["vmcoreinfo", "scan"])
def test_wrong_isf_is_a_clear_symbol_error(sample, tmp_path, hide):
    src = open_source(str(sample("6.1")))
    try:
        if hide:
            src = HiddenVmcoreinfo(src)
        only612 = tmp_path / "only612"
        only612.mkdir()
        os.symlink(ISF["6.12"], only612 / ISF["6.12"].name)
        with pytest.raises(SymbolError) as e:
            open_kernel(src, [only612], include_default_symbols=False)
        msg = str(e.value)
        assert "\n" not in msg
        assert "Linux version 6.1.0-56-cloud-amd64" in msg and "dwarf2json linux --elf" in msg
        assert "--symbols DIR" in msg
        with pytest.raises(SymbolError) as e:
            open_kernel(src, isf=ISF["6.12"])
        msg = str(e.value)
        assert "\n" not in msg
        assert "is for 'Linux version 6.12.117+deb12-cloud-amd64" in msg
        assert "the guest runs 'Linux version 6.1.0-56-cloud-amd64" in msg
    finally:
        src.close()


def test_missing_isf_dir_one_line(sample, tmp_path):
    src = open_source(str(sample("6.12")))
    try:
        with pytest.raises(SymbolError) as e:
            open_kernel(src, [tmp_path / "does-not-exist"], include_default_symbols=False)
        msg = str(e.value)
        assert "\n" not in msg
        assert msg.startswith("no symbol table (ISF) matches the guest kernel 'Linux version 6.12.117+deb12")
        assert "dwarf2json linux --elf vmlinux-with-debuginfo > FILE.json" in msg
        assert "-dbg package" in msg and "--symbols DIR" in msg
    finally:
        src.close()


def test_linear_shortcuts_agree_with_page_tables(prog):
    """The direct-map and kernel-image shortcuts give what the page tables say."""
    pt = prog.page_tables
    addrs = []
    for task in for_each_process(prog):
        addrs += [task.address_, int(task.real_cred), int(task.signal), int(task.thread_pid)]
        if task.mm:
            addrs.append(int(task.mm))
    for sym in ("init_task", "init_pid_ns", "linux_banner", "page_offset_base", "jiffies"):
        addrs.append(prog.symbol_address(sym))
    for a in addrs:
        assert pt.translate(a) == prog.translate(a), hex(a)
    assert prog.direct_map_size <= 1 << 46
    if prog.has_symbol("vmalloc_base"):
        assert prog.page_offset_base + prog.direct_map_size <= prog["vmalloc_base"]


def test_vmalloc_stack_reads_through_page_tables(prog):
    """Kernel stacks are vmalloc'ed (CONFIG_VMAP_STACK): outside both shortcuts."""
    init = next(for_each_process(prog))
    stack = int(init.stack)
    assert not (0 <= stack - prog.page_offset_base < prog.direct_map_size)
    assert prog.translate(stack) == prog.page_tables.translate(stack)
    # The bottom of every kernel stack holds STACK_END_MAGIC (CONFIG_SCHED_STACK_END_CHECK
    # or not, set_task_stack_end_magic always writes it).
    assert prog.read_u64(stack) & 0xFFFFFFFF == 0x57AC6E9D


def test_typed_access_on_a_real_kernel(prog):
    banner = prog["linux_banner"].string_()
    assert banner + b"\0" == prog.read(prog.symbol_address("linux_banner"), len(banner) + 1)
    assert banner == prog.symbols.banner
    init_task = prog["init_task"]
    assert init_task.address_of_().value_() == prog.symbol_address("init_task")
    first = next(for_each_process(prog))
    assert first.pid == 1
    # container_of on the tasks list gives back the task; pointers chain like C's ->.
    assert prog.container_of(first.member_address_("tasks"), "task_struct", "tasks") == first
    assert first.real_parent.deref() == init_task
    assert first.signal.pids[1].numbers[0].nr == 1  # PIDTYPE_TGID
    assert prog.read_cstring(prog.symbol_address("linux_banner"), 10) == b"Linux vers"


def test_user_page_tables_walk(prog):
    for task in for_each_process(prog):
        pt = task_page_tables(task)
        if task.flags & 0x00200000:
            assert pt is None
            continue
        runs = [r for r in pt.walk(0, 1 << 47) if isinstance(r, Run)]
        assert runs and all(prog.runs.contains(r.paddr, r.length) for r in runs)
        # Runs are sorted, disjoint and merged.
        for a, b in zip(runs, runs[1:], strict=False):
            assert a.vaddr + a.length <= b.vaddr
            assert not (a.vaddr + a.length == b.vaddr and a.paddr + a.length == b.paddr)
        # The start of the user stack (mm->start_stack) is mapped.
        assert pt.translate(task.mm.start_stack) is not None
