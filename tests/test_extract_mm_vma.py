"""VMA conversion rules (ovm_offline.extract.mm) that the recorded guests do not exercise:
VmFlags letters CRIU turns into MAP_*/madvise bits, statuses of every kind, and the
[vsyscall] entry of kernels that emulate vsyscalls (the pinned guests boot with
vsyscall_mode NONE), built in fake memory with the real ISFs."""

from __future__ import annotations

import pytest

from ovm_offline.criu.build.mm import vma_status as criu_vma_status
from ovm_offline.extract.vma import (
    MAP_ANONYMOUS,
    MAP_GROWSDOWN,
    MAP_HUGETLB,
    MAP_LOCKED,
    MAP_NORESERVE,
    MAP_PRIVATE,
    MAP_SHARED,
    criu_can_be_lazy,
    criu_lazy_allowed,
    vm_madvise,
    vm_map_flags,
    vm_prot,
    vsyscall_vma,
)
from ovm_offline.kernel.mm import mmap as kmm
from ovm_offline.state import Vma
from tests.support.memory import FakeKernelMemory


def test_vm_flags_to_criu_fields():
    assert vm_prot(kmm.VM_READ | kmm.VM_EXEC | kmm.VM_MAYWRITE) == 0x5
    f = kmm.VM_GROWSDOWN | kmm.VM_LOCKED | kmm.VM_NORESERVE | kmm.VM_HUGETLB
    assert (
        vm_map_flags(f, anonymous=True)
        == MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN | MAP_LOCKED | MAP_NORESERVE | MAP_HUGETLB
    )
    assert vm_map_flags(kmm.VM_SHARED | kmm.VM_MAYSHARE, anonymous=False) == MAP_SHARED
    # A read-only MAP_SHARED file mapping has VM_MAYSHARE without VM_SHARED: still "s".
    assert vm_map_flags(kmm.VM_MAYSHARE, anonymous=False) == MAP_SHARED
    madv = vm_madvise(
        kmm.VM_SEQ_READ
        | kmm.VM_RAND_READ
        | kmm.VM_DONTCOPY
        | kmm.VM_DONTDUMP
        | kmm.VM_MERGEABLE
        | kmm.VM_HUGEPAGE
        | kmm.VM_NOHUGEPAGE
        | kmm.VM_WIPEONFORK
    )
    assert madv == (1 << 2) | (1 << 1) | (1 << 10) | (1 << 16) | (1 << 12) | (1 << 14) | (1 << 15)


@pytest.mark.parametrize(
    "kind,shared,file,status",
    [
        ("anon", False, False, 0x201),
        ("stack", False, False, 0x201),
        ("heap", False, False, 0x221),
        ("file", False, True, 0x41),
        ("file", True, True, 0x81),
        ("vdso", False, False, 0x209),
        ("vvar", False, False, 0x1201),
        ("vsyscall", False, False, 0x204),
    ],
)
def test_statuses(kind, shared, file, status):
    flags = (MAP_SHARED if shared else MAP_PRIVATE) | (0 if file else MAP_ANONYMOUS)
    assert criu_vma_status(Vma(0, 4096, 0, 1, flags, kind, shared=shared)) == status


def test_lazy_rules():
    anon = MAP_PRIVATE | MAP_ANONYMOUS
    assert criu_can_be_lazy(Vma(0, 4096, 0, 3, anon, "anon"))
    assert criu_can_be_lazy(Vma(0, 4096, 0, 3, anon | MAP_GROWSDOWN, "stack"))
    assert not criu_can_be_lazy(Vma(0, 4096, 0, 3, anon | MAP_LOCKED, "anon"))
    assert not criu_can_be_lazy(Vma(0, 4096, 0, 5, anon, "vdso"))
    assert not criu_can_be_lazy(Vma(0, 4096, 0, 3, MAP_PRIVATE, "file"))
    # CRIU 3.17's is_stack() quirk: only a page-aligned SP matters, and then for every page.
    assert criu_lazy_allowed([0x7FFD_2CD2_A5C8, 0x7F00_0000_0FF8])
    assert not criu_lazy_allowed([0x7FFD_2CD2_A5C8, 0x7F00_0000_1000])


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
@pytest.mark.parametrize(
    "mode,flags,want", [(0, 0x5, 0x5), (1, 0x4, 0x4), (2, 0x5, None)], ids=["emulate", "xonly", "none"]
)
def test_vsyscall_entry_follows_vsyscall_mode(kernel, mode, flags, want):
    k = FakeKernelMemory(kernel)
    k.write(k.prog.symbol_address("vsyscall_mode"), mode.to_bytes(4, "little"))
    k.set_symbol("gate_vma", "vm_area_struct", "vm_start", kmm.VSYSCALL_ADDR)
    k.set_symbol("gate_vma", "vm_area_struct", "vm_end", kmm.VSYSCALL_ADDR + 4096)
    k.set_symbol("gate_vma", "vm_area_struct", "vm_flags", flags)
    mm_addr = k.alloc("mm_struct")
    k.set(mm_addr, "mm_struct", "context.flags", 1 << kmm.MM_CONTEXT_HAS_VSYSCALL)
    mm = k.prog.struct("mm_struct", mm_addr)
    v = vsyscall_vma(mm)
    if want is None:
        assert v is None
        return
    assert v is not None
    assert (v.start, v.end, v.prot, v.flags, v.kind) == (
        kmm.VSYSCALL_ADDR,
        kmm.VSYSCALL_ADDR + 4096,
        want,
        MAP_PRIVATE | MAP_ANONYMOUS,
        "vsyscall",
    )
    assert criu_vma_status(v) == 0x204
    # A 32-bit task's mm has no vsyscall page.
    k.set(mm_addr, "mm_struct", "context.flags", 0)
    assert vsyscall_vma(mm) is None
