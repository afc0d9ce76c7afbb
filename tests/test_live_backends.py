"""A live guest as users run it (issue 37): RAM in a memfd (libvirt's shared memory), in two
equal memfds of two NUMA nodes, or split around q35's PCI hole with its upper part above 4 GiB.
`ps --live` and `dump --live` are given the QMP socket alone; ovm-offline finds every backend's
memory itself. The images restore in a fresh guest, and memhog-writer checks every page."""

from __future__ import annotations

import json

import pytest

from corpus import kernels
from corpus.recorder import record_with_live_dump
from corpus.restore import restore
from tests.support.cli import MOMENTS, ovm
from tests.support.corpus_cases import skip_unless_live

KERNELS = list(kernels.KERNELS)
pytestmark = [pytest.mark.guest, pytest.mark.slow]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("layout", ["memfd", "numa-memfd", "q35-high"])
def test_qmp_alone_finds_guest_ram_and_the_dump_restores(tmp_path, kernel, layout):
    skip_unless_live(kernel, "memhog-writer")
    images = tmp_path / "images"
    said: list[str] = []

    def dump_live(guest, root):
        qmp = ["--live", "--qmp", str(guest.qmp_tool_path)]
        listed = ovm("ps", *qmp, "--json")
        assert listed.returncode == 0, listed.stderr
        procs = {p["pid"]: p for p in map(json.loads, listed.stdout.splitlines())}
        assert procs[root]["comm"] == "memhog" and procs[1]["comm"] == "init"
        dumped = ovm("dump", *qmp, "--pid", str(root), "-D", str(images), "--attempts", str(MOMENTS))
        assert dumped.returncode == 0, dumped.stderr
        said.append(dumped.stderr)
        assert guest.command("query-status")["running"] is True

    rec = record_with_live_dump(
        kernel, "memhog-writer", tmp_path / "rec", dump_live, log=lambda m: None, memory_layout=layout
    )
    assert said and f"dumped pid {rec.manifest['root_pid']}" in said[0] and "guest was paused for" in said[0]
    result = restore(rec, images, log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
