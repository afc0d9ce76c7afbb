"""/dev/tty as CRIU saves it (zdtm pty00): a CTTY tty-info entry, numbered by criu's own index
with no pty part, restored through a pty of its session that the same process holds; without
one in the dump, /dev/tty is left out and named, as criu's tty_verify_ctty refuses the dump.
The guest side (ptyprog's /dev/tty fd, diffed against criu's images and restored) is in
tests/test_extract_files.py and tests/test_dump.py."""

from __future__ import annotations

from types import SimpleNamespace as NS

from ovm_offline.criu.build.common import F
from ovm_offline.criu.build.files import FileTable
from ovm_offline.filekinds import leave_out_dangling_files
from ovm_offline.filekinds.tty import CTTY_INDEX, TtyState, TtyWriter, tty_info
from ovm_offline.state import Fd, FileIdentity, OpenFile

SESSION = 300


def tty(driver: str, index: int, sid: int = SESSION, pgrp: int = SESSION) -> TtyState:
    return TtyState(
        index=index,
        driver=driver,
        rdev=(5 << 20) if driver == "ctty" else (136 << 20),
        termios=[0, 0, 191, 2609, 0, 38400, 38400],
        cc=bytes(19),
        termios_locked=[0] * 7,
        cc_locked=bytes(19),
        winsize=(33, 101, 0, 0),
        sid=sid,
        pgrp=pgrp,
        locked=False,
        exclusive=False,
        packet_mode=False,
    )


def fd(n: int, path: str, state: TtyState) -> Fd:
    identity = FileIdentity(path=path, dev=5, ino=n, size=0, mode=0o20620)
    return Fd(fd=n, file=OpenFile(key=n, kind="tty", identity=identity, flags=2, pos=0, state=state), cloexec=False)


def test_dev_tty_is_a_ctty_entry_with_criu_index_and_no_pty_part():
    table = FileTable({"tty": TtyWriter()})
    writer = table.writers["tty"]
    slave = fd(4, "/dev/pts/0", tty("pty-slave", 0))
    ctty = fd(5, "/dev/tty", tty("ctty", CTTY_INDEX))
    for f in (slave, ctty):
        table.open_file(f.file)
    infos = {e.id: e for e in writer.images(table)[0].entries}
    assert set(infos) == {0, CTTY_INDEX << 1}
    entry = infos[CTTY_INDEX << 1]
    assert (entry.type, entry.HasField("pty"), entry.sid, entry.pgrp, entry.rdev) == (
        F.CTTY,
        False,
        SESSION,
        300,
        0x500,
    )
    assert (infos[0].type, infos[0].pty.index) == (F.PTY, 0)
    files = [e for e in table.entries if e is not None and e.type == F.TTY]
    assert [e.tty.tty_info_id for e in files] == [0, CTTY_INDEX << 1]
    # its path, /dev/tty, is a regular entry restore opens once the session has its terminal back
    regs = {e.id: e.reg.name for e in table.entries if e is not None and e.type == F.REG}
    assert regs[files[1].tty.regf_id] == "/dev/tty"


def test_dev_tty_without_its_session_pty_in_the_process_is_left_out_and_named():
    held = NS(
        global_pid=10, comm="sh", fds=[fd(3, "/dev/ptmx", tty("pty-master", 0)), fd(5, "/dev/tty", tty("ctty", 1006))]
    )
    alone = NS(global_pid=11, comm="child", fds=[fd(5, "/dev/tty", tty("ctty", 1006))])
    # a pty of another session does not stand for it
    other = NS(
        global_pid=12,
        comm="other",
        fds=[
            fd(3, "/dev/ptmx", tty("pty-master", 1, 400, 400)),
            fd(4, "/dev/pts/1", tty("pty-slave", 1, 400, 400)),
            fd(5, "/dev/tty", tty("ctty", 1006)),
        ],
    )
    refusals: list = []
    leave_out_dangling_files([held, alone, other], refusals)
    assert [f.fd for f in held.fds] == [3, 5] and alone.fds == [] and [f.fd for f in other.fds] == [3, 4]
    assert [str(r) for r in refusals] == [
        f"PID {p} ({c}) fd 5: /dev/tty of session {SESSION}, whose pseudo-terminal the process does not hold at an fd"
        " saved in the dump (CRIU restores /dev/tty through it)"
        for p, c in ((11, "child"), (12, "other"))
    ]


def test_a_hung_up_slave_is_a_pty_entry_with_no_termios_or_window_size_as_criu_writes_it():
    """zdtm pty04: criu's dump_tty_info stops before them on a terminal whose ioctls fail with EIO,
    and its restore opens such a slave through a fake master (the ptyhup workload restores so)."""
    hung = fd(4, "/dev/pts/0", tty("pty-slave", 0, 0, 0))
    hung.file.state.hung = True
    entry = tty_info(0, hung.file.state, hung.file.identity)
    assert (entry.type, entry.pty.index, entry.sid, entry.pgrp) == (F.PTY, 0, 0, 0)
    assert not any(entry.HasField(f) for f in ("termios", "termios_locked", "winsize"))
    assert tty_info(0, tty("pty-slave", 0), hung.file.identity).HasField("termios")
