"""`ovm-offline dump` of files in flight (the scmrights workload, zdtm scm00's state): a pipe's
read end and a file sent over a UNIX datagram socket with SCM_RIGHTS and closed are saved as
criu saves them, each a file entry of its own that no fd names, listed in order by the first
packet's scm entry; the second packet has none. Before, the socket was refused. The general
gates (diff against criu's images, byte-identical from every source, crit, criu restore with the
workload's check, which receives both files and uses them) run in tests/test_dump.py."""

from __future__ import annotations

import os

import pytest

from corpus import kernels
from ovm_offline.criu import images

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

SCM_RIGHTS = 1
RECEIVER, PIPE_WRITE_END = 4, 6  # scmrights.c's fds


@pytest.mark.parametrize("kernel", KERNELS)
def test_files_in_flight_are_entries_of_their_own_named_by_the_packet(dumped, kernel):
    d = dumped(kernel, "scmrights")
    files = {e.id: e for e in images.read_image(d / images.FILES.filename()).entries}
    ids = images.read_image(d / images.IDS.filename(10000)).entries[0]
    by_fd = {e.fd: e.id for e in images.read_image(d / images.FDINFO.filename(ids.files_id)).entries}
    first, second = images.read_image(d / images.SK_QUEUES.filename()).entries
    assert (first.id_for, second.id_for) == (by_fd[RECEIVER], by_fd[RECEIVER])
    assert [(s.type, len(s.rights)) for s in first.scm] == [(SCM_RIGHTS, 2)] and not second.scm
    pipe_end, file = (files[i] for i in first.scm[0].rights)
    assert not set(first.scm[0].rights) & set(by_fd.values())  # no fd holds them
    # the pipe's read end: the pipe whose write end fd 6 holds
    assert pipe_end.pipe.pipe_id == files[by_fd[PIPE_WRITE_END]].pipe.pipe_id
    assert pipe_end.pipe.flags & os.O_ACCMODE == os.O_RDONLY
    assert (file.reg.name, file.reg.pos, file.reg.flags & os.O_ACCMODE) == ("/run/ovm/scmrights/data", 3, os.O_RDWR)
    # criu writes them as its peek meets them: after the receiving socket's id, before its entry
    order = list(files)
    assert by_fd[RECEIVER] < min(first.scm[0].rights)
    assert order.index(max(first.scm[0].rights)) < order.index(by_fd[RECEIVER])
