"""`ovm-offline dump` of what a pty pair's readers have not read (the ptydata workload, the
state of zdtm pty02): each end's unread bytes are a tty-data.img entry named by that end's
tty-info id, in criu's order, which criu's restore writes into the other end. Before, any byte
queued on a pty was refused. Where criu's restore would give the reader other bytes (the
terminal echoing them again, here), the end is refused by name. The general gates (diff against
criu's images, every source, crit, criu restore with the workload's check of every read) run in
tests/test_dump.py; the rules themselves on every layout in tests/test_filekinds_ttydata.py."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.criu import images
from ovm_offline.errors import UnsupportedError
from ovm_offline.kernel.fs.fdtable import task_fd_file
from ovm_offline.kernel.fs.tty import file_tty
from ovm_offline.kernel.task.tasks import find_task
from tests.support.mutate import PatchedSource

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest
SLAVE_FD = 4
ECHO = 0o10


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_ends_unread_bytes_are_an_entry_named_by_its_tty_info_in_criu_order(dumped, kernel):
    d = dumped(kernel, "ptydata")
    index = {e.pty.index for e in images.read_image(d / images.TTY_INFO.filename()).entries}
    assert len(index) == 1, index
    master = index.pop() << 1 | 1  # criu's tty_gen_id: index << 1, plus 1 for the master
    slave = master ^ 1
    data = images.read_image(d / images.TTY_DATA.filename()).entries
    # criu reads the end it met first (the master, fd 3) first; its restore writes each into the other
    assert [(e.tty_id, e.data) for e in data] == [(master, b"pong"), (slave, b"ping\nline two\n")]


@pytest.mark.parametrize("kernel", KERNELS)
def test_bytes_an_echoing_terminal_would_echo_again_at_restore_are_refused_by_name(recording, tmp_path, kernel):
    """The slave's termios with ECHO set (patched in the guest's memory): criu's restore writes
    the slave's unread lines into the master, and the terminal would echo them to the master's
    reader, who never saw them."""
    rec = recording(kernel, "ptydata")
    pid = rec.manifest["root_pid"]
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        slave = file_tty(task_fd_file(find_task(prog, pid), SLAVE_FD)).deref()
        lflag = slave.address_ + prog.member_offset("tty_struct", "termios") + prog.member_offset("ktermios", "c_lflag")
        source.patch_virtual(prog, lflag, (slave.termios.c_lflag | ECHO).to_bytes(4, "little"))
        with pytest.raises(UnsupportedError) as refused:
            dumping.dump(source, inventory.open_kernel(source), pid, tmp_path / "out")
    assert (
        f"fd {SLAVE_FD}: a pseudo-terminal (/dev/pts/" in str(refused.value)
        and ") with 14 byte(s) queued for its reader, which criu's restore would write back changed: the terminal"
        " echoes, so the master's reader would get them a second time"
        in str(refused.value)
    ), str(refused.value)
    assert not (tmp_path / "out").exists()
