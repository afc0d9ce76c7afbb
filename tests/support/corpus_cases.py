"""The standard corpus recordings as test case names, for parametrizing with the `golden` fixture."""

from __future__ import annotations

from corpus import matrix, workloads

#: "<kernel>-<workload>" for every standard recording with golden images this run covers
GOLDEN_CASES = [f"{k}-{w}" for k, w in matrix.cases() if workloads.get_workload(w).golden]
#: one case per workload
GOLDEN_WORKLOAD_CASES = [c for c in GOLDEN_CASES if c.startswith("6.1-")]
