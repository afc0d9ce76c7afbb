"""Refusals are data: extraction collects every reason a dump cannot be written as asked, and
the dump decides on all of them before it writes anything."""

from __future__ import annotations

import dataclasses

from .errors import UnsupportedError

__all__ = ["SKIP_UNSUPPORTED", "Refusal", "decide"]

#: the option that leaves refused open files out instead
SKIP_UNSUPPORTED = "--skip-unsupported"


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why something of process `pid` cannot be saved: one of its open files (`fd`), or the
    process or tree itself (`fd` None: then `why` is the whole sentence). `option` names what
    would let the dump go on without it, if anything."""

    pid: int  # global
    comm: str
    why: str
    fd: int | None = None
    option: str | None = None

    def __str__(self) -> str:
        return self.why if self.fd is None else f"PID {self.pid} ({self.comm}) fd {self.fd}: {self.why}"

    @classmethod
    def open_file(cls, pid: int, comm: str, fd: int, why: str) -> Refusal:
        return cls(pid, comm, why, fd=fd, option=SKIP_UNSUPPORTED)


def decide(refusals: list[Refusal], skip_unsupported: bool) -> list[Refusal]:
    """Raise one UnsupportedError naming every refusal that stands, or return those left out
    (open files, when `skip_unsupported`): the dump may then be written without them."""
    blocking = [r for r in refusals if r.option is None]
    files = [r for r in refusals if r.option is not None]
    parts = ["; ".join(map(str, blocking))] if blocking else []
    if files and not skip_unsupported:
        parts.append(
            f"cannot save {len(files)} open file(s) yet: "
            + "; ".join(map(str, files))
            + f" ({SKIP_UNSUPPORTED} leaves them out)"
        )
    if parts:
        raise UnsupportedError("; ".join(parts))
    return files
