"""Seccomp filters of a task (``task->seccomp``, a ``struct seccomp``).

``seccomp.filter`` is the newest ``struct seccomp_filter`` a thread runs under; each links to
the one installed before it by ``prev`` (filters are shared by threads and inherited across
fork, so several tasks may point into one chain). A filter's program is a ``struct bpf_prog``
whose ``orig_prog`` (a ``struct sock_fprog_kern``) keeps the classic BPF the process gave,
``len`` instructions of 8 bytes (``struct sock_filter``). The kernel keeps it only when built
with CONFIG_CHECKPOINT_RESTORE (seccomp_prepare_filter's save_orig); without it the program
exists only as eBPF and cannot be given back, so such a filter is refused.
"""

from __future__ import annotations

from ...errors import GuestDataError, UnsupportedError
from ...state import SeccompFilter
from ..core.objects import Struct
from ..ds.list import pointer_chain
from .tasks import task_comm

__all__ = ["BPF_MAXINSNS", "seccomp_filter_program", "task_seccomp_filters"]

#: include/uapi/linux/bpf_common.h: the most instructions one classic BPF program has
BPF_MAXINSNS = 4096
#: kernel/seccomp.c MAX_INSNS_PER_PATH (32768) over the smallest filter (1 instruction + 4
#: of overhead per filter): no thread runs under more filters than this
MAX_FILTERS = 32768 // 5
SOCK_FILTER_SIZE = 8


def seccomp_filter_program(flt: Struct) -> bytes:
    """The classic BPF instructions of a ``struct seccomp_filter`` (``prog->orig_prog``)."""
    prog = flt.prog
    if not prog:
        raise GuestDataError(f"seccomp_filter at 0x{flt.address_:x} has no program")
    orig = prog.deref().orig_prog
    if not orig:
        raise UnsupportedError(
            "its seccomp filter's classic BPF program was not kept (a kernel without CONFIG_CHECKPOINT_RESTORE)"
        )
    fprog = orig.deref()
    length = int(fprog.len)
    if not 0 < length <= BPF_MAXINSNS or not fprog.filter:
        raise GuestDataError(f"seccomp filter program at 0x{int(orig):x} has {length} instructions")
    return flt.prog_.read(int(fprog.filter), length * SOCK_FILTER_SIZE)


def task_seccomp_filters(task: Struct) -> list[SeccompFilter]:
    """The seccomp filters a ``struct task_struct`` in SECCOMP_MODE_FILTER runs under, newest
    first (GuestDataError when there are none); UnsupportedError
    for a filter that hands calls to a user-space listener (SECCOMP_FILTER_FLAG_NEW_LISTENER:
    restored without its listener, those calls would fail)."""
    filters: list[SeccompFilter] = []
    chain = pointer_chain(
        task.seccomp.filter, "prev", name=f"task {task.pid}'s seccomp filter chain", limit=MAX_FILTERS
    )
    for flt in chain:
        if flt.has_member_("notif") and flt.notif:
            raise UnsupportedError(
                f"thread {task.pid} ({task_comm(task)}) runs under a seccomp filter with a user-space listener"
                " (SECCOMP_FILTER_FLAG_NEW_LISTENER), which criu's images cannot hold"
            )
        try:
            program = seccomp_filter_program(flt)
        except UnsupportedError as e:
            raise UnsupportedError(f"thread {task.pid} ({task_comm(task)}): {e}") from None
        filters.append(SeccompFilter(key=flt.address_, program=program, log=bool(flt.log)))
    if not filters:
        # seccomp_attach_filter sets the mode only with a filter in place
        raise GuestDataError(f"task {task.pid} is in seccomp filter mode with no filter")
    return filters
