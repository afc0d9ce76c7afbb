"""The file-kind registry: every kind complete, every mark owned by one kind, and each kind's
module the one place that names it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import get_args

import pytest

from ovm_offline import filekinds
from ovm_offline.filekinds import FILE_KINDS, kind_named, new_writers
from ovm_offline.state import FileKindName, FileState

PACKAGE = Path(filekinds.__file__).parent


@pytest.mark.parametrize("kind", FILE_KINDS, ids=lambda k: k.name)
def test_every_kind_is_complete(kind):
    assert kind.marks, f"{kind.name}: no marks (how does the kernel mark it?)"
    assert kind.noun.startswith(("a ", "an ")), f"{kind.name}: refusals name it {kind.noun!r}"
    saved = kind.saved
    if saved is None:
        return
    assert saved.fd_type > 0, f"{kind.name}: no CRIU FdTypes value"
    writer = saved.writer()
    assert writer.fd_type == saved.fd_type and callable(writer.write) and callable(writer.images)
    if saved.state_type is not None or saved.extract is not None:
        assert saved.extract is not None, f"{kind.name}: a state type but no extractor"
        assert saved.state_type is not None and issubclass(saved.state_type, FileState)
        assert dataclasses.is_dataclass(saved.state_type)


def test_the_registry_names_every_kind_once():
    names = [k.name for k in FILE_KINDS]
    assert sorted(names) == sorted(set(names)) == sorted(get_args(FileKindName))
    assert all(kind_named(n).name == n for n in names)
    assert set(new_writers()) == {k.name for k in FILE_KINDS if k.saved is not None}


def test_no_two_kinds_share_a_mark():
    """Two rows with the same marks would make the second unreachable."""
    seen: dict[tuple, str] = {}
    for kind in FILE_KINDS:
        m = kind.marks
        for fops in m.fops or (None,):
            for mode in m.modes or (None,):
                key = (fops, mode, m.mount, m.name_prefix, m.pipefs, m.families)
                assert key not in seen, f"{kind.name} and {seen[key]} share the marks {key}"
                seen[key] = kind.name


def test_a_kind_is_named_only_in_its_own_module():
    """Adding a kind is one module and one registry row: within the package only the module
    that makes a kind's row names it, and outside it nothing tells open files apart by kind."""
    modules = {path.name: path.read_text() for path in PACKAGE.glob("*.py")}
    for kind in FILE_KINDS:
        naming = [name for name, text in modules.items() if f'"{kind.name}"' in text]
        assert len(naming) == 1, f"kind {kind.name!r} is named in {naming}"
    for path in PACKAGE.parent.rglob("*.py"):
        if PACKAGE in path.parents or "pb" in path.parts:
            continue
        text = path.read_text()
        for pattern in ("file.kind ==", "file.kind in", "f.kind ==", "f.kind in", "file.kind !="):
            assert pattern not in text, f"{path} branches on the kind of an open file ({pattern!r})"


def test_sockets_terminals_and_kinds_that_refer_to_other_fds_are_not_saved_in_flight():
    """A file in flight (SCM_RIGHTS) is restored by criu in the socket's owner and sent again
    before that process's other files are set up: a socket with a queue or peer of its own, a
    terminal of a session, or an epoll watching fds cannot be one."""
    refused = {k.name for k in FILE_KINDS if k.saved is not None and (k.saved.late or not k.saved.in_flight)}
    assert refused == {"unix", "inet", "tty", "eventpoll"}
