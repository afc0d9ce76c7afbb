"""The standard corpus recordings as test case names, for parametrizing with the `golden` fixture."""

from __future__ import annotations

import pytest

from corpus import kernels, matrix, workloads

#: "<kernel>-<workload>" for every standard recording with golden images this run covers
GOLDEN_CASES = [matrix.case_name(k, w) for k, w in matrix.cases() if workloads.get_workload(w).golden]
#: the cases whose golden images the host's crit (Debian 12's, of criu 3.17) writes alike: not
#: those of a kernel whose guest runs another suite's criu (4.x images hold fields 3.17 lacks)
HOST_CRIU_GOLDEN_CASES = [c for c in GOLDEN_CASES if not kernels.get_kernel(matrix.case_parts(c)[0]).criu_suite]
#: one case per workload
GOLDEN_WORKLOAD_CASES = [c for c in GOLDEN_CASES if matrix.case_parts(c)[0] == "6.1"]
#: as-is workloads made to be refused (a call whose interruption is unknown)
REFUSED_AS_IS = ("blockers-unknown",)
#: as-is workloads with tests of their own: a TCP stream's threads are often caught inside
#: write() or read() on a vCPU, which is refused by name (tests/test_dump_inet.py); churn's
#: processes are caught being forked and ending (tests/test_cross_view.py)
AS_IS_WITH_OWN_TESTS = (
    "inet-stream-asis",
    "inet-bursts-asis",
    "runc-inet-stream-asis",
    "churn-asis",
    "spinners-crowded",
)
#: the as-is workloads whose every moment restores (tests/test_dump_asis.py, test_dump_live.py)
AS_IS = [
    w.name
    for w in workloads.WORKLOADS.values()
    if w.moment == "as-is" and w.name not in REFUSED_AS_IS + AS_IS_WITH_OWN_TESTS
]


def criu_layout(kernel: str) -> str:
    """The page-server header layout of the criu a kernel's guests run (--page-server-protocol):
    4.2's where the guest runs another suite's criu (4.2.1), 3's where Debian 12's 3.17."""
    return "4.2" if kernels.get_kernel(kernel).criu_suite else "3"


def skip_outside_subset(kernel: str, workload: str, take: int = 0) -> None:
    """Skip a test of a recording this run does not cover on a kernel (outside its CI share;
    ./run test --all-kernels covers it)."""
    if not matrix.covers(kernel, workload, take):
        what = workload if take == 0 else f"take {take} of {workload}"
        pytest.skip(f"{what} is outside {kernel}'s CI share (./run test --all-kernels runs it)")


def skip_unless_live(kernel: str, workload: str) -> None:
    """Skip a test that boots a live guest of a workload this run does not boot on a kernel."""
    if not matrix.boots_live(kernel, workload):
        pytest.skip(f"a live {workload} guest is outside {kernel}'s CI share (./run test --all-kernels boots it)")


def skip_unless_every_source(kernel: str, workload: str) -> None:
    """Skip a test that dumps a recording from every source form where this run reads the ELF alone."""
    if not matrix.reads_every_source(kernel, workload):
        pytest.skip(f"every source form of {workload} is outside {kernel}'s CI share (./run test --all-kernels)")
