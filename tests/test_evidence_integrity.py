"""A real recording's dump file altered the way a damaged disk, a broken transfer or a hostile
hand alters it (issue 34): a page the dump needs that cannot be read as the file describes it
is named, and no image is written; never read as zeros or as another page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.errors import ExitCode, GuestDataError, UnsupportedError
from ovm_offline.kernel.fs.fdtable import for_each_file, task_files
from ovm_offline.kernel.task.tasks import find_task
from ovm_offline.sources.elf import PHDR, PT_LOAD, ElfSource
from ovm_offline.sources.kdump_format import DUMP_DH_COMPRESSED_ZSTD, PAGE_DESC
from tests.support.checks import assert_one_line_failure
from tests.support.mutate import PatchedSource

pytestmark = pytest.mark.guest


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ovm_offline", *args], capture_output=True, text=True, timeout=300)


def _descriptor_of_the_log_name(kdump: Path, pid: int) -> tuple[int, int]:
    """(pfn, file offset of its page descriptor) of the page holding the name of the
    workload's log file, which files.img needs."""
    with sources.open_source(kdump) as source:
        prog = inventory.open_kernel(source)
        log = dict(for_each_file(task_files(find_task(prog, pid))))[1]
        pfn = prog.translate(int(log.f_path.dentry.d_name.name)) // 4096
        image = source.image
        assert image.dumped.test(pfn)
        logical = image.desc_offset + image.dumped.rank(pfn) * PAGE_DESC.size
        (where, _), *_ = image.layout.container_pieces(logical, PAGE_DESC.size)
    return pfn, where


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("size", 0, "corrupt page descriptor for pfn {pfn:#x} (offset {offset:#x}, size 0)"),
        ("offset", 1 << 40, "corrupt page descriptor for pfn {pfn:#x} (offset 0x10000000000, size {size})"),
        ("flags", DUMP_DH_COMPRESSED_ZSTD, "page at guest-physical {addr:#x}: zstd-compressed pages are not supported"),
    ],
)
def test_a_damaged_kdump_page_descriptor_is_named_and_nothing_is_written(recording, tmp_path, field, value, said):
    rec = recording("6.1", "counter")
    pid = rec.manifest["root_pid"]
    kdump = tmp_path / "damaged.kdump"
    shutil.copyfile(rec.kdumps["kdump-zlib"], kdump)
    pfn, where = _descriptor_of_the_log_name(kdump, pid)
    with open(kdump, "r+b") as f:
        f.seek(where)
        desc = dict(zip(("offset", "size", "flags", "page_flags"), PAGE_DESC.unpack(f.read(PAGE_DESC.size))))
        f.seek(where)
        f.write(PAGE_DESC.pack(*{**desc, field: value}.values()))
    for args in (
        ["dump", str(kdump), "--pid", str(pid), "-D", str(tmp_path / "images")],
        ["convert", str(kdump), str(tmp_path / "out.elf")],
    ):
        result = _run(*args)
        assert_one_line_failure(result, said.format(pfn=pfn, addr=pfn * 4096, **desc))
        assert result.returncode == ExitCode.SOURCE
        assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.kdump"]  # nothing, not even partial


def test_ps_lists_the_processes_before_an_unreadable_page_of_the_task_list(recording, tmp_path):
    """The page holding the root's list_head on the task list made unreadable: `ps` shows every
    process before it, then names the cut and the page in one line, with the source's code."""
    rec = recording("6.1", "counter")
    pid = rec.manifest["root_pid"]
    kdump = tmp_path / "damaged.kdump"
    shutil.copyfile(rec.kdumps["kdump-zlib"], kdump)
    with sources.open_source(kdump) as source:
        prog = inventory.open_kernel(source)
        before = [p.pid for p in inventory.list_processes(prog)]
        task = find_task(prog, pid)
        pfn = prog.translate(task.member_address_("tasks")) // 4096
        image = source.image
        logical = image.desc_offset + image.dumped.rank(pfn) * PAGE_DESC.size
        (where, _), *_ = image.layout.container_pieces(logical, PAGE_DESC.size)
    with open(kdump, "r+b") as f:
        f.seek(where)
        offset, _size, flags, page_flags = PAGE_DESC.unpack(f.read(PAGE_DESC.size))
        f.seek(where)
        f.write(PAGE_DESC.pack(offset, 0, flags, page_flags))
    result = _run("ps", str(kdump), "--json")
    assert_one_line_failure(result, "the task list is cut after PID ", f"corrupt page descriptor for pfn {pfn:#x}")
    assert result.returncode == ExitCode.SOURCE
    shown = [json.loads(line)["pid"] for line in result.stdout.splitlines()]
    assert shown and shown == before[: len(shown)] and pid not in shown
    assert f"after PID {shown[-1]} (" in result.stderr


def test_a_pt_load_moved_over_the_first_16_mib_of_ram_is_named(recording, tmp_path):
    """The 16 MiB segment QEMU writes for VGA memory moved to guest-physical 0 would be read
    as the kernel's first 16 MiB: every process's namespaces, and more, read from it."""
    rec = recording("6.1", "counter")
    elf = tmp_path / "shadowed.elf"
    shutil.copyfile(rec.elf, elf)
    with ElfSource(elf) as source:
        header = source.header
        index = next(
            i for i, ph in enumerate(source.program_headers) if ph.p_type == PT_LOAD and ph.p_filesz == 16 << 20
        )
    at = header.e_phoff + index * header.e_phentsize
    with open(elf, "r+b") as f:
        f.seek(at)
        fields = list(PHDR.unpack(f.read(PHDR.size)))
        fields[4] = 0  # p_paddr
        f.seek(at)
        f.write(PHDR.pack(*fields))
    for args in (
        ["ps", str(elf)],
        ["dump", str(elf), "--pid", str(rec.manifest["root_pid"]), "-D", str(tmp_path / "o")],
    ):
        result = _run(*args)
        assert_one_line_failure(result, f"and #{index} both hold guest-physical 0x0", "damaged or altered")
        assert result.returncode == ExitCode.SOURCE
    assert not (tmp_path / "o").exists()


def _patched_kernel_value(rec, symbol_of, value: bytes):
    """The recording with `value` written where `symbol_of(prog, root task)` says."""
    source = PatchedSource(sources.open_source(rec.elf))
    prog = inventory.open_kernel(source)
    source.patch_virtual(prog, symbol_of(prog, find_task(prog, rec.manifest["root_pid"])), value)
    return source


def _cred_user_ns(prog, task) -> int:
    return int(task.real_cred) + prog.member_offset("cred", "user_ns")


def _nsproxy_net_ns(prog, task) -> int:
    return int(task.nsproxy) + prog.member_offset("nsproxy", "net_ns")


def _init_pid_ns_level(prog, task) -> int:
    return prog.symbol_address("init_pid_ns") + prog.member_offset("pid_namespace", "level")


@pytest.mark.parametrize(
    "where, value, said",
    [
        (_cred_user_ns, bytes(8), "has a NULL user_ns, which no kernel's has (kernel/cred.c:"),
        (
            _init_pid_ns_level,
            b"\xff\xff\xff\xff",
            "its level is 4294967295, which breaks the kernel's invariant pid_namespace.level: at most MAX_PID_NS_LEVEL",
        ),
        (_nsproxy_net_ns, bytes(8), "has a NULL net_ns, which no kernel's has"),
    ],
    ids=["null-cred-user-ns", "absurd-pid-ns-level", "null-net-ns"],
)
def test_a_value_no_kernel_holds_is_refused_by_dump_and_named_by_ps(recording, tmp_path, where, value, said):
    rec = recording("6.1", "counter")
    pid = rec.manifest["root_pid"]
    with _patched_kernel_value(rec, where, value) as source:
        prog = inventory.open_kernel(source)
        (root,) = [p for p in inventory.list_processes(prog) if p.pid == pid]
        assert any(said in problem for problem in root.problems), root.problems
        with pytest.raises(GuestDataError, match=re.escape(said)):
            dumping.dump(source, inventory.open_kernel(source), pid, tmp_path / "images")
    assert not (tmp_path / "images").exists()


def _log_dentry(prog, task):
    return dict(for_each_file(task_files(task)))[1].f_path.dentry


def _dentry_of_another_mount(prog, task) -> tuple[int, bytes]:
    """The log's f_path.dentry (on the tmpfs at /run/ovm) pointed at the task's root dentry
    (the initramfs's): a dentry, but not of the path's mount."""
    log = dict(for_each_file(task_files(task)))[1]
    root = task.fs.root.dentry
    where = int(log) + prog.member_offset("file", "f_path") + prog.member_offset("path", "dentry")
    return where, int(root).to_bytes(8, "little")


def _name_with_a_slash(prog, task) -> tuple[int, bytes]:
    return int(_log_dentry(prog, task).d_name.name), b"count/r.log"


def _its_own_parent(prog, task) -> tuple[int, bytes]:
    """The log's dentry (/run/ovm/counter.log) made its own parent, as a disconnected dentry is:
    its path would be "/", which is not the file."""
    dentry = _log_dentry(prog, task)
    return int(dentry) + prog.member_offset("dentry", "d_parent"), int(dentry).to_bytes(8, "little")


@pytest.mark.parametrize(
    "where, said",
    [
        (_dentry_of_another_mount, "which breaks the kernel's invariant dentry.d_sb of a mount"),
        (
            _name_with_a_slash,
            "below its root: is named 'count/r.log', which breaks the kernel's invariant dentry.d_name",
        ),
        (_its_own_parent, "is its own parent (disconnected, or its d_parent forged): '/' does not name it"),
    ],
    ids=["dentry-of-another-mount", "name-with-a-slash", "its-own-parent"],
)
def test_a_path_no_kernel_makes_is_refused_by_name(recording, tmp_path, where, said):
    rec = recording("6.1", "counter")
    pid = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        address, value = where(prog, find_task(prog, pid))
        source.patch_virtual(prog, address, value)
        with pytest.raises((GuestDataError, UnsupportedError), match=re.escape(said)):
            dumping.dump(source, inventory.open_kernel(source), pid, tmp_path / "images")
    assert not (tmp_path / "images").exists()
