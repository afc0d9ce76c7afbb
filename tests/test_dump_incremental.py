"""Incremental dumps (issue 32): `dump --prev-images-dir` writes only the pages that changed
since the parent dump, names the others PE_PARENT with a `parent` link, and `criu restore`
follows the chain. A running writer (memhog-writer rewrites 1% of its 64 MiB a second, each
page with its next generation) is dumped live three times; the chain restores from the last
dump, and the workload checks every page."""

from __future__ import annotations

import re
import time

import pytest

from corpus import kernels
from corpus.recorder import record_with_live_dump
from corpus.restore import restore
from ovm_offline.criu.images import PAGE_SIZE, PAGEMAP, ImageDir, page_present, pagemap_run_pages
from tests.support.checks import assert_one_line_failure
from tests.support.cli import MOMENTS, ovm
from tests.support.corpus_cases import skip_unless_live

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest


def _pages(directory, pid) -> tuple[int, int]:
    """(pages written, pages named in the parent) of process `pid` in a dump."""
    pagemap = ImageDir(directory).get(PAGEMAP, pid)
    assert pagemap is not None
    runs = pagemap.entries[1:]
    written = sum(pagemap_run_pages(r) for r in runs if page_present(r))
    return written, sum(pagemap_run_pages(r) for r in runs) - written


#: how each of the three dumps is taken: three one-pause dumps, or as the seeds migrate, two
#: pre-dumps while the guest runs (background snapshots) and a final dump
CHAINS = {
    "dumps": ([], [], []),
    "pre-dumps": (["--background", "--pre-dump"], ["--background", "--pre-dump"], []),
}


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("chain_of", list(CHAINS))
def test_a_chain_of_three_live_dumps_restores_from_the_last(tmp_path, ram_on_tmpfs, kernel, chain_of):
    skip_unless_live(kernel, "memhog-writer")
    chain = tmp_path / "chain"
    chain.mkdir()
    said: list[str] = []

    def dump_three(guest, root):
        qmp = ["dump", "--live", "--qmp", str(guest.qmp_tool_path), "--pid", str(root), "--attempts", str(MOMENTS)]
        for n, how in enumerate(CHAINS[chain_of], start=1):
            parent = ["--prev-images-dir", f"../{n - 1}"] if n > 1 else []
            result = ovm(*qmp, *how, "-D", str(chain / str(n)), *parent)
            assert result.returncode == 0, result.stderr
            said.append(result.stderr)
            time.sleep(1.5)  # memhog rewrites 1% of its pages a second

    rec = record_with_live_dump(
        kernel, "memhog-writer", tmp_path / "rec", dump_three, log=lambda m: None, memory_dir=ram_on_tmpfs
    )
    if chain_of == "pre-dumps":
        assert not (chain / "1" / "core-{}.img".format(rec.manifest["root_pid"])).exists()
        assert "pre-dumped (memory only)" in said[0] and "pre-dumped (memory only)" in said[1]
    root = rec.manifest["root_pid"]
    full, _ = _pages(chain / "1", root)
    for n in (2, 3):
        written, kept = _pages(chain / str(n), root)
        assert written + kept == pytest.approx(full, abs=64)  # the same mappings, give or take libc's
        # 1% of 16384 pages a second for ~2 s, plus the stack, libc's data and the like
        assert 0 < written < full // 10, (n, written, kept, full)
        assert re.search(rf"{kept} pages unchanged since the parent dump", said[n - 1])
        assert (chain / str(n) / "parent").readlink().as_posix() == f"../{n - 1}"
    result = restore(rec, chain / "3", log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"


def test_a_parent_that_is_not_a_dump_of_the_tree_is_refused_by_name(recording, tmp_path):
    rec = recording("6.1", "counter")
    root = rec.manifest["root_pid"]
    first = tmp_path / "1"
    assert ovm("dump", str(rec.elf), "--pid", str(root), "-D", str(first)).returncode == 0
    assert_one_line_failure(
        ovm("dump", str(rec.elf), "--pid", "1", "-D", str(tmp_path / "2"), "--prev-images-dir", "../1"),
        f"{first}: is a dump of the tree of PID {root}, not of PID 1",
    )
    assert_one_line_failure(
        ovm("dump", str(rec.elf), "--pid", str(root), "-D", str(tmp_path / "2"), "--prev-images-dir", "../none"),
        "none: the previous images directory does not exist",
    )
    # the images directory itself (replaced with --force): its link would lead to itself
    assert_one_line_failure(
        ovm("dump", str(rec.elf), "--pid", str(root), "-D", str(first), "--force", "--prev-images-dir", "."),
        "a dump's parent cannot be its own images directory or inside it",
    )
    # a truncated parent: its pages file shorter than its pagemap says
    pages = next(first.glob("pages-*.img"))
    pages.write_bytes(pages.read_bytes()[:PAGE_SIZE])
    assert_one_line_failure(
        ovm("dump", str(rec.elf), "--pid", str(root), "-D", str(tmp_path / "2"), "--prev-images-dir", "../1"),
        "(truncated?)",
    )
    assert not (tmp_path / "2").exists()
    # a chain that loops (a parent link to its own directory) is refused, not followed forever
    (first / "parent").symlink_to(".")
    assert_one_line_failure(
        ovm("dump", str(rec.elf), "--pid", str(root), "-D", str(tmp_path / "3"), "--prev-images-dir", "../1"),
        f"{first}/parent: its chain of parent dumps loops back to {first.resolve()}",
    )
    assert not (tmp_path / "3").exists()
