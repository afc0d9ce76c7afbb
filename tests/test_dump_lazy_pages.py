"""Post-copy (issue 32): `dump --lazy-pages --port N` writes the images as `criu dump
--lazy-pages` does, its lazy pages left out, and then serves them to `criu lazy-pages
--page-server` in a fresh guest of the recorded kernel, whose `criu restore --lazy-pages`
continues the tree; the workload checks every page. The requests no lazy page answers are
played by a test peer: criu's daemon never sends them."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from corpus.restore import free_port, restore
from ovm_offline.criu.descriptors import PAGE_SIZE, PE_LAZY, PE_PRESENT
from ovm_offline.criu.images import PAGEMAP, ImageDir
from ovm_offline.criu.page_server import LAYOUTS, PS_IOV_ADD_F, PS_IOV_CLOSE, PS_IOV_GET
from tests.support.checks import assert_one_line_failure
from tests.support.cli import dump_from, ovm
from tests.support.corpus_cases import criu_layout

pytestmark = pytest.mark.guest

#: one process's 64 MiB, each page checked after restore, with each guest's own criu (3.17 on
#: 6.1 and 6.12, 4.2.1 and its layout on 7.2, whose share has filemap)
CASES = [("6.1", "memhog-64"), ("6.12", "memhog-64"), ("7.2", "filemap"), ("5.10", "filemap"), ("6.1-rt", "filemap")]


def _serving(rec, images: Path, port: int, layout: str = "3") -> tuple[subprocess.Popen, list[str]]:
    """`ovm-offline dump --lazy-pages` of the recording's tree, once it serves."""
    argv = [sys.executable, "-m", "ovm_offline", "dump", str(rec.elf), "--pid", str(rec.manifest["root_pid"])]
    argv += ["-D", str(images), "--lazy-pages", "--address", "127.0.0.1", "--port", str(port)]
    argv += ["--page-server-protocol", layout]
    dumping = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    said = []
    assert dumping.stderr is not None
    for line in dumping.stderr:
        said.append(line)
        if line.startswith("serving "):
            return dumping, said
    dumping.wait(10)
    raise AssertionError(f"the lazy dump did not serve: {''.join(said)}")


def _lazy_entries(images: Path, pid: int) -> list:
    pagemap = ImageDir(images).get(PAGEMAP, pid)
    assert pagemap is not None
    return [e for e in pagemap.entries[1:] if e.flags & PE_LAZY]


def _pages_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("pages-*.img"))


@pytest.mark.slow
@pytest.mark.parametrize(("kernel", "workload"), CASES, ids=[f"{k}-{w}" for k, w in CASES])
def test_lazy_pages_served_to_criu_lazy_pages_restore_the_workload(recording, tmp_path, kernel, workload):
    rec = recording(kernel, workload)
    root = rec.manifest["root_pid"]
    reference = dump_from(rec.elf, root, tmp_path / "reference")
    port = free_port()
    images = tmp_path / "images"
    dumping, said = _serving(rec, images, port, criu_layout(kernel))
    try:
        result = restore(rec, images, log=lambda m: None, lazy_pages_port=port)
        rest = dumping.communicate(timeout=120)[1]
    finally:
        dumping.kill()
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
    assert dumping.returncode == 0, rest
    lazy = _lazy_entries(images, root)
    lazy_pages = sum(e.nr_pages for e in lazy)
    assert lazy_pages and all(e.flags == PE_LAZY for e in lazy)  # criu's: lazy alone, not present
    assert f"served {lazy_pages} of {lazy_pages} lazy pages" in rest, "".join(said) + rest
    # the pages files hold everything but the lazy pages
    assert _pages_bytes(images) == _pages_bytes(reference) - lazy_pages * PAGE_SIZE


def _request(sock: socket.socket, pid: int, vaddr: int, nr_pages: int, cmd: int = PS_IOV_GET) -> None:
    sock.sendall(LAYOUTS["3"].pack(cmd, nr_pages, vaddr, pid))


def test_requests_answered_as_criu_answers_them_and_refused_where_no_lazy_page_is(recording, tmp_path):
    rec = recording("6.1", "memhog-64")
    root = rec.manifest["root_pid"]
    reference = ImageDir(dump_from(rec.elf, root, tmp_path / "reference"))
    port = free_port()
    dumping, _ = _serving(rec, tmp_path / "images", port)
    lazy = _lazy_entries(tmp_path / "images", root)
    first = max(lazy, key=lambda e: e.nr_pages)
    expected = {p.vaddr: p.data for p in reference.pages(root)}
    with socket.create_connection(("127.0.0.1", port)) as sock:
        # from the middle of an entry, more than it holds: clamped to its end
        vaddr = first.vaddr + PAGE_SIZE
        _request(sock, root, vaddr, first.nr_pages)
        cmd, nr_pages, at, pid = LAYOUTS["3"].unpack(sock.recv(LAYOUTS["3"].size, socket.MSG_WAITALL))
        assert (cmd, nr_pages, at, pid) == (PS_IOV_ADD_F | PE_PRESENT << 16, first.nr_pages - 1, vaddr, root)
        data = sock.recv(nr_pages * PAGE_SIZE, socket.MSG_WAITALL)
        assert [data[i : i + PAGE_SIZE] for i in range(0, len(data), PAGE_SIZE)] == [
            expected[vaddr + i * PAGE_SIZE] for i in range(nr_pages)
        ]
        _request(sock, 0, 0, 0, PS_IOV_CLOSE)
        assert sock.recv(4, socket.MSG_WAITALL) == b"\0\0\0\0"
    rest = dumping.communicate(timeout=60)[1]
    assert dumping.returncode == 0 and f"served {first.nr_pages - 1} of " in rest, rest


@pytest.mark.parametrize(
    "hostile",
    ["unknown address", "unknown pid", "too many pages", "another command", "gone without closing"],
)
def test_a_request_no_lazy_page_answers_ends_the_serving_in_one_line(recording, tmp_path, hostile):
    rec = recording("6.1", "memhog-64")
    root = rec.manifest["root_pid"]
    port = free_port()
    images = tmp_path / "images"
    dumping, said = _serving(rec, images, port)
    first = _lazy_entries(images, root)[0]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        if hostile == "unknown address":
            _request(sock, root, 0x1000, 1)
        elif hostile == "unknown pid":
            _request(sock, 99999, first.vaddr, 1)
        elif hostile == "too many pages":
            _request(sock, root, first.vaddr, 1025)
        elif hostile == "another command":
            _request(sock, root, first.vaddr, 1, cmd=PS_IOV_ADD_F)
        else:
            sock.sendall(b"\x07\0\0")  # part of a header, then gone
    rest = dumping.communicate(timeout=60)[1]
    needle = {
        "unknown address": "asked for 0x1000 of pid",
        "unknown pid": "of pid 99999, which is no lazy page",
        "too many pages": "a request for 1025 pages",
        "another command": "sent command 0x6, not a request",
        "gone without closing": "went away without closing, after 0 pages",
    }[hostile]
    assert_one_line_failure(subprocess.CompletedProcess([], dumping.returncode, "", rest), f"127.0.0.1:{port}", needle)
    assert dumping.returncode == 1
    assert ImageDir(images).get(PAGEMAP, root) is not None, "the images are whole: the destination decides"


def test_lazy_pages_options_are_refused_where_they_do_not_go(tmp_path):
    out = str(tmp_path / "out")
    for extra, needle in [
        (["--lazy-pages"], "--lazy-pages takes --port"),
        (["--port", "1"], "--port and --address take --lazy-pages"),
        (["--lazy-pages", "--port", "1", "--page-server", "h:1"], "not both"),
        (["--lazy-pages", "--port", "1", "--pre-dump"], "--lazy-pages takes neither --prev-images-dir nor --pre-dump"),
    ]:
        result = ovm("dump", "x.elf", "--pid", "1", "-D", out, *extra)
        assert result.returncode == 2 and needle in result.stderr, result.stderr
    result = ovm("dump", "--live", "--qmp", "/nonexistent", "--pid", "1", "-D", out, "--lazy-pages", "--port", "1")
    assert result.returncode == 2 and "would keep the guest paused" in result.stderr, result.stderr
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = ovm(
            "dump", "x.elf", "--pid", "1", "-D", out, "--lazy-pages", "--address", "127.0.0.1", "--port", str(port)
        )
    assert_one_line_failure(result, f"lazy pages: cannot listen on 127.0.0.1:{port}")
    assert not (tmp_path / "out").exists()
