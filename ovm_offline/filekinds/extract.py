"""The state of every open file of a process, by its kind's extractor, and the open files a
dump must leave out: refused kinds, refused instances, and files left dangling by others left
out (a socket whose peer, an epoll whose target, is gone)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import GuestDataError, UnsupportedError
from ..extract.files import open_file
from ..refusals import Refusal
from ..state import Fd, OpenFile, ProcessState
from .base import ExtractContext, describe
from .registry import classify, kind_named

__all__ = ["attach_file_states", "leave_out_dangling_files", "open_in_flight"]


def _extract(ctx: ExtractContext, fd: Fd) -> None:
    kind = kind_named(fd.file.kind)
    assert kind.saved is not None and kind.saved.extract is not None
    try:
        fd.file.state = kind.saved.extract(ctx, fd.file, ctx.prog.pointer("file", fd.file.key))
    except GuestDataError as e:
        # name the process and file: the kernel-side message alone does not say whose
        raise GuestDataError(f"pid {ctx.pid} fd {fd.fd} ({fd.file.identity.path}): {e}") from None


def attach_file_states(ctx: ExtractContext, fds: list[Fd], refusals: list[Refusal]) -> list[Fd]:
    """The fds of a process that can be saved, each with its kind's state; the others are
    described in `refusals`. A file shared with a process met earlier keeps its state. Kinds
    that refer to other fds (epoll) come last, against the fds kept; when one is refused they
    start over, since another may watch it."""

    def refuse(fd: Fd, why: str) -> None:
        refusals.append(Refusal.open_file(ctx.pid, ctx.comm, fd.fd, why))
        kept.remove(fd)

    kept = list(fds)
    late = []
    for fd in fds:
        kind = kind_named(fd.file.kind)
        if kind.saved is None:
            refuse(fd, describe(kind, fd.file))
        elif kind.saved.check is not None and (why := kind.saved.check(fd.file)) is not None:
            refuse(fd, why)
        elif kind.saved.late:
            late.append(fd)
        elif kind.saved.extract is not None and fd.file.state is None:
            try:
                _extract(ctx, fd)
            except UnsupportedError as e:
                refuse(fd, str(e))
    pending = [fd for fd in late if fd.file.state is None]
    while pending:
        ctx.fds = list(kept)
        for fd in pending:
            try:
                _extract(ctx, fd)
            except UnsupportedError as e:
                refuse(fd, str(e))
                pending.remove(fd)
                for other in pending:
                    other.file.state = None
                break
        else:
            break
    return kept


def leave_out_dangling_files(processes: Sequence[ProcessState], refusals: list[Refusal]) -> None:
    """Take out open files that cannot stay now that others are left out (each kind's
    `dangling` rule), describing them in `refusals`; repeated, because leaving a file out can
    leave another dangling."""
    while True:
        tree = [fd for p in processes for fd in p.fds]
        checks = {
            k: kind.saved.dangling(tree)
            for k in {fd.file.kind for fd in tree}
            if (kind := kind_named(k)).saved is not None and kind.saved.dangling is not None
        }
        outside = []
        for p in processes:
            for fd in p.fds:
                check = checks.get(fd.file.kind)
                why = check(fd, p.fds) if check is not None else None
                if why is not None:
                    outside.append((p, fd, why))
        if not outside:
            return
        for p, fd, why in outside:
            refusals.append(Refusal.open_file(p.global_pid, p.comm, fd.fd, why))
            p.fds.remove(fd)


def open_in_flight(ctx: ExtractContext, address: int, where: str) -> OpenFile:
    """The `OpenFile`, with its kind's state, of a ``struct file`` in flight in the queue of
    UNIX socket `where` (SCM_RIGHTS): criu writes it as a file of its own, which restore opens
    in the socket's owner and sends again. UnsupportedError for a kind not saved, or one that
    refers to other fds or queues of its own."""
    file = ctx.prog.pointer("file", address)
    of = open_file(file, ctx.task, ctx.pid_ns, lambda f: classify(f).name)
    kind = kind_named(of.kind)
    sent = f"{where} has {describe(kind, of)} in flight (SCM_RIGHTS)"
    if kind.saved is None:
        raise UnsupportedError(sent)
    if kind.saved.late or not kind.saved.in_flight:
        raise UnsupportedError(f"{sent}, which ovm-offline does not send again yet")
    if kind.saved.check is not None and (why := kind.saved.check(of)) is not None:
        raise UnsupportedError(f"{sent}: {why}")
    if kind.saved.extract is not None:
        try:
            of.state = kind.saved.extract(ctx, of, file)
        except UnsupportedError as e:
            raise UnsupportedError(f"{sent}: {e}") from None
    return of
