"""MEMBER_KINDS (kernel/core/member_kinds.py) lists every member the walkers read: `ps` and
`dump` of every standard corpus workload on both kernels read nothing else. A failure names
the members to add, with the kinds the pinned ISFs give them; for a workload recorded as it
runs, whose paths depend on the moment caught, it is a warning (thread_info.flags, read only
for a thread caught on a vCPU in one state, was missed until a CI run caught that moment)."""

from __future__ import annotations

import warnings

import pytest

from corpus.workloads import STANDARD, get_workload
from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.errors import OvmError
from ovm_offline.kernel.core import isf_cache, objects
from ovm_offline.kernel.core.member_kinds import MEMBER_KINDS, raw_kind, raw_member
from tests.support.paths import ISF

pytestmark = pytest.mark.guest


def _members_read(rec, out) -> set[tuple[str, str]]:
    """(struct, member) of every member read by `ps` and by `dump` of the recording's root
    (with --skip-unsupported when the plain dump is refused, so the rest is read too)."""
    seen: set[tuple[str, str]] = set()
    member = objects.Struct.member_

    def recording_member(self, name):
        seen.add((self.type_.name, name))
        return member(self, name)

    vcpu_state = rec.live_dir / "registers.txt" if rec.manifest.get("moment") == "as-is" else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(objects.Struct, "member_", recording_member)
        with sources.open_source(rec.elf, vcpu_state) as source:
            prog = inventory.open_kernel(source)
            inventory.list_processes(prog)
            try:
                dumping.dump(source, prog, rec.manifest["root_pid"], out / "plain")
            except OvmError:
                try:
                    dumping.dump(source, prog, rec.manifest["root_pid"], out / "skipping", skip_unsupported=True)
                except OvmError:
                    pass  # refused whole (a thread inside a write, say): what led to it was read
    return seen


@pytest.mark.parametrize("workload", STANDARD)
@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_every_member_the_walkers_read_has_its_kind_listed(recording, tmp_path, kernel, workload):
    seen = _members_read(recording(kernel, workload), tmp_path)
    assert len(seen) > 100
    missing = sorted(f"{s}.{m}" for s, m in seen if not s.startswith("unnamed_") and f"{s}.{m}" not in MEMBER_KINDS)
    if missing:
        isfs = [isf_cache.json_loads(isf_cache.open_isf_bytes(path)) for path in ISF.values()]
        rows = []
        for name in missing:
            kinds = {
                raw_kind(isf, found[1]) for isf in isfs if (found := raw_member(isf, *name.split("."))) is not None
            }
            rows.append(f"    {name} under {' and '.join(sorted(kinds))}")
        message = "members to add to _MEMBERS_BY_KIND:\n" + "\n".join(rows)
        if get_workload(workload).moment == "as-is":
            # which paths run depends on the moment the recording caught: the next recording
            # may not read what this one did, so a miss is said, and a stopped workload fails
            warnings.warn(message, stacklevel=1)
        else:
            pytest.fail(message)
