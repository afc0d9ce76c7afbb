"""`ovm-offline dump` of namespace files held open (the nsfiles workload, zdtm proc-self's state):
each is an NS entry naming the namespace by its id in the dump, as criu writes it. Before, one
was saved as a regular file named "net:[4026531840]", which restore tried to open by that name.
The general gates (diff against criu's images, byte-identical from every source, crit, criu
restore with the workload's check that each fd is still its namespace's, usable by setns) run
in tests/test_dump.py."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline.criu import images
from tests.support.dumped_files import process_files

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x04000000, 0x08000000, 0x40000000
O_CLOEXEC_FD = 1


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_namespace_file_names_the_namespace_the_process_is_in(dumped, kernel):
    d = dumped(kernel, "nsfiles")
    files, fdinfo = process_files(d)
    ids = images.read_image(d / images.IDS.filename(10000)).entries[0]
    ns = {fd: files[e.id].nsf for fd, e in fdinfo.items() if files[e.id].HasField("nsf")}
    assert {fd: (n.ns_cflag, n.ns_id) for fd, n in ns.items()} == {
        3: (CLONE_NEWNET, ids.net_ns_id),
        4: (CLONE_NEWUTS, ids.uts_ns_id),
        5: (CLONE_NEWIPC, ids.ipc_ns_id),
        6: (CLONE_NEWNS, ids.mnt_ns_id),
    }
    assert fdinfo[4].flags == O_CLOEXEC_FD and fdinfo[3].flags == 0
