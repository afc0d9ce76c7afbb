"""Properties over memory and symbol tables a hostile guest (or a broken ISF) may hand us:
whatever the bytes, a walk ends within its bounds with its result or one GuestDataError, a
checked ISF either holds what every read trusts or is one SymbolError. Never another
exception, never an unbounded loop."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ovm_offline.errors import GuestDataError, SymbolError
from ovm_offline.kernel.core.symbols import _check_isf_types
from ovm_offline.kernel.ds.rbtree import rb_inorder
from ovm_offline.kernel.ds.xarray import xa_for_each
from tests.support.memory import FAKE_POB, FakeKernelMemory

NODES = 24


@pytest.fixture(scope="module", params=["6.1", "6.12"])
def fake(request):
    return FakeKernelMemory(request.param)


def _pointers(fake, blocks: list[int]):
    """A pointer as a hostile guest writes one: NULL, one of our nodes (maybe misaligned or
    tagged), unmapped, non-canonical."""
    return st.one_of(
        st.just(0),
        st.sampled_from(blocks),
        st.builds(lambda b, k: b + k, st.sampled_from(blocks), st.integers(1, 7)),
        st.just(FAKE_POB + (1 << 40)),
        st.integers(0, (1 << 64) - 1),
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), limit=st.integers(1, 40))
def test_an_rbtree_of_any_pointers_is_walked_within_its_bounds_or_refused(fake, data, limit):
    node_size = fake.symbols.struct_type("rb_node").size
    base = fake.alloc(NODES * 64)
    blocks = [base + i * 64 for i in range(NODES)]
    left = fake.symbols.struct_type("rb_node").member("rb_left").offset
    right = fake.symbols.struct_type("rb_node").member("rb_right").offset
    for block in blocks:
        fake.src.write_u64(fake.phys(block) + left, data.draw(_pointers(fake, blocks)))
        fake.src.write_u64(fake.phys(block) + right, data.draw(_pointers(fake, blocks)))
    try:
        nodes = list(rb_inorder(fake.prog, blocks[0], name="tree", limit=limit))
    except GuestDataError as e:
        assert "\n" not in str(e) and "tree" in str(e)
        return
    assert len(nodes) == len(set(nodes)) <= limit
    assert node_size > 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), max_index=st.integers(0, (1 << 64) - 1), limit=st.integers(1, 300))
def test_an_xarray_of_any_slots_is_walked_in_index_order_within_its_bounds_or_refused(fake, data, max_index, limit):
    node_type = fake.symbols.struct_type("xa_node")
    slots = node_type.member("slots").offset
    shift = node_type.member("shift").offset
    nodes = [fake.alloc("xa_node") for _ in range(4)]
    entries = st.one_of(
        st.just(0),
        st.builds(lambda n: n | 2, st.sampled_from(nodes)),  # a node
        st.builds(lambda i: (i << 2) | 2, st.integers(0, 70)),  # a sibling, or a retry / zero entry
        st.builds(lambda v: v << 12, st.integers(1, 1 << 20)),  # a page pointer
        st.builds(lambda v: (v << 1) | 1, st.integers(0, 1 << 30)),  # a value entry
        st.integers(0, (1 << 64) - 1),
    )
    for node in nodes:
        fake.src.write(fake.phys(node) + shift, bytes([data.draw(st.sampled_from([0, 6, 12, 18, 64, 255]))]))
        for i in range(64):
            fake.src.write_u64(fake.phys(node) + slots + 8 * i, data.draw(entries) if i < 6 else 0)
    xa = fake.prog.struct("xarray", fake.alloc("xarray"))
    fake.src.write_u64(fake.phys(xa.address_) + xa.type_.member("xa_head").offset, nodes[0] | 2)
    try:
        found = list(xa_for_each(fake.prog, xa, max_index, limit=limit))
    except GuestDataError as e:
        assert "\n" not in str(e)
        return
    indices = [first for first, _, _ in found]
    assert indices == sorted(indices) and all(first <= max_index for first in indices)
    assert all(count >= 1 for _, count, _ in found)


_BASE_ISF = {
    "base_types": {
        "int": {"kind": "int", "size": 4, "signed": True, "endian": "little"},
        "pointer": {"kind": "int", "size": 8, "signed": False, "endian": "little"},
        "char": {"kind": "char", "size": 1, "signed": True, "endian": "little"},
    },
    "user_types": {
        "list_head": {
            "kind": "struct",
            "size": 16,
            "fields": {
                "next": {"offset": 0, "type": {"kind": "pointer", "subtype": {"kind": "struct", "name": "list_head"}}},
                "prev": {"offset": 8, "type": {"kind": "pointer", "subtype": {"kind": "struct", "name": "list_head"}}},
            },
        },
        "task": {
            "kind": "struct",
            "size": 40,
            "fields": {
                "pid": {"offset": 0, "type": {"kind": "base", "name": "int"}},
                "tasks": {"offset": 8, "type": {"kind": "struct", "name": "list_head"}},
                "comm": {
                    "offset": 24,
                    "type": {"kind": "array", "count": 16, "subtype": {"kind": "base", "name": "char"}},
                },
            },
        },
    },
    "symbols": {},
}

_VALUES = st.one_of(
    # fresh containers each draw: a shared just({}) gathered later mutations into itself, so
    # examples changed what the strategy drew (Hypothesis's FlakyStrategyDefinition)
    st.integers(-(1 << 65), 1 << 65),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
    st.builds(dict),
    st.builds(list),
)


@st.composite
def _mutated_isfs(draw):
    isf = copy.deepcopy(_BASE_ISF)
    for _ in range(draw(st.integers(1, 4))):
        where = draw(
            st.sampled_from(
                [
                    ("base_types", "int", "size"),
                    ("base_types", "pointer", "size"),
                    ("base_types", "char", "size"),
                    ("user_types", "task", "size"),
                    ("user_types", "list_head", "size"),
                    ("user_types", "task", "fields", "pid", "offset"),
                    ("user_types", "task", "fields", "tasks", "offset"),
                    ("user_types", "task", "fields", "comm", "offset"),
                    ("user_types", "list_head", "fields", "prev", "offset"),
                    ("user_types", "task", "fields", "pid"),
                    ("user_types", "task", "fields"),
                    ("user_types", "task"),
                ]
            )
        )
        node = isf
        for key in where[:-1]:
            node = node[key] if isinstance(node, dict) and isinstance(node.get(key), dict) else None
            if node is None:
                break
        if node is not None:
            node[where[-1]] = draw(_VALUES)
    return isf


@settings(max_examples=400, deadline=None)
@given(_mutated_isfs())
def test_a_checked_isf_holds_what_reads_trust_or_is_one_symbol_error(isf):
    from pathlib import Path

    try:
        _check_isf_types(isf, Path("mutated.json"))
    except SymbolError as e:
        assert "mutated.json" in str(e) and "\n" not in str(e)
        return
    for base in isf["base_types"].values():
        if base.get("kind") in ("int", "char"):
            assert base["size"] in (1, 2, 4, 8, 16)
    assert isf["base_types"]["pointer"]["size"] == 8
    for user in isf["user_types"].values():
        assert isinstance(user["size"], int) and user["size"] >= 0
        for field in user.get("fields", {}).values():
            assert isinstance(field["offset"], int) and 0 <= field["offset"] <= user["size"]
