"""Memory of real recorded processes, against the in-guest `criu dump` of the same stopped
tree: VMAs, mm fields and auxv (golden mm-PID.img), mapped file names (golden files.img
entries named by each VMA's shmid), the pagemap (pagemap-PID.img) and the saved pages
(pages-N.img, byte for byte), and VMAs against the manifest's /proc/PID/maps.

Bytes the guest kernel itself rewrote between our snapshot and CRIU's dump are masked:
the cpu_id_start, cpu_id, node_id and mm_cid words (6.3+) of each thread's struct rseq,
which the kernel rewrites whenever CRIU's parasite makes the thread return to user space
(on another CPU, with another concurrency id).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ovm_offline.criu.build.mm import vma_status as criu_vma_status
from ovm_offline.extract.mm import MmBusyError, extract_mm
from ovm_offline.extract.pages import PAGE_SIZE, PagesStats, write_pages
from ovm_offline.kernel import open_kernel
from ovm_offline.kernel.task.tasks import find_task
from ovm_offline.sources import open_source
from ovm_offline.state import MmState, Vma

pytestmark = [
    pytest.mark.guest,
    pytest.mark.skipif(shutil.which("crit") is None, reason="crit (Debian package criu) is not installed"),
]

KERNELS = ["6.1", "6.12"]
WORKLOADS = ["counter", "memhog-0", "memhog-64", "filemap", "threads", "pipetree", "ptyprog", "container"]
FORMATS = ["elf", "kdump-zlib"]
MM_FIELDS = [
    "start_code",
    "end_code",
    "start_data",
    "end_data",
    "start_stack",
    "start_brk",
    "brk",
    "arg_start",
    "arg_end",
    "env_start",
    "env_end",
]
CHUNK = 1 << 20


@functools.cache
def crit(path: Path) -> list[dict]:
    """The entries of one CRIU image as `crit decode` gives them (numbers, not names)."""
    res = subprocess.run(["crit", "decode", "-i", str(path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"crit decode {path.name}: {res.stderr.strip()}"
    return json.loads(res.stdout)["entries"]


def ns_pid(manifest: dict, pid: int) -> int:
    """The pid inside the tree's own PID namespace (golden images are named by it)."""
    return int(manifest["member_details"][str(pid)]["status"]["NSpid"].split()[-1])


@pytest.fixture(scope="module", params=[(k, w) for k in KERNELS for w in WORKLOADS], ids=lambda p: f"{p[0]}-{p[1]}")
def rec(request, recording):
    return recording(*request.param)


class Extracted:
    """What we extract from one dump format of a recording: nspid -> MmState, plus the
    source to copy pages from."""

    def __init__(self, rec, fmt: str) -> None:
        self.source = open_source(str(rec.elf if fmt == "elf" else rec.kdumps[fmt]))
        prog = open_kernel(self.source)
        m = rec.manifest
        self.mms: dict[int, MmState] = {}
        for pid in m["members"]:
            task = find_task(prog, pid)
            assert task is not None, f"pid {pid} not in the dump"
            try:
                self.mms[ns_pid(m, pid)] = extract_mm(prog, task)
            except MmBusyError as e:
                # The guest kernel was rewriting this mm's page tables when the dump was
                # taken (seen: khugepaged collapsing a huge page); the golden images were
                # made later, from the finished state. Nothing to compare.
                pytest.skip(f"{rec.root.name}: {e}")


@pytest.fixture(scope="module", params=FORMATS)
def ext(request, rec):
    e = Extracted(rec, request.param)
    yield e
    e.source.close()


def golden_files(rec) -> dict[int, dict]:
    return {e["id"]: e for e in crit(rec.golden / "files.img")}


def vma_key(v: Vma) -> tuple:
    return (
        v.start,
        v.end,
        v.pgoff,
        v.prot,
        v.flags,
        criu_vma_status(v),
        v.madvise,
        v.file_flags if v.kind == "file" else None,
    )


def golden_vma_key(g: dict) -> tuple:
    return (g["start"], g["end"], g["pgoff"], g["prot"], g["flags"], g["status"], g.get("madv", 0), g.get("fdflags"))


def test_vmas_equal_golden(rec, ext):
    files = golden_files(rec)
    for pid, mm in ext.mms.items():
        g = crit(rec.golden / f"mm-{pid}.img")[0]
        assert [vma_key(v) for v in mm.vmas] == [golden_vma_key(v) for v in g["vmas"]], f"pid {pid}"
        for v, gv in zip(mm.vmas, g["vmas"]):
            if v.kind != "file":
                assert v.file is None
                continue
            reg = files[gv["shmid"]]["reg"]
            assert v.file is not None and v.file.path == reg["name"], f"pid {pid} VMA 0x{v.start:x}"
            assert v.file.mode == reg["mode"]
            if "size" in reg:
                assert v.file.size == reg["size"]


def test_mm_fields_auxv_and_exe_equal_golden(rec, ext):
    files = golden_files(rec)
    for pid, mm in ext.mms.items():
        g = crit(rec.golden / f"mm-{pid}.img")[0]
        assert {f: getattr(mm, f) for f in MM_FIELDS} == {f: g[f"mm_{f}"] for f in MM_FIELDS}, f"pid {pid}"
        assert mm.auxv == g["mm_saved_auxv"]
        assert mm.dumpable == g["dumpable"] and mm.thp_disabled == g["thp_disabled"]
        exe = files[g["exe_file_id"]]["reg"]
        assert mm.exe_file is not None
        assert (mm.exe_file.path, mm.exe_file.size, mm.exe_file.mode) == (exe["name"], exe["size"], exe["mode"])


def maps_line(v: Vma) -> dict:
    """A VMA as /proc/PID/maps prints it (the manifest's parsed form)."""
    perms = "".join(c if v.prot & bit else "-" for c, bit in (("r", 1), ("w", 2), ("x", 4)))
    perms += "s" if v.shared else "p"
    names = {"heap": "[heap]", "stack": "[stack]", "vdso": "[vdso]", "vvar": "[vvar]", "vsyscall": "[vsyscall]"}
    if v.file is not None:
        path = v.file.path + (" (deleted)" if v.file.deleted else "")
        dev = f"{v.file.dev >> 20:02x}:{v.file.dev & 0xFFFFF:02x}"
        ino = v.file.ino
    else:
        path, dev, ino = names.get(v.kind, ""), "00:00", 0
    return {"start": v.start, "end": v.end, "perms": perms, "offset": v.pgoff, "dev": dev, "inode": ino, "path": path}


def test_vmas_equal_proc_maps(rec, ext):
    m = rec.manifest
    for pid in m["members"]:
        mm = ext.mms[ns_pid(m, pid)]
        assert [maps_line(v) for v in mm.vmas] == m["member_details"][str(pid)]["maps"], f"pid {pid}"


def test_pagemap_and_pages_equal_golden(rec, ext, tmp_path):
    for pid, mm in ext.mms.items():
        head, *entries = crit(rec.golden / f"pagemap-{pid}.img")
        out = tmp_path / f"pages-{pid}.img"
        stats = PagesStats()
        with out.open("wb") as f:
            ours = write_pages(ext.source, mm, f, stats)
        assert [(e.vaddr, e.nr_pages, e.flags) for e in ours] == [
            (e["vaddr"], e["nr_pages"], e["flags"]) for e in entries
        ], f"pid {pid}"
        assert stats.bytes == out.stat().st_size == sum(r.length for r in mm.pages)
        assert stats.copies <= len(mm.pages)  # bulk copies, never page by page
        compare_pages(rec, pid, ours, out, rec.golden / f"pages-{head['pages_id']}.img")


#: (offset, length) in struct rseq of what the kernel rewrites on return to user space:
#: cpu_id_start and cpu_id; node_id and mm_cid.
RSEQ_VOLATILE = ((0, 8), (20, 8))


def rseq_words(rec, pid: int) -> list[int]:
    """Addresses of the struct rseq of every thread of `pid`."""
    tree = {e["pid"]: e for e in crit(rec.golden / "pstree.img")}
    out = []
    for tid in tree[pid].get("threads", [pid]):
        core = crit(rec.golden / f"core-{tid}.img")[0]
        rseq = core.get("thread_core", {}).get("rseq_entry")
        if rseq and rseq.get("rseq_abi_pointer"):
            out.append(rseq["rseq_abi_pointer"])
    return out


def compare_pages(rec, pid: int, entries, ours: Path, golden: Path) -> None:
    """Page by page equality of two pages files laid out by the same pagemap, streamed in
    1 MiB chunks; the kernel-updated rseq words are masked."""
    page_index: dict[int, int] = {}
    masks: dict[int, list[int]] = {}
    vaddrs = {p & ~(PAGE_SIZE - 1): p for p in rseq_words(rec, pid)}
    i = 0
    for e in entries:
        for k in range(e.nr_pages):
            va = e.vaddr + k * PAGE_SIZE
            if va in vaddrs:
                masks.setdefault(i, []).append(vaddrs[va] & (PAGE_SIZE - 1))
            page_index[i] = va
            i += 1
    assert ours.stat().st_size == golden.stat().st_size == i * PAGE_SIZE
    with ours.open("rb") as a, golden.open("rb") as b:
        base = 0
        while True:
            x, y = bytearray(a.read(CHUNK)), bytearray(b.read(CHUNK))
            assert len(x) == len(y)
            if not x:
                break
            for pg in range(len(x) // PAGE_SIZE):
                for off in masks.get(base + pg, ()):
                    for rel, n in RSEQ_VOLATILE:
                        o = pg * PAGE_SIZE + off + rel
                        x[o : o + n] = y[o : o + n] = bytes(n)
            if x != y:
                for pg in range(len(x) // PAGE_SIZE):
                    s = slice(pg * PAGE_SIZE, (pg + 1) * PAGE_SIZE)
                    assert x[s] == y[s], f"pid {pid}: page 0x{page_index[base + pg]:x} differs from golden"
            base += len(x) // PAGE_SIZE
