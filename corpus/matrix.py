"""Which recordings a run covers: every standard workload on the kernels that run in full, and on
each other kernel the subset its row names (one workload or more of every area: tasks, memory,
files, ttys, sockets, TCP, namespaces, runc, as-is takes), so that CI stays within its time. With
OVM_ALL_KERNELS=1 (`./run test --all-kernels`) every kernel runs every standard workload."""

from __future__ import annotations

import os

from . import kernels, workloads

ALL_KERNELS_ENV = "OVM_ALL_KERNELS"


def full_matrix() -> bool:
    return os.environ.get(ALL_KERNELS_ENV, "") not in ("", "0")


def workloads_on(kernel_name: str) -> tuple[str, ...]:
    """The standard workloads this run records and tests on a kernel, in STANDARD's order."""
    subset = kernels.get_kernel(kernel_name).ci_workloads
    if subset is None or full_matrix():
        return workloads.STANDARD
    return tuple(w for w in workloads.STANDARD if w in subset)


def covers(kernel_name: str, workload_name: str) -> bool:
    """Whether this run reads a workload's recording on a kernel: outside a kernel's subset
    only in the full matrix (workloads recorded on demand are never kept from a kernel)."""
    subset = kernels.get_kernel(kernel_name).ci_workloads
    return subset is None or full_matrix() or workload_name in subset or workload_name not in workloads.STANDARD


def cases() -> list[tuple[str, str]]:
    """(kernel, workload) of every recording this run covers (as-is takes aside)."""
    return [(k, w) for k in kernels.KERNELS for w in workloads_on(k)]


def recordings() -> list[tuple[str, str, int]]:
    """(kernel, workload, take) of every recording this run reads."""
    return [(k, w, take) for k, w in cases() for take in range(workloads.get_workload(w).takes)]


def case_name(kernel_name: str, workload_name: str) -> str:
    """A recording's test-case name, "<kernel>-<workload>" ("6.1-rt-counter")."""
    return f"{kernel_name}-{workload_name}"


def case_parts(case: str) -> tuple[str, str]:
    """(kernel, workload) of a case name; kernel and workload names both hold dashes, so the
    longest kernel name that prefixes it wins."""
    for name in sorted(kernels.KERNELS, key=len, reverse=True):
        if case.startswith(name + "-"):
            return name, case[len(name) + 1 :]
    raise ValueError(f"{case!r} names no pinned kernel")
