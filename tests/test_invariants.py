"""The kernel's invariants (kernel/core/invariants.py) on real recordings: a pointer that no
live kernel object holds NULL, set to NULL in guest memory, is refused by its row's name,
never taken for "absent" (issues 33 and 34)."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest

from corpus import kernels
from fuzz.harness import digest_tree
from fuzz.nulls import Nulls, never_null_members
from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.errors import GuestDataError, MomentError
from ovm_offline.kernel.core.invariants import INVARIANTS, NEVER_NULL, broken
from ovm_offline.kernel.core.ktypes import PointerType
from ovm_offline.kernel.mm.mmap import for_each_vma, mm_page_tables, pages_anon
from ovm_offline.kernel.task.tasks import find_task
from tests.support.memory import FakeKernelMemory
from tests.support.mutate import PatchedSource

#: Workloads every kernel's CI share records: a process tree, and a program on a pty
WORKLOADS = ("pipetree", "ptyprog")
#: Named refusals enough for a row (the fuzz family `nulls` tries every object)
PER_ROW = 3


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_every_row_names_a_pointer_member_of_the_kernel(kernel):
    """A row whose struct or member this kernel lacks must be one that later or earlier
    kernels add (nsproxy.time_ns since 5.6), never a typo: each names a pointer somewhere."""
    symbols = FakeKernelMemory(kernel).prog.symbols
    for owner, member in NEVER_NULL:
        struct = symbols.struct_type(owner)
        if struct.has_member(member):
            assert isinstance(struct.member(member).type, PointerType), (owner, member)
        else:
            assert (owner, member) == ("nsproxy", "time_ns"), f"{owner}.{member} is in no struct {owner}"


def test_each_rule_is_named_with_its_source():
    for name, inv in INVARIANTS.items():
        assert name == inv.name and inv.rule and "/" in inv.source
        assert name in str(broken(name, "struct x at 0x1", "it holds 2"))
    assert all(source.count("/") >= 1 for source in NEVER_NULL.values())


@pytest.mark.guest
@pytest.mark.parametrize("kernel", list(kernels.KERNELS))
def test_null_where_no_kernel_has_one_is_refused_by_name(kernel, recording, tmp_path, caplog):
    """Each NEVER_NULL member of objects `ps` and a dump of the root read (PID 1's task, which
    the tree's check reads for every other process, first) set to NULL: the dump refuses
    naming the row, or `ps` warns naming it, or neither read it and the images are the same.
    Every row is named at least once."""
    named: dict[tuple[str, str], int] = {}
    for workload in WORKLOADS:
        rec = recording(kernel, workload)
        family = Nulls(rec, tmp_path)
        with sources.open_source(rec.elf) as source:
            prog = inventory.open_kernel(source)
            init = find_task(prog, 1)
            cases = [(f"{row[0]}.{row[1]}", row, init.address_ + off) for _, off, row in never_null_members(init.type_)]
            baseline = _dump_digest(source, prog, family.pid, tmp_path / "base")
        cases += [(f"{t.what}: {name}", _row_of(t.type, name), address) for t, name, address in family.cases]
        for what, row, address in cases:
            if named.get(row, 0) >= PER_ROW:
                continue
            message = f"struct {row[0]} at 0x"
            source = PatchedSource(sources.open_source(rec.elf))
            try:
                prog = inventory.open_kernel(source)
                source.patch_virtual(prog, address, bytes(8))
                caplog.clear()
                try:
                    with caplog.at_level(logging.WARNING):
                        problems = [p for proc in inventory.list_processes(prog) for p in proc.problems]
                    digest = _dump_digest(source, prog, family.pid, tmp_path / "out")
                except GuestDataError as e:
                    assert message in str(e) and f"has a NULL {row[1]}, which no kernel's has" in str(e), (what, e)
                    named[row] = named.get(row, 0) + 1
                    continue
                warned = [p for p in problems + caplog.messages if f"has a NULL {row[1]}, which no kernel" in p]
                assert warned or digest == baseline, f"{what}: NULL changed the images without a word"
                named[row] = named.get(row, 0) + bool(warned)
            finally:
                source.base.close()
    symbols = FakeKernelMemory(kernel).prog.symbols
    present = {(o, m) for o, m in NEVER_NULL if symbols.struct_type(o).has_member(m)}
    assert present - set(named) == set()


def _row_of(struct, name: str) -> tuple[str, str]:
    return next(row for n, _, row in never_null_members(struct) if n == name)


def _dump_digest(source, prog, pid: int, out: Path) -> str:
    try:
        dumping.dump(source, prog, pid, out)
        return digest_tree(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _forge_pid_and_tgid(prog, task, pid: int, tgid: int) -> list[tuple[int, bytes]]:
    return [
        (task.member_address_("pid"), pid.to_bytes(4, "little", signed=True)),
        (task.member_address_("tgid"), tgid.to_bytes(4, "little", signed=True)),
    ]


@pytest.mark.guest
@pytest.mark.parametrize(
    "pid, tgid, invariant, flagged",
    [
        (10005, 10004, "task_struct.tgid", {10005}),
        (10004, 10004, "task_struct.pid unique", {10004}),
        (-5, -5, "task_struct.pid", {-5}),
    ],
    ids=["tgid-not-the-leaders-pid", "pid-of-another-process", "negative-pid"],
)
@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_forged_pid_is_named_by_ps_and_refused_by_dump(kernel, recording, tmp_path, pid, tgid, invariant, flagged):
    """A child of pipetree's root (10005) given another pid or tgid, as a rootkit rewrites one:
    `ps` still shows it, with the broken invariant as a warning on each process it concerns,
    and `dump` of the tree refuses by the invariant's name."""
    rec = recording(kernel, "pipetree")
    root = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        for address, value in _forge_pid_and_tgid(prog, find_task(prog, 10005), pid, tgid):
            source.patch_virtual(prog, address, value)
        prog = inventory.open_kernel(source)
        listing = inventory.read_process_list(prog)
        assert listing.cut is None and not listing.unread
        said = f"which breaks the kernel's invariant {invariant}:"
        warned = {p.pid for p in listing.processes if any(said in problem for problem in p.problems)}
        assert flagged <= warned and warned <= flagged | {10004}, warned
        assert 10006 in {p.pid for p in listing.processes}  # the others are still shown
        with pytest.raises(GuestDataError, match=re.escape(said)):
            dumping.dump(source, prog, root, tmp_path / "images")
    assert not (tmp_path / "images").exists()


def _private_file_vma_with_a_cowed_page(prog, task):
    """A private file mapping of `task` (its vm_file set, not VM_SHARED) that maps an
    anonymous page: the data segment its program wrote to."""
    pt = mm_page_tables(task.mm)
    for vma in for_each_vma(task.mm):
        if not vma.vm_file or vma.vm_flags & 0x8 or not vma.anon_vma:  # VM_SHARED
            continue
        for va in range(vma.vm_start, vma.vm_end, 4096):
            pa = pt.translate(va)
            if pa is not None and pages_anon(prog, pa >> 12, 1)[0]:
                return vma
    raise AssertionError("no private file mapping with a COW'd page")


@pytest.mark.guest
@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_cowed_page_in_a_vma_without_anon_vma_is_refused(kernel, recording, tmp_path):
    """The data segment of pipetree's root (a private file mapping its program wrote to) with
    its anon_vma NULLed: the COW'd pages would be left out as page cache, and the restored
    process would read the file's bytes. The dump refuses, naming the invariant."""
    rec = recording(kernel, "pipetree")
    root = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        vma = _private_file_vma_with_a_cowed_page(prog, find_task(prog, root))
        source.patch_virtual(prog, vma.member_address_("anon_vma"), bytes(8))
        said = "which breaks the kernel's invariant vm_area_struct.anon_vma: set in every VMA that maps an anonymous"
        with pytest.raises(GuestDataError, match=re.escape(said)):
            dumping.dump(source, inventory.open_kernel(source), root, tmp_path / "images")
    assert not (tmp_path / "images").exists()


def _tk_sequence(prog) -> int:
    seq = prog["tk_core"].seq
    while seq.has_member_("seqcount"):
        seq = seq.seqcount
    return seq.member_address_("sequence")


def _tkr_mono_shift(prog) -> int:
    return prog["tk_core"].timekeeper.tkr_mono.member_address_("shift")


@pytest.mark.guest
@pytest.mark.parametrize(
    "where, value, error, said",
    [
        (_tk_sequence, 7, MomentError, "the kernel was updating its clocks at the pause"),
        (_tkr_mono_shift, 200, GuestDataError, "the timekeeper's tkr_mono: has shift 200, which breaks the kernel's"),
    ],
    ids=["timekeeper-being-written", "absurd-clocksource-shift"],
)
@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_a_timekeeper_no_clock_could_give_is_not_read(kernel, recording, tmp_path, where, value, error, said):
    """The clocks a dump saves (timers, time namespaces, TCP timestamps) come from the
    timekeeper: one being written at the pause is a moment to take again (exit 8), one whose
    shift no clocksource has is refused by the invariant's name; neither is read as a time."""
    rec = recording(kernel, "counter")
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        source.patch_virtual(prog, where(prog), value.to_bytes(4, "little"))
        with pytest.raises(error, match=re.escape(said)):
            dumping.dump(source, inventory.open_kernel(source), rec.manifest["root_pid"], tmp_path / "images")
    assert not (tmp_path / "images").exists()
