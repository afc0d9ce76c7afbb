"""seccomp.img and the seccomp fields of each thread's core, as criu dump writes them
(criu/seccomp.c).

CRIU reads every thread's filters with PTRACE_SECCOMP_GET_FILTER and lists them in one image:
threads by their real tid, ascending; each thread's chain newest first, every filter after
the first pointing back to the one written before it (`prev`), and the thread's core naming
the last written, its oldest (`seccomp_filter`). When every thread of a process runs under the
same programs, only the leader keeps its chain, flagged SECCOMP_FILTER_FLAG_TSYNC, and the
other threads are saved without seccomp: restore installs the leader's with TSYNC, which puts
them on every thread (try_use_tsync; a single-threaded process always qualifies).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...state import ProcessState, SeccompFilter, ThreadState
from .common import T

__all__ = ["SECCOMP_MODE_DISABLED", "SeccompPlan", "seccomp_plan"]

# include/uapi/linux/seccomp.h
SECCOMP_MODE_DISABLED = 0
SECCOMP_MODE_FILTER = 2
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_FILTER_FLAG_LOG = 2


@dataclasses.dataclass
class SeccompPlan:
    """The seccomp image's filters, and per thread (global tid) the (mode, filter index) its
    core records; a thread not listed keeps its own mode with no filter."""

    filters: list[T.seccomp_filter] = dataclasses.field(default_factory=list)
    threads: dict[int, tuple[int, int | None]] = dataclasses.field(default_factory=dict)

    def of(self, thread: ThreadState) -> tuple[int, int | None]:
        return self.threads.get(thread.global_tid, (thread.seccomp_mode, None))


def _programs(thread: ThreadState) -> list[bytes]:
    return [f.program for f in thread.seccomp_filters]


def _chains(proc: ProcessState, plan: SeccompPlan) -> dict[int, tuple[list[SeccompFilter], int]]:
    """global tid -> (filters newest first, extra flags) of the threads of `proc` whose chains
    the image holds."""
    if not proc.threads:
        return {}  # a zombie
    leader = proc.threads[0]
    filtered = [t for t in proc.threads if t.seccomp_mode == SECCOMP_MODE_FILTER]
    if not filtered:
        return {}
    same = leader.seccomp_mode == SECCOMP_MODE_FILTER and all(
        t.seccomp_mode == leader.seccomp_mode and _programs(t) == _programs(leader) for t in proc.threads
    )
    if same:
        for t in proc.threads[1:]:
            plan.threads[t.global_tid] = (SECCOMP_MODE_DISABLED, None)
        return {leader.global_tid: (leader.seccomp_filters, SECCOMP_FILTER_FLAG_TSYNC)}
    return {t.global_tid: (t.seccomp_filters, 0) for t in filtered}


def seccomp_plan(processes: Sequence[ProcessState]) -> SeccompPlan:
    plan = SeccompPlan()
    chains: dict[int, tuple[list[SeccompFilter], int]] = {}
    for proc in processes:
        chains.update(_chains(proc, plan))
    for tid in sorted(chains):
        chain, flags = chains[tid]
        for i, flt in enumerate(chain):
            entry = T.seccomp_filter(filter=flt.program, flags=flags | (SECCOMP_FILTER_FLAG_LOG if flt.log else 0))
            if i:
                entry.prev = len(plan.filters) - 1
            plan.filters.append(entry)
        plan.threads[tid] = (SECCOMP_MODE_FILTER, len(plan.filters) - 1)
    return plan
