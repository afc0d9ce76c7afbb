"""The table of CRIU 3.17 image kinds: one descriptor (`ImageKind`) per kind of image file,
with its magic, its entry message and its file-name pattern, as CRIU's own image descriptors
(criu/image-desc.c). images.py reads and writes images by these."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from .pb import criu_files_pb2 as files_pb
from .pb import criu_mm_pb2 as mm_pb
from .pb import criu_net_pb2 as net_pb
from .pb import criu_ns_pb2 as ns_pb
from .pb import criu_task_pb2 as task_pb

__all__ = [
    "CGROUP",
    "COMMON_MAGIC",
    "CORE",
    "FDINFO",
    "FIFO_DATA",
    "FILES",
    "FILE_LOCKS",
    "GHOST_FILE",
    "FS",
    "IDS",
    "INVENTORY",
    "IPCNS_SHM",
    "IPCNS_VAR",
    "ImageKind",
    "KINDS",
    "KINDS_BY_MAGIC",
    "KINDS_BY_NAME",
    "MEMFD_INODE",
    "MM",
    "MOUNTPOINTS",
    "NETNS",
    "NOT_IMAGES",
    "PAGEMAP",
    "PAGES",
    "PAGE_SIZE",
    "PE_LAZY",
    "PE_PARENT",
    "PE_PRESENT",
    "PIPES_DATA",
    "PSTREE",
    "REMAP_FPATH",
    "SECCOMP",
    "SERVICE_MAGIC",
    "SHMEM_PAGEMAP",
    "SK_QUEUES",
    "STATS",
    "TCP_STREAM",
    "TIMENS",
    "TMPFS_DEV",
    "TTY_DATA",
    "TTY_INFO",
    "USERNS",
    "UTSNS",
    "kind_for_filename",
]


COMMON_MAGIC = 0x54564319  # precedes the magic of every ordinary image
SERVICE_MAGIC = 0x55105940  # precedes stats-* and irmap-cache
PAGE_SIZE = 4096

# pagemap_entry.flags
PE_PARENT = 1
PE_LAZY = 2
PE_PRESENT = 4


@dataclass(frozen=True)
class ImageKind:
    """How one kind of image file is laid out.

    name: short name, also the root of field paths in show/diff ("core", "mm").
    crit_name: the magic's name as crit prints it ("CORE").
    magic: the per-image magic, None for raw files.
    message: class of the entries (None for raw files).
    pattern: file name, "{id}" standing for a pid or object id.
    single: exactly one entry (core, mm, ...) rather than a list (fdinfo, files, ...).
    head: class of a different first entry (pagemap_head), which counts as entries[0].
    payload_fields: entry fields whose sum is the length of raw data following the entry (with
        several, their parts follow in that order: tcp-stream's inq, then outq).
    prefix: COMMON_MAGIC, SERVICE_MAGIC or None (inventory: its magic stands alone).
    head_data_field: a bool field of the head entry; when it is unset or false, the rest of the
        file after the head is the head's raw payload (a ghost file written without chunks),
        when set the entries after it carry their payloads by `payload_fields`.
    """

    name: str
    crit_name: str
    magic: int | None
    message: type[Message] | None
    pattern: str
    single: bool = False
    head: type[Message] | None = None
    payload_fields: tuple[str, ...] = ()
    prefix: int | None = COMMON_MAGIC
    id_hex: bool = False  # the id in the name is hexadecimal (tcp-stream-%x.img: a socket inode)
    head_data_field: str | None = None

    @property
    def raw(self) -> bool:
        """No header and no entries: the whole file is one payload (pages, ip dumps)."""
        return self.magic is None

    def filename(self, id: int | str | None = None) -> str:
        if "{id}" in self.pattern:
            if id is None:
                raise ValueError(f"{self.name} image names need an id ({self.pattern})")
            return self.pattern.format(id=id)
        return self.pattern

    def match(self, filename: str) -> str | None:
        """The "{id}" part of filename if it is this kind's name ("" when it has no id)."""
        m = _pattern_re(self.pattern, self.id_hex).fullmatch(filename)
        return None if m is None else m.groupdict().get("id", "")

    def payload_size(self, entry: Message) -> int:
        return sum(int(getattr(entry, f)) for f in self.payload_fields)

    def head_data_to_end(self, head: Message) -> bool:
        """Whether the rest of the file after `head` (entries[0]) is its raw payload."""
        return self.head_data_field is not None and not getattr(head, self.head_data_field)


def _pattern_re(pattern: str, id_hex: bool = False) -> re.Pattern[str]:
    head, sep, tail = pattern.partition("{id}")
    digits = r"(?P<id>[0-9a-f]+)" if id_hex else r"(?P<id>[0-9]+)"
    return re.compile(re.escape(head) + (digits if sep else "") + re.escape(tail))


def _k(name: str, crit: str, magic: int | None, msg: type[Message] | None, pattern: str, **kw: Any) -> ImageKind:
    return ImageKind(name, crit, magic, msg, pattern, **kw)


# Magics are CRIU's (criu/include/magic.h); crit_name is how crit's JSON names them.
INVENTORY = _k("inventory", "INVENTORY", 0x58313116, task_pb.inventory_entry, "inventory.img", single=True, prefix=None)
PSTREE = _k("pstree", "PSTREE", 0x50273030, task_pb.pstree_entry, "pstree.img")
CORE = _k("core", "CORE", 0x55053847, task_pb.core_entry, "core-{id}.img", single=True)
IDS = _k("ids", "IDS", 0x54432030, task_pb.task_kobj_ids_entry, "ids-{id}.img", single=True)
MM = _k("mm", "MM", 0x57492820, mm_pb.mm_entry, "mm-{id}.img", single=True)
PAGEMAP = _k("pagemap", "PAGEMAP", 0x56084025, mm_pb.pagemap_entry, "pagemap-{id}.img", head=mm_pb.pagemap_head)
PAGES = _k("pages", "PAGES", None, None, "pages-{id}.img")
FDINFO = _k("fdinfo", "FDINFO", 0x56213732, files_pb.fdinfo_entry, "fdinfo-{id}.img")
FILES = _k("files", "FILES", 0x56303138, files_pb.file_entry, "files.img")
FS = _k("fs", "FS", 0x51403912, files_pb.fs_entry, "fs-{id}.img", single=True)
TTY_INFO = _k("tty-info", "TTY_INFO", 0x59453036, files_pb.tty_info_entry, "tty-info.img")
#: what a pty end's reader had not read (criu/tty.c tty_do_dump_queued_data)
TTY_DATA = _k("tty-data", "TTY_DATA", 0x59413026, files_pb.tty_data_entry, "tty-data.img")
TIMENS = _k("timens", "TIMENS", 0x43114433, ns_pb.timens_entry, "timens-{id}.img", single=True)
CGROUP = _k("cgroup", "CGROUP", 0x59383330, ns_pb.cgroup_entry, "cgroup.img", single=True)
SECCOMP = _k("seccomp", "SECCOMP", 0x64413049, task_pb.seccomp_entry, "seccomp.img", single=True)
UTSNS = _k("utsns", "UTSNS", 0x54473203, ns_pb.utsns_entry, "utsns-{id}.img", single=True)
IPCNS_VAR = _k("ipcns-var", "IPC_VAR", 0x53115007, ns_pb.ipc_var_entry, "ipcns-var-{id}.img", single=True)
IPCNS_SHM = _k("ipcns-shm", "IPCNS_SHM", 0x46283044, ns_pb.ipc_shm_entry, "ipcns-shm-{id}.img")
MOUNTPOINTS = _k("mountpoints", "MNTS", 0x55563928, ns_pb.mnt_entry, "mountpoints-{id}.img")
NETNS = _k("netns", "NETNS", 0x55933752, net_pb.netns_entry, "netns-{id}.img", single=True)
PIPES_DATA = _k(
    "pipes-data", "PIPES_DATA", 0x56453709, files_pb.pipe_data_entry, "pipes-data.img", payload_fields=("bytes",)
)
FIFO_DATA = _k(
    "fifo-data", "FIFO_DATA", 0x59333054, files_pb.pipe_data_entry, "fifo-data.img", payload_fields=("bytes",)
)
SK_QUEUES = _k(
    "sk-queues", "SK_QUEUES", 0x56264026, net_pb.sk_packet_entry, "sk-queues.img", payload_fields=("length",)
)
TCP_STREAM = _k(
    "tcp-stream", "TCP_STREAM", 0x51465506, net_pb.tcp_stream_entry, "tcp-stream-{id}.img",
    single=True, payload_fields=("inq_len", "outq_len"), id_hex=True,
)  # fmt: skip
USERNS = _k("userns", "USERNS", 0x55474906, ns_pb.userns_entry, "userns-{id}.img", single=True)
#: a tmpfs's files as `tar --create --gzip` writes them (criu 3.17 names it with ".img")
TMPFS_DEV = _k("tmpfs-dev", "TMPFS_DEV", None, None, "tmpfs-dev-{id}.tar.gz.img")
STATS = _k("stats", "STATS", 0x57093306, task_pb.stats_entry, "stats-dump", single=True, prefix=SERVICE_MAGIC)

KINDS: tuple[ImageKind, ...] = (
    INVENTORY, PSTREE, CORE, IDS, MM, PAGEMAP, PAGES, FDINFO, FILES, FS, TTY_INFO, TTY_DATA, TIMENS, CGROUP,
    SECCOMP, UTSNS, IPCNS_VAR, IPCNS_SHM, MOUNTPOINTS, NETNS, PIPES_DATA, FIFO_DATA, SK_QUEUES, TCP_STREAM, STATS,
    TMPFS_DEV, USERNS,
    # Images CRIU 3.17 reads but no longer writes by default (their entries moved into core and
    # files.img), and the rarer ones; listed so that any image in a directory decodes.
    _k("creds", "CREDS", 0x54023547, task_pb.creds_entry, "creds-{id}.img", single=True),
    _k("vmas", "VMAS", 0x54123737, mm_pb.vma_entry, "vmas-{id}.img"),
    _k("reg-files", "REG_FILES", 0x50363636, files_pb.reg_file_entry, "reg-files.img"),
    _k("tty-files", "TTY_FILES", 0x59433025, files_pb.tty_file_entry, "tty-files.img"),
    _k("pipes", "PIPES", 0x56513555, files_pb.pipe_entry, "pipes.img"),
    _k("fifo", "FIFO", 0x58364939, files_pb.fifo_entry, "fifo.img"),
    _k("unixsk", "UNIXSK", 0x54373943, net_pb.unix_sk_entry, "unixsk.img"),
    _k("inetsk", "INETSK", 0x56443851, net_pb.inet_sk_entry, "inetsk.img"),
    _k("packetsk", "PACKETSK", 0x60454618, net_pb.packet_sock_entry, "packetsk.img"),
    _k("netlinksk", "NETLINK_SK", 0x58005614, net_pb.netlink_sk_entry, "netlinksk.img"),
    _k("eventfd", "EVENTFD_FILE", 0x44523722, files_pb.eventfd_file_entry, "eventfd.img"),
    _k("eventpoll", "EVENTPOLL_FILE", 0x45023858, files_pb.eventpoll_file_entry, "eventpoll.img"),
    _k("eventpoll-tfd", "EVENTPOLL_TFD", 0x44433746, files_pb.eventpoll_tfd_entry, "eventpoll-tfd.img"),
    _k("signalfd", "SIGNALFD", 0x57323820, files_pb.signalfd_entry, "signalfd.img"),
    _k("timerfd", "TIMERFD", 0x50493712, files_pb.timerfd_entry, "timerfd.img"),
    _k("inotify", "INOTIFY_FILE", 0x48424431, files_pb.inotify_file_entry, "inotify.img"),
    _k("inotify-wd", "INOTIFY_WD", 0x54562009, files_pb.inotify_wd_entry, "inotify-wd.img"),
    _k("fanotify", "FANOTIFY_FILE", 0x55096122, files_pb.fanotify_file_entry, "fanotify.img"),
    _k("fanotify-mark", "FANOTIFY_MARK", 0x56506035, files_pb.fanotify_mark_entry, "fanotify-mark.img"),
    _k("ns-files", "NS_FILES", 0x61394011, files_pb.ns_file_entry, "ns-files.img"),
    _k("tunfile", "TUNFILE", 0x57143751, files_pb.tunfile_entry, "tunfile.img"),
    _k("ext-files", "EXT_FILES", 0x59255641, files_pb.ext_file_entry, "ext-files.img"),
    _k("memfd", "MEMFD_INODE", 0x48453499, files_pb.memfd_inode_entry, "memfd.img"),
    _k("file-locks", "FILE_LOCKS", 0x54323616, files_pb.file_lock_entry, "filelocks.img"),
    _k("remap-fpath", "REMAP_FPATH", 0x59133954, files_pb.remap_file_path_entry, "remap-fpath.img"),
    _k("ghost-file", "GHOST_FILE", 0x52583605, files_pb.ghost_chunk_entry, "ghost-file-{id}.img",
       head=files_pb.ghost_file_entry, payload_fields=("len",), id_hex=True, head_data_field="chunks"),
    _k("sigacts", "SIGACT", 0x55344201, task_pb.sa_entry, "sigacts-{id}.img"),
    _k("itimers", "ITIMERS", 0x57464056, task_pb.itimer_entry, "itimers-{id}.img"),
    _k("posix-timers", "POSIX_TIMERS", 0x52603957, task_pb.posix_timer_entry, "posix-timers-{id}.img"),
    _k("rlimit", "RLIMIT", 0x57113925, task_pb.rlimit_entry, "rlimit-{id}.img"),
    _k("signal", "SIGNAL", 0x59255647, task_pb.siginfo_entry, "signal-p-{id}.img"),
    _k("pidns", "PIDNS", 0x61157326, ns_pb.pidns_entry, "pidns-{id}.img", single=True),
    _k("irmap-cache", "IRMAP_CACHE", 0x57004059, files_pb.irmap_cache_entry, "irmap-cache", prefix=SERVICE_MAGIC),
    # Raw files: the output of ip/iptables/nft/tar, kept opaque.
    _k("ifaddr", "IFADDR", None, None, "ifaddr-{id}.img"),
    _k("route", "ROUTE", None, None, "route-{id}.img"),
    _k("route6", "ROUTE6", None, None, "route6-{id}.img"),
    _k("rule", "RULE", None, None, "rule-{id}.img"),
    _k("iptables", "IPTABLES", None, None, "iptables-{id}.img"),
    _k("ip6tables", "IP6TABLES", None, None, "ip6tables-{id}.img"),
    _k("nftables", "NFTABLES", None, None, "nftables-{id}.img"),
)  # fmt: skip

KINDS_BY_NAME: dict[str, ImageKind] = {k.name: k for k in KINDS}
KINDS_BY_MAGIC: dict[int, ImageKind] = {k.magic: k for k in KINDS if k.magic is not None}
assert len(KINDS_BY_NAME) == len(KINDS) and len(KINDS_BY_MAGIC) == sum(not k.raw for k in KINDS)

MEMFD_INODE = KINDS_BY_NAME["memfd"]
FILE_LOCKS = KINDS_BY_NAME["file-locks"]
REMAP_FPATH = KINDS_BY_NAME["remap-fpath"]
GHOST_FILE = KINDS_BY_NAME["ghost-file"]
#: The contents of a shmem file (shared anonymous memory, memfd, System V segment), named by
#: its inode number; vaddr is the offset in the file. magic.h: SHMEM_PAGEMAP_MAGIC is
#: PAGEMAP_MAGIC, and crit shows them as PAGEMAP: a pagemap by another file name, which
#: decode_image tells by that name. Kept out of KINDS, whose magics are unique.
SHMEM_PAGEMAP = _k(
    "pagemap", "PAGEMAP", PAGEMAP.magic, mm_pb.pagemap_entry, "pagemap-shmem-{id}.img", head=mm_pb.pagemap_head
)

# Files an image directory may hold that are not images (criu's logs).
NOT_IMAGES = re.compile(r".*\.log|.*\.json|.*\.txt")


def kind_for_filename(filename: str) -> ImageKind | None:
    """The kind whose file-name pattern matches, for raw files and for naming checks."""
    for k in KINDS:
        if k.match(filename) is not None:
            return k
    if filename == "stats-restore":
        return STATS
    return None
