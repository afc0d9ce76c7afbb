"""A flattened kdump's record index kept between runs (sources/kdump_index.py): used only for the
very file it was made from, never when it or the dump changed, and bounded in number."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from ovm_offline.sources import KdumpSource, kdump_index
from ovm_offline.sources._files import MappedFile
from ovm_offline.sources.kdump_format import PAGE_SIZE, index_flat_records
from tests.test_sources_kdump import BytesReader, build_kdump, expected_page


def _spec(seed: int, pages: int = 96):
    rnd = random.Random(seed)
    existing = {p: True for p in range(pages)}
    return pages, existing, {p: rnd.randbytes(PAGE_SIZE) for p in range(pages)}


def _dump(path: Path, seed: int, pages: int = 96) -> tuple[Path, tuple]:
    spec = _spec(seed, pages)
    # records of 1 KiB, out of order: several hundred records, as QEMU interleaves them
    build_kdump(path, spec, "raw", True, max_record=1024, shuffle=random.Random(seed))
    return path, spec


def _read_all(path: Path, spec) -> None:
    with KdumpSource(path) as src:
        for pfn in spec[1]:
            assert src.read(pfn * PAGE_SIZE, PAGE_SIZE) == expected_page(spec, pfn)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("OVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kdump_index, "MIN_RECORDS", 1)
    calls: list[str] = []

    def counted(reader):
        calls.append(reader.name)
        return index_flat_records(reader)

    monkeypatch.setattr(kdump_index, "index_flat_records", counted)
    return tmp_path / "cache" / "kdump-index", calls


def test_the_index_is_kept_and_the_next_open_uses_it(cache, tmp_path):
    directory, calls = cache
    path, spec = _dump(tmp_path / "a.kdump", 1)
    _read_all(path, spec)
    assert len(calls) == 1 and len(list(directory.glob("*.idx"))) == 1
    _read_all(path, spec)
    assert len(calls) == 1, "the kept index was not used"


def test_a_dump_written_again_is_indexed_again(cache, tmp_path):
    directory, calls = cache
    path, spec = _dump(tmp_path / "a.kdump", 1)
    _read_all(path, spec)
    path, spec = _dump(path, 2, pages=80)  # the same path and inode, other records
    _read_all(path, spec)
    assert len(calls) == 2 and len(list(directory.glob("*.idx"))) == 1


def test_a_damaged_index_is_not_used(cache, tmp_path):
    directory, calls = cache
    path, spec = _dump(tmp_path / "a.kdump", 1)
    _read_all(path, spec)
    (index,) = directory.glob("*.idx")
    data = bytearray(index.read_bytes())
    data[-5] ^= 0x40  # an offset's bits: the checksum no longer matches
    index.write_bytes(bytes(data))
    _read_all(path, spec)
    index.write_bytes(bytes(data[:100]))  # cut short
    _read_all(path, spec)
    assert len(calls) == 3


def test_an_index_whose_records_the_dump_does_not_have_is_not_used(tmp_path):
    path, _spec_ = _dump(tmp_path / "a.kdump", 1)
    reader = MappedFile(path)
    starts, sizes, offsets = index_flat_records(reader)
    assert kdump_index._headers_agree(reader, starts, sizes, offsets)
    moved = starts[:]
    moved[0] += 1
    assert not kdump_index._headers_agree(reader, moved, sizes, offsets)
    beyond = offsets[:]
    beyond[-1] = reader.size
    assert not kdump_index._headers_agree(reader, starts, sizes, beyond)


def test_at_most_max_files_indexes_are_kept_the_least_recently_used_dropped(cache, tmp_path, monkeypatch):
    directory, _calls = cache
    monkeypatch.setattr(kdump_index, "MAX_FILES", 2)
    dumps = [_dump(tmp_path / f"{n}.kdump", n) for n in range(3)]
    _read_all(*dumps[0])
    _read_all(*dumps[1])
    os.utime(next(directory.glob("*.idx")), ns=(1, 1))  # make one of the two look old ...
    kept = {p.name for p in directory.glob("*.idx")}
    _read_all(*dumps[0])  # ... then use dump 0's again: it is the recent one now
    _read_all(*dumps[2])
    remaining = {p.name for p in directory.glob("*.idx")}
    assert len(remaining) == 2
    first = Path(kdump_index.index_path(*_dev_ino(dumps[0][0]))).name
    assert first in remaining and first in kept


def _dev_ino(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def test_small_dumps_and_layers_are_not_kept_and_an_unwritable_cache_costs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("OVM_CACHE_DIR", str(tmp_path / "cache"))
    path, spec = _dump(tmp_path / "a.kdump", 1)
    _read_all(path, spec)  # fewer than MIN_RECORDS records
    assert not (tmp_path / "cache" / "kdump-index").exists()
    monkeypatch.setattr(kdump_index, "MIN_RECORDS", 1)
    data = path.read_bytes()
    assert kdump_index.flat_records(BytesReader(data)) == index_flat_records(BytesReader(data))
    assert not (tmp_path / "cache" / "kdump-index").exists()  # a layer has no file to key it by
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("OVM_CACHE_DIR", str(blocker))  # no directory can be made there
    _read_all(path, spec)
