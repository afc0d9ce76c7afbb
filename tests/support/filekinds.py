"""Running the file-kind extraction of one process as dump does, for tests."""

from __future__ import annotations

from ovm_offline import filekinds
from ovm_offline.refusals import Refusal, decide
from ovm_offline.state import Fd


def attach_states(prog, fds: list[Fd], *, pid: int = 42, comm: str = "x", task=None, pid_ns=None, shared=None):
    """The fds kept, each with its kind's state, and the refusals, as dump's extraction makes them."""
    refusals: list[Refusal] = []
    ctx = filekinds.ExtractContext(prog, task, pid_ns, pid, comm, {} if shared is None else shared)
    kept = filekinds.attach_file_states(ctx, fds, refusals)
    return kept, refusals


def attach_or_refuse(prog, fds: list[Fd], **kw) -> list[Fd]:
    """The fds with their states, or the one-line UnsupportedError dump would give."""
    kept, refusals = attach_states(prog, fds, **kw)
    decide(refusals, skip_unsupported=False)
    return kept
