"""`ovm-offline dump` of seccomp filters (the seccomp workload, zdtm seccomp_filter's state): every
thread's chain is read from the kernel's seccomp_filter list and its classic BPF kept in
bpf_prog.orig_prog, and written as criu dump writes seccomp.img (threads by tid, each chain newest
first; a process whose threads share their programs saved once, with TSYNC). Before, any
filter refused the whole dump, so no container Docker, Podman or Kubernetes starts (all under
the default seccomp profile) could be saved. The general gates (diff against criu's images,
byte-identical from every source, crit, criu restore with the workload's check that every
filter still returns its errno) run in tests/test_dump.py."""

from __future__ import annotations

import struct

import pytest

from corpus import kernels
from ovm_offline.criu import images

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

SECCOMP_MODE_FILTER = 2
TSYNC, LOG = 1, 2
# x86-64 syscall numbers and the errnos the workload's filters return for them
CHROOT, SETHOSTNAME = 161, 170
ENOMSG, EIDRM = 42, 43


def _rule(program: bytes) -> tuple[int, int]:
    """(syscall, errno) of one of the workload's filters: the nr compared, the errno returned."""
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    assert len(insns) == 7
    return insns[4][3], insns[5][3] & 0xFFFF


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_thread_keeps_its_own_chain_in_criu_order(recording, dumped, kernel):
    directory = dumped(kernel, "seccomp")
    rec = recording(kernel, "seccomp")
    child = int(rec.manifest["ready"].split("child=")[1].split()[0])
    filters = images.read_image(directory / images.SECCOMP.filename()).entries[0].seccomp_filters
    pstree = {e.pid: list(e.threads) for e in images.read_image(directory / images.PSTREE.filename()).entries}
    worker = pstree[child][1]

    def chain(tid):
        core = images.read_image(directory / images.CORE.filename(tid)).entries[0].thread_core
        assert core.seccomp_mode == SECCOMP_MODE_FILTER
        i, rules = core.seccomp_filter, []
        while True:
            rules.append((_rule(filters[i].filter), filters[i].flags))
            if not filters[i].HasField("prev"):
                return rules
            i = filters[i].prev

    # the root alone in its process: saved with TSYNC; the child's threads differ: saved apiece,
    # the main thread's older filter first in its walk, B logging
    assert chain(10000) == [((CHROOT, ENOMSG), TSYNC)]
    assert chain(child) == [((CHROOT, ENOMSG), 0), ((SETHOSTNAME, EIDRM), LOG)]
    assert chain(worker) == [((CHROOT, ENOMSG), 0)]
    assert len(filters) == 4


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_container_under_a_default_like_profile_keeps_it_on_every_process(dumped, kernel):
    """runc-seccomp: each of the container's four processes runs under the profile runc installed
    (one filter of hundreds of instructions; one thread each, so TSYNC)."""
    d = dumped(kernel, "runc-seccomp")
    filters = images.read_image(d / images.SECCOMP.filename()).entries[0].seccomp_filters
    pstree = images.read_image(d / images.PSTREE.filename()).entries
    assert len(pstree) == len(filters) == 4
    assert {(len(f.filter) // 8 > 500, f.flags, f.HasField("prev")) for f in filters} == {(True, TSYNC, False)}
    assert len({f.filter for f in filters}) == 1
    for e in pstree:
        core = images.read_image(d / images.CORE.filename(e.pid)).entries[0].thread_core
        assert core.seccomp_mode == SECCOMP_MODE_FILTER and filters[core.seccomp_filter].filter == filters[0].filter
