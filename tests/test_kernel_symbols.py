"""ISF loading, lookup by banner, layouts, and the on-disk cache."""

from __future__ import annotations

import base64
import json
import lzma
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ovm_offline.errors import SymbolError
from ovm_offline.kernel.core import isf_cache as symmod
from ovm_offline.kernel.core.ktypes import ArrayType, BitfieldType, IntType, PointerType, StructType
from ovm_offline.kernel.core.symbols import CACHE_FORMAT, find_isf_files, isf_banners, load_isf
from tests.support.paths import ISF, REPO, SYMBOLS

BANNER = b"Linux version 9.9.9-test (me@here) (gcc) #1 SMP\n"


def tiny_isf(path: Path, size: int = 8, banner: bytes = BANNER) -> Path:
    isf = {
        "metadata": {"format": "6.2.0"},
        "base_types": {
            "int": {"size": 4, "signed": True, "kind": "int", "endian": "little"},
            "unsigned int": {"size": 4, "signed": False, "kind": "int", "endian": "little"},
            "char": {"size": 1, "signed": True, "kind": "char", "endian": "little"},
        },
        "user_types": {
            "foo": {
                "size": size,
                "kind": "struct",
                "fields": {
                    "a": {"offset": 0, "type": {"kind": "base", "name": "int"}},
                    "unnamed_field_0": {"offset": 4, "anonymous": True, "type": {"kind": "union", "name": "u1"}},
                    "next": {"offset": 8, "type": {"kind": "pointer", "subtype": {"kind": "struct", "name": "foo"}}},
                },
            },
            "u1": {
                "size": 4,
                "kind": "union",
                "fields": {
                    "b": {"offset": 0, "type": {"kind": "base", "name": "unsigned int"}},
                    "flags": {
                        "offset": 0,
                        "type": {
                            "kind": "bitfield",
                            "bit_position": 3,
                            "bit_length": 2,
                            "type": {"kind": "base", "name": "unsigned int"},
                        },
                    },
                },
            },
        },
        "enums": {"colour": {"size": 4, "base": "int", "constants": {"RED": 0, "BLUE": 7}}},
        "symbols": {
            "linux_banner": {
                "address": 0xFFFFFFFF81000000,
                "type": {"kind": "array", "count": 0, "subtype": {"kind": "base", "name": "char"}},
                "constant_data": base64.b64encode(banner + b"\0").decode(),
            },
            "the_foo": {"address": 0xFFFFFFFF81001000, "type": {"kind": "struct", "name": "foo"}},
        },
    }
    data = json.dumps(isf).encode()
    if path.name.endswith(".xz"):
        data = lzma.compress(data)
    path.write_bytes(data)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("OVM_CACHE_DIR", str(d))
    return d / "isf"


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv("OVM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert symmod.cache_dir() == tmp_path / "ovm-offline" / "isf"
    monkeypatch.setenv("OVM_CACHE_DIR", str(tmp_path / "x"))
    assert symmod.cache_dir() == tmp_path / "x" / "isf"


def test_tiny_isf_types(cache, tmp_path):
    p = tiny_isf(tmp_path / "t.json.xz")
    st = load_isf(p)
    assert st.banner == BANNER
    foo = st.struct_type("foo")
    assert foo.size == 8 and foo.member("a").offset == 0
    assert foo.member("b").offset == 4 and isinstance(foo.member("b").type, IntType)  # via anonymous union
    bf = foo.member("flags").type
    assert isinstance(bf, BitfieldType) and (bf.bit_position, bf.bit_length) == (3, 2)
    nxt = foo.member("next").type
    assert isinstance(nxt, PointerType) and nxt.target is foo
    assert st.enum_value("colour", "BLUE") == 7
    assert st.symbol_address("the_foo") == 0xFFFFFFFF81001000 and st.symbol_type("the_foo") is foo
    assert isinstance(st.symbol_type("linux_banner"), ArrayType)
    assert st.type("struct foo *").target is foo
    with pytest.raises(SymbolError, match="no member 'zzz'"):
        foo.member("zzz")
    with pytest.raises(SymbolError, match="no symbol 'nope'"):
        st.symbol_address("nope")
    assert (cache / f"index-v{CACHE_FORMAT}.json").exists()
    assert [f.name for f in cache.glob("*.isfc")] == [symmod.cache_file_name(symmod._sha256_file(p))]


def test_cache_invalidation(cache, tmp_path):
    p = tiny_isf(tmp_path / "t.json", size=8)
    assert load_isf(p).struct_type("foo").size == 8
    # Same file, new content: size/mtime change, so it is hashed again and rebuilt.
    tiny_isf(p, size=24, banner=b"Linux version 9.9.10-test (me@here) (gcc) #2 SMP\n")
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 10**9))
    st = load_isf(p)
    assert st.struct_type("foo").size == 24 and st.banner.startswith(b"Linux version 9.9.10-test")
    assert len(list(cache.glob("*.isfc"))) == 1  # the old one was deleted
    assert isf_banners([tmp_path], include_default=False) == [(p.resolve(), st.banner)]
    # A damaged cache file is rebuilt, never trusted.
    for f in cache.glob("*.isfc"):
        f.write_bytes(f.read_bytes()[:100])
    assert load_isf(p).struct_type("foo").size == 24


def test_unwritable_cache_still_works(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("OVM_CACHE_DIR", str(blocker))  # a file: no directory can be made there
    p = tiny_isf(tmp_path / "t.json")
    assert load_isf(p).struct_type("foo").size == 8


def test_bad_isf_is_symbol_error(cache, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(SymbolError, match="not valid JSON"):
        load_isf(p)
    p.write_text("[]")
    with pytest.raises(SymbolError, match="not a Volatility 3 ISF"):
        load_isf(p)


def test_find_isfs_by_banner():
    files = find_isf_files([], include_default=True)
    assert set(ISF.values()) <= set(files)
    banners = dict(isf_banners())
    assert banners[ISF["6.1"]].startswith(b"Linux version 6.1.0-56-cloud-amd64 (")
    assert banners[ISF["6.12"]].startswith(b"Linux version 6.12.117+deb12-cloud-amd64 (")
    # The vol-style parent directory works as well as symbols/linux itself.
    assert set(find_isf_files([SYMBOLS], include_default=False)) == set(find_isf_files([SYMBOLS / "linux"], False))


@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_layouts_match_raw_isf(kernel):
    raw = json.loads(lzma.open(ISF[kernel]).read())
    st = load_isf(ISF[kernel])
    for name in (
        "task_struct",
        "pid",
        "upid",
        "nsproxy",
        "css_set",
        "cgroup",
        "kernfs_node",
        "signal_struct",
        "cred",
        "mm_struct",
        "vm_area_struct",
        "pid_namespace",
    ):
        t = st.struct_type(name)
        d = raw["user_types"][name]
        assert t.size == d["size"]
        for mname, f in d["fields"].items():
            m = t.member(mname)
            assert m.offset == f["offset"], (name, mname)
            assert m.type.kind == {"base": "int", "union": "struct", "class": "struct"}.get(
                f["type"]["kind"], f["type"]["kind"]
            ) or m.type.kind in ("void", "float"), (name, mname)
    for sym in ("init_task", "init_pid_ns", "linux_banner", "init_top_pgt", "page_offset_base"):
        assert st.symbol_address(sym) == raw["symbols"][sym]["address"]
    assert st.struct_type("task_struct").member("comm").type.count == 16
    assert isinstance(st.struct_type("task_struct").member("tasks").type, StructType)


def test_warm_start_is_fast():
    """A fresh interpreter with a warm cache picks the ISF by banner and loads what
    listing processes needs in well under 0.5 s (imports excluded)."""
    load_isf(ISF["6.12"])  # make sure the cache is warm
    code = """
import time
from ovm_offline.kernel.core.symbols import isf_banners, load_isf
t = time.perf_counter()
want = [p for p, b in isf_banners() if b and b.startswith(b"Linux version 6.12.117")]
st = load_isf(want[0])
for s in ("task_struct", "pid", "upid", "signal_struct", "nsproxy", "css_set", "cgroup",
          "kernfs_node", "cred", "pid_namespace", "list_head", "ns_common", "net"):
    t_ = st.struct_type(s)
    for m in t_.member_names():
        t_.member(m)
for s in ("init_task", "init_pid_ns", "linux_banner", "init_top_pgt", "page_offset_base", "_text", "_end"):
    st.symbol_address(s)
print(time.perf_counter() - t)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    elapsed = float(out.stdout.strip())
    print(f"warm open+pick+load: {elapsed * 1000:.1f} ms")
    assert elapsed < 0.5


def test_an_isf_that_inflates_beyond_the_cap_is_refused_not_inflated_whole(tmp_path, monkeypatch):
    """A few KiB of xz that inflate to 64 MiB stand for one that inflates to GiBs."""
    monkeypatch.setattr(symmod, "MAX_ISF_BYTES", 8 << 20)
    bomb = tmp_path / "bomb.json.xz"
    with lzma.open(bomb, "wb") as f:
        for _ in range(64):
            f.write(b" " * (1 << 20))
    assert bomb.stat().st_size < 64 << 10
    with pytest.raises(SymbolError, match="larger than 8 MiB of JSON"):
        symmod.open_isf_bytes(bomb)
    ok = tiny_isf(tmp_path / "ok.json")
    assert json.loads(symmod.open_isf_bytes(ok))["metadata"]["format"] == "6.2.0"


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda isf: isf["base_types"]["int"].update(size=0), "base type 'int' (int) has size 0"),
        # found by the fuzzer: a 16-byte short once reached the image writer as a huge mode
        (lambda isf: isf["base_types"]["int"].update(size=16), "base type 'int' (int) has size 16"),
        (lambda isf: isf["base_types"].update(pointer={"size": 4, "kind": "int"}), "base type 'pointer'"),
        (lambda isf: isf["user_types"]["u1"]["fields"]["b"].update(offset=99), "u1.b is at offset 99, outside its 4"),
        (lambda isf: isf["user_types"]["foo"].update(size=-8), "type 'foo' has no valid size"),
    ],
)
def test_an_isf_whose_types_no_compiler_makes_is_refused_naming_the_type(tmp_path, mutate, needle):
    path = tiny_isf(tmp_path / "t.json")
    isf = json.loads(path.read_bytes())
    mutate(isf)
    path.write_text(json.dumps(isf))
    with pytest.raises(SymbolError, match=re.escape(needle)):
        load_isf(path, use_cache=False)


@pytest.mark.guest
def test_a_broken_isf_among_the_symbols_is_said_and_skipped(recording, tmp_path):
    rec = recording("6.1", "counter")
    (tmp_path / "broken.json").write_text('{"symbols": ')
    (tmp_path / "empty.json.xz").write_bytes(lzma.compress(b"{}"))
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "ps", str(rec.elf), "--symbols", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert any(f"{tmp_path / 'broken.json'} is not valid JSON" in w and w.endswith("skipped") for w in warnings)
    assert any(f"{tmp_path / 'empty.json.xz'} lacks symbols/user_types" in w for w in warnings)
    assert all(w.startswith("ovm-offline: warning: ") for w in warnings)
    assert " init" in result.stdout
