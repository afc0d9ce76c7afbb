"""Compare two CRIU image directories entry by entry and field by field.

    python -m ovm_offline.criu.diff OURS THEIRS      # exit 0: same, 1: different

Made for checking ovm-offline's output (OURS) against `criu dump` of the same tree
(THEIRS):

* ids that CRIU hands out in discovery order (file ids, kcmp object ids, namespace ids,
  cgroup set ids) are compared by what they refer to, not by number, so a consistent
  renumbering is no difference; file names that embed such ids (fdinfo-<files_id>.img,
  netns-<id>.img, ...) are matched the same way;
* a tmpfs archive (tmpfs-dev-N.tar.gz.img) is compared member by member (type, mode,
  owner, mtime, target, device, data), not byte by byte: tar and gzip write the same files
  in different bytes;
* memory is compared page by page after resolving pagemap runs to virtual addresses, so
  differently split runs or differently numbered pages-N.img files compare equal;
* fields that cannot match between a memory snapshot and a live dump are listed in
  DEFAULT_IGNORES with the reason; criu's dump.log is never compared;
* a stream socket's queued packets are joined up to each carrying files (stream_reads_joined);
* what CRIU 3.x and 4.x write differently (diff_rules.py: VERSION_TWINS, OMITTED_AT_DEFAULT,
  CRIU4_ONLY against 3.x's images, CRIU3_ONLY against 4.x's) is no difference.
"""

from __future__ import annotations

__all__ = ["DEFAULT_IGNORES", "DiffResult", "Difference", "IgnoreRule", "diff_dirs", "main"]

import argparse
import hashlib
import io
import re
import sys
import tarfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from ovm_offline.errors import ExitCode, ImageError, OvmError

from . import images, show
from .diff_rules import (
    ABSENT,
    CLONE_NS,
    CRIU3_ONLY,
    CRIU4_ONLY,
    DEFAULT_IGNORES,
    ENTRY_KEYS,
    FILE_IDENTITY,
    ID_FIELDS,
    KOBJ_FIELDS,
    NAME_ID_CLASS,
    VMA_FILE_MAPPED,
    ZOMBIE_IGNORES,
    IgnoreRule,
    fill_version_twins,
    nested_key,
    stream_reads_joined,
    written_by_criu3,
    zombie_entries,
)
from .images import ImageDir, ImageKind


@dataclass
class IdMap:
    """Structural keys for the arbitrary ids of one image directory."""

    keys: dict[tuple[str, int], str] = field(default_factory=dict)

    def key(self, cls: str, value: int) -> str:
        return self.keys.get((cls, value), f"{cls}?{value}")

    def _add(self, cls: str, value: int, key: str) -> None:
        self.keys.setdefault((cls, value), key)

    @classmethod
    def build(cls, d: ImageDir) -> IdMap:
        m = cls()
        inv = d.entry(images.INVENTORY)
        pids = d.pids()
        # Kernel objects and namespaces: those of criu itself (inventory.root_ids) are "root",
        # the others are named after the first task (in pstree order) that uses them.
        if inv is not None and inv.HasField("root_ids"):
            for f in KOBJ_FIELDS:
                if inv.root_ids.HasField(f):
                    m._add(f[:-3], getattr(inv.root_ids, f), f"{f[:-3]}:root")
        if inv is not None and inv.HasField("root_cg_set"):
            m._add("cg_set", inv.root_cg_set, "cg_set:root")
        for pid in pids:
            ids = d.entry(images.IDS, pid)
            if ids is not None:
                for f in KOBJ_FIELDS:
                    if ids.HasField(f):
                        m._add(f[:-3], getattr(ids, f), f"{f[:-3]}@{pid}")
            core = d.entry(images.CORE, pid)
            if core is not None and core.tc.HasField("cg_set"):
                m._add("cg_set", core.tc.cg_set, f"cg_set@{pid}")
            elif core is not None and core.thread_core.HasField("cg_set"):
                m._add("cg_set", core.thread_core.cg_set, f"cg_set@{pid}")
        cg = d.entry(images.CGROUP)
        if cg is not None:
            for i, s in enumerate(cg.sets):
                m._add("cg_set", s.id, f"cg_set#{i}")
        m._build_files(d, pids)
        return m

    def _build_files(self, d: ImageDir, pids: list[int]) -> None:
        """File ids become "TYPE:identity" (e.g. "REG:/dev/null"). Several open files of the
        same object (each task's "/" root, a file opened twice) add the first place that
        refers to them ("REG:/@root@10004"), so that one missing reference does not shift
        the keys of the others."""
        files_img = d.get(images.FILES)
        entries = {e.id: e for e in files_img.entries} if files_img is not None else {}
        first_site: dict[int, str] = {}

        def ref(fid: int, site: str) -> None:
            if fid in first_site:
                return
            first_site[fid] = site
            e = entries.get(fid)
            if e is not None:  # files referring to other files: the path of a tty or FIFO
                for sub in ("tty", "fifo"):
                    if e.HasField(sub) and getattr(e, sub).HasField("regf_id"):
                        ref(getattr(e, sub).regf_id, f"{site}.{sub}")

        for pid in pids:
            ids = d.entry(images.IDS, pid)
            if ids is not None:
                fdinfo = d.get(images.FDINFO, ids.files_id)
                for fd in sorted(fdinfo.entries, key=lambda e: e.fd) if fdinfo is not None else ():
                    ref(fd.id, f"fd{fd.fd}@{pid}")
            mm = d.entry(images.MM, pid)
            if mm is not None:
                ref(mm.exe_file_id, f"exe@{pid}")
                for vma in sorted(mm.vmas, key=lambda v: v.start):
                    if vma.status & VMA_FILE_MAPPED:
                        ref(vma.shmid, f"vma@{pid}:0x{vma.start:x}")
            fs = d.entry(images.FS, pid)
            if fs is not None:
                ref(fs.cwd_id, f"cwd@{pid}")
                ref(fs.root_id, f"root@{pid}")
        for n, fid in enumerate(entries):
            ref(fid, f"unreferenced#{n}")
        identity = {fid: f"?:{fid}" if fid not in entries else _file_identity(entries[fid]) for fid in first_site}
        count: dict[str, int] = defaultdict(int)
        for ident in identity.values():
            count[ident] += 1
        for fid, site in first_site.items():
            ident = identity[fid]
            self._add("file", fid, ident if count[ident] == 1 else f"{ident}@{site}")


def _file_identity(e: images.Entry) -> str:
    t = images.FILES.message.DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number  # type: ignore[union-attr]
    tname = t[e.type].name if e.type in t else str(e.type)
    for sub, attr in FILE_IDENTITY.items():
        if e.HasField(sub):
            return f"{tname}:{getattr(getattr(e, sub), attr)}"
    return tname


def _substitute(ids: IdMap) -> Callable[[images.Entry, FieldDescriptor, int], Any]:
    def sub(msg: images.Entry, fd: FieldDescriptor, value: int) -> Any:
        name = msg.DESCRIPTOR.name
        if name == "vma_entry" and fd.name == "shmid":
            return ids.key("file", value) if msg.status & VMA_FILE_MAPPED else None
        if name == "ns_file_entry" and fd.name == "ns_id":
            cls = CLONE_NS.get(msg.ns_cflag)
            return ids.key(cls, value) if cls else None
        cls = ID_FIELDS.get((name, fd.name))
        return None if cls is None else ids.key(cls, value)

    return sub


# ---- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    image: str  # file name; arbitrary ids in it replaced by their keys
    entry: str  # entry index or key ("fd=1"); "" for the image as a whole
    path: str  # field path, starting with the image kind
    ours: Any
    theirs: Any

    def __str__(self) -> str:
        where = f"{self.image} [{self.entry}]" if self.entry else self.image
        return f"{where} {self.path}: ours {_short(self.ours)}, theirs {_short(self.theirs)}"


def _short(v: Any, limit: int = 80) -> str:
    s = v if isinstance(v, str) and v == ABSENT else repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


@dataclass
class DiffResult:
    differences: list[Difference] = field(default_factory=list)
    ignored: list[tuple[Difference, IgnoreRule]] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.differences

    @property
    def exit_status(self) -> int:
        return 0 if self.same else 1

    def report(self, max_per_image: int = 50) -> str:
        if self.same:
            return f"no differences ({len(self.ignored)} ignored)\n"
        lines: list[str] = []
        per_image: dict[str, int] = defaultdict(int)
        for d in self.differences:
            per_image[d.image] += 1
            if per_image[d.image] <= max_per_image:
                lines.append(str(d))
        for img, n in per_image.items():
            if n > max_per_image:
                lines.append(f"{img}: ... and {n - max_per_image} more differences")
        lines.append(f"{len(self.differences)} differences ({len(self.ignored)} ignored)")
        return "\n".join(lines) + "\n"


class _Collector:
    def __init__(self, ignore: Sequence[IgnoreRule], zombies: frozenset[str] = frozenset()):
        self.result = DiffResult()
        self.ignore = ignore
        self.zombies = zombies  # entry labels ("pid=N") of zombies: ZOMBIE_IGNORES apply there too

    def add(self, image: str, entry: str, path: str, ours: Any, theirs: Any) -> None:
        d = Difference(image, entry, path, ours, theirs)
        rules = [*self.ignore, *ZOMBIE_IGNORES] if entry in self.zombies else self.ignore
        for rule in rules:
            if rule.covers(path, ours, theirs):
                self.result.ignored.append((d, rule))
                return
        self.result.differences.append(d)


# ---- comparison ----------------------------------------------------------------------------


def _canonical_names(d: ImageDir, ids: IdMap) -> dict[str, str]:
    """canonical name -> real file name, for every image except pages-N.img."""
    out: dict[str, str] = {}
    for name in d.names():
        kind = images.kind_for_filename(name)
        if kind is images.PAGES:
            continue
        cname = name
        if kind is not None and kind.name in NAME_ID_CLASS:
            ident = kind.match(name)
            if ident:
                cname = kind.filename(f"<{ids.key(NAME_ID_CLASS[kind.name], int(ident))}>")
        out[cname] = name
    return out


def _compare_values(c: _Collector, image: str, entry: str, path: str, ours: Any, theirs: Any) -> None:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k in list(theirs) + [k for k in ours if k not in theirs]:
            _compare_values(c, image, entry, f"{path}.{k}", ours.get(k, ABSENT), theirs.get(k, ABSENT))
        return
    if isinstance(ours, list) and isinstance(theirs, list):
        key = nested_key(re.sub(r"\[[^\]]*\]", "", path))
        pairs = _pair(ours, theirs, key)
        for label, o, t in pairs:
            _compare_values(c, image, entry, f"{path}[{label}]", o, t)
        return
    if ours != theirs:
        c.add(image, entry, path, ours, theirs)


def _pair(ours: list[Any], theirs: list[Any], key: str | None) -> list[tuple[str, Any, Any]]:
    """Pair list elements by `key` when it is unique on both sides, else by position."""
    if key is not None:
        ko = [o.get(key) if isinstance(o, dict) else None for o in ours]
        kt = [t.get(key) if isinstance(t, dict) else None for t in theirs]
        unique = len(set(map(repr, ko))) == len(ko) and len(set(map(repr, kt))) == len(kt)
        # No key in common at all (e.g. ASLR moved every VMA): position says more than key.
        overlap = not ours or not theirs or bool(set(map(repr, ko)) & set(map(repr, kt)))
        if None not in ko and None not in kt and unique and overlap:
            mo = {repr(k): o for k, o in zip(ko, ours)}
            mt = {repr(k): t for k, t in zip(kt, theirs)}
            order = [repr(k) for k in kt] + [repr(k) for k in ko if repr(k) not in mt]
            label = {repr(k): str(k) for k in ko + kt}
            return [(f"{key}={label[r]}", mo.get(r, ABSENT), mt.get(r, ABSENT)) for r in order]
    n = max(len(ours), len(theirs))
    return [(str(i), ours[i] if i < len(ours) else ABSENT, theirs[i] if i < len(theirs) else ABSENT) for i in range(n)]


def _entries(img: images.Image, ids: IdMap) -> list[dict[str, Any]]:
    sub = _substitute(ids)
    out = []
    for idx, (msg, payload) in enumerate(zip(img.entries, img.payloads)):
        d = show.message_to_dict(msg, "pretty", substitute=sub)
        fill_version_twins(img.kind.name, d)
        if idx == 0 and img.kind.head is not None and img.kind.head_data_to_end(msg):  # a ghost file's contents
            d["extra"] = show.render_bytes(payload)
        elif img.kind.payload_fields and msg.DESCRIPTOR is img.kind.message.DESCRIPTOR:  # type: ignore[union-attr]
            d["extra"] = show.render_bytes(payload)
        out.append(d)
    return out


def _compare_image(c: _Collector, cname: str, kind: ImageKind, ours: images.Image, theirs: images.Image,
                   ids_o: IdMap, ids_t: IdMap) -> None:  # fmt: skip
    eo, et = _entries(ours, ids_o), _entries(theirs, ids_t)
    if kind.head is not None and kind.head_data_field is None:  # pagemap: the head is not an entry like the others
        _compare_values(c, cname, "head", f"{kind.name}.head", eo[0], et[0])
        return  # runs are compared as pages by _compare_pages
    if kind.single:
        _compare_values(c, cname, "", kind.name, eo[0], et[0])
        return
    for label, o, t in _pair(eo, et, ENTRY_KEYS.get(kind.name)):
        if o is ABSENT or t is ABSENT:
            c.add(cname, label, kind.name, _summary(o), _summary(t))
        else:
            _compare_values(c, cname, label, kind.name, o, t)


def _summary(entry: Any) -> Any:
    return entry if entry is ABSENT else show.render(entry, width=10_000)


# Fields of struct rseq the kernel rewrites on return to user space: cpu_id_start and
# cpu_id at 0..8, node_id and mm_cid at 20..28 (6.3+)
RSEQ_KERNEL_FIELDS = ((0, 8), (20, 28))


def _rseq_cpu_id_windows(idir: ImageDir, pid: int) -> list[tuple[int, int]]:
    """[start, end) of every thread's rseq cpu_id fields: the kernel rewrites them whenever the
    task returns to user space on another CPU, which criu's parasite code makes it do."""
    threads = [pid]
    try:
        pstree = idir.get(images.PSTREE)
        for e in pstree.entries if pstree is not None else []:
            if e.pid == pid:
                threads = list(e.threads) or [pid]
    except (OvmError, OSError, KeyError):
        pass
    windows = []
    for tid in threads:
        try:
            core = idir.entry(images.CORE, tid)
        except (OvmError, OSError, KeyError):
            continue
        if core is not None and core.HasField("thread_core") and core.thread_core.HasField("rseq_entry"):
            start = core.thread_core.rseq_entry.rseq_abi_pointer
            if start:
                windows += [(start + lo, start + hi) for lo, hi in RSEQ_KERNEL_FIELDS]
    return windows


def _only_in(vaddr: int, a: bytes, b: bytes, windows: list[tuple[int, int]]) -> bool:
    """Whether every byte where pages `a` and `b` (at `vaddr`) differ lies in `windows`."""
    return all(any(lo <= vaddr + i < hi for lo, hi in windows) for i in range(len(a)) if a[i] != b[i])


def _compare_pages(
    c: _Collector, cname: str, pid: int, ours: ImageDir, theirs: ImageDir, kind: ImageKind = images.PAGEMAP
) -> None:
    po = {p.vaddr: p for p in ours.pages(pid, kind)}
    path = "pagemap.pages"
    # a shmem file's pages (kind SHMEM_PAGEMAP, `pid` its inode) hold no thread's rseq area
    rseq = _rseq_cpu_id_windows(theirs, pid) if kind is images.PAGEMAP else []
    for p in theirs.pages(pid, kind):
        o = po.pop(p.vaddr, None)
        label = f"0x{p.vaddr:x}"
        if o is None:
            c.add(cname, label, path, ABSENT, _page_summary(p))
            continue
        if o.flags != p.flags:
            c.add(cname, label, "pagemap.pages.flags", _pflags(o.flags), _pflags(p.flags))
        if o.data != p.data:
            rseq_only = o.data is not None and p.data is not None and _only_in(p.vaddr, o.data, p.data, rseq)
            what = "pagemap.pages.rseq_cpu_id" if rseq_only else "pagemap.pages.data"
            c.add(cname, label, what, *_first_difference(o.data, p.data))
    for o in po.values():
        c.add(cname, f"0x{o.vaddr:x}", path, _page_summary(o), ABSENT)


def _pflags(flags: int) -> str:
    return show.map_flags(flags, show.FLAG_TABLES["pmap.flags"])


def _page_summary(p: images.Page) -> str:
    return f"page ({_pflags(p.flags)})" if p.data is None else f"page ({_pflags(p.flags)}, {p.data[:8].hex()}...)"


def _first_difference(a: bytes | None, b: bytes | None) -> tuple[str, str]:
    if a is None or b is None:
        return ("<no data>" if a is None else "<data>", "<no data>" if b is None else "<data>")
    i = next(i for i in range(len(a)) if a[i] != b[i])
    return (f"+0x{i:03x}: {a[i : i + 8].hex()}", f"+0x{i:03x}: {b[i : i + 8].hex()}")


#: what a tar member's entry says (tarfile.TarInfo's names); a regular file's data by digest
_MEMBER_FIELDS = ("type", "mode", "uid", "gid", "mtime", "linkname", "devmajor", "devminor", "size")


def _archive_members(data: bytes, name: str) -> dict[str, dict[str, Any]]:
    members: dict[str, dict[str, Any]] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for info in tar:
                fields = {f: getattr(info, f) for f in _MEMBER_FIELDS}
                fields["type"] = fields["type"].decode("latin-1")
                if info.isreg():
                    extracted = tar.extractfile(info)
                    fields["data"] = hashlib.sha256(extracted.read() if extracted else b"").hexdigest()[:16]
                members[info.name.rstrip("/") or "."] = fields
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ImageError(f"{name}: not a gzip-compressed tar archive ({e})") from None
    return members


def _compare_archives(c: _Collector, cname: str, ours: bytes, theirs: bytes) -> None:
    """A tmpfs archive by its members (name, type, mode, owner, mtime, target, device, data):
    tar and gzip write the same files in different bytes (header padding, timestamps, order)."""
    mo, mt = _archive_members(ours, cname), _archive_members(theirs, cname)
    for member in list(mt) + [m for m in mo if m not in mt]:
        fo, ft = mo.get(member), mt.get(member)
        if fo is None or ft is None:
            c.add(cname, member, "tmpfs-dev", "present" if fo else ABSENT, "present" if ft else ABSENT)
            continue
        for name in sorted(set(fo) | set(ft)):
            if fo.get(name) != ft.get(name):
                c.add(cname, member, f"tmpfs-dev.{name}", fo.get(name), ft.get(name))


def diff_dirs(
    ours: str | Path | ImageDir, theirs: str | Path | ImageDir, ignore: Sequence[IgnoreRule] = DEFAULT_IGNORES
) -> DiffResult:
    """Compare two image directories; see the module docstring for what counts as equal."""
    do = ours if isinstance(ours, ImageDir) else ImageDir(ours)
    dt = theirs if isinstance(theirs, ImageDir) else ImageDir(theirs)
    ids_o, ids_t = IdMap.build(do), IdMap.build(dt)
    names_o, names_t = _canonical_names(do, ids_o), _canonical_names(dt, ids_t)
    ignore = [*ignore, *(CRIU4_ONLY if written_by_criu3(dt.entry(images.INVENTORY)) else CRIU3_ONLY)]
    c = _Collector(ignore, zombie_entries(dt))
    for cname in list(names_t) + [n for n in names_o if n not in names_t]:
        no, nt = names_o.get(cname), names_t.get(cname)
        if no is None or nt is None:
            kind = do.kind_of(no) if no else dt.kind_of(nt)  # type: ignore[arg-type]
            c.add(cname, "", kind.name, "present" if no else ABSENT, "present" if nt else ABSENT)
            continue
        ko, kt = do.kind_of(no), dt.kind_of(nt)
        if ko is not kt:
            c.add(cname, "", "kind", ko.name, kt.name)
            continue
        if ko.raw:
            bo, bt = (do.path / no).read_bytes(), (dt.path / nt).read_bytes()
            if ko is images.TMPFS_DEV:
                _compare_archives(c, cname, bo, bt)
            elif bo != bt:
                c.add(cname, "", ko.name, show.render_bytes(bo), show.render_bytes(bt))
            continue
        lo, lt = stream_reads_joined(do, do.load(no)), stream_reads_joined(dt, dt.load(nt))
        _compare_image(c, cname, ko, lo, lt, ids_o, ids_t)
        if ko is images.PAGEMAP:
            ident = ko.match(nt)
            if ident:
                _compare_pages(c, cname, int(ident), do, dt)
        shmem_ino = ko.match(nt) if ko is images.SHMEM_PAGEMAP else None
        if shmem_ino:  # a shmem file's pages, named by its inode number
            _compare_pages(c, cname, int(shmem_ino), do, dt, images.SHMEM_PAGEMAP)
    return c.result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ovm_offline.criu.diff", description="Compare two CRIU image dirs.")
    ap.add_argument("ours")
    ap.add_argument("theirs")
    ap.add_argument("--show-ignored", action="store_true", help="also list the ignored differences and why")
    args = ap.parse_args(argv)
    try:
        res = diff_dirs(args.ours, args.theirs)
    except OvmError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code  # the exit-code table's, as `ovm-offline diff` does
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.FAILED
    if args.show_ignored:
        for d, rule in res.ignored:
            print(f"ignored: {d}  ({rule.reason})")
    sys.stdout.write(res.report())
    return res.exit_status


if __name__ == "__main__":
    sys.exit(main())
