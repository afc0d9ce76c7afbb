"""The Volatility 3 plugins run the same library code as the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ovm_offline import inventory, sources
from ovm_offline.criu.diff import diff_dirs
from ovm_offline.kernel.crossview.check import cross_view
from tests.support.volatility import vol_command

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.guest


def vol(dump: Path, *args: str) -> subprocess.CompletedProcess:
    options = ["-q", "-r", "json", "-p", str(REPO / "plugins"), "-s", str(REPO / "symbols"), "-f", str(dump)]
    return subprocess.run([*vol_command(), *options, *args], capture_output=True, text=True, timeout=900)


def test_ps_plugin_on_a_kdump_agrees_with_the_cli(recording):
    rec = recording("6.1", "container")
    result = vol(rec.kdumps["kdump-zlib"], "linux.ovm.Ps", "--user-only")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {r["PID"]: r for r in json.loads(result.stdout)}
    for pid in rec.manifest["members"]:
        guest = next(p for p in rec.manifest["processes"] if p["pid"] == pid)
        assert rows[pid]["NsPID"] == guest["nspid"][-1] and rows[pid]["Cgroup"] == "/ovmbox"
        assert rows[pid]["Container"].endswith("cgroup:/ovmbox")


def test_dump_plugin_writes_the_same_images_as_criu(recording, tmp_path):
    rec = recording("6.12", "counter")
    out = tmp_path / "images"
    result = vol(rec.elf, "linux.ovm.Dump", "--pid", str(rec.manifest["root_pid"]), "--images-dir", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    diff = diff_dirs(out, rec.golden)
    assert diff.same, diff.report()


def test_dump_plugin_saves_file_locks_when_asked_as_the_cli_does(recording, tmp_path):
    rec = recording("6.1", "locks")
    out = tmp_path / "images"
    result = vol(rec.elf, "linux.ovm.Dump", "--pid", "10000", "--images-dir", str(out), "--file-locks")
    assert result.returncode == 0, result.stderr[-2000:]
    diff = diff_dirs(out, rec.golden)
    assert diff.same, diff.report()


def test_crossview_plugin_shows_each_view_of_every_task_as_ps_check_does(recording):
    rec = recording("6.1", "counter")
    result = vol(rec.elf, "linux.ovm.CrossView")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {r["PID"]: r for r in json.loads(result.stdout)}
    root = rows[rec.manifest["root_pid"]]
    assert all(root[view] for view in ("tasks", "tasks-prev", "children", "pid-idr", "threads"))
    assert not any(r["Disagreements"] for r in rows.values())
    with sources.open_source(rec.elf) as source:
        views = cross_view(inventory.open_kernel(source))
    assert sorted(rows) == sorted(s.pid for s in views.tasks.values())
