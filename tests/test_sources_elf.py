"""ELF64 core sources: program headers (incl. PN_XNUM), PT_LOAD by p_paddr, notes, bulk copies,
and hostile files."""

from __future__ import annotations

import io
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ovm_offline.errors import SourceError
from ovm_offline.sources import ElfSource, open_source
from ovm_offline.sources.elf import EHDR, PHDR, PN_XNUM
from ovm_offline.sources.elf_writer import core_layout
from ovm_offline.sources.notes import PR_REG_NAMES, PrStatus
from tests.support.notes_writer import build_note, build_prstatus, build_qemu_notes


def write_core(path: Path, runs: list[tuple[int, bytes]], notes: bytes = b"", force_xnum: bool = False) -> None:
    layout = core_layout(notes, [(start, len(data)) for start, data in runs], force_xnum)
    with open(path, "wb") as f:
        f.write(layout.header)
        for (_, data), offset in zip(runs, layout.segment_offsets):
            f.seek(offset)
            f.write(data)
        f.truncate(layout.total_size)


@st.composite
def memory_runs(draw, max_runs: int = 6) -> list[tuple[int, bytes]]:
    """Non-overlapping runs (some touching) of random bytes at random guest-physical addresses."""
    runs = []
    address = draw(st.integers(0, 1 << 20))
    for _ in range(draw(st.integers(1, max_runs))):
        data = draw(st.binary(min_size=1, max_size=3000))
        runs.append((address, data))
        address += len(data) + draw(st.sampled_from([0, 0, 1, 4096, 1 << 32]))
    return draw(st.permutations(runs))


def expected_runs(runs: list[tuple[int, bytes]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, data in sorted(runs):
        if merged and merged[-1][0] + merged[-1][1] == start:
            merged[-1][1] += len(data)
        else:
            merged.append([start, len(data)])
    return [tuple(m) for m in merged]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(memory_runs(), st.booleans(), st.data())
def test_elf_round_trip(runs, force_xnum, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "core"
        write_core(path, runs, force_xnum=force_xnum)
        with open_source(path) as src:
            assert isinstance(src, ElfSource)
            assert [(r.start, r.length) for r in src.runs()] == expected_runs(runs)
            if force_xnum:
                assert src.header.e_phnum == PN_XNUM
                assert len(src.program_headers) == len(runs) + 1
            for start, payload in runs:
                assert src.read(start, len(payload)) == payload
                lo = data.draw(st.integers(0, len(payload) - 1))
                hi = data.draw(st.integers(lo, len(payload)))
                assert src.read(start + lo, hi - lo) == payload[lo:hi]
                sink = io.BytesIO()  # no fileno: the mmap-slice path
                src.copy_to(start + lo, hi - lo, sink)
                assert sink.getvalue() == payload[lo:hi]
                with open(Path(tmp) / "out", "w+b") as out:  # a real file: the sendfile path
                    out.write(b"head")
                    src.copy_to(start + lo, hi - lo, out)
                    out.write(b"tail")
                    out.seek(0)
                    assert out.read() == b"head" + payload[lo:hi] + b"tail"
            last = max(start + len(payload) for start, payload in runs)
            with pytest.raises(SourceError, match="not in the dump"):
                src.read(last, 1)


def test_pn_xnum_with_more_than_65534_program_headers(tmp_path):
    runs = [(i * 8192, bytes([i % 251 + 1])) for i in range(PN_XNUM + 10)]
    write_core(tmp_path / "core", runs)
    raw = (tmp_path / "core").read_bytes()[: EHDR.size]
    assert struct.unpack_from("<H", raw, 56)[0] == PN_XNUM
    with ElfSource(tmp_path / "core") as src:
        assert len(src.runs()) == len(runs)
        assert src.read(12345 * 8192, 1) == bytes([12345 % 251 + 1])
        assert src.read((PN_XNUM + 9) * 8192, 1) == bytes([(PN_XNUM + 9) % 251 + 1])


def test_a_declared_table_of_millions_of_program_headers_is_refused_before_it_is_parsed(tmp_path):
    """Found by the fuzzer: a PN_XNUM count of millions in a big enough file was parsed whole
    (hundreds of MiB); past MAX_PROGRAM_HEADERS it is a corrupt header."""
    path = tmp_path / "core"
    write_core(path, [(0x1000, b"abcd")], force_xnum=True)
    raw = bytearray(path.read_bytes())
    shoff = struct.unpack_from("<Q", raw, 40)[0]
    struct.pack_into("<I", raw, shoff + 44, 3_000_000)  # section header 0's sh_info
    path.write_bytes(raw)
    os.truncate(path, 3_000_000 * PHDR.size + len(raw))  # the table fits in the (sparse) file
    with pytest.raises(SourceError, match="declares 3000000 program headers, more than 131072; corrupt header"):
        ElfSource(path)


def test_memsz_beyond_filesz_reads_zeros(tmp_path):
    path = tmp_path / "core"
    write_core(path, [(0x1000, b"abcd")])
    raw = bytearray(path.read_bytes())
    phoff = struct.unpack_from("<Q", raw, 32)[0]
    load = phoff + PHDR.size  # after the PT_NOTE
    fields = list(PHDR.unpack_from(raw, load))
    fields[6] = 10  # p_memsz
    PHDR.pack_into(raw, load, *fields)
    path.write_bytes(raw)
    with ElfSource(path) as src:
        assert [(r.start, r.length) for r in src.runs()] == [(0x1000, 10)]
        assert src.read(0x1000, 10) == b"abcd" + bytes(6)
        out = io.BytesIO()
        src.copy_to(0x1002, 8, out)
        assert out.getvalue() == b"cd" + bytes(6)


def test_notes_are_parsed(tmp_path):
    regs = {name: i for i, name in enumerate(PR_REG_NAMES)}
    notes = build_note("CORE", 1, build_prstatus(1, regs)) + build_note(
        "VMCOREINFO", 0, b"OSRELEASE=6.1\nKERNELOFFSET=1000\n"
    )
    write_core(tmp_path / "core", [(0, bytes(4096))], notes)
    with open_source(tmp_path / "core") as src:
        assert src.vcpus()[0].rip == regs["rip"]
        assert src.vmcoreinfo() == {"OSRELEASE": "6.1", "KERNELOFFSET": "1000"}
        assert src.note_bytes() == notes


def _patch(raw: bytes, offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(raw)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


@pytest.fixture
def small_core(tmp_path) -> bytes:
    write_core(
        tmp_path / "good",
        [(0, os.urandom(8192)), (0x100000, os.urandom(4096))],
        build_qemu_notes([], {"OSRELEASE": "x"}),
    )
    return (tmp_path / "good").read_bytes()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda raw: _patch(raw, 18, "<H", 3), "not x86-64"),  # EM_386
        (lambda raw: _patch(raw, 4, "<B", 1), "not a little-endian ELF64"),
        (lambda raw: _patch(raw, 16, "<H", 2), "not a core file"),
        (lambda raw: raw[:40], "too short for an ELF header"),
        (lambda raw: raw[:100], "program header table"),
        (lambda raw: raw[:-1], "PT_LOAD #2 .*truncated"),
        (lambda raw: _patch(raw, 56, "<H", 50000), "program header table"),
        (lambda raw: _patch(raw, 32, "<Q", 2**63), "program header table"),
        (lambda raw: _patch(raw, 54, "<H", 8), "program header size"),
        (lambda raw: _patch(raw, 56, "<H", PN_XNUM), "PN_XNUM"),
    ],
)
def test_bad_elf_headers(tmp_path, small_core, mutate, message):
    path = tmp_path / "bad"
    path.write_bytes(mutate(small_core))
    with pytest.raises(SourceError, match=message) as info:
        open_source(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_overlapping_loads_of_the_same_memory_are_joined_and_of_other_memory_refused(tmp_path):
    # vmcore-style ELFs show the kernel image again inside the direct map: same memory, twice
    path = tmp_path / "core"
    write_core(path, [(0x1000, b"A" * 100), (0x1010, b"A" * 10), (0x1050, b"A" * 20 + b"C" * 80), (0x2000, b"D")])
    with ElfSource(path) as src:
        assert [(r.start, r.length) for r in src.runs()] == [(0x1000, 0xB4), (0x2000, 1)]
        assert src.read(0x1000, 0xB4) == b"A" * 100 + b"C" * 80
    write_core(path, [(0x1000, b"A" * 100), (0x1010, b"B" * 10)])
    with pytest.raises(SourceError, match=r"PT_LOAD #\d and #\d both hold guest-physical 0x1010 \(\+0xa\)"):
        ElfSource(path)


def test_unknown_and_empty_files(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "junk").write_bytes(b"hello world" * 100)
    with pytest.raises(SourceError, match="empty"):
        open_source(tmp_path / "empty")
    with pytest.raises(SourceError, match="unknown format"):
        open_source(tmp_path / "junk")
    with pytest.raises(SourceError, match="cannot open"):
        open_source(tmp_path / "missing")
    with pytest.raises(SourceError, match="directory"):
        open_source(tmp_path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_corrupt_elf_only_raises_source_error(data):
    runs = data.draw(memory_runs(max_runs=3))
    notes = build_qemu_notes([(PrStatus(1, {}), None)][:0], {"OSRELEASE": "6.1"})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "core"
        write_core(path, runs, notes, force_xnum=data.draw(st.booleans()))
        raw = bytearray(path.read_bytes())
        header_end = len(core_layout(notes, [(s, len(d)) for s, d in runs]).header) + 64
        for _ in range(data.draw(st.integers(1, 6))):
            pos = data.draw(st.integers(0, min(len(raw), header_end) - 1))
            raw[pos] = data.draw(st.integers(0, 255))
        raw = raw[: data.draw(st.integers(0, len(raw)))]
        path.write_bytes(raw)
        try:
            with open_source(path) as src:
                src.vcpus(), src.vmcoreinfo()
                for run in src.runs()[:4]:
                    src.read(run.start, min(run.length, 1 << 16))
                    src.copy_to(run.start, min(run.length, 1 << 16), io.BytesIO())
        except SourceError as exc:
            assert "\n" not in str(exc)
