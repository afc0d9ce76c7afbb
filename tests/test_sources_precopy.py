"""Pre-copy snapshots (sources/precopy.py over sources/migration.py) of a real, kernel-less QEMU:
the snapshot is guest RAM at the moment QEMU stopped the guest, the guest runs again whatever
happens, and what the stream reader does not know is refused in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ovm_offline.errors import SourceError
from ovm_offline.sources import open_source
from ovm_offline.sources.migration import read_ram_stream
from ovm_offline.sources.precopy import precopy_snapshot
from tests.test_sources_live import _wait_for_firmware, qemu  # noqa: F401  (the fixture)


def _snapshot_dir(tmp_path: Path) -> Path:
    d = tmp_path / "snapshot"
    d.mkdir()
    return d


def test_the_snapshot_is_guest_ram_at_the_stop_and_the_guest_runs_on(qemu, tmp_path):  # noqa: F811
    _wait_for_firmware(qemu)
    before = qemu.cmd("query-migrate-parameters")
    at_stop = tmp_path / "ram-at-stop"
    seen: list[dict] = []

    def paused(execute):
        seen.append(execute("query-status"))
        shutil.copyfile(qemu.ram, at_stop)

    snap = _snapshot_dir(tmp_path)
    report = precopy_snapshot(qemu.qmp_path, snap, qemu.ram, on_paused=paused)
    assert seen and not seen[0]["running"], "on_paused ran while the guest ran"
    assert (snap / "guest-ram").read_bytes() == at_stop.read_bytes()
    assert any(at_stop.read_bytes()[:0x100000]), "firmware left no trace in RAM; the comparison proved nothing"
    assert qemu.status()["running"]
    assert report.paused_seconds is not None and 0 < report.paused_seconds < 30
    assert report.rounds >= 1 and report.ram.pages > 0 and report.ram.block == "ram0"
    assert "pre-copy: guest paused for" in report.line()
    assert qemu.cmd("query-migrate-parameters") == before, "the migration parameters were not given back"
    with open_source(snap) as src:  # a recorded live snapshot like any other
        assert src.read(0xF0000, 0x10000) == at_stop.read_bytes()[0xF0000:0x100000]
        assert len(src.vcpus()) == 1


def test_a_guest_paused_before_is_left_paused(qemu, tmp_path):  # noqa: F811
    assert not qemu.status()["running"]
    report = precopy_snapshot(qemu.qmp_path, _snapshot_dir(tmp_path), qemu.ram)
    assert not qemu.status()["running"] and report.paused_seconds is None
    assert "was paused already" in report.line()


@pytest.mark.parametrize("exc_type", [RuntimeError, KeyboardInterrupt])
def test_the_guest_runs_again_after_an_error_at_the_stop(qemu, tmp_path, exc_type):  # noqa: F811
    _wait_for_firmware(qemu)

    def paused(execute):
        raise exc_type("boom")

    before = qemu.cmd("query-migrate-parameters")
    with pytest.raises(exc_type):
        precopy_snapshot(qemu.qmp_path, _snapshot_dir(tmp_path), qemu.ram, on_paused=paused)
    assert qemu.status()["running"]
    assert qemu.cmd("query-migrate-parameters") == before


def test_stream_features_it_does_not_read_are_refused_before_anything_starts(qemu, tmp_path):  # noqa: F811
    _wait_for_firmware(qemu)
    qemu.cmd("migrate-set-capabilities", capabilities=[{"capability": "xbzrle", "state": True}])
    snap = _snapshot_dir(tmp_path)
    with pytest.raises(SourceError, match="migration capabilities xbzrle are on"):
        precopy_snapshot(qemu.qmp_path, snap, qemu.ram)
    assert qemu.status()["running"] and not any(snap.iterdir())
    assert qemu.cmd("query-migrate").get("status") in (None, "none")


def _stream_of(qemu, tmp_path: Path) -> bytes:  # noqa: F811
    """QEMU's own migration stream of the (paused) guest, written by `cat`."""
    out = tmp_path / "stream"
    qemu.cmd("migrate", uri=f"exec:cat > {out}")
    deadline = time.monotonic() + 30
    while qemu.cmd("query-migrate").get("status") != "completed":
        assert time.monotonic() < deadline, qemu.cmd("query-migrate")
        time.sleep(0.05)
    return out.read_bytes()


def test_a_truncated_or_foreign_stream_is_one_line(qemu, tmp_path):  # noqa: F811
    import io
    import os

    stream = _stream_of(qemu, tmp_path)
    fd = os.open(tmp_path / "ram", os.O_RDWR | os.O_CREAT)
    try:
        whole = read_ram_stream(io.BytesIO(stream), "ram0", fd)
        assert whole.complete and whole.block_bytes == 64 << 20
        for cut in (3, 20, len(stream) // 3, len(stream) // 2):
            with pytest.raises(SourceError, match="migration stream ends at byte") as e:
                read_ram_stream(io.BytesIO(stream[:cut]), "ram0", fd)
            assert "\n" not in str(e.value)
        with pytest.raises(SourceError, match="no QEVM header"):
            read_ram_stream(io.BytesIO(b"\x7fELF" + stream[4:]), "ram0", fd)
        # a page beyond the block's length, as a hostile stream would send it
        bad = bytearray(stream)
        at = bad.find(b"\x00\x00\x00\x00\x04\x00\x00\x00", 20)  # ram0's length word, 64 MiB
        assert at > 0
        bad[at : at + 8] = (0x1000).to_bytes(8, "big")
        with pytest.raises(SourceError):
            read_ram_stream(io.BytesIO(bytes(bad)), "ram0", fd)
    finally:
        os.close(fd)


def test_precopy_takes_live_and_qmp():
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "dump", "--precopy", "guest.elf", "-t", "1", "-D", "/nonexistent/x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--precopy takes --live --qmp SOCKET (and no SOURCE)" in result.stderr


def test_a_full_disk_while_streaming_is_one_line_and_the_guest_runs_on(qemu, tmp_path, monkeypatch):  # noqa: F811
    import errno
    import os

    from ovm_offline.errors import OutputError

    _wait_for_firmware(qemu)
    before = qemu.cmd("query-migrate-parameters")
    real_pwrite = os.pwrite
    writes = []

    def filling(fd, data, offset):
        writes.append(offset)
        if len(writes) > 10:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", filling)
    with pytest.raises(OutputError, match=r"cannot write .*guest-ram: No space left on device \(.* MiB free on") as e:
        precopy_snapshot(qemu.qmp_path, _snapshot_dir(tmp_path), qemu.ram)
    assert "\n" not in str(e.value)
    assert qemu.status()["running"]
    assert qemu.cmd("query-migrate-parameters") == before
    # cancelled, or over already: a small guest's stream can end before the poll sees the error
    assert qemu.cmd("query-migrate")["status"] in ("cancelled", "cancelling", "failed", "completed")


def test_pages_the_stream_had_stale_are_copied_at_the_stop(qemu, tmp_path, monkeypatch):  # noqa: F811
    """QEMU's dirty tracking lost about 30 pages of a guest's first migration under TCG; the
    check at the stop copies them. Here the reader drops every page at one offset, as a lost
    dirty write would leave it."""
    from ovm_offline.sources import migration

    _wait_for_firmware(qemu)
    real_put = migration._RamBlock.put
    monkeypatch.setattr(
        migration._RamBlock,
        "put",
        lambda self, offset, data, fill: None if offset == 0xF0000 else real_put(self, offset, data, fill),
    )
    at_stop = tmp_path / "ram-at-stop"
    snap = _snapshot_dir(tmp_path)
    report = precopy_snapshot(
        qemu.qmp_path, snap, qemu.ram, on_paused=lambda execute: shutil.copyfile(qemu.ram, at_stop)
    )
    assert report.fixed_pages >= 1 and "stale pages fixed at the stop" in report.line()
    assert (snap / "guest-ram").read_bytes() == at_stop.read_bytes()
    assert qemu.status()["running"]


def test_a_memory_file_that_is_not_this_guests_ram_is_refused_before_anything_starts(qemu, tmp_path):  # noqa: F811
    """--mem is mapped for the check at the stop before the migration starts: a file of another
    size (another guest's, or a truncated one) is refused then, and the guest runs on."""
    _wait_for_firmware(qemu)
    other = tmp_path / "other-ram"
    other.write_bytes(bytes(1 << 20))
    snap = _snapshot_dir(tmp_path)
    with pytest.raises(SourceError, match=r"other-ram: is 1048576 bytes, not this guest's RAM \(ram0: \d+ bytes\)"):
        precopy_snapshot(qemu.qmp_path, snap, other)
    assert qemu.status()["running"]
    assert "status" not in qemu.cmd("query-migrate"), "a migration was started"
    assert not (snap / "guest-ram").exists()
    (tmp_path / "2").mkdir()
    with pytest.raises(SourceError, match=r"missing-ram: cannot open"):
        precopy_snapshot(qemu.qmp_path, _snapshot_dir(tmp_path / "2"), tmp_path / "missing-ram")


def test_a_memory_file_of_the_right_size_that_is_not_the_guests_is_refused(qemu, tmp_path):  # noqa: F811
    """Another guest's RAM file of the same size (here a copy of this one's) must not pass:
    the check at the stop would copy its pages into the snapshot wherever they differ, and the
    dump would be silently of another guest."""
    _wait_for_firmware(qemu)
    copy = tmp_path / "copy-of-ram"
    shutil.copyfile(qemu.ram, copy)
    snap = _snapshot_dir(tmp_path)
    with pytest.raises(SourceError, match=r"copy-of-ram: is not the memory of any memory backend of this QEMU"):
        precopy_snapshot(qemu.qmp_path, snap, copy)
    assert qemu.status()["running"]
    assert "status" not in qemu.cmd("query-migrate"), "a migration was started"
    assert not (snap / "guest-ram").exists()


def test_pre_copy_without_xxhash_is_refused_before_anything_starts(qemu, tmp_path, monkeypatch):  # noqa: F811
    """The check at the stop hashes guest RAM with Debian's libxxhash (which apt needs, so
    it is there): were it gone, pre-copy says so before it starts anything."""
    from ovm_offline.sources import ramcheck

    _wait_for_firmware(qemu)
    monkeypatch.setattr(ramcheck, "XXHASH_LIBRARY", "libxxhash-gone.so.0")
    snap = _snapshot_dir(tmp_path)
    with pytest.raises(SourceError, match=r"pre-copy needs xxHash \(libxxhash-gone.so.0: apt-get install libxxhash0\)"):
        precopy_snapshot(qemu.qmp_path, snap, qemu.ram)
    assert qemu.status()["running"]
    assert "status" not in qemu.cmd("query-migrate"), "a migration was started"
    assert not any(snap.iterdir())


def _settled(flags: bytearray, seconds: float = 10.0) -> bool:
    """The hasher has taken every written chunk (it clears a flag before it hashes)."""
    deadline = time.monotonic() + seconds
    while any(flags) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(flags)


def test_the_check_at_the_stop_finds_every_page_the_stream_left_stale(tmp_path):
    """The check hashes the guest's side of each chunk against the snapshot's hash the thread
    kept while the stream wrote: a page the guest wrote and the stream never re-sent is found
    and copied, in a whole chunk and in the shorter last one; a page re-sent after its chunk was
    hashed is compared as written, not by the old hash."""
    import os
    import random

    from ovm_offline.sources import ramcheck

    page, chunk = ramcheck.PAGE_SIZE, ramcheck.CHECK_CHUNK
    size = 3 * chunk + 5 * page
    live_path, snap_path = tmp_path / "guest-ram-live", tmp_path / "guest-ram"
    rng = random.Random(7)
    live_path.write_bytes(rng.randbytes(size))
    snap_fd = os.open(snap_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(snap_fd, size)
    pair = ramcheck.GuestRamPair(live_path, snap_fd, size, "test", ramcheck.xxh3_with_seed("test"))
    try:
        live_fd = os.open(live_path, os.O_RDWR)

        def stream_writes(offset: int, data: bytes) -> None:  # as migration._RamBlock.write does
            os.pwrite(snap_fd, data, offset)
            pair.written.flags[offset >> pair.written.shift] = 1

        for offset in range(0, size, page):
            if offset != 2 * page:  # a page of zeros as QEMU sends them: never written
                stream_writes(offset, os.pread(live_fd, page, offset))
        os.pwrite(live_fd, bytes(page), 2 * page)
        assert _settled(pair.written.flags)
        # the guest writes on; the stream re-sends one page and loses two
        lost = [chunk + 7 * page, 3 * chunk + 4 * page]
        resent = 2 * chunk + page
        for offset in [*lost, resent]:
            os.pwrite(live_fd, rng.randbytes(page), offset)
        stream_writes(resent, os.pread(live_fd, page, resent))
        assert pair.stale_pages(2) == lost
        assert pair.fix(2) == 2
        assert snap_path.read_bytes() == live_path.read_bytes()
        os.close(live_fd)
    finally:
        pair.close()
        os.close(snap_fd)


def test_a_report_says_how_long_the_guest_was_stopped_or_that_qemu_did_not_say():
    from ovm_offline.sources.background import BackgroundReport
    from ovm_offline.sources.migration import RamStream
    from ovm_offline.sources.precopy import PrecopyReport

    def precopy(was_running: bool, paused: float | None) -> str:
        return PrecopyReport(was_running, paused, 3, 2, RamStream("ram0", pages=10), 1.5).line()

    assert precopy(True, 0.0421).startswith("pre-copy: guest paused for 42 ms (QEMU downtime 3 ms) after 2 rounds")
    assert precopy(False, None).startswith("pre-copy: guest was paused already (QEMU downtime")
    # events lost: neither "0 ms" nor "was paused already" (which would stop the CLI's retries)
    assert precopy(True, None).startswith("pre-copy: guest paused for a time QEMU did not report (")
    background = BackgroundReport(None, 3, RamStream("ram0", pages=10), 1.5)
    assert background.was_running
    assert background.line().startswith("background snapshot: guest paused for a time QEMU did not report (")
    assert (
        BackgroundReport(0.0125, 3, RamStream("ram0"), 1.5)
        .line()
        .startswith("background snapshot: guest paused for 12 ms (QEMU downtime 3 ms), then 0 pages")
    )
