"""cgroup.img: CRIU's cg_sets and the cgroup v2 directories restore recreates."""

from __future__ import annotations

import dataclasses

from ...state import CgroupDir, CgroupPerms, ProcessState
from .common import N

__all__ = ["CRIU_CGROUP", "CRIU_CG_SET", "CgroupSets"]

#: The cgroup (v2) criu itself would run in: the root. Its cg_set is 1 (the inventory's
#: root_cg_set) and is not saved; a task there inherits the cgroup of the restoring criu.
CRIU_CGROUP = "/"
CRIU_CG_SET = 1


class CgroupSets:
    """CRIU's cg_sets: one per distinct set of cgroups a task is in (with cgroup v2 only,
    one path), numbered as met; criu's own comes first as CRIU_CG_SET."""

    def __init__(self, cgroups: dict[str, CgroupDir], cgns_root: str | None = None) -> None:
        self.cgroups = cgroups
        # the root of the tree's own cgroup namespace, which each set below it names as its
        # prefix (restore unshares the namespace there)
        self.cgns_root = cgns_root.rstrip("/") if cgns_root is not None else None
        self.ids: dict[tuple[str, int], int] = {(CRIU_CGROUP, 0): CRIU_CG_SET}
        self.heads: list[_CgDir] = []  # CRIU's cg_controller heads of the v2 hierarchy

    def _in_cgns(self, path: str) -> bool:
        return self.cgns_root is not None and (path == self.cgns_root or path.startswith(self.cgns_root + "/"))

    def set_of(self, proc: ProcessState) -> int:
        path = proc.cgroup or CRIU_CGROUP
        # criu 3.17 gives each task in a cgroup namespace a set of its own (equal ones)
        key = (path, proc.pid if self._in_cgns(path) else 0)
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
            if path in self.cgroups:
                self._collect(self.cgroups[path])  # (a directory collected already is skipped)
        return self.ids[key]

    def _collect(self, top: CgroupDir) -> None:
        """CRIU's collect_cgroups(): ftw below the set's cgroup, each directory put under the
        deepest collected one its path starts with (a plain string prefix, as CRIU does),
        those already collected skipped."""
        stack = [top]
        while stack:
            d = stack.pop()
            stack.extend(reversed(d.children))
            where, match = _find_dir(d.path, self.heads)
            if where == "exact":
                continue
            siblings = match.children if where == "parent" and match is not None else self.heads
            siblings.append(_CgDir(d))

    def image(self, root_set: int) -> N.cgroup_entry | None:
        """cgroup.img, or None when every task is in criu's set (CRIU writes nothing then)."""
        if root_set == CRIU_CG_SET and len(self.ids) == 1:
            return None
        entry = N.cgroup_entry()
        for (path, _), sid in self.ids.items():
            if sid != CRIU_CG_SET:
                member = N.cg_member_entry(name="", path=path)
                if self.cgns_root is not None and self._in_cgns(path):
                    member.cgns_prefix = len(self.cgns_root)
                entry.sets.add(id=sid, ctls=[member])
        ctl = entry.controllers.add(cnames=[""])
        ctl.dirs.extend(_cg_dir_entry(h, 0) for h in self.heads)
        # CRIU 4.x: a threaded cgroup below makes the hierarchy threaded (3.17 has no such field)
        ctl.is_threaded = any(_threaded(h) for h in self.heads)
        return entry


@dataclasses.dataclass
class _CgDir:
    dir: CgroupDir
    children: list[_CgDir] = dataclasses.field(default_factory=list)


def _find_dir(path: str, dirs: list[_CgDir]) -> tuple[str, _CgDir | None]:
    for d in dirs:
        if d.dir.path == path:
            return "exact", d
        if path.startswith(d.dir.path):
            where, match = _find_dir(path, d.children)
            return ("parent", d) if where == "none" else (where, match)
    return "none", None


def _threaded(node: _CgDir) -> bool:
    if any(p.name == "cgroup.type" and p.value == "threaded" for p in node.dir.properties):
        return True
    return any(_threaded(c) for c in node.children)


def _perms(p: CgroupPerms) -> N.cgroup_perms:
    return N.cgroup_perms(mode=p.mode, uid=p.uid, gid=p.gid)


def _cg_dir_entry(node: _CgDir, poff: int) -> N.cgroup_dir_entry:
    path = node.dir.path
    # CRIU's dump_cg_dirs(): the name is the path after the parent's, without the "/"
    name = path[poff:] if poff == 1 else path[poff + 1 :]
    entry = N.cgroup_dir_entry(dir_name=name, dir_perms=_perms(node.dir.perms))
    for prop in node.dir.properties:
        p = entry.properties.add(name=prop.name, value=prop.value)
        if prop.perms is not None:
            p.perms.CopyFrom(_perms(prop.perms))
    entry.children.extend(_cg_dir_entry(c, len(path)) for c in node.children)
    return entry
