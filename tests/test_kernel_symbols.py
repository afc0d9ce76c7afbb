"""ISF loading, lookup by banner, layouts, and the on-disk cache."""

from __future__ import annotations

import base64
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ovm_offline.errors import ExitCode, LayoutError, SymbolError
from ovm_offline.kernel.core import isf_cache as symmod
from ovm_offline.kernel.core.identify import open_kernel
from ovm_offline.kernel.core.ktypes import ArrayType, BitfieldType, IntType, PointerType, StructType
from ovm_offline.kernel.core.member_kinds import MEMBER_KINDS, check_member_kinds
from ovm_offline.kernel.core.symbols import CACHE_FORMAT, SymbolTable, find_isf_files, isf_banners, load_isf
from ovm_offline.sources import open_source
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm
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
    for f in cache.glob("*.isfc"):
        f.write_bytes(b"")  # nothing to read
    assert load_isf(p).struct_type("foo").size == 24
    for f in cache.glob("*.isfc"):
        whole = f.read_bytes()
        f.write_bytes(whole[:-1])  # cut inside the last bucket
    assert load_isf(p).struct_type("foo").size == 24
    for f in cache.glob("*.isfc"):
        assert f.read_bytes() == whole
        f.write_bytes(whole[:8] + (0xFFFFFFF0).to_bytes(4, "little") + whole[12:])  # an absurd header length
    assert load_isf(p).struct_type("foo").size == 24
    assert all(f.stat().st_size > 100 for f in cache.glob("*.isfc"))


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


@pytest.fixture(scope="module")
def real_isf_6_1():
    return symmod.json_loads(symmod.open_isf_bytes(ISF["6.1"]))


def _retype(struct: str, member: str, ref: dict):
    return lambda isf: isf["user_types"][struct]["fields"][member].update(type=ref)


def _retype_anonymous(struct: str, member: str):
    """Make `member`, which `struct` holds in an anonymous union, an int."""

    def mutate(isf: dict) -> None:
        for field in isf["user_types"][struct]["fields"].values():
            inner = isf["user_types"].get(field["type"].get("name"), {}).get("fields", {})
            if field.get("anonymous") and member in inner:
                inner[member]["type"] = {"kind": "base", "name": "int"}
                return
        raise AssertionError(f"{struct}.{member} is not in an anonymous member")

    return mutate


def _retype_untagged(struct: str, member: str, inner: str, ref: dict):
    """Retype `inner` of the untagged struct or union that `struct`.`member` is."""

    def mutate(isf: dict) -> None:
        untagged = isf["user_types"][struct]["fields"][member]["type"]["name"]
        assert untagged.startswith("unnamed_")
        isf["user_types"][untagged]["fields"][inner]["type"] = ref

    return mutate


def _retype_symbol(symbol: str, ref: dict):
    return lambda isf: isf["symbols"][symbol].update(type=ref)


def _shrink_symbol_type(symbol: str, size: int):
    return lambda isf: isf["user_types"][isf["symbols"][symbol]["type"]["name"]].update(size=size)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        # members of untagged structs and unions, named by their path from a tagged struct or symbol
        (
            _retype_untagged("tty_struct", "ctrl", "pgrp", {"kind": "base", "name": "int"}),
            "tty_struct.ctrl.pgrp is integer, where the walkers read pointer to struct pid",
        ),
        (
            _retype_untagged("timerfd_ctx", "t", "tmr", {"kind": "base", "name": "long int"}),
            "timerfd_ctx.t.tmr is integer, where the walkers read struct hrtimer",
        ),
        (
            _retype("tty_struct", "ctrl", {"kind": "base", "name": "int"}),
            "tty_struct.ctrl is integer, where the walkers read struct (unnamed)",
        ),
        (_retype_symbol("tk_core", {"kind": "base", "name": "int"}), "symbol tk_core is integer, where the walkers"),
        (_shrink_symbol_type("tk_core", 8), "@tk_core.timekeeper takes bytes 8..2"),
        # found by the fuzzer: each failed inside a walker with an AttributeError or TypeError
        (
            _retype("task_struct", "mm", {"kind": "base", "name": "int"}),
            "task_struct.mm is integer, where the walkers read pointer to struct mm_struct",
        ),
        (
            _retype("file", "f_pos", {"kind": "array", "count": 1 << 40, "subtype": {"kind": "base", "name": "char"}}),
            "file.f_pos is array of integer, where the walkers read integer",
        ),
        (
            _retype("task_struct", "files", {"kind": "pointer", "subtype": {"kind": "base", "name": "void"}}),
            "task_struct.files is pointer to void, where the walkers read pointer to struct files_struct",
        ),
        (
            _retype("vm_area_struct", "vm_file", {"kind": "pointer", "subtype": {"kind": "struct", "name": "nope"}}),
            "vm_area_struct.vm_file is pointer to missing struct nope, where the walkers read pointer to struct file",
        ),
        # a member reached through an anonymous union is checked too
        (_retype_anonymous("inode", "i_pipe"), "inode.i_pipe is integer, where the walkers read pointer to struct"),
        # found by the fuzzer: a 1-byte k_sigaction was read with a 1-byte stride, silently
        (lambda isf: isf["user_types"]["k_sigaction"].update(size=1), "k_sigaction.sa takes bytes 0..32 of a 1-byte"),
    ],
)
def test_an_isf_that_retypes_a_member_the_walkers_read_is_refused_naming_it(tmp_path, real_isf_6_1, mutate, needle):
    isf = json.loads(json.dumps(real_isf_6_1))
    mutate(isf)
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(isf))
    with pytest.raises(SymbolError, match=re.escape(needle)) as refused:
        load_isf(path, use_cache=False)
    assert str(path) in str(refused.value)
    # a member of another kind is a kernel laid out otherwise; one outside its struct, a broken ISF
    assert isinstance(refused.value, LayoutError) == ("takes bytes" not in needle)


def test_the_member_kinds_hold_for_every_pinned_kernel():
    """The table was made from these ISFs; a change to it that they fail is a wrong row."""
    for path in ISF.values():
        check_member_kinds(symmod.json_loads(symmod.open_isf_bytes(path)), path)
    assert len(MEMBER_KINDS) > 200


#: the member table each cache format was checked against: a cached ISF was checked once, so a
#: table that grows without a new CACHE_FORMAT would leave the new members unchecked in caches
MEMBER_TABLE_OF_FORMAT = {
    5: "5713c4fbea315e44",
    6: "87a1fa06c041eac5",
    7: "6450097618ddf091",
    8: "f0373fb6e9516bf2",
    9: "afdd657910798b51",
    10: "e56d05eb0ded1987",
    11: "e3c5723b1ea81c86",
    12: "ba774885370561d7",
    13: "04798872deb7dc01",
    14: "db298de6b8e2d404",
    15: "db298de6b8e2d404",
    16: "11f9ec60cebe1cf6",
    17: "4f2211d662b23f20",
    18: "b957659120819f7c",
    19: "e9b92ebcc872045a",
    20: "b8a44fb57f1ccfc3",
    21: "138560b90707d153",
    22: "0f7eecc60ebfc7fe",
    23: "abb3fd2edd791d3f",
    24: "896061ee9f52c0d4",
    25: "3ad7c4fe8321d695",
    26: "91e38134e0224cd0",
    27: "f8c3bf2dcc4ec698",
    28: "47fba7efa6b50659",
    29: "270cbaf0aa9717db",
    30: "4f85b1159e36767c",
}


def test_a_changed_member_table_comes_with_a_new_cache_format():
    digest = hashlib.sha256(repr(sorted(MEMBER_KINDS.items())).encode()).hexdigest()[:16]
    assert MEMBER_TABLE_OF_FORMAT.get(CACHE_FORMAT) == digest, (
        f"member_kinds.py changed: raise CACHE_FORMAT and record {digest!r} for it here"
    )


def test_enumerators_are_found_by_name_alone_in_every_pinned_isf():
    """Anonymous enums (dwarf2json's unnamed_<hash>) have no name to ask by: the walkers ask
    for their enumerators by name, and get what the ISF says, through the cache or without."""
    for kernel, path in ISF.items():
        isf = symmod.json_loads(symmod.open_isf_bytes(path))
        has_udp_flags = "udp_flags" in isf["user_types"]["udp_sock"]["fields"]  # corkflag before
        has_inet_flags = "inet_flags" in isf["user_types"]["inet_sock"]["fields"]  # bit-fields before
        for table in (load_isf(path), SymbolTable(symmod.DictReader(isf), path)):
            assert (table.enumerator("UDP_FLAGS_CORK") is not None) == has_udp_flags, kernel
            assert (table.enumerator("INET_FLAGS_FREEBIND") is not None) == has_inet_flags, kernel
            assert table.enumerator("CGRP_ROOT_NS_DELEGATE") == 1 << 3, kernel
            assert table.enumerator("no_such_enumerator") is None
    cgroup_local_events = {k: load_isf(p).enumerator("CGRP_ROOT_MEMORY_LOCAL_EVENTS") for k, p in ISF.items()}
    assert cgroup_local_events == {
        "5.10": 1 << 5,
        "6.1": 1 << 17,
        "6.1-rt": 1 << 17,
        "6.12": 1 << 17,
        "7.2": 1 << 17,
    }  # the enum grew
    assert symmod.enumerators({"enums": {"a": {"constants": {"X": 1}}, "b": {"constants": {"X": 2, "Y": 3}}}}) == {
        "X": None,
        "Y": 3,
    }


def _write_mutated_isf(directory: Path, kernel: str, mutate) -> Path:
    isf = symmod.json_loads(symmod.open_isf_bytes(ISF[kernel]))
    mutate(isf)
    path = directory / "mutated.json"
    path.write_text(json.dumps(isf))
    return path


@pytest.mark.guest
def test_an_isf_retyping_a_member_is_said_and_skipped_and_the_result_is_unchanged(recording, tmp_path):
    """The ISF with task_struct.mm made an int is searched first (--symbols) and refused by
    name; the bundled ISF of the same kernel lists the same processes."""
    rec = recording("6.1", "counter")
    bad = _write_mutated_isf(tmp_path, "6.1", _retype("task_struct", "mm", {"kind": "base", "name": "int"}))
    plain = ovm("ps", str(rec.elf), "--json")
    mutated = ovm("ps", str(rec.elf), "--json", "--symbols", str(tmp_path))
    assert plain.returncode == 0 and mutated.returncode == 0, mutated.stderr
    assert mutated.stdout == plain.stdout
    assert mutated.stderr.strip() == (
        f"ovm-offline: warning: the ISF {bad} loaded, but the kernel it describes has a layout not supported: "
        "task_struct.mm is integer, where the walkers read pointer to struct mm_struct (README: Supported kernels); skipped"
    )


@pytest.mark.guest
def test_the_isf_of_a_kernel_laid_out_as_the_walkers_do_not_know_is_said_so_not_missing(recording, tmp_path):
    """Where the only ISF of the guest's kernel describes a layout the walkers do not know,
    the error says that, with its own exit code: not "no ISF matches, make one with
    dwarf2json", which sent a user with the right ISF away to make another."""
    rec = recording("6.1", "counter")
    bad = _write_mutated_isf(tmp_path, "6.1", _retype("task_struct", "mm", {"kind": "base", "name": "int"}))
    expected = (
        f"the ISF {bad} loaded, but the kernel it describes has a layout not supported: task_struct.mm is integer"
    )
    with open_source(rec.elf) as source:
        for only in ({"isf": bad}, {"symbol_dirs": [tmp_path], "include_default_symbols": False}):
            with pytest.raises(LayoutError) as refused:
                open_kernel(source, use_cache=False, **only)
            assert str(refused.value).startswith(expected) and "dwarf2json" not in str(refused.value)
            assert refused.value.exit_code == ExitCode.LAYOUT == 9


def test_debian_unstables_7_2_isf_loads_and_an_older_walker_table_would_refuse_it():
    """7.2's layouts (mm_flags_t, memdesc_flags_t, rseq_data, ...) are in the member table; a
    table that knew only the integer mm->flags refuses the ISF as a layout, naming the member."""
    path = ISF["7.2"]
    load_isf(path, use_cache=False)
    isf = symmod.json_loads(symmod.open_isf_bytes(path))
    saved = MEMBER_KINDS["mm_struct.flags"]
    MEMBER_KINDS["mm_struct.flags"] = ("integer",)
    try:
        with pytest.raises(LayoutError, match=r"layout not supported: mm_struct.flags is struct mm_flags_t, where"):
            check_member_kinds(isf, path)
    finally:
        MEMBER_KINDS["mm_struct.flags"] = saved


@pytest.mark.guest
@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_an_isf_without_a_namespace_its_kernel_has_is_refused_not_read_without_it(recording, tmp_path, kernel):
    """Found by the fuzzer: nsproxy.cgroup_ns removed (as a pre-4.6 kernel lacks it) made the
    images silently lack the cgroup namespace; the ISF still defines struct cgroup_namespace,
    so it is no such kernel."""
    rec = recording(kernel, "counter")
    symbols = tmp_path / "symbols"
    symbols.mkdir()
    _write_mutated_isf(symbols, kernel, lambda isf: isf["user_types"]["nsproxy"]["fields"].pop("cgroup_ns"))
    out = tmp_path / "images"
    result = ovm(
        "dump", str(rec.elf), "--pid", str(rec.manifest["root_pid"]), "-D", str(out), "--symbols", str(symbols)
    )
    assert result.returncode == ExitCode.SYMBOLS
    assert_one_line_failure(result, "struct nsproxy has no member 'cgroup_ns' in this ISF")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["symbols"]


def test_another_versions_cache_is_kept_while_it_is_used_and_pruned_after_a_week(cache, tmp_path):
    """Two ovm-offline versions sharing a cache directory once deleted each other's files on
    every run, so each run parsed the ISF again (330 MiB for 6.12): a fuzz case over 300 MiB."""
    theirs = [cache / f"{'0' * 64}-v{CACHE_FORMAT + 1}-cpython-311.isfc", cache / f"index-v{CACHE_FORMAT + 1}.json"]
    stale = [cache / f"{'1' * 64}-v{CACHE_FORMAT - 1}-cpython-311.isfc", cache / f"index-v{CACHE_FORMAT - 1}.json"]
    cache.mkdir(parents=True)
    for p in theirs + stale:
        p.write_bytes(b"x")
    week_ago = time.time() - symmod.PRUNE_AFTER_SECONDS - 60
    for p in stale:
        os.utime(p, (week_ago, week_ago))
    load_isf(tiny_isf(tmp_path / "t.json"))  # builds our cache, pruning as it does
    assert all(p.exists() for p in theirs) and not any(p.exists() for p in stale)
    assert (cache / f"index-v{CACHE_FORMAT}.json").exists()
