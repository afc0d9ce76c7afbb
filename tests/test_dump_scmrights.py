"""`ovm-offline dump` of files in flight (the scmrights workload, zdtm scm00's state): a pipe's
read end and a file sent over a UNIX datagram socket with SCM_RIGHTS and closed are saved as
criu saves them, each a file entry of its own that no fd names, listed in order by the first
packet's scm entry; the second packet has none. Before, the socket was refused. On a stream
socket (scmrights-stream) each message with files is a packet of its own, so criu's restore
hands the files to the read of those bytes, not of the bytes queued before them. The general
gates (diff against criu's images, byte-identical from every source, crit, criu restore with the
workload's check, which receives both files and uses them) run in tests/test_dump.py."""

from __future__ import annotations

import os

import pytest

from corpus import kernels
from ovm_offline.criu import images
from tests.support.dumped_files import process_files

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

SCM_RIGHTS = 1
RECEIVER, PIPE_WRITE_END = 4, 6  # scmrights.c's fds


@pytest.mark.parametrize("kernel", KERNELS)
def test_files_in_flight_are_entries_of_their_own_named_by_the_packet(dumped, kernel):
    d = dumped(kernel, "scmrights")
    files, fdinfo = process_files(d)
    by_fd = {fd: e.id for fd, e in fdinfo.items()}
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


@pytest.mark.parametrize("kernel", KERNELS)
def test_files_in_flight_on_a_stream_come_with_the_bytes_they_were_sent_with(dumped, kernel):
    d = dumped(kernel, "scmrights-stream")
    files, fdinfo = process_files(d)
    by_fd = {fd: e.id for fd, e in fdinfo.items()}
    queues = images.read_image(d / images.SK_QUEUES.filename())
    assert {e.id_for for e in queues.entries} == {by_fd[RECEIVER]}
    packets = [(data, [len(s.rights) for s in e.scm]) for e, data in zip(queues.entries, queues.payloads)]
    assert packets == [(b"hd", []), (b"xyz", [2]), (b"w", []), (b"k", [1])]
    (pipe_end, file), (again,) = (queues.entries[1].scm[0].rights, queues.entries[3].scm[0].rights)
    assert again == pipe_end  # the same open file sent twice is one entry
    assert files[pipe_end].pipe.pipe_id == files[by_fd[PIPE_WRITE_END]].pipe.pipe_id
    assert (files[file].reg.name, files[file].reg.pos, files[file].reg.flags & os.O_ACCMODE) == (
        "/run/ovm/scmrights/data",
        3,
        os.O_RDONLY,
    )
