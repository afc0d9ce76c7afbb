"""Terminals: pseudo-terminal pairs are saved (files.img tty entries and tty-info.img), and
/dev/tty when it leads to a pty the same process holds (CRIU's "ctty": restore reopens
/dev/tty once the session has its pty back as its controlling terminal); other terminals
(consoles, serial lines, virtual terminals) are refused by name.

`TtyState` holds what CRIU's tty ioctls return for the file: for a pty master the termios,
locked termios, window size, session and process group are the slave's (the kernel answers
them from tty->link); session and pgrp of a non-master tty are 0 unless it is the controlling
tty of the task (TIOCGSID/TIOCGPGRP refuse otherwise). ``rdev`` is the kernel's dev_t
(MAJOR << 20 | MINOR), like FileIdentity.dev.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence

from ..criu import images
from ..criu.build.common import F, fown
from ..criu.build.files import ExtraImage, FileTable
from ..errors import UnsupportedError
from ..kernel.core.objects import Pointer, Struct
from ..kernel.fs.fdtable import file_fops_name, file_inode_ptr
from ..kernel.fs.tty import (
    TTY_EXCLUSIVE,
    TTY_PTY_LOCK,
    file_tty,
    ktermios_values,
    task_ctty,
    tty_driver_name,
    tty_index,
    tty_is_pty,
    tty_packet_mode,
    tty_pair_get_tty,
    tty_pgrp,
    tty_read_queue,
    tty_session,
    tty_test_flag,
    tty_winsize,
)
from ..kernel.task.pid import pid_nr_ns
from ..state import Fd, FileIdentity, FileState, OpenFile
from .base import ExtractContext, FileKind, Marks, Saved
from .ttydata import queued_as_criu_restores_it

__all__ = ["KIND", "TtyState", "new_encode_dev", "tty_info"]

TERMIOS_NCC = 19
PTY_DRIVERS = ("pty-master", "pty-slave")
#: criu/tty.c CTTY_INDEX: the index every /dev/tty file's tty-info is numbered by
CTTY_INDEX = 1006
HUNG_UP_FOPS = frozenset({"hung_up_tty_fops"})


@dataclasses.dataclass
class TtyState(FileState):
    index: int
    driver: str  # "pty-master", "pty-slave", "console", "serial", ...
    rdev: int
    termios: list[int]  # c_iflag, c_oflag, c_cflag, c_lflag, c_line, c_ispeed, c_ospeed
    cc: bytes
    termios_locked: list[int]
    cc_locked: bytes
    winsize: tuple[int, int, int, int]  # rows, cols, xpixel, ypixel
    sid: int  # 0 if none
    pgrp: int  # 0 if none
    locked: bool
    exclusive: bool
    packet_mode: bool
    uid: int = 0  # owner of the tty's device inode (CRIU tty_info uid/gid)
    gid: int = 0
    # what this end's reader has not read (criu's tty-data.img, written into the other end at restore)
    queued: bytes = b""
    # hung up (a pty slave whose master is closed): criu's tty-info then has no termios or window
    # size, and its restore opens the slave through a fake master it closes again
    hung: bool = False


def tty_state(file: Pointer, task: Struct, pid_ns: Pointer | Struct) -> TtyState:
    """What CRIU records of the tty a ``struct file *`` is open on, when `task` holds it
    (see the module doc for which end of a pty each value comes from)."""
    tty = file_tty(file)
    inode = file_inode_ptr(file)
    rdev = inode.i_rdev
    real = tty_pair_get_tty(tty)
    is_master = int(real) != int(tty)
    termios, cc = ktermios_values(real.termios)
    locked, cc_locked = ktermios_values(real.termios_locked)
    sid = pgrp = 0
    ctty = task_ctty(task)
    if is_master or (ctty is not None and int(ctty) == int(tty)):
        sid = pid_nr_ns(tty_session(real), pid_ns)
        pgrp = pid_nr_ns(tty_pgrp(real), pid_ns)
    driver = tty_driver_name(tty, rdev)
    # TIOCGPTLCK / TIOCGPKT answer from the end the file is on; CRIU asks only a pty's file
    pty = driver in PTY_DRIVERS
    return TtyState(
        index=CTTY_INDEX if driver == "ctty" else tty_index(tty),
        driver=driver,
        rdev=rdev,
        termios=termios,
        cc=cc,
        termios_locked=locked,
        cc_locked=cc_locked,
        winsize=tty_winsize(real),
        sid=sid,
        pgrp=pgrp,
        locked=pty and tty_test_flag(tty, TTY_PTY_LOCK),
        exclusive=tty_test_flag(tty, TTY_EXCLUSIVE),
        packet_mode=pty and tty_packet_mode(tty),
        uid=inode.i_uid.val,
        gid=inode.i_gid.val,
    )


def extract_tty(ctx: ExtractContext, f: OpenFile, file: Pointer) -> TtyState:
    """The `TtyState` of a terminal file; only pseudo-terminals can be saved, with what their
    reader has not read where criu's restore gives it back unchanged (ttydata.py)."""
    if file_fops_name(file, HUNG_UP_FOPS):
        return hung_slave_state(file, f.identity.path)
    state = tty_state(file, ctx.task, ctx.pid_ns)
    if state.driver == "ctty":
        _check_ctty(state, file, f.identity.path)
    elif state.driver not in PTY_DRIVERS:
        raise UnsupportedError(f"a {state.driver} terminal ({f.identity.path}), not a pseudo-terminal")
    queue = tty_read_queue(file_tty(file))
    if queue is None:
        raise UnsupportedError(f"a pseudo-terminal ({f.identity.path}) under a line discipline other than N_TTY")
    state.queued = queued_as_criu_restores_it(state, queue, f"a pseudo-terminal ({f.identity.path})")
    return state


def hung_slave_state(file: Pointer, path: str) -> TtyState:
    """A pty slave hung up when its master closed (zdtm pty04): what criu's dump keeps of it,
    whose every tty ioctl fails with EIO (the device, its owner, its index; no termios, window
    size, session or group). Another terminal hung up (by vhangup) is refused by name."""
    tty = file_tty(file)
    inode = file_inode_ptr(file)
    driver = tty_driver_name(tty, inode.i_rdev)
    if driver != "pty-slave":
        raise UnsupportedError(f"a terminal that was hung up ({path}), not a pty slave whose master closed")
    return TtyState(
        index=tty_index(tty),
        driver=driver,
        rdev=inode.i_rdev,
        termios=[0] * 7,
        cc=b"",
        termios_locked=[0] * 7,
        cc_locked=b"",
        winsize=(0, 0, 0, 0),
        sid=0,
        pgrp=0,
        locked=False,
        exclusive=False,
        packet_mode=False,
        uid=inode.i_uid.val,
        gid=inode.i_gid.val,
        hung=True,
    )


def _check_ctty(state: TtyState, file: Pointer, path: str) -> None:
    """/dev/tty as CRIU restores it: through the session's pty, which must still be the
    process's controlling terminal with the session leader's group in the foreground."""
    if not tty_is_pty(file_tty(file)):
        raise UnsupportedError(f"{path} leads to a terminal that is not a pseudo-terminal")
    if not state.sid:
        raise UnsupportedError(f"{path} leads to a terminal that is no longer the process's controlling terminal")
    if state.pgrp != state.sid:
        raise UnsupportedError(
            f"{path} leads to a terminal whose foreground process group ({state.pgrp}) is not its session's"
            f" ({state.sid}); CRIU restores a controlling terminal only to the session leader's group"
        )


def unsaved_tty_ends(tree: Sequence[Fd]) -> Callable[[Fd, Sequence[Fd]], str | None]:
    """What criu saves of a terminal only with another file in the dump: a pty slave with its
    master (tty_verify_active_pairs; a hung-up slave has none), /dev/tty through a pty of its
    session that the same process holds (tty_verify_ctty), and the bytes a pty master's reader
    has not read only with the slave (tty_dump_queued_data)."""
    ends = {(s.index, s.driver) for fd in tree if isinstance(s := fd.file.state, TtyState)}

    def check(fd: Fd, own: Sequence[Fd]) -> str | None:
        state = fd.file.state
        if not isinstance(state, TtyState):
            return None
        if state.driver == "pty-slave" and not state.hung and (state.index, "pty-master") not in ends:
            return (
                f"pty {state.index}'s slave, whose master no dumped process holds (criu's dump refuses it, and"
                " its restore would open it through a master of its own and hang it up)"
            )
        if state.queued and state.driver == "pty-master" and (state.index, "pty-slave") not in ends:
            return (
                f"{len(state.queued)} byte(s) queued for the reader of pty {state.index}'s master, whose slave no"
                " dumped process holds (CRIU saves them only with both ends)"
            )
        if state.driver != "ctty":
            return None
        for other_fd in own:
            o = other_fd.file.state
            if isinstance(o, TtyState) and o.driver in PTY_DRIVERS and o.sid == o.pgrp == state.sid:
                return None
        return (
            f"/dev/tty of session {state.sid}, whose pseudo-terminal the process does not hold at an fd"
            " saved in the dump (CRIU restores /dev/tty through it)"
        )

    return check


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
        type=F.CTTY if tty.driver == "ctty" else F.PTY,
        locked=tty.locked,
        exclusive=tty.exclusive,
        packet_mode=tty.packet_mode,
        sid=tty.sid,
        pgrp=tty.pgrp,
        rdev=new_encode_dev(tty.rdev),
    )
    if not tty.hung:  # criu's dump_tty_info stops before them on a hung-up terminal
        entry.termios.CopyFrom(termios(tty.termios, tty.cc))
        entry.termios_locked.CopyFrom(termios(tty.termios_locked, tty.cc_locked))
        entry.winsize.CopyFrom(
            F.winsize_entry(
                ws_row=tty.winsize[0], ws_col=tty.winsize[1], ws_xpixel=tty.winsize[2], ws_ypixel=tty.winsize[3]
            )
        )
    if tty.driver in PTY_DRIVERS:
        entry.pty.index = tty.index
    entry.dev, entry.uid, entry.gid = new_encode_dev(node.dev), tty.uid, tty.gid
    return entry


class TtyWriter:
    """A tty's files.img entry before its path's (CRIU's order), and tty-info.img."""

    fd_type = F.TTY

    def __init__(self) -> None:
        self.infos: dict[int, tuple[TtyState, FileIdentity]] = {}  # tty_info id -> state, device node

    def write(self, table: FileTable, f: OpenFile) -> int:
        assert isinstance(f.state, TtyState)
        fid, slot = table.reserve()
        regf = table.regular(f.identity, f.flags, f.pos, key=("tty-path", f.key))
        # CRIU's tty_gen_id(): index << 1, plus 1 for a pty master
        info_id = f.state.index << 1 | (f.state.driver == "pty-master")
        self.infos.setdefault(info_id, (f.state, f.identity))
        table.entries[slot] = F.file_entry(
            type=F.TTY,
            id=fid,
            tty=F.tty_file_entry(id=fid, tty_info_id=info_id, flags=f.flags, fown=fown(f.owner), regf_id=regf),
        )
        return fid

    def images(self, table: FileTable) -> list[ExtraImage]:
        infos = [tty_info(i, *t) for i, t in sorted(self.infos.items(), reverse=True)]
        out = [ExtraImage(images.TTY_INFO, list(infos))]
        data = [F.tty_data_entry(tty_id=i, data=s.queued) for i, s in self._queued_in_criu_order() if s.queued]
        if data:
            out.append(ExtraImage(images.TTY_DATA, list(data)))
        return out

    def _queued_in_criu_order(self) -> list[tuple[int, TtyState]]:
        """The ends of each pty pair, in criu's tty_dump_queued_data order: pairs last met first
        (each is moved to the head of its list), and in a pair the end met first."""
        order = [i for i, (state, _) in self.infos.items() if state.driver in PTY_DRIVERS]
        position = {i: n for n, i in enumerate(order)}
        # a pty's two tty-info ids differ in their lowest bit (tty_gen_id: index << 1 | master)
        pairs = [(i, i ^ 1) for i in order if position.get(i ^ 1, -1) > position[i]]
        return [(i, self.infos[i][0]) for pair in reversed(pairs) for i in pair]


KIND = FileKind(
    name="tty",
    noun="a terminal",
    marks=Marks(fops=("tty_fops", "ptmx_fops", "hung_up_tty_fops", "console_fops")),
    saved=Saved(
        writer=TtyWriter,
        fd_type=F.TTY,
        state_type=TtyState,
        extract=extract_tty,
        dangling=unsaved_tty_ends,
        in_flight=False,
    ),
)
