"""Reading and writing CRIU images: the golden images of the corpus (written by the in-guest
`criu dump`) decode with our protos, re-encode byte for byte, and decode to the same JSON as
`crit decode`; images built from scratch by our writer decode with crit."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
from google.protobuf import unknown_fields

from ovm_offline.criu import images, pb, show
from ovm_offline.criu.images import ImageError
from ovm_offline.errors import OvmError
from tests.support.corpus_cases import GOLDEN_CASES, GOLDEN_WORKLOAD_CASES, HOST_CRIU_GOLDEN_CASES
from tests.support.pages_image import write_pages as write_pages_image

ROOT = Path(__file__).resolve().parents[1]
CRIT = Path("/usr/bin/crit")
task_pb, mm_pb, files_pb = pb.criu_task_pb2, pb.criu_mm_pb2, pb.criu_files_pb2


needs_crit = pytest.mark.skipif(not CRIT.exists(), reason="crit (Debian package criu) is not installed")


def image_files(d: Path) -> list[Path]:
    """The non-raw images of a dump dir."""
    idir = images.ImageDir(d)
    return [d / n for n in idir.names() if not idir.kind_of(n).raw]


@cache
def crit_decode(path: Path, pretty: bool) -> dict:
    args = [str(CRIT), "decode", "-i", str(path)] + (["--pretty"] if pretty else [])
    res = subprocess.run(args, check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"crit decode {path.name}: {res.stderr.strip()}"
    return json.loads(res.stdout)


def crit_decode_all(paths: list[Path], pretty: bool) -> list[dict]:
    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(lambda p: crit_decode(p, pretty), paths))


def has_unknown_fields(msg) -> bool:
    if len(unknown_fields.UnknownFieldSet(msg)):
        return True
    for f, v in msg.ListFields():
        if f.message_type is not None and any(has_unknown_fields(x) for x in (v if f.is_repeated else [v])):
            return True
    return False


# ---- golden images ----------------------------------------------------------------------


@pytest.mark.guest
@pytest.mark.parametrize("golden", GOLDEN_CASES, indirect=True)
def test_golden_images_decode_fully_and_reencode_byte_identical(golden, tmp_path):
    for path in image_files(golden):
        img = images.read_image(path)
        assert img.kind.match(path.name) is not None or path.name == "stats-dump", path.name
        for i, e in enumerate(img.entries):
            assert not has_unknown_fields(e), f"{path.name} entry {i}: fields our protos lack"
        out = tmp_path / path.name
        images.write_image(out, img.kind, img.entries, img.payloads)
        assert out.read_bytes() == path.read_bytes(), path.name


@pytest.mark.guest
@needs_crit
@pytest.mark.parametrize("golden", HOST_CRIU_GOLDEN_CASES, indirect=True)
def test_golden_images_decode_like_crit(golden):
    paths = image_files(golden)
    for path, theirs in zip(paths, crit_decode_all(paths, pretty=False)):
        ours = show.image_to_dict(images.read_image(path), "crit")
        assert _around_crit_ipcns_shm_bug(path, ours, theirs) == theirs, path.name


def _around_crit_ipcns_shm_bug(path, ours: dict, theirs: dict) -> dict:
    """crit 3.17 reads `size` bytes of segment data after every ipcns-shm entry, even when
    in_pagemaps says the data is in pagemap-shmem/pages images instead: it shows the first
    entry with the next entries' bytes as its "extra" and loses them. Compare what it
    does decode: our first entry, given the bytes crit swallowed."""
    if images.kind_for_filename(path.name) is not images.IPCNS_SHM or len(ours["entries"]) < 2:
        return ours
    assert all(e.get("in_pagemaps") for e in ours["entries"])
    raw = path.read_bytes()
    first_end = 8 + 4 + int.from_bytes(raw[8:12], "little")  # magics, then the first entry
    swallowed = raw[first_end : first_end + ours["entries"][0]["size"]]
    return {**ours, "entries": [{**ours["entries"][0], "extra": base64.b64encode(swallowed).decode() + "\n"}]}


# crit --pretty prints task_state 3 as "Zombie" and 6 as "Stopped"; CRIU's constants say the
# opposite and so does our show. crit prints a flag word of 0 as "", ours as "0".
CRIT_TASK_STATE = {"Zombie": "Stopped", "Stopped": "Zombie"}
TASK_DEAD = 2  # a zombie's task_state in criu's images


def pretty_mismatches(crit, ours, path: str) -> list[str]:
    if isinstance(crit, dict) and isinstance(ours, dict):
        if crit.keys() != ours.keys():
            return [f"{path}: keys differ: {sorted(crit.keys() ^ ours.keys())}"]
        return [m for k in crit for m in pretty_mismatches(crit[k], ours[k], f"{path}.{k}")]
    if isinstance(crit, list) and isinstance(ours, list):
        if len(crit) != len(ours):
            return [f"{path}: {len(crit)} vs {len(ours)} items"]
        return [m for i, (a, b) in enumerate(zip(crit, ours)) for m in pretty_mismatches(a, b, f"{path}[{i}]")]
    if crit == ours or (path.endswith(".task_state") and CRIT_TASK_STATE.get(crit) == ours):
        return []
    if path.endswith(".task_state") and isinstance(crit, int) and show.NAME_TABLES["task_state"].get(crit) == ours:
        return []  # a state crit has no name for (2, a zombie's TASK_DEAD): crit prints the number
    if crit == "" and ours == "0":
        return []
    if isinstance(crit, str) and isinstance(ours, str):  # bytes: crit base64, ours hex or a digest
        try:
            raw = base64.b64decode(crit, validate=False)
            digest = re.fullmatch(r"<(\d+) bytes sha256:([0-9a-f]+)>", ours)
            if digest and len(raw) == int(digest[1]) and hashlib.sha256(raw).hexdigest().startswith(digest[2]):
                return []
            if raw == bytes.fromhex(ours):
                return []
        except ValueError:
            pass
    return [f"{path}: crit {crit!r}, ours {ours!r}"]


@pytest.mark.guest
@needs_crit
@pytest.mark.parametrize("golden", GOLDEN_WORKLOAD_CASES, indirect=True)
def test_golden_images_show_like_crit_pretty(golden):
    paths = image_files(golden)
    problems = []
    for path, theirs in zip(paths, crit_decode_all(paths, pretty=True)):
        ours = _around_crit_ipcns_shm_bug(path, show.image_to_dict(images.read_image(path), "pretty"), theirs)
        assert ours["magic"] == theirs["magic"]
        problems += pretty_mismatches(theirs["entries"], ours["entries"], path.name)
    assert not problems, "\n".join(problems[:20])


@pytest.mark.guest
@pytest.mark.parametrize("golden", GOLDEN_CASES, indirect=True)
def test_golden_pages_resolve_through_pagemap(golden):
    idir = images.ImageDir(golden)
    assert idir.pids()
    for pid in idir.pids():
        pm = idir.get(images.PAGEMAP, pid)
        core = idir.entry(images.CORE, pid)
        if core is not None and core.tc.task_state == TASK_DEAD:
            assert pm is None  # a zombie: criu writes its core alone
            continue
        assert pm is not None
        pages = list(idir.pages(pid))
        size = (golden / images.PAGES.filename(pm.entries[0].pages_id)).stat().st_size
        assert sum(p.data is not None for p in pages) * images.PAGE_SIZE == size
        assert [p.vaddr for p in pages] == sorted({p.vaddr for p in pages})


# ---- writing from scratch -------------------------------------------------------------


def make_core(pid: int = 4242) -> task_pb.core_entry:
    regs = task_pb.core_entry().thread_info.gpregs  # every user_x86_regs field is required
    core = task_pb.core_entry(mtype=task_pb.core_entry.X86_64)
    ti = core.thread_info
    ti.clear_tid_addr = 0x7F0000001000
    for f in regs.DESCRIPTOR.fields:
        if f.name != "mode":
            setattr(ti.gpregs, f.name, 0)
    ti.gpregs.ip, ti.gpregs.sp, ti.gpregs.cs, ti.gpregs.ss = 0x401000, 0x7FFFFFFFE000, 0x33, 0x2B
    ti.gpregs.mode = pb.criu_x86_pb2.NATIVE
    fp = ti.fpregs
    fp.cwd, fp.swd, fp.twd, fp.fop, fp.rip, fp.rdp, fp.mxcsr, fp.mxcsr_mask = 0x37F, 0, 0, 0, 0, 0, 0x1F80, 0xFFFF
    fp.st_space.extend([0] * 32)
    fp.xmm_space.extend([0] * 64)
    tc = core.tc
    tc.task_state, tc.exit_code, tc.personality, tc.flags, tc.blk_sigset, tc.comm = 1, 0, 0, 0x400000, 0, "demo"
    for t in (tc.timers.real, tc.timers.virt, tc.timers.prof):
        t.isec = t.iusec = t.vsec = t.vusec = 0
    tc.rlimits.rlimits.add(cur=8 << 20, max=2**64 - 1)
    for _ in range(62):
        tc.sigactions.add(sigaction=0, flags=0, restorer=0, mask=0, compat_sigaction=False)
    th = core.thread_core
    th.futex_rla, th.futex_rla_len = 0, 24
    th.creds.CopyFrom(task_pb.creds_entry(uid=0, gid=0, euid=0, egid=0, suid=0, sgid=0, fsuid=0, fsgid=0, secbits=0))
    th.rseq_entry.CopyFrom(task_pb.rseq_entry(rseq_abi_pointer=0, rseq_abi_size=0, signature=0x53053053))
    return core


def make_mm() -> mm_pb.mm_entry:
    mm = mm_pb.mm_entry(exe_file_id=1, dumpable=1)
    for f in mm.DESCRIPTOR.fields[:11]:  # the eleven required mm_* addresses
        setattr(mm, f.name, 0x400000)
    mm.vmas.add(start=0x400000, end=0x401000, pgoff=0, shmid=1, prot=5, flags=2, status=0x41, fd=-1)
    mm.vmas.add(start=0x7FFFFFFDE000, end=0x7FFFFFFFF000, pgoff=0, shmid=0, prot=3, flags=0x122, status=0x203, fd=-1)
    mm.mm_saved_auxv.extend([6, 4096, 0, 0])
    return mm


@needs_crit
def test_images_we_write_decode_with_crit(tmp_path):
    core, mm = make_core(), make_mm()
    pages_head = mm_pb.pagemap_head(pages_id=1)
    runs = [mm_pb.pagemap_entry(vaddr=0x7FFFFFFFE000, nr_pages=1, flags=images.PE_PRESENT)]
    pipe_data = [files_pb.pipe_data_entry(pipe_id=77, bytes=5, size=65536)]
    written = {
        images.CORE.filename(4242): (images.CORE, [core], None),
        images.MM.filename(4242): (images.MM, [mm], None),
        images.PAGEMAP.filename(4242): (images.PAGEMAP, [pages_head, *runs], None),
        images.PIPES_DATA.filename(): (images.PIPES_DATA, pipe_data, [b"hello"]),
        images.STATS.filename(): (images.STATS, [task_pb.stats_entry()], None),
        images.INVENTORY.filename(): (images.INVENTORY, [task_pb.inventory_entry(img_version=2, fdinfo_per_id=True)], None),
    }  # fmt: skip
    for name, (kind, entries, payloads) in written.items():
        images.write_image(tmp_path / name, kind, entries, payloads)
    for name, (kind, _entries, _payloads) in written.items():
        theirs = crit_decode(tmp_path / name, False)
        assert theirs["magic"] == kind.crit_name
        assert theirs == show.image_to_dict(images.read_image(tmp_path / name), "crit"), name
    assert (
        crit_decode(tmp_path / "pipes-data.img", False)["entries"][0]["extra"] == base64.encodebytes(b"hello").decode()
    )
    core_json = crit_decode(tmp_path / "core-4242.img", True)["entries"][0]
    assert core_json["thread_info"]["gpregs"]["ip"] == "0x401000" and len(core_json["tc"]["sigactions"]) == 62


def test_writer_is_deterministic_and_accepts_file_objects(tmp_path):
    import io

    a, b = io.BytesIO(), io.BytesIO()
    n = images.write_image(a, images.CORE, [make_core()])
    images.write_image(b, images.CORE, [make_core()])
    assert a.getvalue() == b.getvalue() and n == len(a.getvalue())
    assert a.getvalue()[:8] == bytes.fromhex("19435654") + bytes.fromhex("47380555")
    images.write_image(tmp_path / "inventory.img", images.INVENTORY, [task_pb.inventory_entry(img_version=2)])
    assert (tmp_path / "inventory.img").read_bytes()[:4] == (0x58313116).to_bytes(4, "little")
    images.write_image(tmp_path / "stats-dump", images.STATS, [task_pb.stats_entry()])
    assert (tmp_path / "stats-dump").read_bytes()[:4] == (0x55105940).to_bytes(4, "little")


def test_writer_rejects_bad_entries_with_one_line_errors():
    core = make_core()
    core.thread_info.gpregs.ClearField("ip")
    with pytest.raises(ImageError, match="required field.*thread_info.gpregs.ip"):
        images.encode_image(images.CORE, [core])
    with pytest.raises(ImageError, match="is a mm_entry, expected core_entry"):
        images.encode_image(images.CORE, [make_mm()])
    with pytest.raises(ImageError, match="exactly one entry, found 2"):
        images.encode_image(images.CORE, [make_core(), make_core()])
    with pytest.raises(ImageError, match="payload is 3 bytes, the entry says 5"):
        images.encode_image(images.PIPES_DATA, [files_pb.pipe_data_entry(pipe_id=1, bytes=5)], [b"abc"])
    with pytest.raises(ImageError, match="pagemap image lacks its pagemap_head"):
        images.encode_image(images.PAGEMAP, [])
    for e in (ImageError("x"),):
        assert isinstance(e, OvmError)


def test_reader_errors_are_image_errors(tmp_path):
    good = images.encode_image(images.FDINFO, [files_pb.fdinfo_entry(id=1, flags=0, type=files_pb.REG, fd=0)])
    cases = {
        "short.img": (b"\x19C", "too short"),
        "unknown.img": ((0x54564319).to_bytes(4, "little") + b"\x01\x02\x03\x04", "unknown image magic 0x04030201"),
        "trunc.img": (good[:-1], "entry 0: length 8 exceeds the 7 bytes left"),
        "len.img": (good[:8] + b"\xff\xff\xff\x7f", "exceeds"),
        "half.img": (good + b"\x01\x00", "truncated length field"),
        "req.img": (good[:8] + b"\x02\x00\x00\x00\x08\x01", "lacks required flags, type, fd"),
        "garbage.img": (good[:8] + b"\x03\x00\x00\x00\xff\xff\xff", "bad fdinfo_entry"),
        "noprefix.img": (good[4:], "leading magic none, expected 0x54564319"),
    }
    for name, (data, msg) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ImageError, match=msg) as ei:
            images.read_image(tmp_path / name)
        assert "\n" not in str(ei.value) and name in str(ei.value)
    with pytest.raises(ImageError, match="cannot read"):
        images.read_image(tmp_path / "missing.img")


def test_raw_pages_and_image_dir(tmp_path):
    head = mm_pb.pagemap_head(pages_id=3)
    runs = [
        mm_pb.pagemap_entry(vaddr=0x1000, nr_pages=2, flags=images.PE_PRESENT),
        mm_pb.pagemap_entry(vaddr=0x8000, nr_pages=1, flags=images.PE_LAZY),
        mm_pb.pagemap_entry(vaddr=0x9000, nr_pages=1),  # no flags: present (old images)
    ]
    images.write_image(tmp_path / "pagemap-7.img", images.PAGEMAP, [head, *runs])
    write_pages_image(tmp_path / "pages-3.img", [b"a" * 4096, b"b" * 4096 + b"c" * 4096])
    images.write_image(
        tmp_path / "pstree.img", images.PSTREE, [task_pb.pstree_entry(pid=7, ppid=0, pgid=7, sid=7, threads=[7])]
    )
    (tmp_path / "dump.log").write_text("not an image")
    idir = images.ImageDir(tmp_path)
    assert idir.names() == ["pagemap-7.img", "pages-3.img", "pstree.img"]
    assert idir.kind_of("pages-3.img") is images.PAGES and idir.kind_of("pagemap-7.img") is images.PAGEMAP
    pages = list(idir.pages(7))
    assert [(hex(p.vaddr), p.data[:1] if p.data else None) for p in pages] == [
        ("0x1000", b"a"), ("0x2000", b"b"), ("0x8000", None), ("0x9000", b"c"),
    ]  # fmt: skip
    raw = images.read_image(tmp_path / "pages-3.img")
    assert raw.kind is images.PAGES and raw.entries == [] and len(raw.payloads[0]) == 3 * 4096
    (tmp_path / "pages-3.img").write_bytes(b"a" * 4096)
    with pytest.raises(ImageError, match="needs 12288"):
        list(idir.pages(7))
    with pytest.raises(ImageError, match="not a multiple"):
        write_pages_image(tmp_path / "pages-9.img", [b"x"])
