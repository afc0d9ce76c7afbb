"""The migration-stream reader (sources/migration.py) on streams built here in QEMU 7.2's layout:
the last copy of a page wins, zero pages clear what was there, other blocks and commands are
skipped, and a hostile stream (mutated, cut short, absurd lengths) ends in SourceError without
writing outside the block. QEMU's own streams are read in tests/test_sources_precopy.py."""

from __future__ import annotations

import io
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ovm_offline.errors import SourceError
from ovm_offline.sources import migration as m

PAGE = m.PAGE_SIZE
BLOCK_PAGES = 8


def _name(text: str) -> bytes:
    return bytes([len(text)]) + text.encode()


def _section_start(section_id: int, name: str) -> bytes:
    return bytes([m.SECTION_START]) + struct.pack(">I", section_id) + _name(name) + struct.pack(">II", 0, 4)


def _footer(section_id: int) -> bytes:
    return bytes([m.SECTION_FOOTER]) + struct.pack(">I", section_id)


def _page(block: str | None, index: int, data: bytes | None = None, fill: int = 0) -> bytes:
    flags = m.FLAG_PAGE if data is not None else m.FLAG_ZERO
    word = struct.pack(">Q", index * PAGE | flags | (m.FLAG_CONTINUE if block is None else 0))
    return word + (b"" if block is None else _name(block)) + (data if data is not None else bytes([fill]))


def stream(*parts: bytes, blocks=(("ram0", BLOCK_PAGES), ("vga.vram", 2))) -> bytes:
    """A stream: header, configuration, the RAM section's start (block list) and `parts` as
    one PART section each, an END section, then a device section."""
    total = sum(n * PAGE for _, n in blocks)
    setup = struct.pack(">Q", total | m.FLAG_MEM_SIZE) + b"".join(
        _name(name) + struct.pack(">Q", n * PAGE) for name, n in blocks
    )
    out = struct.pack(">II", m.QEVM_MAGIC, m.QEVM_VERSION)
    out += bytes([m.SECTION_CONFIGURATION]) + struct.pack(">I", 13) + b"pc-i440fx-7.2"
    out += _section_start(0, "ram") + setup + struct.pack(">Q", m.FLAG_EOS) + _footer(0)
    for part in parts:
        out += bytes([m.SECTION_PART]) + struct.pack(">I", 0) + part + struct.pack(">Q", m.FLAG_EOS) + _footer(0)
    out += bytes([m.SECTION_END]) + struct.pack(">I", 0) + struct.pack(">Q", m.FLAG_EOS) + _footer(0)
    out += bytes([m.SECTION_FULL]) + b"device state this reader never looks at"
    return out


def _read(tmp_path, data: bytes):
    """Read `data` as the stream of a guest whose RAM backend is BLOCK_PAGES pages."""
    path = tmp_path / "ram"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        result = m.read_ram_stream(io.BufferedReader(io.BytesIO(data)), "ram0", fd, max_block_bytes=BLOCK_PAGES * PAGE)
    finally:
        os.close(fd)
    return result, path.read_bytes()


def test_the_last_copy_of_each_page_wins_and_zero_pages_clear(tmp_path):
    a, b, c = (bytes([x]) * PAGE for x in (0xAA, 0xBB, 0xCC))
    data = stream(
        _page("ram0", 1, a) + _page(None, 2, b) + _page("vga.vram", 0, c) + _page("ram0", 3, c),
        _page("ram0", 1, b) + _page(None, 2, fill=0) + _page(None, 5, fill=0x7F),
    )
    result, ram = _read(tmp_path, data)
    assert result.complete and result.block_bytes == BLOCK_PAGES * PAGE
    pages = [ram[i * PAGE : (i + 1) * PAGE] for i in range(BLOCK_PAGES)]
    assert pages[1] == b and pages[2] == bytes(PAGE) and pages[3] == c and pages[5] == b"\x7f" * PAGE
    assert pages[0] == pages[4] == bytes(PAGE)
    assert (result.pages, result.zero_pages, result.resent) == (4, 2, 2)


@pytest.mark.parametrize(
    "bad,needle",
    [
        (_page("ram0", BLOCK_PAGES, bytes(PAGE)), "beyond RAM block ram0"),
        (_page(None, 0, bytes(PAGE)), "continues no block"),
        (struct.pack(">Q", m.FLAG_XBZRLE) + _name("ram0"), "XBZRLE, compression and multifd"),
        (struct.pack(">Q", 0x1000 | 0x80), "page flags 0x80"),
    ],
)
def test_what_it_does_not_know_is_one_line(tmp_path, bad, needle):
    with pytest.raises(SourceError, match=needle) as e:
        _read(tmp_path, stream(bad))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("blocks", [(("ram0", 1 << 40),), (("ram0", BLOCK_PAGES + 1),), (("ram0", 1), ("ram0", 1))])
def test_a_block_longer_than_the_backend_or_twice_is_refused_before_the_file_grows(tmp_path, blocks):
    with pytest.raises(SourceError, match="RAM block ram0 of"):
        _read(tmp_path, stream(blocks=blocks))
    assert (tmp_path / "ram").stat().st_size <= PAGE


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_mutated_stream_is_read_or_refused_and_never_written_outside_the_block(tmp_path_factory, data):
    good = stream(_page("ram0", 1, b"\x11" * PAGE) + _page(None, 6, fill=3), _page("ram0", 7, b"\x22" * PAGE))
    mutated = bytearray(good)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.integers(0, 255))
    mutated = mutated[: data.draw(st.integers(0, len(mutated)))]
    tmp = tmp_path_factory.mktemp("mutated")
    try:
        _, ram = _read(tmp, bytes(mutated))
    except SourceError as e:
        assert "\n" not in str(e)
        ram = (tmp / "ram").read_bytes()
    assert len(ram) <= BLOCK_PAGES * PAGE
