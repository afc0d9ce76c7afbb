"""`ovm-offline ps` from every source agrees with what ps saw inside the guest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpus import initramfs, jobs, kernels
from corpus.guest import Guest
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest


def sources_of(rec) -> dict[str, Path]:
    return {"elf": rec.elf, **rec.kdumps, "live-snapshot": rec.live_dir}


def in_guest_ps(manifest: dict) -> dict[int, dict]:
    # the facts were read by the record job's own shell while the workload was stopped; the
    # job's short-lived helpers (cat, awk) are gone by the time memory is dumped
    return {p["pid"]: p for p in manifest["processes"]}


def ps_json(source: Path) -> dict[int, dict]:
    result = ovm("ps", str(source), "--json")
    assert result.returncode == 0, result.stderr
    return {p["pid"]: p for p in map(json.loads, result.stdout.splitlines())}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", ["container", "pipetree", "threads", "counter-la57"])
def test_ps_from_every_source_agrees_with_the_guest(recording, kernel, workload):
    rec = recording(kernel, workload)
    guest = in_guest_ps(rec.manifest)
    members = set(rec.manifest["members"])
    for name, source in sources_of(rec).items():
        ours = ps_json(source)
        # every process alive in the guest when it was paused is listed, with the same facts
        for pid in members | {1}:
            g, o = guest[pid], ours.get(pid)
            assert o is not None, f"{name}: pid {pid} missing"
            assert (o["ppid"], o["comm"], o["state"], o["nthreads"]) == (
                g["ppid"],
                g["comm"],
                g["state"],
                g["threads"],
            ), name
            assert o["ns_pid"] == g["nspid"][-1] and o["cgroup"] == g["cgroup"], name
            assert o["namespaces"]["pid"] == g["ns"]["pid"] and o["namespaces"]["mnt"] == g["ns"]["mnt"], name
            assert o["kthread"] == g["kernel_thread"], name
            assert not o["on_cpu"] or pid not in members, f"{name}: stopped pid {pid} shown on a CPU"
        kernel_threads = {p for p, g in guest.items() if g["kernel_thread"]}
        assert kernel_threads <= set(ours), f"{name}: kernel threads missing"
        # containers: the workload's processes share one, host processes have none
        containers = {ours[pid]["container"] for pid in members}
        if workload == "container":
            assert len(containers) == 1 and containers.pop().endswith("cgroup:/ovmbox")
        else:
            assert containers == {None}
        assert ours[1]["container"] is None
        # /ovmbox follows no runtime's naming: the container has no runtime id to show
        assert {ours[pid]["runtime_id"] for pid in members} == {None}


@pytest.mark.parametrize("kernel", KERNELS)
def test_ps_tree_and_table(recording, kernel):
    rec = recording(kernel, "pipetree")
    root = rec.manifest["root_pid"]
    tree = ovm("ps", str(rec.elf), "--tree", "--no-kernel-threads")
    assert tree.returncode == 0, tree.stderr
    assert tree.stdout.splitlines()[0].startswith("1 init")
    assert any(line.strip(" │├└─").startswith(f"{root} pipetree") for line in tree.stdout.splitlines())
    table = ovm("ps", str(rec.elf))
    header = table.stdout.splitlines()[0].split()
    assert header == ["PID", "PPID", "THR", "S", "CPU", "NSPID", "CGROUP", "CONTAINER", "COMM"]
    assert any(line.split()[0] == str(root) and line.split()[-1] == "pipetree" for line in table.stdout.splitlines())


@pytest.mark.slow
def test_ps_live_pauses_the_guest_only_while_reading_and_resumes_it(tmp_path):
    kernel = kernels.unpack(kernels.get_kernel("6.1"))
    image = initramfs.build(kernel)
    job = b"""echo 9999 > /proc/sys/kernel/ns_last_pid
/bin/counter </dev/null >/run/ovm/counter.log 2>&1 3>&- &
sleep 1; echo "UP $!" > /dev/ttyS1; sleep 600
"""
    jobs.write_input_disk(tmp_path / "in.img", {"job.sh": job})
    with Guest(tmp_path, kernel.vmlinuz, image, 512, [tmp_path / "in.img"]) as guest:
        pid = int(guest.expect("UP", 180, "starting counter").split()[1])
        result = ovm("ps", "--live", "--qmp", str(guest.qmp_tool_path), "--mem", str(guest.memory_file), "--json")
        assert result.returncode == 0, result.stderr
        procs = {p["pid"]: p for p in map(json.loads, result.stdout.splitlines())}
        assert procs[pid]["comm"] == "counter" and procs[1]["comm"] == "init"
        assert "guest was paused for" in result.stderr
        assert guest.command("query-status")["running"] is True
        # dump from the running guest: paused while read, resumed after, images complete
        images_dir = tmp_path / "images"
        dumped = ovm(
            "dump",
            "--live",
            "--qmp",
            str(guest.qmp_tool_path),
            "--mem",
            str(guest.memory_file),
            "--pid",
            str(pid),
            "-D",
            str(images_dir),
        )
        assert dumped.returncode == 0, dumped.stderr
        assert "guest was paused for" in dumped.stderr and f"dumped pid {pid} (counter)" in dumped.stderr
        assert (images_dir / f"core-{pid}.img").exists() and (images_dir / "pages-1.img").stat().st_size > 0
        assert guest.command("query-status")["running"] is True
        refused = ovm(
            "dump",
            "--live",
            "--qmp",
            str(guest.qmp_tool_path),
            "--mem",
            str(guest.memory_file),
            "--pid",
            str(pid),
            "-D",
            str(images_dir),
        )
        assert refused.returncode != 0 and "not empty" in refused.stderr
        assert guest.command("query-status")["running"] is True  # refused before pausing
        # a guest that was already paused is left paused
        guest.command("stop")
        again = ovm("ps", "--live", "--qmp", str(guest.qmp_tool_path), "--mem", str(guest.memory_file))
        assert again.returncode == 0 and "counter" in again.stdout
        assert guest.command("query-status")["running"] is False


def test_bad_sources_are_one_line_errors(recording, tmp_path):
    rec = recording("6.1", "counter")
    truncated = tmp_path / "truncated.elf"
    with open(rec.elf, "rb") as f:
        truncated.write_bytes(f.read(1 << 20))
    assert_one_line_failure(ovm("ps", str(truncated)), str(truncated))
    truncated_kdump = tmp_path / "truncated.kdump"
    with open(rec.kdumps["kdump-zlib"], "rb") as f:
        truncated_kdump.write_bytes(f.read(3 << 20))
    assert_one_line_failure(ovm("ps", str(truncated_kdump)), str(truncated_kdump))
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(1 << 16))
    assert_one_line_failure(ovm("ps", str(garbage)), "unknown format")
    arm = tmp_path / "arm.elf"
    with open(rec.elf, "rb") as f:
        head = bytearray(f.read(1 << 16))
    head[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    arm.write_bytes(head)
    assert_one_line_failure(ovm("ps", str(arm)), str(arm))
    assert_one_line_failure(ovm("ps", str(tmp_path / "missing.elf")), "missing.elf")
    assert_one_line_failure(
        ovm("ps", "--live", "--qmp", str(tmp_path / "no.sock"), "--mem", str(rec.live_dir / "guest-ram")), "no.sock"
    )


def test_missing_or_wrong_isf_is_a_one_line_error_naming_the_banner(recording, tmp_path, monkeypatch):
    rec = recording("6.1", "counter")
    # only the 6.12 ISF available: the 6.1 guest has no symbols
    only = tmp_path / "isf"
    only.mkdir()
    for f in Path("symbols/linux").glob("*6.12*"):
        (only / f.name).symlink_to(f.resolve())
    monkeypatch.setenv("OVM_CACHE_DIR", str(tmp_path / "cache"))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ovm_offline.kernel.core import identify; "
            "from ovm_offline.sources import open_source; from ovm_offline.errors import OvmError\n"
            "try:\n identify.open_kernel(open_source(sys.argv[1]), [sys.argv[2]], include_default_symbols=False)\n"
            "except OvmError as e:\n print(e); sys.exit(3)",
            str(rec.elf),
            str(only),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 3
    assert "6.1.0-56-cloud-amd64" in result.stdout and "dwarf2json" in result.stdout


def test_convert_kdump_to_elf_reads_back_the_elf_dump_of_the_same_moment(recording, tmp_path):
    from ovm_offline.sources import open_source

    rec = recording("6.12", "counter")
    out = tmp_path / "converted.elf"
    result = ovm("convert", str(rec.kdumps["kdump-zlib"]), str(out))
    assert result.returncode == 0, result.stderr
    with open_source(out) as converted, open_source(rec.elf) as original:
        assert converted.vmcoreinfo() == original.vmcoreinfo()
        runs = converted.runs()
        assert sum(r.length for r in runs) == sum(r.length for r in original.runs())
        for run in runs:
            for offset in range(0, run.length, 8 << 20):
                n = min(8 << 20, run.length - offset)
                assert converted.read(run.start + offset, n) == original.read(run.start + offset, n)
    assert ps_json(out) == ps_json(rec.elf)
    again = ovm("convert", str(rec.kdumps["kdump-zlib"]), str(out))
    assert again.returncode != 0 and "exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1
