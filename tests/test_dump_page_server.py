"""Diskless dumps (issue 32): `dump --page-server HOST:PORT` sends the pagemaps and pages to a
real `criu page-server` in a fresh guest of the recorded kernel, whose criu then restores the
tree from what its page server wrote and what came to -D; the workload checks every page.
Each guest's own criu serves: Debian 12's 3.17 speaks the 24-byte header, unstable's 4.2.1
the 32-byte one."""

from __future__ import annotations

import re
import shutil
import socket
import threading
from pathlib import Path

import pytest

from corpus import kernels
from corpus.recorder import record_with_live_dump
from corpus.restore import PageServerRestore, page_server_guest, restore
from ovm_offline.criu.descriptors import PAGE_SIZE, PE_PRESENT
from ovm_offline.criu.page_server import LAYOUTS, PS_IOV_ADD_F, PS_IOV_CLOSE, PS_IOV_OPEN2, PS_IOV_PARENT
from ovm_offline.criu.parent import _DIGEST_RECORD, _DIGESTS_MAGIC, DIGESTS_FILE
from tests.support.checks import assert_one_line_failure
from tests.support.cli import MOMENTS, dump_from, ovm
from tests.support.corpus_cases import criu_layout, skip_unless_live

#: one process's pages (memhog-64: 64 MiB, each page's pattern checked after restore), shared
#: memory (pagemap-shmem-INO.img), and criu 4.2.1's layout on 7.2 (whose share has filemap)
CASES = [
    ("6.1", "memhog-64"),
    ("6.1", "shmem"),
    ("6.12", "memhog-64"),
    ("7.2", "filemap"),
    ("5.10", "filemap"),
    ("6.1-rt", "filemap"),
]


def _page_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(("pages-", "pagemap-")))


class _NoRestore(Exception):
    """A test that needed only the guest's page server: its guest stops here."""


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize(("kernel", "workload"), CASES, ids=[f"{k}-{w}" for k, w in CASES])
def test_a_dump_to_criu_page_server_restores_the_workload(recording, tmp_path, kernel, workload):
    rec = recording(kernel, workload)
    root = rec.manifest["root_pid"]
    reference = dump_from(rec.elf, root, tmp_path / "reference")
    local = tmp_path / "local"
    said: list[str] = []

    def dump(address: str, _round: int) -> Path:
        result = ovm(
            "dump", str(rec.elf), "--pid", str(root), "-D", str(local),
            "--page-server", address, "--page-server-protocol", criu_layout(kernel),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        said.append(result.stderr)
        return local

    result = restore(rec, None, log=lambda m: None, page_server=PageServerRestore(dump))
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
    assert "page server 127.0.0.1:" in said[0] and f"(criu {criu_layout(kernel)}'s layout)" in said[0], said[0]
    # every other image is here, as a local dump writes it, and the pages' digests; no page and
    # no pagemap is
    assert sorted(p.name for p in local.iterdir()) == sorted(
        [DIGESTS_FILE, *(p.name for p in reference.iterdir() if p.name not in _page_files(reference))]
    )
    page_bytes = sum((reference / name).stat().st_size for name in _page_files(reference) if name.startswith("pages-"))
    assert page_bytes and sum(p.stat().st_size for p in local.iterdir()) < page_bytes / 8


def _forget_pages(digests: Path, every: int) -> int:
    """Alter every `every`th page's digest, as if those pages had changed since: the next dump
    sends them, and holes for the rest. Returns how many were altered."""
    data = digests.read_bytes()
    body = bytearray(data[len(_DIGESTS_MAGIC) :])
    altered = 0
    for i in range(0, len(body) // _DIGEST_RECORD.size, every):
        body[(i + 1) * _DIGEST_RECORD.size - 1] ^= 0xFF
        altered += 1
    digests.write_bytes(_DIGESTS_MAGIC + bytes(body))
    return altered


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["6.1", "6.12"])
def test_pre_dumps_and_a_final_dump_to_chained_page_servers_restore_from_the_last(recording, tmp_path, kernel):
    """As the seeds migrate, diskless: pre-dump, pre-dump, final dump, each to a page server whose
    parent is the round before. The recording is one moment, so the rounds are made to differ by
    altering the digests of some pages kept beside the previous round: those are sent again."""
    rec = recording(kernel, "memhog-64")
    root = rec.manifest["root_pid"]
    chain = tmp_path / "chain"
    chain.mkdir()
    said: list[str] = []
    altered: list[int] = []

    def dump(address: str, n: int) -> Path:
        how = ["--pre-dump"] if n < 3 else []
        parent = ["--prev-images-dir", f"../{n - 1}"] if n > 1 else []
        if n > 1:
            altered.append(_forget_pages(chain / str(n - 1) / DIGESTS_FILE, every=4 * n))
        result = ovm(
            "dump", str(rec.elf), "--pid", str(root), "-D", str(chain / str(n)), *how, *parent,
            "--page-server", address,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        said.append(result.stderr)
        return chain / str(n)

    result = restore(rec, None, log=lambda m: None, page_server=PageServerRestore(dump, rounds=3))
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
    assert "pre-dumped (memory only)" in said[0] and "pre-dumped (memory only)" in said[1]
    assert not _page_files(chain / "3") and (chain / "3" / "parent").is_symlink()
    for n in (2, 3):
        sent = int(re.search(r": (\d+) pages \(", said[n - 1]).group(1))
        kept = int(re.search(r"(\d+) pages unchanged since the parent dump", said[n - 1]).group(1))
        # only the pages whose digests were altered (and those the kernel still writes into) went again
        assert altered[n - 2] <= sent <= altered[n - 2] + 8 and kept > 4 * sent, said[n - 1]


def test_a_parent_whose_pages_did_not_go_to_a_page_server_is_refused_before_anything(tmp_path):
    parent = tmp_path / "1"
    parent.mkdir()
    (parent / "inventory.img").write_bytes(b"")
    out = tmp_path / "2"
    result = ovm("dump", "x.elf", "--pid", "1", "-D", str(out), "--prev-images-dir", "../1", "--page-server", "h:1")
    assert_one_line_failure(result, f"{parent}: has no page digests")
    (parent / DIGESTS_FILE).write_bytes(b"OVMPDIG1" + b"\0" * 5)
    result = ovm("dump", "x.elf", "--pid", "1", "-D", str(out), "--prev-images-dir", "../1", "--page-server", "h:1")
    assert_one_line_failure(result, "not ovm-offline's page digests, or truncated")
    assert not out.exists()


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["6.1", "7.2"])
def test_the_other_layout_is_refused_by_name_and_nothing_is_left(recording, tmp_path, kernel):
    workload = "memhog-64" if kernel == "6.1" else "filemap"
    rec = recording(kernel, workload)
    ours = criu_layout(kernel)
    other = next(name for name in LAYOUTS if name != ours)
    out = tmp_path / "out"

    def dump(address: str, _round: int) -> Path:
        result = ovm(
            "dump", str(rec.elf), "--pid", str(rec.manifest["root_pid"]), "-D", str(out),
            "--page-server", address, "--page-server-protocol", other,
        )  # fmt: skip
        assert_one_line_failure(result, f"page server {address}", f"--page-server-protocol {ours}")
        assert result.returncode == 1
        assert not out.exists()
        raise _NoRestore

    with pytest.raises(_NoRestore):
        restore(rec, None, log=lambda m: None, page_server=PageServerRestore(dump))


def _peer(answer_check: bool, then: str) -> tuple[socket.socket, threading.Thread]:
    """A listener that plays criu's page server (layout 3) to one connection, as
    page_server_serve() reads it: it answers the layout check (or stays silent), then `then`:
    "close" at the first pagemap opened, or "fail" the final status."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while header := conn.recv(LAYOUTS["3"].size, socket.MSG_WAITALL):
                cmd, nr_pages, _vaddr, _dst = LAYOUTS["3"].unpack(header)
                if cmd == PS_IOV_PARENT:
                    if not answer_check:
                        conn.recv(1)  # until the client gives up
                        return
                    conn.sendall((0).to_bytes(4, "little"))
                elif cmd == PS_IOV_OPEN2:
                    if then == "close":
                        return
                    conn.sendall(b"\0")
                elif cmd & 0xFFFF == PS_IOV_ADD_F:
                    if cmd >> 16 & PE_PRESENT:
                        conn.recv(nr_pages * PAGE_SIZE, socket.MSG_WAITALL)
                elif cmd == PS_IOV_CLOSE:
                    conn.sendall((-1).to_bytes(4, "little", signed=True))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.guest
@pytest.mark.parametrize("then", ["close", "fail"])
def test_a_server_gone_or_failing_mid_dump_leaves_no_images(recording, tmp_path, then):
    rec = recording("6.1", "counter")
    listener, thread = _peer(True, then)
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--pid", str(rec.manifest["root_pid"]), "-D", str(out), "--page-server", address)
    thread.join(10)
    listener.close()
    needle = "closed the connection before the opening of pagemap" if then == "close" else "ended with status -1"
    assert_one_line_failure(result, f"page server {address}", needle)
    assert not out.exists()


def test_no_server_and_bad_addresses_are_refused_in_one_line(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = tmp_path / "out"
    result = ovm("dump", "no-such.elf", "--pid", "1", "-D", str(out), "--page-server", f"127.0.0.1:{port}")
    assert_one_line_failure(result, f"page server 127.0.0.1:{port}: cannot connect")
    for address, needle in [("nohost", "is not HOST:PORT"), ("h:0", "from 1 to 65535"), ("h:x", "from 1 to 65535")]:
        result = ovm("dump", "no-such.elf", "--pid", "1", "-D", str(out), "--page-server", address)
        assert result.returncode == 2 and needle in result.stderr, result.stderr
    result = ovm("dump", "x.elf", "--pid", "1", "-D", str(out), "--page-server-protocol", "4.2")
    assert result.returncode == 2 and "--page-server-protocol takes --page-server" in result.stderr
    assert not out.exists()


def test_a_silent_server_is_taken_for_the_other_layout(tmp_path, monkeypatch):
    from ovm_offline.criu import page_server
    from ovm_offline.errors import OutputError

    monkeypatch.setattr(page_server, "CHECK_SECONDS", 0.5)
    listener, thread = _peer(False, "close")
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    with pytest.raises(
        OutputError, match=r"no answer in 0.5 s .* criu 3's layout \(24 bytes\).*--page-server-protocol 4\.2"
    ):
        page_server.PageServer.connect(address, "3")
    thread.join(10)
    listener.close()


#: a one-pause live dump (the guest paused while its pages stream to the server) and one from a
#: background snapshot (paused only for QEMU's downtime), as a migration takes it
LIVE_MODES = {"one-pause": [], "background": ["--background"]}


@pytest.mark.guest
@pytest.mark.slow
@pytest.mark.parametrize("kernel", list(kernels.KERNELS))
@pytest.mark.parametrize("mode", list(LIVE_MODES))
def test_a_live_dump_to_criu_page_server_restores_the_running_writer(tmp_path, ram_on_tmpfs, kernel, mode):
    """The migration's own path: a running guest (memhog-writer rewriting its pages) dumped
    live to criu page-server in another guest; what that server wrote, beside the other images,
    restores in a fresh guest, every page checked."""
    skip_unless_live(kernel, "memhog-writer")
    local = tmp_path / "images"
    said: list[str] = []

    def dump_live(guest, root):
        with page_server_guest(kernel, tmp_path / "destination") as destination:
            result = ovm(
                "dump", "--live", "--qmp", str(guest.qmp_tool_path), "--pid", str(root), "--attempts", str(MOMENTS),
                *LIVE_MODES[mode], "-D", str(local), "--page-server", destination.address,
                "--page-server-protocol", criu_layout(kernel),
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            said.append(result.stderr)
        assert not _page_files(local)
        for path in destination.images.iterdir():  # as a user copies the other images to the server's
            shutil.copy(path, local / path.name)

    rec = record_with_live_dump(
        kernel, "memhog-writer", tmp_path / "rec", dump_live, log=lambda m: None, memory_dir=ram_on_tmpfs
    )
    assert "the pagemaps and pages went to the page server" in said[0], said[0]
    result = restore(rec, local, log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
