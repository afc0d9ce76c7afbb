"""Terminals (``struct tty_struct``, ``struct tty_driver``, ``struct ktermios``).

An open tty ``struct file`` has ``private_data`` = ``struct tty_file_private`` whose
``tty`` is the ``struct tty_struct``; for a pty the two ends are two tty_structs
linked through ``tty->link``. Which end an ioctl reads matters: the termios, locked
termios, window size, session and process group of a pty pair live on the slave,
and the kernel answers TCGETS, TIOCGLCKTRMIOS, TIOCGWINSZ, TIOCGSID and TIOCGPGRP on
the master from the slave (tty_pair_get_tty); packet mode, the pty lock and
TIOCEXCL are read from the end the file is open on.

Driver types and tty->flags bits are #defines in include/linux/tty_driver.h and
include/linux/tty.h, identical in 6.1 and 6.12; an ISF with an enum of them (newer
kernels) is preferred.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ..core.objects import Pointer, Struct
from ..ds.list import pointer_chain

__all__ = [
    "TTY_EXCLUSIVE",
    "TTY_PTY_LOCK",
    "TtyReadQueue",
    "file_tty",
    "ktermios_values",
    "task_ctty",
    "tty_driver_name",
    "tty_index",
    "tty_is_pty",
    "tty_packet_mode",
    "tty_pair_get_tty",
    "tty_pgrp",
    "tty_read_queue",
    "tty_session",
    "tty_test_flag",
    "tty_winsize",
]


if TYPE_CHECKING:
    from ..core.memory import Program

# include/linux/tty_driver.h
TTY_DRIVER_TYPE_SYSTEM = 0x0001
TTY_DRIVER_TYPE_CONSOLE = 0x0002
TTY_DRIVER_TYPE_SERIAL = 0x0003
TTY_DRIVER_TYPE_PTY = 0x0004
PTY_TYPE_MASTER = 0x0001

# include/linux/tty.h: bit numbers in tty->flags
TTY_EXCLUSIVE = 3
TTY_PTY_LOCK = 16

#: drivers/tty/n_tty.c: the size of an N_TTY read buffer
N_TTY_BUF_SIZE = 4096

# include/uapi/linux/major.h
TTYAUX_MAJOR = 5

#: include/uapi/asm-generic/termbits.h: NCCS of struct ktermios on x86
#: tty indexes are below a driver's num, at most a few million (pty max is 1<<20)
MAX_TTY_INDEX = 1 << 22


def _enum(prog: Program, enum: str, name: str, default: int) -> int:
    return prog.symbols.enum_value(enum, name, default)


def file_tty(file: Pointer | Struct) -> Pointer:
    """The ``struct tty_struct *`` of an open tty ``struct file`` (file_tty():
    ``((struct tty_file_private *)file->private_data)->tty``)."""
    f = file.deref() if isinstance(file, Pointer) else file
    prog = f.prog_
    priv = int(f.private_data)
    if not priv:
        raise GuestDataError(f"tty file at 0x{f.address_:x} has no tty_file_private")
    tfp = prog.struct("tty_file_private", priv)
    try:
        tty = tfp.tty
        back = int(tfp.file)
    except GuestDataError:
        raise GuestDataError(f"tty file at 0x{f.address_:x}: tty_file_private at 0x{priv:x} is unreadable") from None
    if not tty or back != f.address_:
        raise GuestDataError(f"tty file at 0x{f.address_:x}: tty_file_private at 0x{priv:x} does not point back to it")
    return tty


def tty_driver(tty: Pointer | Struct) -> Pointer:
    """``tty->driver`` (``struct tty_driver *``), never NULL (invariants.NEVER_NULL)."""
    drv: Pointer = tty.driver
    return drv


def tty_driver_type(tty: Pointer | Struct) -> tuple[int, int]:
    """(type, subtype) of a ``struct tty_struct``'s driver (TTY_DRIVER_TYPE_*,
    PTY_TYPE_* / SYSTEM_TYPE_*)."""
    drv = tty_driver(tty)
    return drv.type & 0xFFFF, drv.subtype & 0xFFFF


def tty_is_pty(tty: Pointer | Struct) -> bool:
    prog = tty.prog_
    return tty_driver_type(tty)[0] == _enum(prog, "tty_driver_type", "TTY_DRIVER_TYPE_PTY", TTY_DRIVER_TYPE_PTY)


def tty_is_pty_master(tty: Pointer | Struct) -> bool:
    """Is a ``struct tty_struct`` the master end of a pty?"""
    prog = tty.prog_
    t, sub = tty_driver_type(tty)
    return t == _enum(prog, "tty_driver_type", "TTY_DRIVER_TYPE_PTY", TTY_DRIVER_TYPE_PTY) and sub == _enum(
        prog, "tty_driver_subtype", "PTY_TYPE_MASTER", PTY_TYPE_MASTER
    )


def tty_pair_get_tty(tty: Pointer | Struct) -> Pointer | Struct:
    """The end that carries a pty pair's state: ``tty->link`` (the slave) for a master,
    else the tty itself (drivers/tty/tty_io.c tty_pair_get_tty)."""
    if tty_is_pty_master(tty):
        link = tty.link
        if not link:
            raise GuestDataError(f"pty master at 0x{_addr(tty):x} has no slave (link)")
        return link
    return tty


def tty_index(tty: Pointer | Struct) -> int:
    """``tty->index``: the number of the tty in its driver (N of /dev/pts/N)."""
    i = tty.index
    if not 0 <= i < MAX_TTY_INDEX:
        raise GuestDataError(f"tty_struct at 0x{_addr(tty):x} has impossible index {i}")
    return i


def tty_test_flag(tty: Pointer | Struct, bit: int) -> bool:
    """test_bit(bit, &tty->flags)."""
    return bool(tty.flags >> bit & 1)


def tty_packet_mode(tty: Pointer | Struct) -> bool:
    """TIOCPKT state of a ``struct tty_struct``: ``tty->ctrl.packet`` (5.17+) or
    ``tty->packet`` (older)."""
    if tty_struct_has(tty, "ctrl"):
        return bool(tty.ctrl.packet)
    return bool(tty.packet)


def tty_session(tty: Pointer | Struct) -> Pointer:
    """The session ``struct pid *`` of a ``struct tty_struct`` (may be NULL)."""
    if tty_struct_has(tty, "ctrl"):
        return tty.ctrl.session
    return tty.session


def tty_pgrp(tty: Pointer | Struct) -> Pointer:
    """The foreground process group ``struct pid *`` of a ``struct tty_struct`` (may be
    NULL)."""
    if tty_struct_has(tty, "ctrl"):
        return tty.ctrl.pgrp
    return tty.pgrp


def tty_winsize(tty: Pointer | Struct) -> tuple[int, int, int, int]:
    """(rows, cols, xpixel, ypixel) of a ``struct tty_struct``."""
    w = tty.winsize
    return w.ws_row, w.ws_col, w.ws_xpixel, w.ws_ypixel


def ktermios_values(t: Struct) -> tuple[list[int], bytes]:
    """([c_iflag, c_oflag, c_cflag, c_lflag, c_line, c_ispeed, c_ospeed], c_cc) of a
    ``struct ktermios``."""
    cc = t.c_cc.read_()
    return [t.c_iflag, t.c_oflag, t.c_cflag, t.c_lflag, t.c_line, t.c_ispeed, t.c_ospeed], cc


def task_ctty(task: Struct) -> Pointer | None:
    """The controlling terminal (``task->signal->tty``) of a ``struct task_struct``."""
    signal = task.signal
    if not signal:
        return None
    tty = signal.tty
    return tty if tty else None


def tty_struct_has(tty: Pointer | Struct, member: str) -> bool:
    t = tty.deref() if isinstance(tty, Pointer) else tty
    return t.has_member_(member)


def _addr(obj: Pointer | Struct) -> int:
    return int(obj) if isinstance(obj, Pointer) else obj.address_


def tty_driver_name(tty: Pointer | Struct, rdev: int) -> str:
    """What CRIU calls the tty behind a file opened on device `rdev` (kernel dev_t):
    "ctty" for /dev/tty, "console" for /dev/console (whatever tty they lead to, CRIU
    goes by the device), else by the driver: "pty-master", "pty-slave", "vt",
    "serial", "system", "other"."""
    major, minor = rdev >> 20, rdev & ((1 << 20) - 1)
    if major == TTYAUX_MAJOR and minor == 0:
        return "ctty"
    if major == TTYAUX_MAJOR and minor == 1:
        return "console"
    prog = tty.prog_
    t, sub = tty_driver_type(tty)
    if t == _enum(prog, "tty_driver_type", "TTY_DRIVER_TYPE_PTY", TTY_DRIVER_TYPE_PTY):
        if sub == _enum(prog, "tty_driver_subtype", "PTY_TYPE_MASTER", PTY_TYPE_MASTER):
            return "pty-master"
        return "pty-slave"
    if t == _enum(prog, "tty_driver_type", "TTY_DRIVER_TYPE_CONSOLE", TTY_DRIVER_TYPE_CONSOLE):
        return "vt"
    if t == _enum(prog, "tty_driver_type", "TTY_DRIVER_TYPE_SERIAL", TTY_DRIVER_TYPE_SERIAL):
        return "serial"
    if t == _enum(prog, "tty_driver_type", "TTY_DRIVER_TYPE_SYSTEM", TTY_DRIVER_TYPE_SYSTEM):
        return "system"
    return "other"


#: tty_buffers a port's flip buffer chain holds at most: its memory limit (TTYB_DEFAULT_MEM_LIMIT,
#: 640 KiB) over the smallest buffer (256 bytes), with room to spare
MAX_TTY_BUFFERS = 1 << 12


#: include/uapi/asm-generic/termbits.h: c_lflag bits
ICANON, EXTPROC = 0o2, 0o200000
#: what N_TTY stores for an end-of-file character in canonical mode (a flagged line end)
DISABLED_CHAR = 0
_ULONG = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class TtyReadQueue:
    """What one end of a terminal holds for its reader, as its N_TTY line discipline keeps it."""

    # what read()s return now, in order, to an end-of-file if any (complete lines in canonical mode)
    readable: bytes
    # bytes no read() returns yet: a line not ended (canonical mode), or not committed
    unended: int
    # an end-of-file character among the readable lines (a read() there returns 0)
    eof: bool
    # bytes in the port's flip buffers, not yet through the line discipline
    unflushed: int
    # echoes the discipline has not written to the other end yet
    echoes: int


def _under_n_tty(tty: Struct) -> bool:
    """Is a ``struct tty_struct``'s line discipline N_TTY (whose queue is read here)?"""
    prog = tty.prog_
    ldisc = tty.ldisc
    return bool(ldisc) and prog.has_symbol("n_tty_ops") and int(ldisc.ops) == prog.symbol_address("n_tty_ops")


def _n_tty_data(tty: Struct) -> Struct | None:
    """The ``struct n_tty_data`` of a ``struct tty_struct`` under N_TTY; None before it is opened."""
    data = tty.disc_data
    return tty.prog_.struct("n_tty_data", int(data)) if data else None


def _ring_span(ldata: Struct, start: int, end: int, what: str) -> int:
    """`end - start` of two of n_tty_data's free-running indices, within its buffer."""
    n = (end - start) & _ULONG
    if n > N_TTY_BUF_SIZE:
        raise GuestDataError(
            f"n_tty_data at 0x{ldata.address_:x} holds {n} bytes {what}, more than its {N_TTY_BUF_SIZE}"
        )
    return n


def tty_read_queue(tty: Pointer | Struct) -> TtyReadQueue | None:
    """What the reader of a ``struct tty_struct`` would get (n_tty_read: in canonical mode up to
    ``canon_head``, line by line, an end-of-file ending a line stored as a flagged 0; otherwise up
    to ``commit_head``); None under a line discipline other than N_TTY."""
    t = tty.deref() if isinstance(tty, Pointer) else tty
    if not _under_n_tty(t):
        return None
    unflushed = _port_unflushed(t)
    ldata = _n_tty_data(t)
    if ldata is None:
        return TtyReadQueue(b"", 0, False, unflushed, 0)
    tail = ldata.read_tail
    lflag = t.termios.c_lflag
    canonical = bool(lflag & ICANON) and not lflag & EXTPROC
    end = ldata.canon_head if canonical else ldata.commit_head
    count = _ring_span(ldata, tail, end, "readable")
    unended = _ring_span(ldata, end, ldata.read_head, "not readable yet")
    if count + unended > N_TTY_BUF_SIZE:
        raise GuestDataError(f"n_tty_data at 0x{ldata.address_:x}: its read indices overlap")
    echoes = _ring_span(ldata, ldata.echo_tail, ldata.echo_head, "to echo")
    if not count:  # most terminals: the 4.5 KiB ring and flags are not read
        return TtyReadQueue(b"", unended, False, unflushed, echoes)
    ring = ldata.read_buf.read_()
    flags = int.from_bytes(ldata.read_flags.read_(), "little") if canonical else 0
    positions = [(tail + i) & (N_TTY_BUF_SIZE - 1) for i in range(count)]
    eof = any(ring[p] == DISABLED_CHAR and flags >> p & 1 for p in positions)
    return TtyReadQueue(bytes(ring[p] for p in positions), unended, eof, unflushed, echoes)


def _port_unflushed(tty: Struct) -> int:
    """Bytes a ``struct tty_struct``'s port has received into its flip buffers and not yet
    passed to the line discipline (``commit - read`` of each ``struct tty_buffer``)."""
    port = tty.port
    if not port:
        return 0
    total = 0
    for b in pointer_chain(
        port.buf.head, "next", name=f"tty_port 0x{int(port):x}'s flip buffers", limit=MAX_TTY_BUFFERS
    ):
        pending = b.commit - b.read
        if pending < 0 or pending > b.size:
            raise GuestDataError(f"tty_buffer at 0x{b.address_:x}: read {b.read} past commit {b.commit}")
        total += pending
    return total
