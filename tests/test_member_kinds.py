"""MEMBER_KINDS (kernel/core/member_kinds.py) lists every member the walkers read: `ps` and
`dump` of every standard corpus workload on both kernels read nothing else. A failure names
the members to add, with the kinds the pinned ISFs give them; for a workload recorded as it
runs, whose paths depend on the moment caught, it is a warning (thread_info.flags, read only
for a thread caught on a vCPU in one state, was missed until a CI run caught that moment)."""

from __future__ import annotations

import warnings

import pytest

from corpus import matrix
from corpus.workloads import get_workload
from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.errors import OvmError
from ovm_offline.kernel.core import isf_cache, objects
from ovm_offline.kernel.core.member_kinds import MEMBER_KINDS, raw_kind, raw_member_path
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


def _untagged_paths(isf: dict) -> dict[str, list[str]]:
    """Each untagged struct or union of the ISF -> the paths that reach it from a tagged struct
    or a symbol ("tty_struct.ctrl", "@tk_core"), as MEMBER_KINDS names its members."""
    parents: dict[str, list[str]] = {}
    for name, symbol in isf["symbols"].items():
        ref = symbol.get("type") or {}
        if str(ref.get("name", "")).startswith("unnamed_"):
            parents.setdefault(ref["name"], []).append(f"@{name}")
    for struct, user in isf["user_types"].items():
        for member, field in user.get("fields", {}).items():
            ref = field.get("type") or {}
            if str(ref.get("name", "")).startswith("unnamed_") and not field.get("anonymous"):
                parents.setdefault(ref["name"], []).append(f"{struct}.{member}")

    def paths(name: str, depth: int = 0) -> list[str]:
        found = []
        for parent in parents.get(name, []):
            head, _, rest = parent.partition(".")
            if head.startswith("unnamed_") and depth < 4:
                found += [f"{above}.{rest}" for above in paths(head, depth + 1)]
            elif not head.startswith("unnamed_"):
                found.append(parent)
        return found

    return {name: paths(name) for name in parents}


def _member_names(seen: set[tuple[str, str]], isf: dict) -> set[str]:
    """The MEMBER_KINDS names of the (struct, member) pairs read: a member of an untagged type
    by the first of its paths that the table lists, or else its first path."""
    untagged = _untagged_paths(isf)
    names = set()
    for struct, member in seen:
        if not struct.startswith("unnamed_"):
            names.add(f"{struct}.{member}")
            continue
        paths = [f"{path}.{member}" for path in untagged.get(struct, [])]
        assert paths, f"no tagged struct or symbol reaches {struct} (read for .{member})"
        names.add(next((p for p in paths if p in MEMBER_KINDS), paths[0]))
    return names


@pytest.fixture(scope="module")
def isfs() -> dict[str, dict]:
    return {kernel: isf_cache.json_loads(isf_cache.open_isf_bytes(path)) for kernel, path in ISF.items()}


@pytest.mark.parametrize("kernel,workload", matrix.cases(), ids=[f"{k}-{w}" for k, w in matrix.cases()])
def test_every_member_the_walkers_read_has_its_kind_listed(recording, tmp_path, isfs, kernel, workload):
    seen = _members_read(recording(kernel, workload), tmp_path)
    assert len(seen) > 100
    missing = sorted(name for name in _member_names(seen, isfs[kernel]) if name not in MEMBER_KINDS)
    if missing:
        rows = []
        for name in missing:
            kinds = {
                raw_kind(isf, found[1]) for isf in isfs.values() if (found := raw_member_path(isf, name)[1]) is not None
            }
            rows.append(f"    {name} under {' and '.join(sorted(kinds))}")
        message = (
            "members to add to member_table.py's MEMBERS_BY_KIND (or paths to MEMBER_PATHS_BY_KIND):\n"
            + "\n".join(rows)
        )
        if get_workload(workload).moment == "as-is":
            # which paths run depends on the moment the recording caught: the next recording
            # may not read what this one did, so a miss is said, and a stopped workload fails
            warnings.warn(message, stacklevel=1)
        else:
            pytest.fail(message)
