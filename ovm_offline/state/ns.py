"""Namespaces and cgroups of a dumped tree."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from .mm import SharedMemory

__all__ = [
    "CgroupPerms",
    "CgroupProperty",
    "CgroupDir",
    "CgroupNamespaceState",
    "MountNamespaceState",
    "NetNamespaceState",
    "NamespaceIds",
    "TmpfsContents",
    "TmpfsFile",
    "UserNamespaceState",
    "IpcShmSegment",
    "IpcNamespaceState",
    "TreeNamespaces",
    "UtsNamespaceState",
]


@dataclasses.dataclass
class CgroupPerms:
    """Mode (with the file type bits), owner and group of a cgroup file or directory."""

    mode: int
    uid: int
    gid: int


@dataclasses.dataclass
class CgroupProperty:
    """A file of a cgroup directory CRIU saves (for cgroup.procs only its permissions)."""

    name: str
    value: str
    perms: CgroupPerms | None = None


@dataclasses.dataclass
class CgroupDir:
    """A directory of the cgroup v2 hierarchy: the cgroup of a dumped task, or one below
    it (CRIU saves the whole subtree so that restore can recreate it). `path` is from the
    hierarchy's root ("/ovmbox"); children are in readdir order."""

    path: str
    perms: CgroupPerms
    properties: list[CgroupProperty] = field(default_factory=list)
    children: list[CgroupDir] = field(default_factory=list)


# --- the process -----------------------------------------------------------------------------


@dataclasses.dataclass
class NamespaceIds:
    """Namespace inode numbers (the kernel's ns_common.inum); None for a kind of namespace the
    guest's kernel does not have (time namespaces before 5.6)."""

    pid: int | None
    net: int | None
    ipc: int | None
    uts: int | None
    mnt: int | None
    user: int | None
    cgroup: int | None
    time: int | None


@dataclasses.dataclass
class IpcShmSegment:
    """A System V shared memory segment (``struct shmid_kernel``) as ipcns-shm.img holds it."""

    id: int  # the shmid (IDR index plus sequence number)
    key: int  # the IPC key as an unsigned 32-bit number (IPC_PRIVATE is 0)
    uid: int
    gid: int
    cuid: int
    cgid: int
    mode: int  # permission bits plus SHM_DEST/SHM_LOCKED as the kernel keeps them
    size: int  # shm_segsz in bytes
    contents: SharedMemory  # its shmem file (inode number = id) and the pages to save


@dataclasses.dataclass
class IpcNamespaceState:
    """An IPC namespace of its own around the dumped tree (CRIU saves it only then): the
    sysctls ipcns-var.img holds (kernel.sem, msg*, shm*, fs.mqueue.*; next ids None while
    unset, i.e. -1) and the System V shared memory segments, in id index order."""

    inum: int
    sem_ctls: list[int]  # semmsl, semmns, semopm, semmni
    msg_ctlmax: int
    msg_ctlmnb: int
    msg_ctlmni: int
    shm_ctlmax: int
    shm_ctlall: int
    shm_ctlmni: int
    shm_rmid_forced: int
    mq_queues_max: int
    mq_msg_max: int
    mq_msgsize_max: int
    mq_msg_default: int
    mq_msgsize_default: int
    msg_next_id: int | None = None
    sem_next_id: int | None = None
    shm_next_id: int | None = None
    shm_segments: list[IpcShmSegment] = field(default_factory=list)


@dataclasses.dataclass
class UtsNamespaceState:
    """The tree's own UTS namespace, as utsns-N.img holds it: what uname(2) reports in it."""

    inum: int
    nodename: str
    domainname: str


@dataclasses.dataclass(frozen=True)
class MountInfo:
    """One mount as a line of /proc/PID/mountinfo describes it, less the file system's own
    options. `mount_point` is None for a mount the task's root does not reach (mountinfo
    leaves it out)."""

    mnt_id: int
    parent_id: int
    dev: int  # the super block's s_dev, in the kernel's encoding (MAJOR << 20 | MINOR)
    root: str  # mnt_root inside its file system
    mount_point: str | None
    # the per-mount options as mountinfo names them, "ro" or "rw" first ("rw", "nosuid", "relatime")
    mount_options: tuple[str, ...]
    unbindable: bool
    shared_group: int | None  # shared:N
    master_group: int | None  # master:N (a slave of that peer group)
    fstype: str
    source: str
    sb_flags: int
    fs_options: str | None  # the file system's own ("size=65536k,mode=755"); None: not known


@dataclasses.dataclass
class TmpfsFile:
    """One file of a tmpfs as an archive of it holds it. `path` is from the file system's
    root ("" for the root itself); values as the guest's kernel keeps them (ids of the initial
    user namespace, `rdev` in the kernel's MAJOR << 20 | MINOR)."""

    path: str
    mode: int  # file type and permission bits
    uid: int
    gid: int
    mtime: int  # seconds
    rdev: int
    ino: int
    nlink: int
    target: bytes | None = None  # a symlink's
    data: bytes = b""  # a regular file's


@dataclasses.dataclass
class TmpfsContents:
    """The files of one tmpfs super block a mount namespace shows, which CRIU archives
    (tmpfs-dev-N.tar.gz, N the super block's device)."""

    dev: int
    mount_point: str
    files: list[TmpfsFile]


@dataclasses.dataclass
class MountNamespaceState:
    """The tree's own mount namespace, as mountpoints-N.img and the tmpfs archives hold it:
    the mounts its root sees, in mountinfo's order; the ones its runtime names external
    ({mount point: key}, as `criu --external mnt[POINT]:KEY`); the root of its cgroup
    namespace (a cgroup2 mount's root is written relative to it)."""

    inum: int
    mounts: list[MountInfo]
    external: dict[str, str]
    cgroup_root: str
    tmpfs: list[TmpfsContents]


@dataclasses.dataclass
class CgroupNamespaceState:
    """The tree's own cgroup namespace: the path of its root cgroup on the v2 hierarchy, which
    cgroup.img's sets name as their namespace prefix."""

    inum: int
    root: str


@dataclasses.dataclass
class NetNamespaceState:
    """The tree's own network namespace where its runtime recreates it empty at restore (runc
    checkpoints with `criu --empty-ns network`): nothing of it is saved but its id."""

    inum: int


@dataclasses.dataclass
class UserNamespaceState:
    """The tree's own user namespace, as userns-N.img holds it: its uid and gid maps, each a
    list of (first id inside, first kernel id, count) extents."""

    inum: int
    uid_map: list[tuple[int, int, int]]
    gid_map: list[tuple[int, int, int]]


@dataclasses.dataclass
class TreeNamespaces:
    """The namespaces of its own a dumped tree lives in and CRIU saves (None: the tree shares
    the guest's, which CRIU leaves to the restoring system)."""

    ipc: IpcNamespaceState | None = None
    uts: UtsNamespaceState | None = None
    mnt: MountNamespaceState | None = None
    cgroup: CgroupNamespaceState | None = None
    net: NetNamespaceState | None = None
    user: UserNamespaceState | None = None
