"""Sockets: files.img entries of UNIX sockets (in CRIU's postponed-peer order) and their
queued bytes (sk-queues.img)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import UnsupportedError
from ...state import OpenFile
from .common import NET, F, fown

if TYPE_CHECKING:
    from .files import FileTable

__all__ = ["UnixSockets"]


class UnixSockets:
    """files.img entries and sk-queues.img of UNIX sockets, in CRIU's order. A socket gets
    its file id when met; its entry is written then unless its peer has not been met yet,
    in which case it waits and is written right after that peer (CRIU's postponed
    sockets). Queued bytes are saved when a socket is met."""

    def __init__(self, table: FileTable) -> None:
        self._table = table
        self._seen: set[int] = set()  # socket inodes met
        self._waiting: dict[int, list] = {}  # peer inode -> entries waiting for it
        self.queues: list[tuple[NET.sk_packet_entry, bytes]] = []

    def met(self, fid: int, f: OpenFile) -> None:
        u = f.unix
        entry = F.file_entry(type=F.UNIXSK, id=fid, usk=self._entry(fid, f))
        self._seen.add(u.ino)
        self.queues += [(NET.sk_packet_entry(id_for=fid, length=len(p.data)), p.data) for p in u.queue]
        if u.peer and u.peer not in self._seen:
            self._waiting.setdefault(u.peer, []).append(entry)
            return
        self._table.entries.append(entry)
        self._table.entries.extend(self._waiting.pop(u.ino, []))

    def check_complete(self) -> None:
        """Every postponed socket found its peer (else a connection leaves the dump)."""
        if self._waiting:
            peers = ", ".join(f"socket:[{ino}]" for ino in sorted(self._waiting))
            raise UnsupportedError(f"UNIX sockets are connected to sockets outside the dumped processes ({peers})")

    def _entry(self, fid: int, f: OpenFile) -> NET.unix_sk_entry:
        u, o = f.unix, f.unix.options
        opts = NET.sk_opts_entry(
            so_sndbuf=o.sndbuf,
            so_rcvbuf=o.rcvbuf,
            so_snd_tmo_sec=o.snd_timeout[0],
            so_snd_tmo_usec=o.snd_timeout[1],
            so_rcv_tmo_sec=o.rcv_timeout[0],
            so_rcv_tmo_usec=o.rcv_timeout[1],
            reuseaddr=o.reuseaddr,
            so_priority=o.priority,
            so_rcvlowat=o.rcvlowat,
            so_mark=o.mark,
            so_passcred=o.passcred,
            so_passsec=o.passsec,
            so_dontroute=o.dontroute,
            so_no_check=o.no_check,
            so_reuseport=o.reuseport,
            so_broadcast=o.broadcast,
            so_keepalive=o.keepalive,
            so_oobinline=int(o.oobinline),
            so_buf_lock=o.buf_lock,
        )
        entry = NET.unix_sk_entry(
            id=fid,
            ino=u.ino,
            type=u.type,
            state=u.state,
            flags=f.flags,
            uflags=0,
            backlog=u.backlog,
            peer=u.peer,
            fown=fown(f.owner),
            opts=opts,
            name=u.name,
            ns_id=self._table.net_ns_id(u.net_ns),
        )
        if u.shutdown:
            entry.shutdown = u.shutdown  # RCV_SHUTDOWN 1 | SEND_SHUTDOWN 2, as sk_shutdown's values
        if u.bound is not None:
            entry.file_perms.mode, entry.file_perms.uid, entry.file_perms.gid = u.bound
        if u.name_deleted:
            entry.deleted = True
        return entry
