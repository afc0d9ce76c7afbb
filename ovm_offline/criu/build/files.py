"""files.img and what hangs off its entries: regular files, ttys (tty-info.img), pipes and
FIFOs (pipes-data, fifo-data), eventfd/signalfd/timerfd/epoll entries; UNIX sockets are in
net.py. File ids are handed out in the order CRIU meets files."""

from __future__ import annotations

import struct
from collections.abc import Callable

from ...errors import UnsupportedError
from ...state import FileIdentity, OpenFile, Owner, PipeState, TtyState
from .common import F, fown
from .net import UnixSockets

__all__ = ["ANON_FILE_KINDS", "FD_CLOEXEC", "FD_TYPES", "FileTable", "anon_file_entry", "new_encode_dev", "tty_info"]

FD_CLOEXEC = 1
TERMIOS_NCC = 19
FD_TYPES = {"reg": F.REG, "tty": F.TTY, "pipe": F.PIPE, "fifo": F.FIFO, "unix": F.UNIXSK}
FD_TYPES.update({"eventfd": F.EVENTFD, "signalfd": F.SIGNALFD, "timerfd": F.TIMERFD, "eventpoll": F.EVENTPOLL})


class FileTable:
    """files.img: one entry per struct file (or per mapped file, as CRIU does), ids in the order met."""

    def __init__(self) -> None:
        self.entries: list = []
        self._by_key: dict[tuple, int] = {}
        self.tty_infos: dict[int, tuple[TtyState, FileIdentity]] = {}  # tty_info id -> state, device node
        self.pipe_data: dict[int, PipeState] = {}  # pipe_id -> pipe, in pipes-data.img order
        self.fifo_data: dict[int, PipeState] = {}  # the same for fifo-data.img
        self.unix = UnixSockets(self)
        self._last_id = 0
        #: net namespace inode -> its id in the dump (set by write_dump)
        self.net_ns_id: Callable[[int], int] = lambda inum: 0

    def _next_id(self) -> int:
        # ids are handed out when a file is met; some entries are written later (CRIU writes
        # a FIFO's path before the FIFO, and a UNIX socket once its peer is met), so an id is
        # not an index into `entries`
        self._last_id += 1
        return self._last_id

    def reserve(self) -> tuple[int, int]:
        """A new file id and the index of a placeholder in `entries` for its entry, to be
        filled once the entries it refers to (a tty's path, a memfd's inode) are made."""
        self.entries.append(None)
        return self._next_id(), len(self.entries) - 1

    def regular(
        self,
        identity: FileIdentity,
        flags: int = 0,
        pos: int = 0,
        key: tuple | None = None,
        owner: Owner | None = None,
        build_id: bytes | None = None,
    ) -> int:
        key = key or ("path", identity.path, flags, pos)
        if key in self._by_key:
            return self._by_key[key]
        fid = self._next_id()
        build_id = build_id or identity.build_id
        reg = F.reg_file_entry(id=fid, flags=flags, pos=pos, fown=fown(owner), name=identity.path, mode=identity.mode)
        if _has_size(identity, flags):
            reg.size = identity.size
        if build_id:
            reg.build_id.extend(struct.unpack(f"<{len(build_id) // 4}I", build_id[: len(build_id) // 4 * 4]))
        self.entries.append(F.file_entry(type=F.REG, id=fid, reg=reg))
        self._by_key[key] = fid
        return fid

    def open_file(self, f: OpenFile) -> int:
        key = ("file", f.key)
        if key in self._by_key:
            return self._by_key[key]
        if f.kind == "tty" and f.tty is not None:
            fid, slot = self.reserve()  # keep CRIU's order: the tty's entry, then its path's
            self._by_key[key] = fid
            regf = self.regular(f.identity, f.flags, f.pos, key=("tty-path", f.key))
            info_id = self._tty_info_id(f.tty, f.identity)
            self.entries[slot] = F.file_entry(
                type=F.TTY,
                id=fid,
                tty=F.tty_file_entry(id=fid, tty_info_id=info_id, flags=f.flags, fown=fown(f.owner), regf_id=regf),
            )
            return fid
        if f.kind == "pipe" and f.pipe is not None:
            fid = self._next_id()
            self.entries.append(
                F.file_entry(
                    type=F.PIPE,
                    id=fid,
                    pipe=F.pipe_entry(id=fid, pipe_id=f.pipe.pipe_id, flags=f.flags, fown=fown(f.owner)),
                )
            )
            self._by_key[key] = fid
            self._pipe_data(f, f.pipe)
            return fid
        if f.kind == "fifo" and f.pipe is not None:
            fid = self._next_id()
            self._by_key[key] = fid
            # CRIU writes the FIFO's path entry first, then the FIFO naming it
            regf = self.regular(f.identity, f.flags, f.pos, key=("fifo-path", f.key))
            self.entries.append(
                F.file_entry(type=F.FIFO, id=fid, fifo=F.fifo_entry(id=fid, pipe_id=f.pipe.pipe_id, regf_id=regf))
            )
            if (f.flags & O_ACCMODE) != O_WRONLY:
                self.fifo_data.setdefault(f.pipe.pipe_id, f.pipe)
            return fid
        if f.kind == "unix" and f.unix is not None:
            fid = self._next_id()
            self._by_key[key] = fid
            self.unix.met(fid, f)
            return fid
        # ids are consumed when handed out, so only files of these kinds may take one here
        anon = anon_file_entry(f, self._next_id()) if f.kind in ANON_FILE_KINDS else None
        if anon is not None:
            self.entries.append(anon)
            self._by_key[key] = anon.id
            return anon.id
        if f.kind != "reg":
            raise UnsupportedError(f"cannot save open files of kind {f.kind!r} yet ({f.identity.path})")
        return self.regular(f.identity, f.flags, f.pos, key=key, owner=f.owner, build_id=f.build_id)

    def _pipe_data(self, f: OpenFile, pipe: PipeState) -> None:
        """CRIU's dump_one_pipe_data(): a pipe's data is saved once, when the pipe is first
        met through an end that can read (its data could not be read through a write-only one)."""
        if (f.flags & O_ACCMODE) == O_WRONLY or pipe.pipe_id in self.pipe_data:
            return
        self.pipe_data[pipe.pipe_id] = pipe

    def _tty_info_id(self, tty: TtyState, node: FileIdentity) -> int:
        # CRIU's tty_gen_id(): index << 1, plus 1 for a pty master
        info_id = tty.index << 1 | (tty.driver == "pty-master")
        self.tty_infos.setdefault(info_id, (tty, node))
        return info_id


O_ACCMODE, O_WRONLY, O_APPEND = 0o3, 0o1, 0o2000


def _has_size(identity: FileIdentity, flags: int) -> bool:
    """CRIU records (and restore checks) the size of regular files, except those opened
    write-only for appending: logs may legitimately grow (CRIU's should_check_size)."""
    if (identity.mode & 0o170000) != 0o100000:
        return False
    return not ((flags & O_ACCMODE) == O_WRONLY and flags & O_APPEND)


NSEC_PER_SEC = 10**9
#: open-file kinds anon_file_entry() writes
ANON_FILE_KINDS = ("eventfd", "signalfd", "timerfd", "eventpoll")


def anon_file_entry(f: OpenFile, fid: int) -> F.file_entry | None:
    """The files.img entry CRIU writes for an eventfd, signalfd, timerfd or epoll file (the
    values its fdinfo parser reads), or None for another kind or one without its state."""
    owner = fown(f.owner)
    if f.kind == "eventfd" and f.eventfd is not None:
        # no field for EFD_SEMAPHORE in CRIU 3.17: extraction refuses semaphore eventfds
        return F.file_entry(
            type=F.EVENTFD, id=fid, efd=F.eventfd_file_entry(id=fid, flags=f.flags, fown=owner, counter=f.eventfd.count)
        )
    if f.kind == "signalfd" and f.signalfd is not None:
        return F.file_entry(
            type=F.SIGNALFD,
            id=fid,
            sgfd=F.signalfd_entry(id=fid, flags=f.flags, fown=owner, sigmask=f.signalfd.sigmask),
        )
    if f.kind == "timerfd" and f.timerfd is not None:
        t = f.timerfd
        return F.file_entry(
            type=F.TIMERFD,
            id=fid,
            tfd=F.timerfd_entry(
                id=fid,
                flags=f.flags,
                fown=owner,
                clockid=t.clock_id,
                ticks=t.ticks,
                settime_flags=t.settime_flags,
                vsec=t.value_ns // NSEC_PER_SEC,
                vnsec=t.value_ns % NSEC_PER_SEC,
                isec=t.interval_ns // NSEC_PER_SEC,
                insec=t.interval_ns % NSEC_PER_SEC,
            ),
        )
    if f.kind == "eventpoll" and f.epoll is not None:
        # each target's own id stays 0: CRIU 3.17 embeds them in the epoll's entry and never sets it
        return F.file_entry(
            type=F.EVENTPOLL,
            id=fid,
            epfd=F.eventpoll_file_entry(
                id=fid,
                flags=f.flags,
                fown=owner,
                tfd=[
                    F.eventpoll_tfd_entry(
                        id=0, tfd=t.fd, events=t.events, data=t.data, dev=t.dev, inode=t.ino, pos=t.pos
                    )
                    for t in f.epoll.targets
                ],
            ),
        )
    return None


def new_encode_dev(dev: int) -> int:
    """stat()'s encoding of a kernel dev_t (major << 20 | minor), as CRIU records devices."""
    major, minor = dev >> 20, dev & 0xFFFFF
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


def tty_info(info_id: int, tty: TtyState, node: FileIdentity) -> F.tty_info_entry:
    def termios(flags: list[int], cc: bytes) -> F.termios_entry:
        # CRIU memcpy()s the NCCS=19 c_cc bytes into the front of its 19-word array; the words
        # after the fifth are whatever its stack held (the diff ignores them)
        packed = list(struct.unpack("<5I", cc[:TERMIOS_NCC].ljust(20, b"\0")))
        # CRIU's TCGETS fills glibc's struct termios, whose speed fields stay 0
        return F.termios_entry(
            c_iflag=flags[0],
            c_oflag=flags[1],
            c_cflag=flags[2],
            c_lflag=flags[3],
            c_line=flags[4],
            c_ispeed=0,
            c_ospeed=0,
            c_cc=packed + [0] * (TERMIOS_NCC - len(packed)),
        )

    entry = F.tty_info_entry(
        id=info_id,
        type=F.PTY,
        locked=tty.locked,
        exclusive=tty.exclusive,
        packet_mode=tty.packet_mode,
        sid=tty.sid,
        pgrp=tty.pgrp,
        rdev=new_encode_dev(tty.rdev),
        termios=termios(tty.termios, tty.cc),
        termios_locked=termios(tty.termios_locked, tty.cc_locked),
        winsize=F.winsize_entry(
            ws_row=tty.winsize[0], ws_col=tty.winsize[1], ws_xpixel=tty.winsize[2], ws_ypixel=tty.winsize[3]
        ),
    )
    entry.pty.index = tty.index
    entry.dev, entry.uid, entry.gid = new_encode_dev(node.dev), tty.uid, tty.gid
    return entry
