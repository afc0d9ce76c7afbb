"""What a pseudo-terminal's reader has not read, as criu saves it (criu/tty.c
tty_dump_queued_data): with both ends of a pair dumped, criu read()s each end dry and keeps the
bytes in tty-data.img; its restore write()s them into the other end. So the bytes go through
the pair's processing a second time: input processing and echo of the slave's termios for what
the slave's reader had queued, output processing for what the master's reader had. The reader
gets the same bytes only when that processing leaves them as they are; where it would not (or
where criu's read would lose some), the end is refused by name, before anything is written.

termios bits and c_cc indices: include/uapi/asm-generic/termbits.h.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedError
from ..kernel.fs.tty import TtyReadQueue

if TYPE_CHECKING:
    from .tty import TtyState

__all__ = ["queued_as_criu_restores_it"]

# c_iflag
PARMRK, ISTRIP, INLCR, IGNCR, ICRNL, IUCLC, IXON = 0o10, 0o40, 0o100, 0o200, 0o400, 0o1000, 0o2000
# c_oflag
OPOST, OLCUC, ONLCR, OCRNL, ONOCR, TABDLY, XTABS = 0o1, 0o2, 0o4, 0o10, 0o20, 0o14000, 0o14000
# c_lflag
ISIG, ICANON, ECHO, ECHONL, IEXTEN = 0o1, 0o2, 0o10, 0o100, 0o100000
# c_cc
VINTR, VQUIT, VERASE, VKILL, VEOF, VSTART, VSTOP, VSUSP, VREPRINT, VWERASE, VLNEXT = 0, 1, 2, 3, 4, 8, 9, 10, 12, 14, 15


def queued_as_criu_restores_it(state: TtyState, queue: TtyReadQueue, where: str) -> bytes:
    """The bytes criu's dump reads from this end of a pty pair, when its restore gives the
    reader the same; UnsupportedError saying why not."""
    if queue.unflushed:
        raise UnsupportedError(
            f"{where} with {queue.unflushed} byte(s) received that its line discipline has not taken in yet"
        )
    if queue.echoes:
        raise UnsupportedError(f"{where} with {queue.echoes} echo byte(s) not yet written to its master")
    if queue.unended:
        raise UnsupportedError(
            f"{where} with {queue.unended} byte(s) of a line not yet ended queued for its reader, which criu's"
            " dump cannot read (they would be lost)"
        )
    if queue.eof:
        raise UnsupportedError(f"{where} with an end-of-file queued for its reader, where criu's dump stops reading")
    data = queue.readable
    if not data:
        return b""
    if state.driver == "pty-master":
        why = "packet mode adds a status byte to each read" if state.packet_mode else _output_change(state, data)
    else:
        why = _input_change(state, data)
    if why:
        raise UnsupportedError(
            f"{where} with {len(data)} byte(s) queued for its reader, which criu's restore would write back"
            f" changed: {why}"
        )
    return data


def _output_change(state: TtyState, data: bytes) -> str | None:
    """How the slave's output processing (n_tty's do_output_char) would change bytes the
    master's reader had, written into the slave again; None if it would not."""
    oflag = state.termios[1]
    if not oflag & OPOST:
        return None
    if oflag & ONLCR and b"\n" in data:
        return "ONLCR turns each newline into CR NL"
    if oflag & (OCRNL | ONOCR) and b"\r" in data:
        return "OCRNL or ONOCR change carriage returns"
    if oflag & TABDLY == XTABS and b"\t" in data:
        return "XTABS turns tabs into spaces"
    if oflag & OLCUC and any(0x61 <= b <= 0x7A for b in data):
        return "OLCUC turns lower case into upper"
    return None


def _input_change(state: TtyState, data: bytes) -> str | None:
    """How the slave's input processing (n_tty_receive_char and its special characters) would
    change bytes its reader had, written into the master again, or what it would echo; None
    if nothing."""
    iflag, lflag = state.termios[0], state.termios[3]
    if lflag & ECHO or (lflag & ECHONL and lflag & ICANON and b"\n" in data):
        return "the terminal echoes, so the master's reader would get them a second time"
    mapped = {INLCR: b"\n", IGNCR: b"\r", ICRNL: b"\r"}
    for bit, byte in mapped.items():
        if iflag & bit and byte in data:
            return f"{byte!r} is mapped or dropped on input"
    if iflag & ISTRIP and any(b >= 0x80 for b in data):
        return "ISTRIP clears the eighth bit"
    if iflag & PARMRK and 0xFF in data:
        return "PARMRK doubles 0xff"
    if iflag & IUCLC and lflag & IEXTEN and any(0x41 <= b <= 0x5A for b in data):
        return "IUCLC turns upper case into lower"
    special = _special_characters(state)
    hit = sorted(special & set(data))
    return f"byte 0x{hit[0]:02x} is a control character the terminal acts on" if hit else None


def _special_characters(state: TtyState) -> set[int]:
    """The c_cc characters the slave's input processing acts on rather than queue (a byte equal
    to one in the data was queued escaped, by VLNEXT, or under other settings)."""
    iflag, lflag, cc = state.termios[0], state.termios[3], state.cc
    chosen: list[int] = []
    if lflag & ISIG:
        chosen += [VINTR, VQUIT, VSUSP]
    if lflag & ICANON:
        chosen += [VERASE, VKILL, VEOF]
        if lflag & IEXTEN:
            chosen += [VWERASE, VREPRINT]
    if lflag & IEXTEN:
        chosen.append(VLNEXT)
    if iflag & IXON:
        chosen += [VSTART, VSTOP]
    return {cc[i] for i in chosen if i < len(cc)}
