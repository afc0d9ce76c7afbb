"""ELF note streams: PRSTATUS, QEMU CPU state, VMCOREINFO — round trips and hostile input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ovm_offline.errors import SourceError
from ovm_offline.sources.notes import (
    PR_REG_NAMES,
    QEMU_GPR_NAMES,
    QEMU_SEGMENT_NAMES,
    PrStatus,
    QemuCpuState,
    Segment,
    iter_notes,
    parse_notes,
    parse_prstatus,
    parse_qemu_cpu_state,
    parse_vmcoreinfo,
)
from tests.support.notes_writer import build_note, build_prstatus, build_qemu_notes

u64 = st.integers(0, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)


@st.composite
def prstatus(draw) -> PrStatus:
    return PrStatus(draw(st.integers(-(2**31), 2**31 - 1)), {name: draw(u64) for name in PR_REG_NAMES})


@st.composite
def cpu_state(draw) -> QemuCpuState:
    return QemuCpuState(
        version=1,
        size=0,  # filled in by the writer
        gprs={name: draw(u64) for name in QEMU_GPR_NAMES},
        rip=draw(u64),
        rflags=draw(u64),
        segments={name: Segment(draw(u32), draw(u32), draw(u32), draw(u64)) for name in QEMU_SEGMENT_NAMES},
        cr=tuple(draw(u64) for _ in range(5)),
        kernel_gs_base=draw(st.none() | u64),
    )


vmcoreinfo_key = st.text(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ_()abcdefgh0123456789."), min_size=1, max_size=30)
vmcoreinfo_value = st.text(st.characters(blacklist_characters="\n\x00", blacklist_categories=("Cs",)), max_size=40)


@settings(deadline=None)  # a loaded shared machine makes the 200 ms default flaky
@given(
    st.lists(
        st.tuples(
            st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=20), u32, st.binary(max_size=300)
        ),
        max_size=8,
    )
)
def test_note_stream_round_trip(notes):
    stream = b"".join(build_note(name, ntype, desc) for name, ntype, desc in notes)
    parsed = list(iter_notes(stream, "t"))
    assert [(n.name, n.type, n.desc) for n in parsed] == [(name, ntype, desc) for name, ntype, desc in notes]


@settings(deadline=None)  # a loaded shared machine makes the 200 ms default flaky
@given(
    st.lists(st.tuples(prstatus(), cpu_state()), max_size=6),
    st.none() | st.dictionaries(vmcoreinfo_key, vmcoreinfo_value, max_size=10),
)
def test_qemu_notes_round_trip(cpus, vmcoreinfo):
    parsed = parse_notes(build_qemu_notes(cpus, vmcoreinfo), "t")
    assert len(parsed.vcpus) == len(cpus)
    for i, ((pr, state), vcpu) in enumerate(zip(cpus, parsed.vcpus)):
        assert parsed.prstatus[i] == pr
        got = parsed.cpu_states[i]
        assert got.gprs == state.gprs and got.segments == state.segments and got.cr == state.cr
        assert got.kernel_gs_base == state.kernel_gs_base
        assert got.size == (440 if state.kernel_gs_base is not None else 432)
        assert (vcpu.index, vcpu.cr3, vcpu.cr4, vcpu.rip, vcpu.rsp) == (
            i,
            state.cr[3],
            state.cr[4],
            state.rip,
            state.gprs["rsp"],
        )
        assert vcpu.gs_base == state.segments["gs"].base
        assert vcpu.kernel_gs_base == state.kernel_gs_base
    assert parsed.vmcoreinfo == vmcoreinfo


def test_qemu_cpu_state_offsets():
    """The layout the facts file gives: GPRs from +8, rip +136, segments from +152 (base at +16
    of each 24-byte segment), cr[] from +392 (CR3 at +416), kernel_gs_base at +432."""
    desc = bytearray(440)
    struct.pack_into("<II", desc, 0, 1, 440)
    struct.pack_into("<Q", desc, 8 + 6 * 8, 0x1111)  # rsp is the 7th GPR (rax rbx rcx rdx rsi rdi rsp)
    struct.pack_into("<Q", desc, 136, 0x2222)
    struct.pack_into("<Q", desc, 152 + 4 * 24 + 16, 0x3333)  # gs base
    struct.pack_into("<Q", desc, 416, 0x4000)
    struct.pack_into("<Q", desc, 424, 0x6F0)
    struct.pack_into("<Q", desc, 432, 0x5555)
    state = parse_qemu_cpu_state(bytes(desc), "t")
    assert state.gprs["rsp"] == 0x1111 and state.rip == 0x2222
    assert state.segments["gs"].base == 0x3333
    assert state.cr[3] == 0x4000 and state.cr[4] == 0x6F0
    assert state.kernel_gs_base == 0x5555


def test_prstatus_offsets():
    desc = bytearray(336)
    struct.pack_into("<i", desc, 32, 7)
    struct.pack_into("<Q", desc, 112 + 16 * 8, 0xABC)  # rip is pr_reg[16]
    struct.pack_into("<Q", desc, 112 + 22 * 8, 0xDEF)  # gs_base is pr_reg[22]
    pr = parse_prstatus(bytes(desc), "t")
    assert pr.pid == 7 and pr.regs["rip"] == 0xABC and pr.regs["gs_base"] == 0xDEF
    assert build_prstatus(7, pr.regs) == bytes(desc)


def test_vcpu_from_prstatus_only():
    regs = {name: i for i, name in enumerate(PR_REG_NAMES)}
    parsed = parse_notes(build_note("CORE", 1, build_prstatus(1, regs)), "t")
    (vcpu,) = parsed.vcpus
    assert vcpu.cr3 is None and vcpu.rip == regs["rip"] and vcpu.gs_base == regs["gs_base"]


def test_vmcoreinfo_text():
    info = parse_vmcoreinfo(
        b"OSRELEASE=6.1.0\nKERNELOFFSET=2b600000\nno equals sign\nSYMBOL(swapper_pg_dir)=ffffffff\n\0junk"
    )
    assert info == {"OSRELEASE": "6.1.0", "KERNELOFFSET": "2b600000", "SYMBOL(swapper_pg_dir)": "ffffffff"}


def test_trailing_zero_padding_is_accepted():
    stream = build_note("CORE", 1, b"x" * 4) + bytes(8)
    assert len(list(iter_notes(stream, "t"))) == 1


@pytest.mark.parametrize(
    "stream",
    [
        struct.pack("<III", 5, 1000, 1) + b"CORE\0\0\0\0",  # descriptor beyond the area
        struct.pack("<III", 0xFFFFFFFF, 0, 1),  # absurd name size
        build_note("CORE", 1, b"short"),  # PRSTATUS too short
        build_note("QEMU", 0, bytes(100)),  # QEMU state too short
        build_note("QEMU", 0, struct.pack("<II", 2, 432) + bytes(430)),  # unknown version
        b"\x01\x02\x03",  # truncated header with junk
    ],
)
def test_bad_notes_raise_source_error(stream):
    with pytest.raises(SourceError, match="^t: "):
        parse_notes(stream, "t")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupt_note_streams_only_raise_source_error(data):
    cpus = data.draw(st.lists(st.tuples(prstatus(), cpu_state()), min_size=1, max_size=2))
    stream = bytearray(build_qemu_notes(cpus, {"OSRELEASE": "6.1"}))
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(stream) - 1))
        stream[pos] = data.draw(st.integers(0, 255))
    stream = stream[: data.draw(st.integers(0, len(stream)))]
    try:
        parse_notes(bytes(stream), "t")
    except SourceError as exc:
        assert "\n" not in str(exc)
