"""Image directories appear whole or not at all: written under a temporary name beside the
target and renamed into place when complete.

What may be replaced is narrow, because `-D` comes from a user who may have mistyped it: an
empty directory, or with --force a directory holding nothing but what an images directory
holds (image files and criu's logs). Never a file, a device, a FIFO or a symbolic link."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import INTERRUPTING_SIGNALS, OutputError, OutputExistsError, OvmError

__all__ = [
    "atomic_directory",
    "atomic_file",
    "check_file_target",
    "check_target",
    "remove_abandoned_partials",
    "scratch_directory",
]

log = logging.getLogger("ovm_offline")

#: what an images directory may hold besides images: criu's logs and statistics, and what a dump
#: taken with --accept-inconsistent-views says of the tree (dump.INCONSISTENT_VIEWS_FILE)
_IMAGES_DIR_FILE = re.compile(r"[\w.+-]+\.img|[\w.+-]+\.log|stats-(dump|restore)|ovm-offline-inconsistent-views\.txt")
_FULL_OR_READ_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


#: the link of an incremental dump to its parent (criu's CR_PARENT_LINK)
_PARENT_LINK = "parent"


def _not_images(target: Path) -> str | None:
    """What in directory `target` is not part of an images directory, if anything."""
    for entry in os.scandir(target):
        if entry.name == _PARENT_LINK and entry.is_symlink():
            continue
        if not entry.is_file(follow_symlinks=False) or not _IMAGES_DIR_FILE.fullmatch(entry.name):
            return entry.name
    return None


def check_target(target: Path, force: bool) -> None:
    """Refuse a target that exists and is not an empty directory, or with `force` one that is
    not an images directory; and a target whose parent does not exist."""
    try:
        st = target.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a name too long, a parent that is a file
        raise OvmError(f"{target}: cannot be an images directory: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OutputExistsError(f"{target} is a symbolic link; name the images directory itself")
        if not stat.S_ISDIR(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "a file")
            raise OutputExistsError(f"{target} exists and is {kind}, not a directory; it is never replaced")
        if any(target.iterdir()):
            if not force:
                raise OutputExistsError(f"{target} exists and is not empty; pass --force to replace it")
            stranger = _not_images(target)
            if stranger is not None:
                raise OutputExistsError(
                    f"{target} holds {stranger!r}, which is no image file: --force replaces only an images directory"
                )
    if not target.parent.is_dir():
        raise OvmError(f"{target.parent} does not exist")


def _partial_prefix(target: Path) -> str:
    return f".{target.name}.partial-"


def remove_abandoned_partials(target: Path) -> list[Path]:
    """Remove the temporary directories or files a killed run (SIGKILL, power loss) left
    beside `target`: those whose writer, named in the name, no longer runs."""
    removed = []
    pattern = re.compile(re.escape(_partial_prefix(target)) + r"(\d+)-\w+")
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            m = pattern.fullmatch(entry.name)
            if m is None or _running(int(m.group(1))):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            else:
                continue  # not something we make: left alone
            removed.append(Path(entry.path))
    return removed


def _remove_leftovers(target: Path) -> None:
    """remove_abandoned_partials(target), saying what it removed."""
    for path in remove_abandoned_partials(target):
        log.warning("removed %s, left by a run that was killed", path.name)


def check_file_target(target: Path, force: bool) -> None:
    """Refuse an output file that exists (without `force`), or that is anything but a regular
    file: a FIFO, a device, a socket, a directory or a symbolic link is never replaced."""
    try:
        st = target.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OvmError(f"{target}: cannot be written: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OutputExistsError(f"{target} is a symbolic link; it is never replaced: name the file itself")
        if stat.S_ISDIR(st.st_mode):
            raise OutputExistsError(f"{target} is a directory; it is never replaced")
        if not stat.S_ISREG(st.st_mode):
            raise OutputExistsError(f"{target} exists and is {_KINDS[stat.S_IFMT(st.st_mode)]}; it is never replaced")
        if not force:
            raise OutputExistsError(f"{target} exists; pass --force to replace it")
    if not target.parent.is_dir():
        raise OvmError(f"{target.parent} does not exist")


@contextlib.contextmanager
def atomic_file(target: str | os.PathLike[str], force: bool = False) -> Iterator[BinaryIO]:
    """Yield a new file beside `target`, written under a partial name; when the block ends it
    is synced and renamed to `target`, on any error or interruption removed. The partial name
    carries our pid, so a run killed with SIGKILL leaves a file the next run removes."""
    target = Path(target).absolute()
    check_file_target(target, force)
    _remove_leftovers(target)
    tmp: str | None = None
    try:
        with _signals_held():  # made and not yet known to be ours: a signal must wait
            fd, tmp = tempfile.mkstemp(prefix=f"{_partial_prefix(target)}{os.getpid()}-", dir=target.parent)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode of a new file
            yield out
            out.flush()
            os.fsync(out.fileno())
        with _signals_held():
            os.replace(tmp, target)
            tmp = None
    except OSError as exc:
        raise OutputError.writing(target, exc) from None
    finally:
        if tmp is not None:
            with _signals_held(), contextlib.suppress(OSError):
                os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    return True


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike[str], force: bool = False) -> Iterator[Path]:
    """Yield an empty temporary directory; on success it replaces `target`, on any error
    (or Ctrl-C, or SIGTERM, which the CLI turns into one) it is removed and `target` is left
    as it was."""
    if not os.fspath(target):
        raise OvmError("the images directory name is empty")
    target = Path(target).absolute()
    check_target(target, force)
    _remove_leftovers(target)
    tmp: Path | None = None
    try:
        with _signals_held():  # a signal now would leave the directory made and not yet ours
            tmp = Path(tempfile.mkdtemp(prefix=f"{_partial_prefix(target)}{os.getpid()}-", dir=target.parent))
        yield tmp
        os.chmod(tmp, 0o755)
        with _signals_held():  # ... or the old images moved away and the new not yet in place
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                target.rename(old)
                tmp.rename(target)
                shutil.rmtree(old)
            else:
                tmp.rename(target)
    except (OutputError, OSError) as exc:
        _remove(tmp)
        if isinstance(exc, OSError):
            if exc.errno not in _FULL_OR_READ_ONLY and not _about_output(exc, target):
                raise
            # before the partial directory was made, the fault is the target's place
            exc = OutputError.writing((exc.filename if tmp is not None else None) or tmp or target.parent, exc)
        # the file was written under the temporary directory's name: name it by the target's
        said = str(exc).replace(f"{tmp}{os.sep}", "").replace(str(tmp), target.name)
        raise OutputError(f"{target}: {said}; nothing was written") from None
    except BaseException:
        _remove(tmp)
        raise


@contextlib.contextmanager
def scratch_directory(target: str | os.PathLike[str], purpose: str) -> Iterator[Path]:
    """An empty directory beside `target` for what one run needs only while it runs (a
    pre-copy snapshot of guest RAM: the same file system as the images, and no copy of guest
    memory anywhere else), removed when it ends. It is named as partial output, so a later run
    removes it if this one is killed."""
    target = Path(target).absolute()
    tmp: Path | None = None
    try:
        with _signals_held():
            tmp = Path(tempfile.mkdtemp(prefix=f"{_partial_prefix(target)}{os.getpid()}-{purpose}", dir=target.parent))
        yield tmp
    except OSError as exc:
        if exc.errno not in _FULL_OR_READ_ONLY and not _about_output(exc, target):
            raise
        raise OutputError.writing(exc.filename or tmp or target, exc) from None
    finally:
        _remove(tmp)


def _about_output(exc: OSError, target: Path) -> bool:
    """Did `exc` come from the output itself (its partial directory, or the rename into
    place), whatever its errno: a parent under /proc (ENOENT), an immutable one (EPERM)?
    An OSError of the source's reading is not, and stays what it is."""
    names = [os.fspath(n) for n in (exc.filename, exc.filename2) if isinstance(n, (str, os.PathLike))]
    partial = os.path.join(target.parent, _partial_prefix(target))
    return any(n.startswith(partial) or n == os.fspath(target) for n in names)


def _remove(partial: Path | None) -> None:
    if partial is not None:
        with _signals_held():  # a second Ctrl-C must not stop the cleanup of the first
            shutil.rmtree(partial, ignore_errors=True)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and the other interrupting signals wait while a step that must not be cut in
    two runs; they are delivered (as KeyboardInterrupt) when it ends."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTING_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
