"""Kinds of open files ovm-offline recognises and refuses by name (or leaves out with
--skip-unsupported), each with how the kernel marks it."""

from __future__ import annotations

from ..kernel.net.sock import AF_NETLINK, AF_PACKET
from .base import S_IFSOCK, FileKind, Marks

__all__ = ["ANON", "OTHER_SOCKET", "REFUSED_ANON_KINDS", "SOCKET_KINDS"]

# include/linux/socket.h address families
SOCKET = Marks(fops=("socket_file_ops",), modes=(S_IFSOCK,))

#: sockets of families not saved yet (UNIX and IPv4/IPv6 sockets are saved: unix.py, inet.py)
SOCKET_KINDS = (
    FileKind("netlink", "a netlink socket", Marks(SOCKET.fops, SOCKET.modes, families=(AF_NETLINK,))),
    FileKind("packet", "a packet socket", Marks(SOCKET.fops, SOCKET.modes, families=(AF_PACKET,))),
)
#: a socket of another family, or one whose family cannot be read
OTHER_SOCKET = FileKind("socket", "a socket", SOCKET)

#: anon-inode files and others with file_operations of their own
REFUSED_ANON_KINDS = (
    # pidfd_fops became pidfs_file_operations in 6.9
    FileKind("pidfd", "a pidfd", Marks(fops=("pidfd_fops", "pidfs_file_operations"))),
    FileKind("userfaultfd", "a userfaultfd", Marks(fops=("userfaultfd_fops",))),
    FileKind("io_uring", "an io_uring instance", Marks(fops=("io_uring_fops",))),
    FileKind("bpf-map", "a BPF map", Marks(fops=("bpf_map_fops",))),
    FileKind("bpf-prog", "a BPF program", Marks(fops=("bpf_prog_fops",))),
    FileKind("perf", "a perf event", Marks(fops=("perf_fops",))),
    FileKind("memfd-secret", "a memfd_secret area", Marks(fops=("memfd_secret_fops",))),
)
#: an anon-inode file of a kind not known here; also what a file matching no row is
ANON = FileKind("anon", "an anonymous-inode file", Marks(mount="anon_inode_mnt"))
