"""What `diff` knows about CRIU images besides their messages: the fields that cannot match
between a memory snapshot and a live `criu dump` (`DEFAULT_IGNORES`, with the reason for
each), and where CRIU puts ids it hands out in discovery order (`ID_FIELDS` and friends), which
are compared by what they refer to. Extend these tables rather than special-casing fields in
the comparison."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import images

__all__ = [
    "CRIU3_ONLY",
    "CRIU4_ONLY",
    "OMITTED_AT_DEFAULT",
    "VERSION_TWINS",
    "fill_version_twins",
    "written_by_criu3",
    "zombie_entries",
    "stream_reads_joined",
    "ABSENT",
    "CLONE_NS",
    "DEFAULT_IGNORES",
    "ENTRY_KEYS",
    "FILE_IDENTITY",
    "ID_FIELDS",
    "IgnoreRule",
    "KOBJ_FIELDS",
    "NAME_ID_CLASS",
    "NESTED_KEYS",
    "nested_key",
    "VMA_FILE_MAPPED",
    "ZOMBIE_IGNORES",
]


@dataclass(frozen=True)
class IgnoreRule:
    """A field path pattern and why it may differ.

    Paths start with the image kind ("core", "mm", "stats") and use "." between fields and
    "[...]" for list elements; "*" matches one field name, "[*]" any element, "**" anything
    (fields and elements at any depth). A rule matching a prefix of a path ignores everything
    below it ("timens" ignores the whole image). A rule with `bits` ignores an integer field only
    where the two values differ in those bits alone; one with `theirs_not` only where ours is
    absent and theirs has a "value" other than that one.
    """

    pattern: str
    reason: str
    bits: int = 0
    theirs_not: str | None = None

    def matches(self, path: str) -> bool:
        return _rule_re(self.pattern).match(path) is not None

    def covers(self, path: str, ours: object, theirs: object) -> bool:
        if not self.matches(path):
            return False
        if self.theirs_not is not None:
            return ours == ABSENT and isinstance(theirs, dict) and theirs.get("value") != self.theirs_not
        if not self.bits:
            return True
        return isinstance(ours, int) and isinstance(theirs, int) and not (ours ^ theirs) & ~self.bits


def _rule_re(pattern: str) -> re.Pattern[str]:
    rx = (
        re.escape(pattern)
        .replace(r"\*\*", "\0")
        .replace(r"\[\*\]", r"\[[^\]]*\]")
        .replace(r"\*", r"[^.\[\]]+")
        .replace("\0", ".*")
    )
    return re.compile(rx + r"(?=$|[.\[])")


# Extend this table rather than special-casing fields in the code.
DEFAULT_IGNORES: tuple[IgnoreRule, ...] = (
    IgnoreRule("stats", "stats-dump records how long criu's own dump took and how many pages it scanned"),
    IgnoreRule(
        "inventory.dump_criu_run_id",
        "CRIU 4.x names each dump run (a UUID) for its nftables network-lock table; ours locks nothing in the guest",
    ),
    IgnoreRule(
        "core.tc.flags",
        "PF_FREEZER_SKIP (0x40000000, a hole from 6.1 on): before 6.1 criu's own ptrace stop of each task is a"
        " freezable sleep that sets it; restore never reads the task flags",
        bits=0x40000000,
    ),
    IgnoreRule("core.tc.timers.*.vsec", "itimer time remaining depends on the instant of the dump"),
    IgnoreRule("core.tc.timers.*.vusec", "itimer time remaining depends on the instant of the dump"),
    IgnoreRule("core.tc.timers.posix[*].vsec", "posix timer time remaining depends on the instant of the dump"),
    IgnoreRule("core.tc.timers.posix[*].vnsec", "posix timer time remaining depends on the instant of the dump"),
    IgnoreRule("core.tc.timers.posix[*].overrun", "overrun count keeps growing while the timer runs"),
    IgnoreRule("files.tfd.vsec", "timerfd time remaining depends on the instant of the dump"),
    IgnoreRule("files.tfd.vnsec", "timerfd time remaining depends on the instant of the dump"),
    IgnoreRule(
        "pagemap.pages.rseq_cpu_id",
        "the kernel rewrites rseq cpu_id_start/cpu_id/node_id/mm_cid when criu's "
        "parasite runs the task; a memory snapshot keeps the values of the moment",
    ),
    *(
        IgnoreRule(
            f"tty-info.{t}.c_cc[{i}]",
            "criu copies the 19 c_cc bytes into the front of its 19-word array; "
            "the later words are whatever its memory held",
        )
        for t in ("termios", "termios_locked")
        for i in range(5, 19)
    ),
    IgnoreRule(
        "timens", "CLOCK_MONOTONIC/BOOTTIME readings taken at dump time, from which restore derives the offsets"
    ),
    IgnoreRule(
        "tcp-stream.timestamp",
        "TCP_TIMESTAMP is the connection's timestamp clock (ms since boot plus its offset) read at the instant "
        "of the dump",
    ),
    IgnoreRule("pagemap.head.pages_id", "names pages-N.img, a dump-local counter; pages are compared by content"),
    IgnoreRule(
        "cgroup.**.properties[name=cgroup.type]",
        'CRIU 4.x restores cgroup.type only when "threaded" (the only value the kernel takes; 3.x would fail'
        " writing another): ours save it only then",
        theirs_not="threaded",
    ),
)

ABSENT = "<absent>"  # value shown for a missing image, entry, field or page

# ---- arbitrary ids --------------------------------------------------------------------

CLONE_NS = {  # ns_file_entry.ns_cflag -> namespace id class
    0x00020000: "mnt_ns", 0x02000000: "cgroup_ns", 0x04000000: "uts_ns", 0x08000000: "ipc_ns",
    0x10000000: "user_ns", 0x20000000: "pid_ns", 0x40000000: "net_ns", 0x00000080: "time_ns",
}  # fmt: skip

KOBJ_FIELDS = ("vm_id", "files_id", "fs_id", "sighand_id", "pid_ns_id", "net_ns_id", "ipc_ns_id",
               "uts_ns_id", "mnt_ns_id", "user_ns_id", "cgroup_ns_id", "time_ns_id")  # fmt: skip

# (message, field) -> id class. Every `id` of a file_entry sub-message is a file id too.
ID_FIELDS: dict[tuple[str, str], str] = {
    ("file_entry", "id"): "file",
    ("fdinfo_entry", "id"): "file",
    ("mm_entry", "exe_file_id"): "file",
    ("fs_entry", "cwd_id"): "file",
    ("fs_entry", "root_id"): "file",
    ("tty_file_entry", "regf_id"): "file",
    ("fifo_entry", "regf_id"): "file",
    ("eventpoll_tfd_entry", "id"): "file",
    ("inotify_wd_entry", "id"): "file",
    ("fanotify_mark_entry", "id"): "file",
    ("sk_packet_entry", "id_for"): "file",
    ("remap_file_path_entry", "orig_id"): "file",
    ("task_core_entry", "cg_set"): "cg_set",
    ("thread_core_entry", "cg_set"): "cg_set",
    ("inventory_entry", "root_cg_set"): "cg_set",
    ("cg_set_entry", "id"): "cg_set",
    ("unix_sk_entry", "ns_id"): "net_ns",
    ("inet_sk_entry", "ns_id"): "net_ns",
    ("packet_sock_entry", "ns_id"): "net_ns",
    ("netlink_sk_entry", "ns_id"): "net_ns",
    ("tunfile_entry", "ns_id"): "net_ns",
    ("netns_id", "target_ns_id"): "net_ns",
    **{("task_kobj_ids_entry", f): f[: -len("_id")] for f in KOBJ_FIELDS},
}
assert images.FILES.message is not None
FILE_SUBMESSAGES = tuple(
    f.message_type.name for f in images.FILES.message.DESCRIPTOR.fields if f.message_type is not None
)
for _m in FILE_SUBMESSAGES:
    ID_FIELDS[(_m, "id")] = "file"

VMA_FILE_MAPPED = 0x40 | 0x80  # VMA_FILE_PRIVATE | VMA_FILE_SHARED: shmid is a file id

# Image kinds whose "{id}" is an arbitrary id of this class (else it is a pid or literal).
NAME_ID_CLASS = {
    "fdinfo": "files", "utsns": "uts_ns", "ipcns-var": "ipc_ns", "ipcns-shm": "ipc_ns", "mountpoints": "mnt_ns",
    "netns": "net_ns", "userns": "user_ns", "pidns": "pid_ns",
}  # fmt: skip

# How the entries of a multi-entry image are paired up: by this field (after id
# canonicalisation) rather than by position. Nested lists likewise, by path.
#: Fields of a zombie's entries (a process whose core says TASK_DEAD) that may differ besides
#: DEFAULT_IGNORES.
ZOMBIE_IGNORES: tuple[IgnoreRule, ...] = (
    IgnoreRule(
        "pstree.threads",
        "criu dump writes a zombie's one thread id from memory its seize never filled (it reads no threads"
        " of a zombie); restore does not read it",
    ),
)

ENTRY_KEYS = {"files": "id", "fdinfo": "fd", "pstree": "pid", "mountpoints": "mnt_id", "tty-info": "id",
              "pipes-data": "pipe_id", "fifo-data": "pipe_id"}  # fmt: skip
#: a nested list's path without its elements' labels ("**" as in IgnoreRule) -> its key field
NESTED_KEYS = {"mm.vmas": "start", "cgroup.sets": "id", "cgroup.**.properties": "name"}


def nested_key(path: str) -> str | None:
    """The key field of the nested list at `path` (labels of elements already stripped)."""
    for pattern, key in NESTED_KEYS.items():
        if _rule_re(pattern).fullmatch(path):
            return key
    return None


FILE_IDENTITY = {  # file_entry sub-message -> field naming the object, for readable keys
    "reg": "name", "pipe": "pipe_id", "fifo": "pipe_id", "tty": "tty_info_id", "usk": "ino",
    "isk": "ino", "psk": "id", "nlsk": "ino",
}  # fmt: skip


#: (image kind, field path, field path): one fact that CRIU 3.x and 4.x keep in different
#: fields. Our images write both; criu's write their version's. Each side's missing twin is
#: filled from the other before comparing, so that only a different value is a difference.
VERSION_TWINS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("core", ("tc", "cg_set"), ("thread_core", "cg_set")),
)


#: (image kind, message key, field, value): a field CRIU 4.x leaves out where it has this value
#: (SO_MARK 0; SO_PASSCRED/SO_PASSSEC of a socket that is neither UNIX nor netlink, which 6.16+
#: refuses to get), and 3.x writes. Filled in where absent before comparing.
OMITTED_AT_DEFAULT: tuple[tuple[str, str, str, Any], ...] = (
    ("files", "opts", "so_mark", 0),
    ("files", "opts", "so_passcred", False),
    ("files", "opts", "so_passsec", False),
)

_CRIU3_LACKS = "CRIU 3.x writes no such field (4.x does, and ours do, for 4.x's restore)"
#: fields CRIU 4.x and our images hold that 3.x never writes: ignored against 3.x's images alone
#: (those whose inventory has no plugins_entry, which every 4.x dump writes)
CRIU4_ONLY: tuple[IgnoreRule, ...] = (
    IgnoreRule("inventory.plugins_entry", _CRIU3_LACKS),
    IgnoreRule("core.tc.stop_signo", _CRIU3_LACKS),
    IgnoreRule("core.thread_core.cg_set", _CRIU3_LACKS),  # a leader's is tc.cg_set's twin
    IgnoreRule("core.thread_core.creds.no_new_privs", _CRIU3_LACKS),
    IgnoreRule("core.thread_core.creds.cap_amb", _CRIU3_LACKS),
    IgnoreRule("files.isk.tcp_opts", _CRIU3_LACKS),
    IgnoreRule("files.isk.ip_opts.pktinfo", _CRIU3_LACKS),
    IgnoreRule("files.isk.ip_opts.tos", _CRIU3_LACKS),
    IgnoreRule("files.isk.ip_opts.ttl", _CRIU3_LACKS),
    IgnoreRule("cgroup.controllers[*].is_threaded", _CRIU3_LACKS),
    IgnoreRule("memfd.mode", _CRIU3_LACKS),
    *(
        IgnoreRule(
            f"cgroup.**.properties[name={name}]", "CRIU 3.x saves no such cgroup v2 file (4.x does, and ours do)"
        )
        for name in (
            "cgroup.subtree_control",
            "cgroup.max.descendants",
            "cgroup.max.depth",
            "cgroup.freeze",
            "cgroup.type",
        )
    ),
)

_CRIU4_MOVED = "CRIU 4.x writes this in tcp_opts instead (ours write both: 3.x reads only this one)"

#: ignored where theirs are CRIU 4.x's: what 3.x's restore reads and 4.x moved elsewhere
CRIU3_ONLY: tuple[IgnoreRule, ...] = (
    IgnoreRule("files.isk.opts.tcp_keepcnt", _CRIU4_MOVED),
    IgnoreRule("files.isk.opts.tcp_keepidle", _CRIU4_MOVED),
    IgnoreRule("files.isk.opts.tcp_keepintvl", _CRIU4_MOVED),
    IgnoreRule("tcp-stream.nodelay", _CRIU4_MOVED),
    IgnoreRule("tcp-stream.cork", _CRIU4_MOVED),
    IgnoreRule(
        "cgroup.**.properties[name=cgroup.procs]",
        "CRIU 4.x saves the cgroup v2 files of its own list instead (ours hold both: 3.x restores this one)",
    ),
)


def written_by_criu3(inventory: Any) -> bool:
    """Whether an images directory's inventory entry is CRIU 3.x's (no plugins_entry)."""
    return inventory is not None and not inventory.HasField("plugins_entry")


def _fill_omitted(kind: str, value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _fill_omitted(kind, item)
    if not isinstance(value, dict):
        return
    for key, inner in value.items():
        for rule_kind, container, field, default in OMITTED_AT_DEFAULT:
            if rule_kind == kind and key == container and isinstance(inner, dict) and field not in inner:
                inner[field] = default
        _fill_omitted(kind, inner)


def fill_version_twins(kind: str, entry: dict[str, Any]) -> None:
    """Fill, in one image entry as a dict, a `VERSION_TWINS` field its side left out, and the
    fields CRIU 4.x leaves out at their default (`OMITTED_AT_DEFAULT`)."""
    _fill_omitted(kind, entry)
    for twin_kind, a, b in VERSION_TWINS:
        if twin_kind != kind:
            continue
        for src, dst in ((a, b), (b, a)):
            value: Any = entry
            for name in src:
                value = value.get(name) if isinstance(value, dict) else None
            parent: Any = entry
            for name in dst[:-1]:
                parent = parent.get(name) if isinstance(parent, dict) else None
            if value is not None and isinstance(parent, dict) and dst[-1] not in parent:
                parent[dst[-1]] = value


#: task_core_entry.task_state of a zombie (criu's TASK_DEAD)
TASK_DEAD = 2


def zombie_entries(d: images.ImageDir) -> frozenset[str]:
    """The pstree entry labels of the processes whose core says TASK_DEAD (criu's zombies)."""
    pstree = d.get(images.PSTREE)
    zombies = set()
    for e in pstree.entries if pstree is not None else []:
        core = d.entry(images.CORE, e.pid)
        if core is not None and core.HasField("tc") and core.tc.task_state == TASK_DEAD:
            zombies.add(f"pid={e.pid}")
    return frozenset(zombies)


#: unix_sk_entry.type of a stream socket
SOCK_STREAM = 1


def stream_reads_joined(d: images.ImageDir, queues: images.Image) -> images.Image:
    """sk-queues.img with each stream socket's packets joined up to and including each one that
    carries files. criu's peek glues the bytes queued before files into their packet, where
    ovm-offline sends those bytes apart so the files come with the bytes they came with
    (filekinds/unix.py stream_reads): both hold the same bytes with the same files. Any other
    image is returned as it is."""
    if queues.kind is not images.SK_QUEUES:
        return queues
    files = d.get(images.FILES)
    streams = {e.id for e in files.entries if e.HasField("usk") and e.usk.type == SOCK_STREAM} if files else set()
    entries: list[Any] = []
    payloads: list[bytes] = []
    for e, payload in zip(queues.entries, queues.payloads):
        last = entries[-1] if entries else None
        if last is not None and e.id_for in streams and last.id_for == e.id_for and not last.scm:
            joined = type(e)()
            joined.CopyFrom(e)
            joined.length = last.length + e.length
            entries[-1], payloads[-1] = joined, payloads[-1] + payload
        else:
            entries.append(e)
            payloads.append(payload)
    return queues._replace(entries=entries, payloads=payloads)
