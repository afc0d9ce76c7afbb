"""The dataclass method cache (ovm_offline/dataclass_code.py): classes made through it are the
classes Python makes, the cache is reused across runs, and a bad cache only costs the compile."""

from __future__ import annotations

import dataclasses
import inspect
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ovm_offline import dataclass_code


def _make_classes() -> tuple[type, type]:
    @dataclasses.dataclass(frozen=True)
    class Frozen:
        pid: int
        name: str = "init"
        children: tuple[int, ...] = ()

    @dataclasses.dataclass
    class Mutable:
        pages: list[int] = dataclasses.field(default_factory=list)
        flags: int = 0

    return Frozen, Mutable


def _behaviour(frozen: type, mutable: type) -> dict[str, object]:
    a, b = frozen(1, "sh", (2,)), frozen(1, "sh", (2,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.pid = 2  # type: ignore[attr-defined]
    m1, m2 = mutable(), mutable()
    m1.pages.append(1)
    return {
        "repr": (repr(a).split(".")[-1], repr(m1).split(".")[-1]),
        "eq": (a == b, a == frozen(2), m1 == m2),
        "hash": hash(a) == hash(b),
        "defaults": (frozen(5).name, m2.pages, m2.flags),
        "signatures": (str(inspect.signature(frozen)), str(inspect.signature(mutable))),
        "init annotations": (frozen.__init__.__annotations__, mutable.__init__.__annotations__),
        "unhashable": mutable.__hash__ is None,
    }


def test_classes_made_through_the_cache_behave_as_python_makes_them(tmp_path, monkeypatch):
    monkeypatch.setattr(dataclasses, "exec", exec, raising=False)  # the builtin
    plain = _behaviour(*_make_classes())
    cached_exec = dataclass_code._CompiledMethods(str(tmp_path / "code.marshal"))
    monkeypatch.setattr(dataclasses, "exec", cached_exec, raising=False)
    first = _behaviour(*_make_classes())  # compiled and kept
    assert cached_exec.added and cached_exec.codes
    cached_exec.added = False
    second = _behaviour(*_make_classes())  # every method from the cache
    assert not cached_exec.added
    # this module's `from __future__ import annotations` must not reach the generated methods:
    # __init__'s return annotation is the object None, not the string "None"
    assert [a["return"] for a in plain["init annotations"]] == [None, None]  # type: ignore[attr-defined]
    assert plain == first == second


def test_the_cli_writes_the_cache_once_and_the_next_run_reuses_it(tmp_path):
    """The CLI ends with os._exit, which skips atexit: it saves the cache itself."""
    env = {**os.environ, "OVM_CACHE_DIR": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    cache = tmp_path / "code" / Path(dataclass_code.cache_file()).name

    def run() -> None:
        subprocess.run([sys.executable, "-m", "ovm_offline", "--help"], env=env, capture_output=True, check=True)

    run()
    written = cache.stat()
    codes = marshal.loads(cache.read_bytes())
    assert len(codes) >= 10 and all(text.startswith("def __create_fn__(") for text in codes)
    run()
    assert cache.stat().st_ino == written.st_ino  # nothing new compiled: not written again


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00garbage", marshal.dumps({"def f(): pass": "not code"}), marshal.dumps([1, 2])],
    ids=["empty", "not marshal", "not code", "not a dict"],
)
def test_a_bad_cache_is_ignored_and_replaced(tmp_path, monkeypatch, content):
    path = tmp_path / "code.marshal"
    path.write_bytes(content)
    cached_exec = dataclass_code._CompiledMethods(str(path))
    assert cached_exec.codes == {}
    monkeypatch.setattr(dataclasses, "exec", cached_exec, raising=False)
    _behaviour(*_make_classes())
    cached_exec.save()
    assert dataclass_code._CompiledMethods(str(path)).codes.keys() == cached_exec.codes.keys()


def test_an_unwritable_cache_only_costs_the_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cached_exec = dataclass_code._CompiledMethods(str(blocker / "code" / "x.marshal"))
    monkeypatch.setattr(dataclasses, "exec", cached_exec, raising=False)
    _behaviour(*_make_classes())
    cached_exec.save()  # no directory can be made under a file: nothing raised, nothing left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_the_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(dataclass_code, "MAX_ENTRIES", 3)
    cached_exec = dataclass_code._CompiledMethods(str(tmp_path / "code.marshal"))
    namespace: dict[str, object] = {}
    for i in range(10):
        cached_exec(f"def f{i}(): return {i}", namespace, namespace)
    assert len(cached_exec.codes) == 3
    assert namespace["f9"]() == 9  # type: ignore[operator]  # past the bound: compiled, not kept


def test_a_full_cache_makes_room_for_this_runs_classes(tmp_path, monkeypatch):
    """Entries of classes no run defines any more (an older version's) give way to new ones."""
    monkeypatch.setattr(dataclass_code, "MAX_ENTRIES", 3)
    path = tmp_path / "code.marshal"
    stale = {f"def old{i}(): return {i}": compile(f"def old{i}(): return {i}", "<string>", "exec") for i in range(3)}
    path.write_bytes(marshal.dumps(stale))
    cached_exec = dataclass_code._CompiledMethods(str(path))
    namespace: dict[str, object] = {}
    cached_exec("def old0(): return 0", namespace, namespace)  # used this run: kept
    cached_exec("def new(): return 'new'", namespace, namespace)
    cached_exec.save()
    kept = marshal.loads(path.read_bytes())
    assert len(kept) == 3 and "def new(): return 'new'" in kept and "def old0(): return 0" in kept
