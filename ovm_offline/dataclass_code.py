"""The compiled methods of our dataclasses, kept on disk between runs.

Python 3.11's ``dataclasses`` writes each class's ``__init__``, ``__repr__``, ``__eq__`` (and a
frozen class's ``__setattr__``, ``__delattr__`` and ``__hash__``) as source text and compiles
it at import: about 0.1 ms per method, 30 ms for the ~300 of one ``dump``, a seventh of its
fixed cost. The text depends only on the class's fields and options, so its compiled code is
kept in ``$OVM_CACHE_DIR/code/`` (or ``~/.cache/ovm-offline/code/``) as one marshal file per
Python bytecode version and reused: the same code objects ``compile`` would make, found by
their source text.

`install` shadows the builtin ``exec`` inside the ``dataclasses`` module only; an ``exec`` of
anything but source text, or of text not in the cache, behaves as the builtin does. A missing,
unreadable, corrupt or foreign cache only costs the compile. It is the same trust as Python's
own ``__pycache__``: the user's files, marshal loaded.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import marshal
import os
import sys
from types import CodeType
from typing import Any

from .user_cache import atomic_write, cache_root

__all__ = ["cache_file", "install", "save"]

#: at most this many entries are kept (ours need ~400 for all commands): an unbounded file would grow with
#: other programs' classes defined after ours in the same process
MAX_ENTRIES = 2000


def cache_file() -> str:
    # marshal's code objects are only good for the bytecode version that wrote them
    return os.path.join(cache_root(), "code", f"dataclasses-{sys.implementation.cache_tag}.marshal")


class _CompiledMethods:
    """``exec`` for the dataclasses module: source text compiled once per cache, not per run."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.codes = _load(path)
        self.used: set[str] = set()
        self.added = False

    def __call__(self, source: Any, globals: Any = None, locals: Any = None, /) -> None:
        if isinstance(source, str):
            code = self.codes.get(source)
            if code is None:
                # dont_inherit: compiled as dataclasses' own exec would, without this module's
                # ``from __future__ import annotations``
                code = compile(source, "<string>", "exec", dont_inherit=True)
                self._keep(source, code)
            self.used.add(source)
            source = code
        builtins.exec(source, globals, locals)

    def _keep(self, source: str, code: CodeType) -> None:
        if len(self.codes) >= MAX_ENTRIES:
            # full: an entry this run has not used (an older version's class) makes room, or a
            # cache filled by past upgrades would never take this version's classes
            stale = next((text for text in self.codes if text not in self.used), None)
            if stale is None:
                return
            del self.codes[stale]
        self.codes[source] = code
        self.added = True

    def save(self) -> None:
        """Write the cache if this run compiled something new (atomically: runs may race)."""
        if not self.added:
            return
        atomic_write(self.path, marshal.dumps(self.codes))  # unwritable: the next run compiles


def _load(path: str) -> dict[str, CodeType]:
    try:
        with open(path, "rb") as f:
            # loads of the whole file: marshal.load reads a file object piecemeal, 7x slower
            codes = marshal.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(codes, dict) or not all(isinstance(k, str) and isinstance(v, CodeType) for k, v in codes.items()):
        return {}
    return codes


def install() -> None:
    """Make ``dataclasses`` use the cache from now on (once per process)."""
    if isinstance(getattr(dataclasses, "exec", None), _CompiledMethods):
        return
    methods = _CompiledMethods(cache_file())
    dataclasses.exec = methods  # type: ignore[attr-defined]
    atexit.register(methods.save)


def save() -> None:
    """Write what this run compiled now: for an exit that skips ``atexit`` (the CLI's)."""
    methods = getattr(dataclasses, "exec", None)
    if isinstance(methods, _CompiledMethods):
        methods.save()
        methods.added = False
