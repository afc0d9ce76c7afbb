"""Errors that reach the user as one line and a non-zero exit, never a traceback, and the
one table of exit codes (`ExitCode`; the README lists it)."""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import shutil
import signal
from collections.abc import Iterator

__all__ = [
    "EXIT_CODE_MEANINGS",
    "INTERRUPTING_SIGNALS",
    "ExitCode",
    "GuestDataError",
    "ImageError",
    "LayoutError",
    "MomentError",
    "NoSuchProcess",
    "OutputError",
    "OutputExistsError",
    "OvmError",
    "SourceError",
    "SymbolError",
    "UnreadablePageError",
    "UnsupportedError",
    "raised_by_an_interruption",
]


#: Signals that end a run as Ctrl-C does: partial output removed, a paused guest resumed. A
#: closed terminal (SIGHUP) and Ctrl-\\ (SIGQUIT) are interruptions too, not a core dump.
INTERRUPTING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class ExitCode(enum.IntEnum):
    """Every exit status of `ovm-offline`."""

    OK = 0
    FAILED = 1  # any other one-line error; `diff`: the directories differ
    SOURCE = 2  # also click's own for a usage error
    SYMBOLS = 3
    GUEST_DATA = 4
    UNSUPPORTED = 5
    IMAGES = 6
    NO_SUCH_PROCESS = 7
    MOMENT = 8  # refused only for what the guest was doing at the pause: another moment may be saved
    LAYOUT = 9  # the guest kernel's ISF loaded, and describes a structure the walkers do not know
    INTERNAL = 70  # EX_SOFTWARE: a bug of ours, not bad input
    INTERRUPTED = 130  # 128 + SIGINT


#: What each exit status means, with an example message (the README's table is this one).
EXIT_CODE_MEANINGS: dict[ExitCode, tuple[str, str]] = {
    ExitCode.OK: ("success; `diff`: no differences beyond the ignored fields", ""),
    ExitCode.FAILED: (
        "an error not covered below (the output cannot be written, e.g. the disk is full); `diff`: the directories differ",
        "images: cannot write pages-1.img: No space left on device (1.2 MiB free on /mnt); nothing was written",
    ),
    ExitCode.SOURCE: (
        "the memory source is unreadable, truncated, corrupt or of another architecture (or a usage error)",
        "guest.elf: PT_LOAD #1 (offset 0x1510, 0xa0000 bytes) extends beyond the end of the file (0x3e8 bytes); truncated?",
    ),
    ExitCode.SYMBOLS: (
        "no usable ISF for the guest kernel",
        "no symbol table (ISF) matches the guest kernel 'Linux version 6.1.0-56-cloud-amd64 ...' (searched ...)",
    ),
    ExitCode.LAYOUT: (
        "the ISF of the guest's kernel is there, but that kernel lays out a structure in a way ovm-offline"
        " does not know (yet): the struct and member are named",
        "the ISF debian-7.2.13+deb14-cloud-amd64.json.xz loaded, but the kernel it describes has a layout not"
        " supported: mm_struct.flags is struct mm_flags_t, where the walkers read integer (README: Supported kernels)",
    ),
    ExitCode.GUEST_DATA: (
        "guest kernel data is inconsistent (a loop, an absurd length, a bad pointer)",
        "process tree below PID 1 loops at PID 42",
    ),
    ExitCode.UNSUPPORTED: (
        "the process uses something ovm-offline cannot save (yet)",
        "cannot save 1 open file(s) yet: PID 10000 (srv) fd 3: an IPv4/IPv6 socket (...)",
    ),
    ExitCode.IMAGES: (
        "the output directory exists, or an image file is truncated or corrupt",
        "images exists and is not empty; pass --force to replace it",
    ),
    ExitCode.NO_SUCH_PROCESS: (
        "no such PID or container in the guest",
        "no process with PID 4242 in the guest (see `ovm-offline ps`)",
    ),
    ExitCode.MOMENT: (
        "the guest was paused at a moment that cannot be saved (a thread mid-way through a system call on a"
        " vCPU, runnable inside one, entering the kernel, or being switched on or off a CPU); another moment"
        " can be, and `--live` tries"
        " --attempts of them",
        "PID 10000 (inet) thread 10005 is inside read(): it is runnable there (woken or preempted): ...",
    ),
    ExitCode.INTERNAL: ("a bug of ours (OVM_DEBUG=1 shows the traceback)", "internal error: KeyError: ..."),
    ExitCode.INTERRUPTED: ("interrupted (Ctrl-C, SIGTERM, SIGHUP or SIGQUIT); partial output removed", "interrupted"),
}


class OvmError(Exception):
    """Base for every error the CLI reports as a one-line message."""

    exit_code: ExitCode = ExitCode.FAILED


class SourceError(OvmError):
    """The memory source (dump file or live guest) is unreadable, truncated or corrupt."""

    exit_code = ExitCode.SOURCE


class UnreadablePageError(SourceError):
    """A page the dump says it holds cannot be read as the dump describes it (a descriptor
    outside the file, a size no page has, a compression the format does not define): named,
    never read as zeros or as another page."""


class SymbolError(OvmError):
    """No usable symbol table (ISF) for the guest kernel."""

    exit_code = ExitCode.SYMBOLS


class LayoutError(SymbolError):
    """The ISF loaded, and a structure the walkers read has a layout they do not know."""

    exit_code = ExitCode.LAYOUT


class GuestDataError(OvmError):
    """Guest kernel data is inconsistent: a looping list, an absurd length, a bad pointer."""

    exit_code = ExitCode.GUEST_DATA


class UnsupportedError(OvmError):
    """The guest uses something ovm-offline cannot save yet."""

    exit_code = ExitCode.UNSUPPORTED


class MomentError(UnsupportedError):
    """Refused for what a thread was doing at the very moment of the pause (on a vCPU inside a
    call, runnable inside one, entering or leaving the kernel, being switched on or off a CPU,
    in uninterruptible sleep): the
    same guest paused a moment later may be saved."""

    exit_code = ExitCode.MOMENT


class ImageError(OvmError):
    """A CRIU image is truncated, corrupt, of an unknown kind, or cannot be encoded."""

    exit_code = ExitCode.IMAGES


class OutputExistsError(OvmError):
    """The output directory exists (and may not be replaced)."""

    exit_code = ExitCode.IMAGES


class NoSuchProcess(OvmError):
    """No process (or container) of that id in the guest."""

    exit_code = ExitCode.NO_SUCH_PROCESS


class OutputError(OvmError):
    """Output cannot be written: the disk is full, a quota is reached, permission is denied."""

    exit_code = ExitCode.FAILED

    @classmethod
    def writing(cls, path: str | os.PathLike[str], exc: OSError) -> OutputError:
        """The one line for a failed write of `path`: which file, why, and (when the disk or
        quota is full) how much room there was."""
        message = f"cannot write {os.fspath(path)}: {exc.strerror or exc}"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            directory = os.path.dirname(os.path.abspath(path))
            try:
                free = shutil.disk_usage(directory).free
                message += f" ({free / (1 << 20):.1f} MiB free on {_mount_point(directory)})"
            except OSError:
                pass
        return cls(message)


@contextlib.contextmanager
def writing_output(path: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError while writing `path` raised as the OutputError that names it."""
    try:
        yield
    except OSError as exc:
        raise OutputError.writing(path, exc) from None


def _mount_point(path: str) -> str:
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def raised_by_an_interruption(error: BaseException) -> bool:
    """Is a KeyboardInterrupt (Ctrl-C, or SIGTERM's handler) behind `error`? Python 3.11 wraps
    an exception raised in __set_name__ in RuntimeError, so a signal landing while an import
    builds a dataclass arrives as "Error calling __set_name__ on 'Field' instance ..."."""
    seen = 0
    cause: BaseException | None = error
    while cause is not None and seen < 16:
        if isinstance(cause, KeyboardInterrupt):
            return True
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return False
