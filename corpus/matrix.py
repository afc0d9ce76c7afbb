"""What a run covers: on each kernel the share its row names (kernels.CiShare: its workloads, takes,
golden restores, source forms and live guests), so that CI stays within its time. With OVM_ALL_KERNELS=1
(`./run test --all-kernels`) every kernel runs the whole corpus."""

from __future__ import annotations

import os

from . import kernels, workloads

ALL_KERNELS_ENV = "OVM_ALL_KERNELS"


def full_matrix() -> bool:
    return os.environ.get(ALL_KERNELS_ENV, "") not in ("", "0")


def _share(kernel_name: str) -> kernels.CiShare | None:
    """The part of the corpus this run covers on a kernel; None: all of it."""
    share = kernels.get_kernel(kernel_name).ci
    return None if full_matrix() else share


def _named(names: tuple[str, ...] | None, workload_name: str) -> bool:
    """Whether a share's list of workloads names one (None names every one)."""
    return names is None or workload_name in names


def workloads_on(kernel_name: str) -> tuple[str, ...]:
    """The standard workloads this run records and tests on a kernel, in STANDARD's order."""
    share = _share(kernel_name)
    if share is None:
        return workloads.STANDARD
    return tuple(w for w in workloads.STANDARD if _named(share.workloads, w))


def takes_on(kernel_name: str, workload_name: str) -> int:
    """How many moments of a workload this run records on a kernel."""
    share = _share(kernel_name)
    takes = workloads.get_workload(workload_name).takes
    return takes if share is None else min(takes, share.takes)


def covers(kernel_name: str, workload_name: str, take: int = 0) -> bool:
    """Whether this run reads a recording on a kernel: outside a kernel's share only in the full
    matrix (workloads recorded on demand are never kept from a kernel)."""
    share = _share(kernel_name)
    if share is None or workload_name not in workloads.STANDARD:
        return True
    return _named(share.workloads, workload_name) and take < takes_on(kernel_name, workload_name)


def restores_golden(kernel_name: str, workload_name: str) -> bool:
    """Whether this run has criu restore a recording's golden images on a kernel."""
    share = _share(kernel_name)
    return share is None or _named(share.golden_restores, workload_name)


def reads_every_source(kernel_name: str, workload_name: str) -> bool:
    """Whether this run dumps a recording on a kernel from every source form, not the ELF alone."""
    share = _share(kernel_name)
    return share is None or _named(share.every_source, workload_name)


def boots_live(kernel_name: str, workload_name: str) -> bool:
    """Whether this run boots a live guest of a workload on a kernel (dump --live, precopy,
    background)."""
    share = _share(kernel_name)
    return share is None or _named(share.live, workload_name)


def cases() -> list[tuple[str, str]]:
    """(kernel, workload) of every recording this run covers (as-is takes aside)."""
    return [(k, w) for k in kernels.KERNELS for w in workloads_on(k)]


def recordings() -> list[tuple[str, str, int]]:
    """(kernel, workload, take) of every recording this run reads."""
    return [(k, w, take) for k, w in cases() for take in range(takes_on(k, w))]


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
