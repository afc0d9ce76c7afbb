"""The standard corpus recordings as test case names, for parametrizing with the `golden` fixture."""

from __future__ import annotations

from corpus import kernels, matrix, workloads

#: "<kernel>-<workload>" for every standard recording with golden images this run covers
GOLDEN_CASES = [matrix.case_name(k, w) for k, w in matrix.cases() if workloads.get_workload(w).golden]
#: the cases whose golden images the host's crit (Debian 12's, of criu 3.17) writes alike: not
#: those of a kernel whose guest runs another suite's criu (4.x images hold fields 3.17 lacks)
HOST_CRIU_GOLDEN_CASES = [c for c in GOLDEN_CASES if not kernels.get_kernel(matrix.case_parts(c)[0]).criu_suite]
#: one case per workload
GOLDEN_WORKLOAD_CASES = [c for c in GOLDEN_CASES if matrix.case_parts(c)[0] == "6.1"]
