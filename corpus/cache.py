"""Where recorded outputs live, keyed by everything that produced them.

Layout: $OVM_CORPUS_CACHE (default <repo>/corpus/cache)/<kind>/<name>-<key>/. A directory is
complete only once its `.complete` marker exists; a crash leaves an incomplete one that the
next run discards, so readers never see half a recording.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent


def cache_root() -> Path:
    # an empty OVM_CORPUS_CACHE (as `OVM_CORPUS_CACHE= cmd` sets it) means the default, not the cwd
    root = Path(os.environ.get("OVM_CORPUS_CACHE") or CORPUS_DIR / "cache").resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:16]


def source_digest(*paths: Path) -> str:
    """Digest of files' contents: the recorder's code and inputs form part of every key."""
    return digest(*(p.name.encode() + b"\0" + p.read_bytes() for p in sorted(paths)))


def entry(kind: str, name: str, key: str) -> Path:
    return cache_root() / kind / f"{name}-{key}"


def is_complete(path: Path) -> bool:
    return (path / ".complete").exists()


def begin(path: Path) -> Path:
    """A fresh, empty directory for an entry being produced (an old incomplete one is removed)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def finish(path: Path) -> Path:
    (path / ".complete").write_text("")
    return path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock for producing `path`, so concurrent recorders (parallel test
    sessions, a developer and CI) wait for each other instead of clobbering one entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def siblings(path: Path) -> list[Path]:
    """Entries of the same kind and name under other keys (older inputs)."""
    name = path.name.rsplit("-", 1)[0]
    return [
        sibling
        for sibling in path.parent.glob(f"{name}-*")
        if sibling != path and sibling.is_dir() and sibling.name.rsplit("-", 1)[0] == name
    ]


def prune_siblings(path: Path) -> None:
    """Remove the siblings of an entry: recordings are hundreds of MiB each, and a changed
    input would otherwise leave every old one on disk. An entry another process holds the
    lock of is left alone."""
    for sibling in siblings(path):
        with open(sibling.parent / f".{sibling.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(sibling, ignore_errors=True)
        (sibling.parent / f".{sibling.name}.lock").unlink(missing_ok=True)
