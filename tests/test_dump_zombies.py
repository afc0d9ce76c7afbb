"""`ovm-offline dump` of zombies (the zombies workload, zdtm zombie00/zombie01's state): each child
that has ended unreaped is saved as criu saves one, its comm and the wait status its parent will
reap, where before the whole tree was refused ("a zombie; there is nothing left to restore"). The
general gates (diff against criu's images, byte-identical from every source, crit, criu restore
with the workload's check that reaps each with its status) run in tests/test_dump.py."""

from __future__ import annotations

import signal

import pytest

from corpus import kernels
from ovm_offline.criu import images

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

TASK_DEAD = 2  # criu's task_state for a zombie


def _pids(rec) -> dict[str, int]:
    return {k: int(v) for k, v in (w.split("=") for w in rec.manifest["ready"].split()[1:])}


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_zombie_keeps_its_wait_status_and_nothing_else(recording, dumped, kernel):
    rec = recording(kernel, "zombies")
    directory = dumped(kernel, "zombies")
    pid = _pids(rec)
    statuses = {"exited": 7 << 8, "killed": signal.SIGTERM, "leader": 0}
    for name, status in statuses.items():
        core = images.read_image(directory / images.CORE.filename(pid[name])).entries[0]
        assert (core.tc.task_state, core.tc.exit_code, core.tc.comm) == (TASK_DEAD, status, "zombies"), name
        assert not core.HasField("thread_info") and not core.HasField("thread_core")
        # a zombie has left its memory, files and namespaces: criu writes no other image of it
        for kind in (images.IDS, images.MM, images.PAGEMAP, images.FS):
            assert not (directory / kind.filename(pid[name])).exists()
    pstree = {e.pid: e for e in images.read_image(directory / images.PSTREE.filename()).entries}
    assert {pstree[pid[n]].ppid for n in statuses} == {10000}
    assert pstree[pid["leader"]].pgid == pid["leader"] and pstree[pid["exited"]].pgid == 10000
