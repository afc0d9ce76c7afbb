"""The standard corpus recordings as test case names, for parametrizing with the `golden` fixture."""

from __future__ import annotations

from corpus import kernels, workloads

#: "<kernel>-<workload>" for every standard recording with golden images
GOLDEN_CASES = [f"{k}-{w}" for k in kernels.KERNELS for w in workloads.STANDARD if workloads.get_workload(w).golden]
#: one case per workload
GOLDEN_WORKLOAD_CASES = [c for c in GOLDEN_CASES if c.startswith("6.1-")]
