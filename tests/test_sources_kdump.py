"""kdump sources: flattened records, headers, bitmaps/rank, page descriptors, every compression,
plain and flattened layouts, conversion to ELF, and hostile files."""

from __future__ import annotations

import io
import os
import random
import struct
import tempfile
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ovm_offline.errors import SourceError, UnreadablePageError
from ovm_offline.sources import ElfSource, KdumpSource, open_source
from ovm_offline.sources import kdump as kdump_module
from ovm_offline.sources.convert import kdump_to_elf
from ovm_offline.sources.elf import PN_XNUM
from ovm_offline.sources.kdump import BATCH_PAGES
from ovm_offline.sources.kdump_format import (
    DISK_DUMP_HEADER,
    FLAT_HEADER_SIZE,
    PAGE_DESC,
    PAGE_SIZE,
    Bitmap,
    FlattenedLayout,
    PageDesc,
    decompress_page,
    parse_disk_dump_header,
    parse_page_descs,
    parse_sub_header,
)
from ovm_offline.sources.notes import PR_REG_NAMES
from tests.support.kdump_writer import (
    FlatSink,
    KdumpContents,
    compress_page,
    unflatten,
    write_kdump,
)
from tests.support.notes_writer import build_note, build_prstatus

FILE_SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


class BytesReader:
    """ByteReader over an in-memory buffer."""

    def __init__(self, data: bytes, name: str = "mem") -> None:
        self.data, self.name, self.size = data, name, len(data)

    def pread(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise SourceError(f"{self.name}: out of range")
        return self.data[offset : offset + length]


# ==== flattened records ===========================================================================
@st.composite
def logical_pieces(draw) -> list[tuple[int, bytes]]:
    pieces = []
    offset = draw(st.integers(0, 100))
    for _ in range(draw(st.integers(1, 10))):
        data = draw(st.binary(min_size=1, max_size=200))
        pieces.append((offset, data))
        offset += len(data) + draw(st.sampled_from([0, 0, 1, 50]))
    return pieces


@settings(max_examples=200, deadline=None)
@given(logical_pieces(), st.integers(1, 64), st.randoms(use_true_random=False), st.data())
def test_flattened_records_round_trip(pieces, max_record, rnd, data):
    out = io.BytesIO()
    sink = FlatSink(out, max_record, shuffle=rnd)
    for offset, piece in pieces:
        sink.write_at(offset, piece)
    sink.finish(0)
    expected = bytearray(max(o + len(p) for o, p in pieces))
    for offset, piece in pieces:
        expected[offset : offset + len(piece)] = piece
    layout = FlattenedLayout(BytesReader(out.getvalue()))
    assert layout.size == len(expected)
    assert layout.pread(0, layout.size) == expected
    lo = data.draw(st.integers(0, len(expected) - 1))
    hi = data.draw(st.integers(lo, len(expected)))
    assert layout.pread(lo, hi - lo) == expected[lo:hi]
    with pytest.raises(SourceError):
        layout.pread(len(expected), 1)


def _flat(records: list[tuple[int, int, bytes]], end: bool = True) -> bytes:
    head = b"makedumpfile".ljust(16, b"\0") + struct.pack(">qq", 1, 1)
    body = b"".join(struct.pack(">qq", o, s) + d for o, s, d in records)
    return head.ljust(FLAT_HEADER_SIZE, b"\0") + body + (struct.pack(">qq", -1, -1) if end else b"")


@pytest.mark.parametrize(
    "stream, message",
    [
        (_flat([(0, 4, b"abcd")], end=False), "end marker"),
        (_flat([(0, 400, b"abcd")]), "beyond the end of the file"),
        (_flat([(-5, 4, b"abcd")]), "corrupt flattened record"),
        (_flat([(0, 4, b"abcd"), (2, 4, b"efgh")]), "overlap"),
        (_flat([(2**62, 4, b"abcd")]), "corrupt flattened record"),
        (_flat([])[:100], "truncated makedumpfile header"),
        (b"makedumpfile".ljust(16, b"\0") + struct.pack(">qq", 2, 1) + bytes(4096), "type 2"),
    ],
)
def test_bad_flattened_streams(stream, message):
    with pytest.raises(SourceError, match=message):
        FlattenedLayout(BytesReader(stream))


# ==== bitmaps =====================================================================================
def naive_runs(bits: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, b in enumerate(bits + [0]):
        if b and start is None:
            start = i
        if not b and start is not None:
            runs.append((start, i - start))
            start = None
    return runs


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=600), st.data())
def test_bitmap_rank_and_runs(data, draw):
    nbits = draw.draw(st.integers(1, len(data) * 8))
    bitmap = Bitmap(data, nbits)
    bits = [(data[i >> 3] >> (i & 7)) & 1 for i in range(nbits)]
    assert bitmap.count == sum(bits)
    for i in draw.draw(st.lists(st.integers(0, nbits), max_size=20)) + [0, nbits]:
        assert bitmap.rank(i) == sum(bits[:i])
        if i < nbits:
            assert bitmap.test(i) == bool(bits[i])
    assert list(bitmap.runs()) == naive_runs(bits)
    start = draw.draw(st.integers(0, nbits - 1))
    count = draw.draw(st.integers(0, nbits - start))
    assert bitmap.bits(start, count) == sum(b << k for k, b in enumerate(bits[start : start + count]))


_stretch = st.one_of(
    st.integers(1, 40).map(lambda n: b"\x00" * n),
    st.integers(1, 40).map(lambda n: b"\xff" * n),
    st.binary(min_size=1, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_stretch, min_size=1, max_size=30).map(b"".join), st.data())
def test_bitmap_runs_over_stretches_of_whole_bytes(data, draw):
    # runs() takes 0x00 and 0xff stretches whole and mixed bytes bit by bit: every way they meet
    nbits = draw.draw(st.integers(1, len(data) * 8))
    bits = [(data[i >> 3] >> (i & 7)) & 1 for i in range(nbits)]
    assert list(Bitmap(data, nbits).runs()) == naive_runs(bits)


def test_bitmap_runs_cross_scan_chunks():
    # runs() scans 1 MiB of bitmap at a time: a run over the boundary must come out whole
    nbits = 2 * 8 * (1 << 20) + 100
    value = ((1 << 300) - 1) << (8 * (1 << 20) - 150) | 1 | (1 << (nbits - 1))
    bitmap = Bitmap(value.to_bytes((nbits + 7) // 8, "little"), nbits)
    assert list(bitmap.runs()) == [(0, 1), (8 * (1 << 20) - 150, 300), (nbits - 1, 1)]
    assert bitmap.rank(nbits - 1) == 301


# ==== headers and descriptors ====================================================================
@settings(deadline=None)  # a loaded shared machine makes the 200 ms default flaky
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
        ),
        max_size=50,
    )
)
def test_page_desc_round_trip(descs):
    raw = b"".join(PAGE_DESC.pack(*d) for d in descs)
    assert parse_page_descs(raw) == [PageDesc(*d) for d in descs]


@settings(deadline=None)  # a loaded shared machine makes the 200 ms default flaky
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 2**32 - 1),
    st.integers(0, 0x7FFFFFFF),
    st.text("abcdefghijklmnopqrstuvwxyz_0123456789", max_size=64),
)
def test_disk_dump_header_fields(status, max_mapnr, nr_cpus, machine):
    uts = b"".join(f.encode().ljust(65, b"\0") for f in ("Linux", "", "", "", machine, ""))
    raw = DISK_DUMP_HEADER.pack(b"KDUMP   ", 6, uts, 11, 12, status, 4096, 2, 64, max_mapnr, 0, 0, 0, 0, nr_cpus)
    assert len(raw) == 464
    header = parse_disk_dump_header(raw, "t")
    assert (header.status, header.block_size, header.sub_hdr_size, header.bitmap_blocks) == (status, 4096, 2, 64)
    assert (header.max_mapnr, header.nr_cpus, header.timestamp_sec, header.timestamp_usec) == (
        max_mapnr,
        nr_cpus,
        11,
        12,
    )
    assert header.utsname[0] == "Linux" and header.utsname[4] == machine
    assert struct.unpack_from("<I", raw, 424)[0] == status  # the offsets the facts file gives
    assert struct.unpack_from("<I", raw, 440)[0] == max_mapnr


def test_sub_header_offsets():
    raw = struct.pack("<QIIQQQQQQQQQQQ", 1, 2, 3, 4, 5, 0x16E0, 0xCBE, 0x1068, 0x1338, 10, 11, 12, 13, 0x100000)
    sub = parse_sub_header(raw, "t")
    assert len(raw) == 104
    assert (sub.offset_vmcoreinfo, sub.size_vmcoreinfo, sub.offset_note, sub.size_note, sub.max_mapnr_64) == (
        0x16E0,
        0xCBE,
        0x1068,
        0x1338,
        0x100000,
    )
    with pytest.raises(SourceError):
        parse_sub_header(raw[:50], "t")


@pytest.mark.parametrize("method", ["zlib", "lzo", "snappy", "raw"])
def test_page_codecs(method):
    page = (b"page" * 512) + os.urandom(2048)
    flags = {"zlib": 1, "lzo": 2, "snappy": 4, "raw": 0}[method]
    assert decompress_page(compress_page(page, method), flags, PAGE_SIZE) == page
    with pytest.raises(ValueError):
        decompress_page(compress_page(page[:100], method), flags, PAGE_SIZE)


def test_hostile_snappy_length_is_refused_before_decompressing():
    with pytest.raises(ValueError, match="uncompressed length"):
        decompress_page(b"\xff\xff\xff\xff\x0f" + b"\0" * 20, 4, PAGE_SIZE)


# ==== whole dumps =================================================================================
@st.composite
def kdump_specs(draw):
    max_mapnr = draw(st.integers(1, 40000))
    existing: dict[int, bool] = {}
    pfn = draw(st.integers(0, max_mapnr - 1))
    while pfn < max_mapnr and len(existing) < 120:
        for p in range(pfn, min(max_mapnr, pfn + draw(st.integers(1, 40)))):
            existing[p] = draw(st.integers(0, 9)) > 0  # most pages dumped, some excluded
        pfn = p + 1 + draw(st.sampled_from([0, 1, 7, 3000]))
    pages = {}
    for p, dumped in existing.items():
        if not dumped:
            continue
        kind = draw(st.sampled_from(["zero", "text", "random", "mixed"]))
        if kind == "zero":
            pages[p] = bytes(PAGE_SIZE)
        elif kind == "text":
            pages[p] = (f"pfn {p:#x} ".encode() * PAGE_SIZE)[:PAGE_SIZE]
        elif kind == "random":
            pages[p] = draw(st.randoms(use_true_random=False)).randbytes(PAGE_SIZE)
        else:
            pages[p] = bytes(2048) + draw(st.randoms(use_true_random=False)).randbytes(2048)
    return max_mapnr, existing, pages


def bitmap_of(pfns, max_mapnr: int) -> bytes:
    value = 0
    for p in pfns:
        value |= 1 << p
    return value.to_bytes((max_mapnr + 7) // 8, "little")


def sample_notes(cpus: int = 2) -> bytes:
    notes = b"".join(
        build_note("CORE", 1, build_prstatus(i + 1, {name: i for name in PR_REG_NAMES})) for i in range(cpus)
    )
    return notes + build_note("VMCOREINFO", 0, b"OSRELEASE=6.1.0-test\nKERNELOFFSET=2b600000\n")


def build_kdump(
    path: Path, spec, compression: str, flattened: bool, max_record: int | None = None, shuffle=None
) -> None:
    max_mapnr, existing, pages = spec
    contents = KdumpContents(max_mapnr, bitmap_of(existing, max_mapnr), bitmap_of(pages, max_mapnr), sample_notes())
    with open(path, "wb") as out:
        write_kdump(out, contents, (pages[p] for p in sorted(pages)), compression, flattened, max_record, shuffle)


def expected_page(spec, pfn: int) -> bytes:
    _, existing, pages = spec
    return pages.get(pfn, bytes(PAGE_SIZE)) if pfn in existing else b""


@FILE_SETTINGS
@given(
    kdump_specs(),
    st.sampled_from(["zlib", "lzo", "snappy", "raw"]),
    st.booleans(),
    st.sampled_from([None, 1000, 4096, 20000]),
    st.booleans(),
    st.data(),
)
def test_kdump_round_trip(spec, compression, flattened, max_record, shuffle, data):
    max_mapnr, existing, pages = spec
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dump"
        build_kdump(
            path,
            spec,
            compression,
            flattened,
            max_record if flattened else None,
            random.Random(1) if shuffle and flattened else None,
        )
        with open_source(path) as src:
            assert isinstance(src, KdumpSource)
            assert src.format_name == f"kdump-{compression} ({'flattened' if flattened else 'plain'})"
            assert [(r.start // PAGE_SIZE, r.length // PAGE_SIZE) for r in src.runs()] == naive_runs(
                [int(p in existing) for p in range(max_mapnr)]
            )
            for pfn in existing:
                assert src.read(pfn * PAGE_SIZE, PAGE_SIZE) == expected_page(spec, pfn)
            for run in src.runs():
                whole = b"".join(
                    expected_page(spec, p) for p in range(run.start // PAGE_SIZE, (run.start + run.length) // PAGE_SIZE)
                )
                lo = data.draw(st.integers(0, run.length - 1))
                hi = data.draw(st.integers(lo, run.length))
                assert src.read(run.start + lo, hi - lo) == whole[lo:hi]
                sink = io.BytesIO()
                src.copy_to(run.start + lo, hi - lo, sink)
                assert sink.getvalue() == whole[lo:hi]
            absent = next((p for p in range(max_mapnr + 1) if p not in existing), None)
            with pytest.raises(SourceError, match="not in the dump"):
                src.read(absent * PAGE_SIZE, 1)
            assert [v.rip for v in src.vcpus()] == [0, 1]
            assert src.vmcoreinfo() == {"OSRELEASE": "6.1.0-test", "KERNELOFFSET": "2b600000"}


@st.composite
def long_run_specs(draw):
    """One run of several decode batches: mostly zero (shared, excluded or stored zeros) with
    pages of data scattered alone and in clusters, so batches split into data and zero pieces."""
    max_mapnr = draw(st.integers(2 * BATCH_PAGES + 1, 4 * BATCH_PAGES))
    rnd = random.Random(draw(st.integers(0, 2**32)))  # thousands of pages: too many draws to shrink
    existing = {p: rnd.random() > 0.1 for p in range(max_mapnr)}
    data_pages = set()
    for _ in range(rnd.randrange(13)):
        start = rnd.randrange(max_mapnr)
        data_pages |= set(range(start, min(max_mapnr, start + rnd.choice([1, 2, 15, 16, 17, 40]))))
    pages = {}
    for p, dumped in existing.items():
        if dumped:
            pages[p] = (rnd.randbytes(64) * 64) if p in data_pages else bytes(PAGE_SIZE)
    return max_mapnr, existing, pages


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_run_specs(), st.sampled_from(["zlib", "raw", "lzo"]), st.booleans(), st.integers(1, 3), st.data())
def test_long_runs_decode_the_same_on_any_number_of_cores(spec, compression, flattened, workers, data):
    """A run longer than a batch is decoded batch by batch, by threads when there are cores:
    copy_to (plain and sparse) and read give the pages in order whatever the number of cores."""
    max_mapnr, existing, pages = spec
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(kdump_module, "cores", lambda: workers)
        path = Path(tmp) / "dump"
        build_kdump(path, spec, compression, flattened)
        whole = b"".join(expected_page(spec, p) for p in range(max_mapnr))
        part = data.draw(st.integers(0, len(whole) - 1))
        ranges = ((0, len(whole)), (part, data.draw(st.integers(part, len(whole)))))
        with open_source(path) as src:
            assert [(r.start, r.length) for r in src.runs()] == [(0, len(whole))]
            for lo, hi in ranges:
                assert src.read(lo, hi - lo) == whole[lo:hi]
                sink = io.BytesIO()
                src.copy_to(lo, hi - lo, sink)
                assert sink.getvalue() == whole[lo:hi]
                with open(Path(tmp) / "sparse", "wb") as out:
                    src.copy_to(lo, hi - lo, out, sparse=True)
                    out.truncate(hi - lo)
                assert (Path(tmp) / "sparse").read_bytes() == whole[lo:hi]


@pytest.mark.parametrize("workers", [1, 3])
def test_a_page_that_does_not_decode_in_a_later_batch_stops_the_copy_there(tmp_path, monkeypatch, workers):
    """Damage in the third batch of a long run: SourceError naming its page, on one core or
    many, and no decoding thread is left behind."""
    monkeypatch.setattr(kdump_module, "cores", lambda: workers)
    count = 3 * BATCH_PAGES
    spec = (count, {p: True for p in range(count)}, {p: bytes([p % 251]) * PAGE_SIZE for p in range(count)})
    build_kdump(tmp_path / "dump", spec, "zlib", flattened=False)
    raw = bytearray((tmp_path / "dump").read_bytes())
    raw[-200:] = bytes(200)  # the last pages' compressed data
    (tmp_path / "dump").write_bytes(raw)
    threads = threading.active_count()
    sink = io.BytesIO()
    with open_source(tmp_path / "dump") as src, pytest.raises(SourceError, match="page at guest-physical 0x"):
        src.copy_to(0, count * PAGE_SIZE, sink)
    assert threading.active_count() == threads
    assert sink.getvalue() == b"".join(spec[2][p] for p in range(len(sink.getvalue()) // PAGE_SIZE))
    assert 2 * BATCH_PAGES * PAGE_SIZE <= len(sink.getvalue()) < count * PAGE_SIZE


def test_unflatten_gives_the_plain_layout(tmp_path):
    spec = (
        5000,
        {p: p % 5 != 0 for p in range(100, 400)},
        {p: bytes([p % 256]) * PAGE_SIZE for p in range(100, 400) if p % 5},
    )
    build_kdump(tmp_path / "flat", spec, "zlib", flattened=True, max_record=3000, shuffle=random.Random(2))
    build_kdump(tmp_path / "plain", spec, "zlib", flattened=False)
    unflatten(tmp_path / "flat", tmp_path / "unflat")
    assert (tmp_path / "unflat").read_bytes() == (tmp_path / "plain").read_bytes()
    with KdumpSource(tmp_path / "unflat") as src:
        assert src.format_name == "kdump-zlib (plain)"
        assert src.read(101 * PAGE_SIZE, 2) == bytes([101, 101])
        assert src.read(105 * PAGE_SIZE, 2) == bytes(2)  # excluded: defined as zero


def test_kdump_to_elf_round_trip(tmp_path):
    spec = (9000, {p: p % 7 != 0 for p in list(range(300)) + list(range(8000, 8999))}, {})
    spec[2].update(
        {
            p: (b"%d" % p) * (PAGE_SIZE // len(b"%d" % p)) + bytes(PAGE_SIZE % len(b"%d" % p))
            for p, d in spec[1].items()
            if d and p % 3
        }
    )
    spec[2].update({p: bytes(PAGE_SIZE) for p, d in spec[1].items() if d and p not in spec[2]})
    build_kdump(tmp_path / "dump", spec, "snappy", flattened=True)
    kdump_to_elf(tmp_path / "dump", tmp_path / "dump.elf")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with KdumpSource(tmp_path / "dump") as kd, ElfSource(tmp_path / "dump.elf") as elf:
        assert elf.runs() == kd.runs()
        assert elf.note_bytes() == kd.note_bytes()
        assert elf.vmcoreinfo() == kd.vmcoreinfo() and elf.vcpus() == kd.vcpus()
        for run in kd.runs():
            assert elf.read(run.start, run.length) == kd.read(run.start, run.length)


def test_kdump_to_elf_uses_pn_xnum_for_many_runs(tmp_path):
    max_mapnr = 2 * (PN_XNUM + 5)
    existing = {p: True for p in range(0, max_mapnr, 2)}  # every other page: one run each
    pages = {p: bytes([1 + p % 200]) * 16 + bytes(PAGE_SIZE - 16) for p in existing}
    build_kdump(tmp_path / "dump", (max_mapnr, existing, pages), "zlib", flattened=False)
    kdump_to_elf(tmp_path / "dump", tmp_path / "dump.elf")
    raw = (tmp_path / "dump.elf").read_bytes()[:64]
    assert struct.unpack_from("<H", raw, 56)[0] == PN_XNUM
    with ElfSource(tmp_path / "dump.elf") as elf:
        assert len(elf.runs()) == len(existing)
        assert elf.read((max_mapnr - 2) * PAGE_SIZE, 16) == bytes([1 + (max_mapnr - 2) % 200]) * 16
    for name in ("dump", "dump.elf"):  # 270 MB each; pytest keeps old tmp dirs
        (tmp_path / name).unlink()


def test_kdump_to_elf_failure_leaves_nothing(tmp_path):
    spec = (100, {p: True for p in range(10)}, {p: bytes(2048) + os.urandom(2048) for p in range(10)})
    build_kdump(tmp_path / "dump", spec, "zlib", flattened=False)
    raw = bytearray((tmp_path / "dump").read_bytes())
    raw[-100:] = bytes(100)  # damage the last page's compressed data
    (tmp_path / "dump").write_bytes(raw)
    with pytest.raises(SourceError, match="zlib"):
        kdump_to_elf(tmp_path / "dump", tmp_path / "out.elf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump"]


def test_wrong_architecture_and_block_size(tmp_path):
    spec = (100, {1: True}, {1: bytes(PAGE_SIZE)})
    max_mapnr, existing, pages = spec
    contents = KdumpContents(max_mapnr, bitmap_of(existing, max_mapnr), bitmap_of(pages, max_mapnr), machine="aarch64")
    with open(tmp_path / "arm", "wb") as out:
        write_kdump(out, contents, [pages[1]], "zlib", flattened=False)
    with pytest.raises(SourceError, match="aarch64"):
        open_source(tmp_path / "arm")
    build_kdump(tmp_path / "bs", spec, "zlib", flattened=False)
    raw = bytearray((tmp_path / "bs").read_bytes())
    struct.pack_into("<I", raw, 428, 65536)
    (tmp_path / "bs").write_bytes(raw)
    with pytest.raises(SourceError, match="block size 65536"):
        open_source(tmp_path / "bs")


@pytest.mark.parametrize(
    "offset, fmt, value, message",
    [
        (432, "<I", 0, "sub header"),  # sub_hdr_size
        (436, "<I", 3, "bitmap blocks"),  # odd bitmap_blocks
        (436, "<I", 2**30, "bitmaps"),  # bitmaps beyond the file
        (4096 + 96, "<Q", 0, "max_mapnr"),  # max_mapnr_64
        (4096 + 96, "<Q", 2**50, "max_mapnr"),
        (4096 + 56, "<Q", 2**40, "note area"),  # size_note
    ],
)
def test_corrupt_kdump_headers(tmp_path, offset, fmt, value, message):
    spec = (100, {p: True for p in range(10)}, {p: bytes(PAGE_SIZE) for p in range(10)})
    build_kdump(tmp_path / "dump", spec, "zlib", flattened=False)
    raw = bytearray((tmp_path / "dump").read_bytes())
    struct.pack_into(fmt, raw, offset, value)
    (tmp_path / "dump").write_bytes(raw)
    with pytest.raises(SourceError, match=message) as info:
        open_source(tmp_path / "dump")
    assert str(info.value).startswith(str(tmp_path / "dump")) and "\n" not in str(info.value)


def test_truncated_kdumps(tmp_path):
    spec = (3000, {p: True for p in range(0, 2000, 3)}, {p: os.urandom(PAGE_SIZE) for p in range(0, 2000, 3)})
    for flattened in (True, False):
        build_kdump(tmp_path / "dump", spec, "zlib", flattened)
        raw = (tmp_path / "dump").read_bytes()
        for cut in (0, 10, 500, 4096, 5000, 9000, 20000, len(raw) // 2, len(raw) - 17, len(raw) - 1):
            (tmp_path / "cut").write_bytes(raw[:cut])
            with pytest.raises(SourceError):
                with open_source(tmp_path / "cut") as src:
                    for run in src.runs():
                        src.copy_to(run.start, run.length, io.BytesIO())


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_corrupt_kdumps_only_raise_source_error(data):
    spec = data.draw(kdump_specs())
    compression = data.draw(st.sampled_from(["zlib", "lzo", "snappy", "raw"]))
    flattened = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dump"
        build_kdump(path, spec, compression, flattened, max_record=2048 if flattened else None)
        raw = bytearray(path.read_bytes())
        # aim most flips at the headers, bitmaps and descriptors, some anywhere
        hot = min(len(raw), data.draw(st.sampled_from([600, 4096 + 300, 20000, len(raw)])))
        for _ in range(data.draw(st.integers(1, 10))):
            pos = data.draw(st.integers(0, hot - 1))
            raw[pos] = data.draw(st.integers(0, 255))
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        path.write_bytes(raw)
        try:
            with open_source(path) as src:
                src.vcpus(), src.vmcoreinfo(), src.format_name
                for run in src.runs()[:20]:
                    size = min(run.length, 64 * PAGE_SIZE)
                    src.read(run.start, min(size, 3 * PAGE_SIZE))
                    src.copy_to(run.start, size, io.BytesIO())
        except SourceError as exc:
            assert "\n" not in str(exc)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_page_that_inflates_to_megabytes_is_refused_by_its_size(tmp_path, workers):
    """A hostile zlib page may inflate to about 4 MiB (zeros compress 1000 to 1): it is refused
    by its address and size, on one thread or several, where a batch is inflated at once."""
    count = 2 * BATCH_PAGES
    spec = (
        count,
        {p: True for p in range(count)},
        {p: (f"page {p} ".encode() * PAGE_SIZE)[:PAGE_SIZE] for p in range(count)},
    )
    build_kdump(tmp_path / "dump", spec, "zlib", flattened=False)
    raw = bytearray((tmp_path / "dump").read_bytes())
    with open_source(tmp_path / "dump") as src:
        # the last page: its data may move to the end of the file and stay in the pages' order
        desc_at = src.image.desc_offset + (count - 1) * PAGE_DESC.size
    bomb = zlib.compress(bytes(4 << 20), 9)
    assert len(bomb) <= PAGE_SIZE
    struct.pack_into("<QII", raw, desc_at, len(raw), len(bomb), PageDesc(*PAGE_DESC.unpack_from(raw, desc_at)).flags)
    (tmp_path / "dump").write_bytes(bytes(raw) + bomb)
    with pytest.MonkeyPatch.context() as patch, open_source(tmp_path / "dump") as src:
        patch.setattr(kdump_module, "cores", lambda: workers)
        address = (count - 1) * PAGE_SIZE
        with pytest.raises(SourceError, match=f"page at guest-physical {address:#x}: page decodes to {4 << 20} bytes"):
            src.copy_to(0, count * PAGE_SIZE, io.BytesIO())


# ==== batches stored raw, written from the file ===================================================
def _raw_spec(count: int) -> tuple[int, dict[int, bool], dict[int, bytes]]:
    """memhog's shape: incompressible pages (QEMU stores them raw), every 16th a zero page (all
    pointed at QEMU's one raw zero page), and in the last batch pages zlib does shrink."""
    rnd = random.Random(7)
    pages = {p: rnd.randbytes(PAGE_SIZE) for p in range(count)}
    pages.update({p: bytes(PAGE_SIZE) for p in range(15, count, 16)})
    pages.update({p: bytes([p % 251]) * PAGE_SIZE for p in range(count - BATCH_PAGES + 3, count, 5)})
    return count, {p: True for p in range(count)}, pages


@pytest.mark.parametrize(("flattened", "max_record"), [(False, None), (True, None), (True, 4 * PAGE_SIZE), (True, 512)])
def test_a_batch_stored_raw_is_written_from_the_file_byte_for_byte(tmp_path, flattened, max_record):
    """QEMU's flattened records hold 4 pages: a raw batch is written as its records' bytes."""
    count = 3 * BATCH_PAGES
    spec = _raw_spec(count)
    build_kdump(tmp_path / "dump", spec, "zlib", flattened, max_record)
    whole = b"".join(spec[2][p] for p in range(count))
    with KdumpSource(tmp_path / "dump") as src:
        kinds = [type(src.image.batch(start, BATCH_PAGES, True)[0][1]) for start in range(0, count, BATCH_PAGES)]
        # records of 512 bytes: more than MAX_PIECES per batch, decoded page by page instead
        raw_kind = bytes if max_record == 512 else kdump_module.StoredRaw
        assert kinds == [raw_kind, raw_kind, bytes]
        assert src.image.batch(0, BATCH_PAGES)[0][1] != kdump_module.StoredRaw  # only when asked
        for lo, hi in [(0, count * PAGE_SIZE), (5 * PAGE_SIZE + 100, 2 * BATCH_PAGES * PAGE_SIZE + 7)]:
            with open(tmp_path / "out", "wb") as out:  # a file: writev
                out.write(b"head")
                src.copy_to(lo, hi - lo, out)
                out.write(b"tail")
            assert (tmp_path / "out").read_bytes() == b"head" + whole[lo:hi] + b"tail"
            sink = io.BytesIO()  # no descriptor: the views written one by one
            src.copy_to(lo, hi - lo, sink)
            assert sink.getvalue() == whole[lo:hi]
            assert src.read(lo, hi - lo) == whole[lo:hi]


def test_a_raw_batch_with_bytes_no_record_holds_is_decoded_page_by_page(tmp_path):
    """A flattened dump missing a record inside a raw batch: those bytes read as zeros, as
    makedumpfile -R leaves them, the same through both paths."""
    count = 2 * BATCH_PAGES
    spec = _raw_spec(count)
    build_kdump(tmp_path / "dump", spec, "zlib", flattened=True, max_record=4 * PAGE_SIZE)
    with KdumpSource(tmp_path / "dump") as src:
        first = src.image._stored_raw(list(PAGE_DESC.iter_unpack(src.image._desc_bytes(0, BATCH_PAGES))))
        assert first is not None
        victim = first.pieces[3][0]  # a record's data inside the batch: drop the record
    raw = (tmp_path / "dump").read_bytes()
    header_at = victim - 16
    start, size = struct.unpack(">qq", raw[header_at:victim])
    damaged = raw[:header_at] + raw[victim + size :]
    (tmp_path / "dump").write_bytes(damaged)
    with KdumpSource(tmp_path / "dump") as src:
        assert not isinstance(src.image.batch(0, BATCH_PAGES, True)[0][1], kdump_module.StoredRaw)
        out = io.BytesIO()
        src.copy_to(0, count * PAGE_SIZE, out)
        got = out.getvalue()
        assert got == src.read(0, count * PAGE_SIZE)
        expected = b"".join(spec[2][p] for p in range(count))
        assert got != expected and got.count(bytes(size)) and len(got) == len(expected)  # the gap: zeros


def test_container_pieces_of_the_flattened_layout():
    records = [(0, 100), (100, 50), (200, 10)]  # a gap from 150 to 200
    stream = io.BytesIO()
    sink = FlatSink(stream)
    for start, size in records:
        sink.write_at(start, bytes(size))
    sink.finish(210)
    layout = FlattenedLayout(BytesReader(stream.getvalue()))
    first = FLAT_HEADER_SIZE + 16
    assert layout.container_pieces(10, 120) == [(first + 10, 90), (first + 100 + 16, 30)]
    assert layout.container_pieces(140, 20) is None  # into the gap
    assert layout.container_pieces(205, 10) is None  # beyond the end
    assert layout.container_pieces(-1, 5) is None
    assert layout.container_pieces(200, 10) == [(first + 100 + 16 + 50 + 16, 10)]


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=300),
    spans=st.lists(st.tuples(st.integers(0, 299), st.integers(0, 120)), max_size=12),
    buffer_size=st.integers(1, 40),
    write_at_most=st.integers(1, 50),
    read_at_most=st.one_of(st.none(), st.integers(1, 50)),
)
def test_copy_pieces_writes_every_piece_in_order_through_short_reads_and_writes(
    tmp_path_factory, data, spans, buffer_size, write_at_most, read_at_most
):
    """The bulk path gathers pieces through one small buffer, reading pieces a few bytes apart
    in one preadv: pieces larger than it, pieces that fill it part way, pieces out of order,
    and reads and writes that move fewer bytes than asked all come out whole."""
    from ovm_offline.sources import _files

    pieces = [(min(o, len(data)), min(n, len(data) - min(o, len(data)))) for o, n in spans]
    pieces += pieces[: len(pieces) // 2]  # repeats, as QEMU's one stored zero page is
    directory = tmp_path_factory.mktemp("pieces")
    (directory / "in").write_bytes(data)
    real_write, real_preadv = os.write, os.preadv
    saved = getattr(_files._copy_buffers, "buffer", None)
    _files._copy_buffers.buffer = bytearray(buffer_size)
    try:
        with open(directory / "out", "wb") as out:
            out.write(b"<")  # buffered: must land first
            os.write = lambda fd, view: real_write(fd, view[:write_at_most])
            if read_at_most is not None:  # short reads into the first iovec only
                os.preadv = lambda fd, views, at: real_preadv(fd, [views[0][:read_at_most]], at)
            try:
                reader = _files.MappedFile(directory / "in")
                reader.write_pieces(pieces, out)
                reader.close()
            finally:
                os.write, os.preadv = real_write, real_preadv
            out.write(b">")
        assert (directory / "out").read_bytes() == b"<" + b"".join(data[o : o + n] for o, n in pieces) + b">"
    finally:
        _files._copy_buffers.buffer = saved


def test_a_file_that_shrinks_under_the_bulk_path_is_named(tmp_path):
    from ovm_offline.sources import _files

    (tmp_path / "in").write_bytes(bytes(100))
    fd = os.open(tmp_path / "in", os.O_RDONLY)
    try:
        with open(tmp_path / "out", "wb") as out, pytest.raises(SourceError, match="in: file shrank while being read"):
            _files.copy_pieces(fd, [(50, 100)], out.fileno(), str(tmp_path / "in"))
    finally:
        os.close(fd)


@pytest.mark.parametrize("flattened", [False, True])
def test_a_page_left_out_is_zeros_only_when_the_dump_level_left_out_only_zero_pages(tmp_path, flattened):
    """Pages that exist (bitmap 1) but were not dumped (bitmap 2): QEMU's dump level 1 leaves
    out zero pages only, so they read as zeros; makedumpfile's -d 31 leaves out cache, user and
    free pages too, whose content is not in the dump: named, never read as zeros."""
    data = {0: os.urandom(PAGE_SIZE), 1: os.urandom(PAGE_SIZE)}
    existing = bitmap_of({p: True for p in range(4)}, 16)
    for level, left_out in ((1, bytes(PAGE_SIZE)), (31, None)):
        path = tmp_path / f"d{level}"
        with open(path, "wb") as out:
            contents = KdumpContents(16, existing, bitmap_of(data, 16), dump_level=level)
            write_kdump(out, contents, [data[0], data[1]], "zlib", flattened=flattened)
        with KdumpSource(path) as src:
            assert src.read(0, 2 * PAGE_SIZE) == data[0] + data[1]
            if left_out is not None:
                assert src.read(2 * PAGE_SIZE, 2 * PAGE_SIZE) == left_out * 2
                continue
            for read in (lambda: src.read(3 * PAGE_SIZE, 8), lambda: src.copy_to(0, 4 * PAGE_SIZE, io.BytesIO())):
                with pytest.raises(UnreadablePageError, match=r"pfn 0x[23] was left out by the dumper \(dump level 31"):
                    read()


@pytest.mark.parametrize("moved", ["to the next page's data", "to the previous page's data", "before the data"])
def test_a_descriptor_pointed_at_another_pages_data_is_named_not_read_as_that_page(tmp_path, moved):
    """QEMU and makedumpfile write the shared zero page first, then every page's data in pfn
    order: a descriptor moved onto another page's data (which would decode cleanly, as that
    page) breaks the order and is refused by its pfn, by page() and by batch()."""
    data = {p: (f"page {p} ".encode() * PAGE_SIZE)[:PAGE_SIZE] for p in range(8)}
    data[2] = bytes(PAGE_SIZE)  # a zero page: the shared one, which may repeat anywhere
    build_kdump(tmp_path / "dump", (8, dict.fromkeys(range(8), True), data), "zlib", flattened=False)
    raw = bytearray((tmp_path / "dump").read_bytes())
    with open_source(tmp_path / "dump") as src:
        assert src.read(0, 8 * PAGE_SIZE) == b"".join(data[p] for p in range(8))
        descs = [PageDesc(*PAGE_DESC.unpack_from(raw, src.image.desc_offset + p * PAGE_DESC.size)) for p in range(8)]
        start = src.image.data_start
    target = {"to the next page's data": 5, "to the previous page's data": 3, "before the data": None}[moved]
    offset, size = (descs[target].offset, descs[target].size) if target is not None else (start - 64, descs[4].size)
    struct.pack_into("<QI", raw, src.image.desc_offset + 4 * PAGE_DESC.size, offset, size)
    (tmp_path / "dump").write_bytes(bytes(raw))
    # which of two pages whose data overlap is the altered one cannot be known: either is named
    named = {"to the next page's data": "0x4", "to the previous page's data": "0x[34]", "before the data": "0x[34]"}[
        moved
    ]
    with open_source(tmp_path / "dump") as src:
        assert src.read(0, 3 * PAGE_SIZE) == b"".join(data[p] for p in range(3))
        for read in (lambda: src.read(4 * PAGE_SIZE, 8), lambda: src.copy_to(0, 8 * PAGE_SIZE, io.BytesIO())):
            with pytest.raises(UnreadablePageError, match=rf"for pfn {named} .*: its data .* out of the order pages"):
                read()
