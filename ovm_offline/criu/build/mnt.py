"""The mount namespace: mountpoints-N.img, one mnt_entry per mount, as criu 3.17's
mount.c dump_mnt_ns writes it (entries in the reverse of mountinfo's order), and an archive
of each tmpfs in it (tmpfs-dev-N.tar.gz, N its device), which criu makes with
`tar --create --gzip --numeric-owner ... .` in the mount and restore unpacks with tar."""

from __future__ import annotations

import io
import stat
from typing import TYPE_CHECKING

from ...state import MountInfo, MountNamespaceState, TmpfsContents, TmpfsFile
from .. import images
from .common import N, NamespaceOut

if TYPE_CHECKING:
    import tarfile

__all__ = [
    "CRIU_FSTYPES",
    "MS_FLAG_OF_MNT_OPTION",
    "UnsavedMount",
    "mnt_entry",
    "mountpoints_entries",
    "tmpfs_archive",
    "write_mount_namespace",
]

#: criu's fstype codes (images/mnt.proto) of the file systems whose mounts we save, as its own
#: dump of the corpus's runc container writes them; a mount of another file system is refused
CRIU_FSTYPES = {"proc": 1, "sysfs": 2, "devtmpfs": 3, "tmpfs": 5, "devpts": 6, "mqueue": 14, "cgroup2": 23}

# criu's parse_mnt_flags: mountinfo's per-mount options as MS_* flags
MS_RDONLY = 0x1
MS_STRICTATIME = 0x1000000
MS_FLAG_OF_MNT_OPTION = {
    "nosuid": 0x2,
    "nodev": 0x4,
    "noexec": 0x8,
    "noatime": 0x400,
    "nodiratime": 0x800,
    "relatime": 0x200000,
}
# the super block flags criu keeps (parse_sb_opt): ro, sync, mand, dirsync, lazytime
SB_FLAGS_KEPT = 0x1 | 0x10 | 0x40 | 0x80 | 0x2000000


class UnsavedMount(ValueError):
    """A mount mountpoints-N cannot describe (its message names the mount and why)."""


def _ms_flags(mount_options: tuple[str, ...]) -> int:
    flags = MS_RDONLY if "ro" in mount_options else 0
    for name in mount_options:
        flags |= MS_FLAG_OF_MNT_OPTION.get(name, 0)
    if "relatime" not in mount_options and "noatime" not in mount_options:
        flags |= MS_STRICTATIME  # neither said: the kernel's default then is strict atime
    return flags


def _options(info: MountInfo) -> str:
    if info.fs_options is None:
        raise UnsavedMount(f"mount {info.mnt_id} ({info.fstype} on {info.mount_point}): its options are not known")
    if info.fstype == "devpts":
        # criu mounts devpts again as a new instance, and says so in the options it keeps
        return ",".join(o for o in (info.fs_options, "newinstance") if o)
    return info.fs_options


def mnt_entry(info: MountInfo, cgroup_root: str = "/", ext_key: str | None = None) -> N.mnt_entry:
    """The mnt_entry of one mount; `cgroup_root` is the cgroup namespace's root, which a
    cgroup2 mount's root is written relative to; `ext_key` names the mount as external (what
    the restoring side binds in its place, as `criu --external mnt[POINT]:KEY` names it)."""
    if info.mount_point is None:
        raise UnsavedMount(f"mount {info.mnt_id} ({info.fstype}): outside the tree's root")
    where = f"mount {info.mnt_id} ({info.fstype} on {info.mount_point})"
    code = CRIU_FSTYPES.get(info.fstype)
    if code is None:
        raise UnsavedMount(f"{where}: a file system not saved")
    # criu 3.17's parse_mnt_flags has no bit for nosymfollow, and restores every mount bindable:
    # written without them, the restored mount would follow symlinks or take binds it refused
    unsaved = [o for o in info.mount_options if o not in MS_FLAG_OF_MNT_OPTION and o not in ("ro", "rw")]
    if info.unbindable:
        unsaved.append("unbindable")
    if unsaved:
        raise UnsavedMount(f"{where}: {', '.join(unsaved)}, which criu 3.17's images do not carry")
    root = info.root
    if info.fstype == "cgroup2" and cgroup_root != "/":
        if root != cgroup_root and not root.startswith(cgroup_root + "/"):
            raise UnsavedMount(f"{where}: root {root} outside {cgroup_root}")
        root = root[len(cgroup_root) :] or "/"
    entry = N.mnt_entry(
        fstype=code,
        mnt_id=info.mnt_id,
        root_dev=info.dev,
        parent_mnt_id=info.parent_id,
        flags=_ms_flags(info.mount_options),
        root=root,
        mountpoint=info.mount_point,
        source=info.source,
        options=_options(info),
        shared_id=info.shared_group or 0,
        master_id=info.master_group or 0,
        sb_flags=info.sb_flags & SB_FLAGS_KEPT,
    )
    if ext_key is not None:
        entry.ext_key = ext_key
    return entry


def mountpoints_entries(
    mounts: list[MountInfo], cgroup_root: str = "/", external: dict[str, str] | None = None
) -> list[N.mnt_entry]:
    """mountpoints-N's entries for the mounts of a namespace in mountinfo's order; `external`
    maps a mount point to the key it is external by (a runtime's masked paths and bind mounts)."""
    external = external or {}
    return [mnt_entry(info, cgroup_root, external.get(info.mount_point or "")) for info in reversed(mounts)]


def _kdev(dev: int) -> tuple[int, int]:
    return dev >> 20, dev & ((1 << 20) - 1)


#: tar's member type (tarfile's constant of that name) of each kind of file a tmpfs holds;
#: sockets it skips, as GNU tar does. tarfile itself is imported only when a tmpfs is archived:
#: it was 2 ms of every dump's start.
_TAR_TYPE_NAMES = {
    stat.S_IFREG: "REGTYPE",
    stat.S_IFDIR: "DIRTYPE",
    stat.S_IFLNK: "SYMTYPE",
    stat.S_IFCHR: "CHRTYPE",
    stat.S_IFBLK: "BLKTYPE",
    stat.S_IFIFO: "FIFOTYPE",
}


def _tar_member(file: TmpfsFile, first_path: dict[int, str]) -> tuple[tarfile.TarInfo, bytes | None] | None:
    import tarfile

    type_name = _TAR_TYPE_NAMES.get(stat.S_IFMT(file.mode))
    if type_name is None:
        return None
    kind = getattr(tarfile, type_name)
    info = tarfile.TarInfo("./" + file.path if file.path else ".")
    info.mode, info.uid, info.gid, info.mtime = stat.S_IMODE(file.mode), file.uid, file.gid, file.mtime
    info.type = kind
    if kind != tarfile.DIRTYPE and file.nlink > 1:
        seen = first_path.setdefault(file.ino, info.name)
        if seen != info.name:  # a second name of the same file (tar --check-links)
            info.type, info.linkname = tarfile.LNKTYPE, seen
            return info, None
    if kind == tarfile.SYMTYPE:
        info.linkname = (file.target or b"").decode("utf-8", "surrogateescape")
    elif kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = _kdev(file.rdev)
    elif kind == tarfile.REGTYPE:
        info.size = len(file.data)
        return info, file.data
    return info, None


def tmpfs_archive(contents: TmpfsContents) -> bytes:
    """tmpfs-dev-N.tar.gz: the files of a tmpfs as GNU tar archives them from its root
    ("./", "./null", ...), numeric owners, every directory before what it holds."""
    import gzip
    import tarfile

    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            first_path: dict[int, str] = {}
            for file in contents.files:
                member = _tar_member(file, first_path)
                if member is not None:
                    info, data = member
                    tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return raw.getvalue()


def write_mount_namespace(ns: MountNamespaceState, ns_image_id: int, out: NamespaceOut) -> None:
    """mountpoints-N.img and a tmpfs-dev-N.tar.gz of each tmpfs the namespace archives."""
    out.put(images.MOUNTPOINTS, mountpoints_entries(ns.mounts, ns.cgroup_root, ns.external), ns_image_id)
    for contents in ns.tmpfs:
        out.put_raw(images.TMPFS_DEV, tmpfs_archive(contents), contents.dev)
