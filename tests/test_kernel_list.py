"""List walking over constructed guest memory: order, loops, bounds, bad pointers;
and the typed object layer (members, anonymous unions, bit-fields, arrays, strings)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ovm_offline.errors import GuestDataError
from ovm_offline.kernel.core.memory import FaultError, Program
from ovm_offline.kernel.core.symbols import load_isf
from ovm_offline.kernel.ds.list import hlist_for_each, list_count, list_empty, list_for_each, list_for_each_entry
from tests.support.memory import SparseSource
from tests.support.paths import ISF

POB = 0xFFFF_8880_0000_0000  # direct-map base used for the fake guest


@pytest.fixture(scope="module")
def symbols():
    return load_isf(ISF["6.1"])


def fake_prog(symbols, src: SparseSource) -> Program:
    return Program(
        src, symbols, kaslr_offset=0, phys_base=0, pgtable_levels=4, kernel_root=0x1000, page_offset_base=POB
    )


def build_list(src: SparseSource, head_pa: int, node_pas: list[int], close: bool = True) -> None:
    """A circular list_head list: head -> nodes... -> head (next at +0, prev at +8)."""
    chain = [head_pa] + node_pas
    for i, pa in enumerate(chain):
        nxt = chain[(i + 1) % len(chain)] if (close or i + 1 < len(chain)) else None
        src.write_u64(pa, POB + nxt if nxt is not None else 0)
        src.write_u64(pa + 8, POB + chain[i - 1])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 50), data=st.data())
def test_list_order_and_entries(symbols, n, data):
    src = SparseSource(1 << 30)
    prog = fake_prog(symbols, src)
    slots = data.draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n, unique=True))
    pas = [0x10_0000 + s * 0x100 for s in slots]
    build_list(src, 0x8000, pas)
    assert list(list_for_each(prog, POB + 0x8000)) == [POB + p for p in pas]
    assert list_empty(prog, POB + 0x8000) == (n == 0)
    assert list_count(prog, POB + 0x8000) == n
    off = prog.member_offset("task_struct", "tasks")
    tasks = list(list_for_each_entry(prog, "task_struct", POB + 0x8000, "tasks"))
    assert [t.address_ for t in tasks] == [POB + p - off for p in pas]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), back=st.data())
def test_looping_list_detected(symbols, n, back):
    """A list whose last node points back into the middle never returns to its head."""
    src = SparseSource(1 << 30)
    prog = fake_prog(symbols, src)
    pas = [0x10_0000 + i * 0x40 for i in range(n)]
    build_list(src, 0x8000, pas)
    j = back.draw(st.integers(0, n - 1))
    src.write_u64(pas[-1], POB + pas[j])  # last -> pas[j]: a cycle excluding the head
    with pytest.raises(GuestDataError) as e:
        list(list_for_each_entry(prog, "task_struct", POB + 0x8000, "tasks", name="init_task.tasks"))
    msg = str(e.value)
    assert "init_task.tasks" in msg and "loops" in msg and "\n" not in msg


def test_list_limit(symbols):
    src = SparseSource(1 << 30)
    prog = fake_prog(symbols, src)
    build_list(src, 0x8000, [0x10_0000 + i * 0x40 for i in range(100)])
    assert len(list(list_for_each(prog, POB + 0x8000, limit=100))) == 100
    with pytest.raises(GuestDataError, match=r"list my_list has more than 99 entries"):
        list(list_for_each(prog, POB + 0x8000, name="my_list", limit=99))


def test_null_and_wild_pointers(symbols):
    src = SparseSource(1 << 30)
    prog = fake_prog(symbols, src)
    build_list(src, 0x8000, [0x10_0000, 0x10_0040], close=False)
    with pytest.raises(GuestDataError, match="NULL next pointer after 2 entries"):
        list(list_for_each(prog, POB + 0x8000, name="x"))
    src.write_u64(0x10_0040, 0xDEAD_0000_0000)  # a user-space address: not mapped in the kernel
    with pytest.raises(GuestDataError, match="list x: unreadable node"):
        list(list_for_each(prog, POB + 0x8000, name="x"))
    with pytest.raises(FaultError):
        prog.read(POB + (1 << 31), 8)  # beyond the fake memory


def test_hlist(symbols):
    src = SparseSource(1 << 30)
    prog = fake_prog(symbols, src)
    src.write_u64(0x9000, POB + 0xA000)
    src.write_u64(0xA000, POB + 0xB000)
    src.write_u64(0xB000, 0)
    assert list(hlist_for_each(prog, POB + 0x9000)) == [POB + 0xA000, POB + 0xB000]
    src.write_u64(0xB000, POB + 0xA000)
    with pytest.raises(GuestDataError, match="loops"):
        list(hlist_for_each(prog, POB + 0x9000, name="pid hash"))


def test_typed_objects(symbols):
    src = SparseSource(1 << 30)
    prog = fake_prog(symbols, src)
    t = symbols.struct_type("task_struct")
    base = 0x20_0000
    src.write(base + t.member("comm").offset, b"hello\0garbage...")
    src.write(base + t.member("pid").offset, (1234).to_bytes(4, "little"))
    src.write(base + t.member("__state").offset, (0x402).to_bytes(4, "little"))
    task = prog.object("task_struct", POB + base)
    assert task.pid == 1234 and task.member_("__state") == 0x402
    assert task.comm.string_() == b"hello" and len(task.comm) == 16
    # A bit-field: in_execve is bit 2 of the byte at its offset in 6.1.
    m = t.member("in_execve")
    src.write(base + m.offset, bytes([1 << m.type.bit_position]))
    assert task.in_execve == 1
    # Members of anonymous unions are found like in C (kernfs_node.dir lives in one).
    assert symbols.struct_type("kernfs_node").has_member("dir")
    # Pointers: p.member is p->member; NULL deref is a GuestDataError.
    src.write_u64(base + t.member("real_parent").offset, POB + base)
    assert task.real_parent.pid == 1234 and int(task.real_parent) == POB + base
    assert prog.container_of(POB + base + t.member("tasks").offset, "task_struct", "tasks") == task
    src.write_u64(base + t.member("parent").offset, 0)
    with pytest.raises(GuestDataError, match="NULL"):
        task.parent.deref()
    # Strings are bounded.
    src.write(0x30_0000, b"A" * 10000)
    assert prog.read_cstring(POB + 0x30_0000, 100) == b"A" * 100


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 30), cut=st.data())
def test_a_list_cut_short_to_its_head_does_not_close_when_prev_is_checked(symbols, n, cut):
    """A `next` rewritten to point at the head makes a shorter list that is a list in every
    other respect; only the head's `prev` still names the true last node."""
    src = SparseSource(1 << 30)
    prog = fake_prog(symbols, src)
    pas = [0x10_0000 + i * 0x100 for i in range(n)]
    build_list(src, 0x8000, pas)
    assert list(list_for_each(prog, POB + 0x8000, check_prev=True)) == [POB + p for p in pas]
    if n == 0:
        return
    at = cut.draw(st.integers(0, n - 1))  # the head (0) or a node whose next now points home
    src.write_u64(([0x8000] + pas)[at], POB + 0x8000)
    assert len(list(list_for_each(prog, POB + 0x8000))) == at  # unchecked: shorter, quietly
    with pytest.raises(GuestDataError, match=f"does not close: it ends after {at} entries"):
        list(list_for_each(prog, POB + 0x8000, check_prev=True))
