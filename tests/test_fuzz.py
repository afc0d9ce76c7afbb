"""The mutation fuzzer's gate, in small: every family on a real recording of each pinned kernel,
a fixed seed, and not one case that hangs, dies, changes a result silently, leaves partial
output or touches the host. `python -m fuzz` runs the same with as many cases as you like."""

from __future__ import annotations

import pytest

from corpus import kernels
from fuzz.__main__ import FAMILIES, run_family
from fuzz.harness import BAD

pytestmark = pytest.mark.guest

CASES = {"signals": 20, "inputs": 20}  # each starts an interpreter
#: the recordings each family mutates: runc's state and a container's mount namespace are only
#: in the runc workloads' guests (runc-userns: ids mapped into a user namespace on top)
WORKLOADS = {"runtimes": ("runc",), "mountns": ("runc", "runc-userns")}
CASES_OF = [(f, w) for f in sorted(FAMILIES) for w in WORKLOADS.get(f, ("counter",))]
#: what shows that a family's cases reached the code they aim at: a refusal, or for `ps`
#: alone (which lists what it can and warns about the rest) a warning
REACHED = {"runtimes": "warned", "views": "warned"}
#: families whose every case may rightly be refused: evidence alters a page or a segment the
#: dump reads, so a case ends `ok` only when its page happens not to be read (none did in 40
#: cases of 6.1's counter in a CI run); nulls writes a NULL no kernel holds into an object the
#: dump reads (`ok` only for a member it does not read, as a mapped file's f_op); views forges a
#: task's links, which `ps --check` names (`ok` only for a real_parent rewritten to itself)
ALL_MAY_BE_REFUSED = {"evidence", "nulls", "views"}


@pytest.mark.parametrize(("family", "workload"), CASES_OF)
@pytest.mark.parametrize("kernel", list(kernels.KERNELS))
def test_no_case_of_the_family_fails_the_gate(recording, tmp_path, family, workload, kernel):
    recording(kernel, workload)
    # memory is gated by `python -m fuzz` in a process of its own (see run_family)
    report = run_family(family, kernel, workload, CASES.get(family, 40), 7, tmp_path, lambda r: None, None)
    counts = report.counts()
    assert not [c for c in report.cases if c.outcome in BAD], report.failures()[:5]
    assert counts[REACHED.get(family, "refused")] > 0, counts
    assert family in ALL_MAY_BE_REFUSED or counts["ok"] + counts["changed"] > 0, counts
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
