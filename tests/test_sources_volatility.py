"""The Volatility 3 kdump layer and stacker on synthetic dumps (the real-dump run of
`vol linux.pslist` is in test_sources_real.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("volatility3")

from volatility3.framework import contexts, exceptions  # noqa: E402
from volatility3.framework.layers import physical  # noqa: E402

from ovm_offline.sources import KdumpSource  # noqa: E402
from ovm_offline.sources.kdump_format import PAGE_SIZE  # noqa: E402
from ovm_offline.volatility.layers import KdumpLayer, KdumpStacker  # noqa: E402
from tests.support.kdump_writer import KdumpContents, write_kdump  # noqa: E402


def bitmap(pfns, max_mapnr: int) -> bytes:
    value = 0
    for p in pfns:
        value |= 1 << p
    return value.to_bytes((max_mapnr + 7) // 8, "little")


def make_dump(path: Path, flattened: bool) -> dict[int, bytes]:
    rnd = random.Random(5)
    existing = list(range(16, 48)) + list(range(100, 140))
    pages = {
        p: (b"%05d" % p) * 800 + bytes(PAGE_SIZE - 4000) if p % 3 else rnd.randbytes(PAGE_SIZE)
        for p in existing
        if p % 10
    }
    contents = KdumpContents(200, bitmap(existing, 200), bitmap(pages, 200))
    with open(path, "wb") as out:
        write_kdump(out, contents, (pages[p] for p in sorted(pages)), "zlib", flattened, max_record=3000)
    return {p: pages.get(p, bytes(PAGE_SIZE)) for p in existing}


def file_layer(path: Path) -> tuple[contexts.Context, str]:
    ctx = contexts.Context()
    ctx.config["file.location"] = path.resolve().as_uri()
    ctx.add_layer(physical.FileLayer(ctx, "file", "file"))
    return ctx, "file"


@pytest.mark.parametrize("flattened", [True, False])
def test_stacker_builds_a_layer_that_reads_like_the_source(tmp_path, flattened):
    expected = make_dump(tmp_path / "dump", flattened)
    ctx, base = file_layer(tmp_path / "dump")
    layer = KdumpStacker.stack(ctx, base)
    assert isinstance(layer, KdumpLayer)
    ctx.add_layer(layer)
    with KdumpSource(tmp_path / "dump") as src:
        for run in src.runs():
            assert layer.read(run.start, run.length) == src.read(run.start, run.length)
    assert layer.read(20 * PAGE_SIZE + 7, 10) == expected[20][7:17]
    assert layer.maximum_address == 140 * PAGE_SIZE - 1
    assert layer.is_valid(16 * PAGE_SIZE, 32 * PAGE_SIZE) and not layer.is_valid(15 * PAGE_SIZE, 2)
    with pytest.raises(exceptions.InvalidAddressException):
        layer.read(50 * PAGE_SIZE, 1)
    padded = layer.read(47 * PAGE_SIZE, 2 * PAGE_SIZE, pad=True)
    assert padded == expected[47] + bytes(PAGE_SIZE)
    maps = list(layer.mapping(40 * PAGE_SIZE, 70 * PAGE_SIZE, ignore_errors=True))
    assert [(m[0], m[1]) for m in maps] == [(40 * PAGE_SIZE, 8 * PAGE_SIZE), (100 * PAGE_SIZE, 10 * PAGE_SIZE)]
    assert all(m[4] == layer.name for m in maps)


def test_stacker_ignores_other_files(tmp_path):
    (tmp_path / "elf").write_bytes(b"\x7fELF" + bytes(5000))
    ctx, base = file_layer(tmp_path / "elf")
    assert KdumpStacker.stack(ctx, base) is None
    (tmp_path / "bad").write_bytes(b"KDUMP   " + bytes(100))  # right magic, truncated header
    ctx, base = file_layer(tmp_path / "bad")
    assert KdumpStacker.stack(ctx, base) is None
