"""What a pseudo-terminal's reader has not read (zdtm pty02), as criu saves it: read from each
end of a pair both dumped into tty-data.img, in criu's order, kept only where criu's restore
(which writes the bytes into the other end) gives the reader the same bytes; every other case
refused by name. The kernel side reads N_TTY's ring as n_tty_read() would return it, on fake
memory of every pinned kernel's layout; the guest side is tests/test_dump_ptydata.py."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace as NS

import pytest

from corpus import kernels
from ovm_offline.criu import images
from ovm_offline.criu.build.files import FileTable
from ovm_offline.errors import GuestDataError, UnsupportedError
from ovm_offline.filekinds import leave_out_dangling_files
from ovm_offline.filekinds.tty import TtyWriter
from ovm_offline.filekinds.ttydata import queued_as_criu_restores_it
from ovm_offline.kernel.fs.tty import TtyReadQueue, tty_read_queue
from tests.support.checks import assert_one_line_error
from tests.support.memory import FakeKernelMemory
from tests.test_filekinds_tty import fd, tty

ICANON, ECHO, ISIG, IEXTEN, ICRNL, OPOST, ONLCR = 0o2, 0o10, 0o1, 0o100000, 0o400, 0o1, 0o4
#: a slave set up as ptydata.c sets it: canonical, signals, no echo; output processed with ONLCR
QUIET = [ICRNL, OPOST | ONLCR, 191, ICANON | ISIG | IEXTEN, 0, 38400, 38400]
#: Linux's default c_cc: ^C ^\\ DEL ^U ^D 0 1 0 ^Q ^S ^Z 0 ^R ^O ^W ^V 0
CC = bytes([3, 28, 127, 21, 4, 0, 1, 0, 17, 19, 26, 0, 18, 15, 23, 22, 0, 0, 0])


def end(driver: str, index: int = 0, **changes) -> object:
    return dataclasses.replace(tty(driver, index), **{"termios": list(QUIET), "cc": CC, **changes})


def queue(readable: bytes = b"", **changes) -> TtyReadQueue:
    return dataclasses.replace(TtyReadQueue(readable, 0, False, 0, 0), **changes)


def test_bytes_criu_gives_back_unchanged_are_kept():
    assert queued_as_criu_restores_it(end("pty-slave"), queue(b"ping\nline two\n"), "p") == b"ping\nline two\n"
    assert queued_as_criu_restores_it(end("pty-master"), queue(b"pong"), "p") == b"pong"
    assert queued_as_criu_restores_it(end("pty-master"), queue(), "p") == b""


@pytest.mark.parametrize(
    ("driver", "state", "q", "why"),
    [
        ("pty-slave", {}, {"unflushed": 3}, "3 byte(s) received that its line discipline has not taken in yet"),
        ("pty-slave", {}, {"echoes": 2}, "2 echo byte(s) not yet written to its master"),
        ("pty-slave", {}, {"unended": 4}, "4 byte(s) of a line not yet ended queued for its reader"),
        ("pty-slave", {}, {"eof": True}, "an end-of-file queued for its reader"),
        ("pty-slave", {"termios": [ICRNL, 5, 191, ICANON | ECHO, 0, 0, 0]}, {}, "the terminal echoes"),
        ("pty-master", {}, {"readable": b"pong\r\n"}, "ONLCR turns each newline into CR NL"),
        ("pty-master", {"packet_mode": True}, {"readable": b"pong"}, "packet mode adds a status byte"),
        ("pty-slave", {}, {"readable": b"a\x03b\n"}, "byte 0x03 is a control character the terminal acts on"),
        ("pty-slave", {}, {"readable": b"a\rb\n"}, "b'\\r' is mapped or dropped on input"),
    ],
)
def test_what_criu_would_lose_or_give_back_changed_is_refused_by_name(driver, state, q, why):
    q.setdefault("readable", b"ping\n")
    assert_one_line_error(
        lambda: queued_as_criu_restores_it(end(driver, **state), queue(**q), "a pseudo-terminal (/dev/pts/0)"),
        why,
        UnsupportedError,
    )


def test_tty_data_follows_criu_order_pairs_last_met_first_and_the_end_met_first():
    table = FileTable({"tty": TtyWriter()})
    met = [
        fd(3, "/dev/ptmx", end("pty-master", 0, queued=b"A-out")),
        fd(4, "/dev/pts/0", end("pty-slave", 0, queued=b"A-in\n")),
        fd(5, "/dev/pts/1", end("pty-slave", 1, queued=b"B-in\n")),
        fd(6, "/dev/ptmx", end("pty-master", 1)),  # nothing queued: no entry
    ]
    for f in met:
        table.open_file(f.file)
    extra = {e.kind: e for e in table.writers["tty"].images(table)}
    assert [(e.tty_id, e.data) for e in extra[images.TTY_DATA].entries] == [
        (2, b"B-in\n"),
        (1, b"A-out"),
        (0, b"A-in\n"),
    ]


def test_a_slave_without_its_master_or_bytes_for_a_master_without_its_slave_are_left_out_and_named():
    """criu's dump refuses a pty slave whose master it does not dump (tty_verify_active_pairs), and
    keeps a master's unread bytes only with its slave; a hung-up slave has no master to want."""
    master = NS(global_pid=10, comm="sh", fds=[fd(3, "/dev/ptmx", end("pty-master", 0, queued=b"pong"))])
    slave = NS(global_pid=11, comm="job", fds=[fd(0, "/dev/pts/1", end("pty-slave", 1))])
    hung = NS(global_pid=12, comm="old", fds=[fd(4, "/dev/pts/2", end("pty-slave", 2, hung=True))])
    refusals: list = []
    leave_out_dangling_files([master, slave, hung], refusals)
    assert master.fds == [] and slave.fds == [] and [f.fd for f in hung.fds] == [4]
    assert [str(r) for r in refusals] == [
        "PID 10 (sh) fd 3: 4 byte(s) queued for the reader of pty 0's master, whose slave no dumped process"
        " holds (CRIU saves them only with both ends)",
        "PID 11 (job) fd 0: pty 1's slave, whose master no dumped process holds (criu's dump refuses it, and"
        " its restore would open it through a master of its own and hang it up)",
    ]


class FakeTty(FakeKernelMemory):
    def n_tty(self, ring: bytes, tail: int, canon: int, commit: int, head: int, lflag: int, eol: tuple = ()) -> object:
        """A tty under N_TTY whose ring holds `ring` at index `tail` (free-running indices)."""
        tty = self.alloc("tty_struct")
        ldisc = self.alloc("tty_ldisc")
        self.set(ldisc, "tty_ldisc", "ops", self.prog.symbol_address("n_tty_ops"))
        self.set(tty, "tty_struct", "ldisc", ldisc)
        self.set(tty, "tty_struct", "termios.c_lflag", lflag)
        ldata = self.alloc("n_tty_data")
        self.set(tty, "tty_struct", "disc_data", ldata)
        for name, value in (("read_tail", tail), ("canon_head", canon), ("commit_head", commit), ("read_head", head)):
            self.set(ldata, "n_tty_data", name, value)
        buf = bytearray(4096)
        flags = 0
        for i, b in enumerate(ring):
            buf[(tail + i) & 4095] = b
        for i in eol:
            flags |= 1 << ((tail + i) & 4095)
        self.set(ldata, "n_tty_data", "read_buf", bytes(buf))
        self.set(ldata, "n_tty_data", "read_flags", flags.to_bytes(512, "little"))
        return self.prog.struct("tty_struct", tty)


@pytest.fixture(params=list(kernels.KERNELS))
def fake(request):
    return FakeTty(request.param)


def test_canonical_mode_reads_whole_lines_across_the_ring_end_and_counts_the_line_not_ended(fake):
    ring = b"ping\nline two\npart"
    tail = 4096 - 6  # the ring wraps inside "line two"
    q = tty_read_queue(fake.n_tty(ring, tail, tail + 14, tail + 18, tail + 18, ICANON, eol=(4, 13)))
    assert (q.readable, q.unended, q.eof) == (b"ping\nline two\n", 4, False)
    # without ICANON every committed byte is read
    raw = tty_read_queue(fake.n_tty(ring, tail, tail, tail + 18, tail + 18, 0))
    assert (raw.readable, raw.unended) == (ring, 0)


def test_an_end_of_file_is_a_flagged_zero_and_absurd_indices_are_bad_guest_data(fake):
    q = tty_read_queue(fake.n_tty(b"ab\0", 0, 3, 3, 3, ICANON, eol=(2,)))
    assert (q.readable, q.eof) == (b"ab\0", True)
    # a 0 byte that ends no line is data
    assert not tty_read_queue(fake.n_tty(b"a\0\n", 0, 3, 3, 3, ICANON, eol=(2,))).eof
    assert_one_line_error(
        lambda: tty_read_queue(fake.n_tty(b"", 10, 9, 10, 10, ICANON)), "more than its 4096", GuestDataError
    )
