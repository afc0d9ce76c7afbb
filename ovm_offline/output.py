"""Image directories appear whole or not at all: written under a temporary name beside the
target and renamed into place when complete."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import OutputExistsError, OvmError

__all__ = ["atomic_directory", "check_target"]


def check_target(target: Path, force: bool) -> None:
    """Refuse an existing non-empty directory (or a non-directory) unless `force`."""
    if target.exists() and not force:
        if not target.is_dir():
            raise OutputExistsError(f"{target} exists and is not a directory; pass --force to replace it")
        if any(target.iterdir()):
            raise OutputExistsError(f"{target} exists and is not empty; pass --force to replace it")
    if not target.parent.is_dir():
        raise OvmError(f"{target.parent} does not exist")


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike[str], force: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory; on success it replaces `target`, on any error
    (or Ctrl-C) it is removed and `target` is left as it was."""
    target = Path(target).absolute()
    check_target(target, force)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old) if target.is_dir() else target.replace(old)
            tmp.rename(target)
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
