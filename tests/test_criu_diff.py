"""diff of image directories: golden dumps equal themselves; a changed register, page byte,
missing image or extra fd is found; consistent renumbering of arbitrary ids and different
pagemap splits are not differences; ignore rules work as documented."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ovm_offline.criu import diff, images, pb, show
from ovm_offline.criu.diff import IgnoreRule
from ovm_offline.errors import ExitCode
from tests.support.cli import ovm
from tests.support.corpus_cases import GOLDEN_CASES

ROOT = Path(__file__).resolve().parents[1]
mm_pb, files_pb = pb.criu_mm_pb2, pb.criu_files_pb2


@pytest.fixture
def copy(tmp_path):
    def make(src: Path) -> Path:
        dst = tmp_path / "ours"
        shutil.copytree(src, dst)
        return dst

    return make


def rewrite(d: Path, name: str, change) -> None:
    img = images.read_image(d / name)
    change(img.entries)
    images.write_image(d / name, img.kind, img.entries, img.payloads)


def only(res: diff.DiffResult) -> diff.Difference:
    assert len(res.differences) == 1, res.report()
    return res.differences[0]


@pytest.mark.guest
@pytest.mark.parametrize("golden", GOLDEN_CASES, indirect=True)
def test_golden_equals_itself(golden):
    res = diff.diff_dirs(golden, golden)
    assert res.same and not res.ignored and res.exit_status == 0, res.report()


@pytest.mark.guest
def test_changed_register_is_reported(golden_of, copy):
    src = golden_of("counter")
    ours = copy(src)
    pid = images.ImageDir(src).pids()[0]
    rewrite(
        ours, f"core-{pid}.img", lambda es: setattr(es[0].thread_info.gpregs, "ip", es[0].thread_info.gpregs.ip + 2)
    )
    d = only(diff.diff_dirs(ours, src))
    assert (d.image, d.entry, d.path) == (f"core-{pid}.img", "", "core.thread_info.gpregs.ip")
    assert int(d.ours, 16) == int(d.theirs, 16) + 2
    assert "core.thread_info.gpregs.ip" in diff.diff_dirs(ours, src).report()


@pytest.mark.guest
def test_changed_page_byte_is_reported(golden_of, copy):
    src = golden_of("counter")
    ours = copy(src)
    idir = images.ImageDir(src)
    pid = idir.pids()[0]
    pages = [p for p in idir.pages(pid) if p.data is not None]
    target = pages[len(pages) // 2]
    index = pages.index(target)
    pages_file = ours / images.PAGES.filename(idir.get(images.PAGEMAP, pid).entries[0].pages_id)
    data = bytearray(pages_file.read_bytes())
    data[index * images.PAGE_SIZE + 0x123] ^= 0xFF
    pages_file.write_bytes(data)
    d = only(diff.diff_dirs(ours, src))
    assert (d.image, d.entry, d.path) == (f"pagemap-{pid}.img", f"0x{target.vaddr:x}", "pagemap.pages.data")
    assert d.ours.startswith("+0x123:") and d.theirs.startswith("+0x123:")


@pytest.mark.guest
def test_missing_and_extra_images_are_reported(golden_of, copy):
    src = golden_of("counter")
    ours = copy(src)
    pid = images.ImageDir(src).pids()[0]
    (ours / f"fs-{pid}.img").unlink()
    d = only(diff.diff_dirs(ours, src))
    assert (d.image, d.path, d.ours, d.theirs) == (f"fs-{pid}.img", "fs", diff.ABSENT, "present")
    d = only(diff.diff_dirs(src, ours))
    assert (d.ours, d.theirs) == ("present", diff.ABSENT)


@pytest.mark.guest
def test_extra_fd_is_reported(golden_of, copy):
    src = golden_of("counter")
    ours = copy(src)
    idir = images.ImageDir(src)
    pid = idir.pids()[0]
    files_id = idir.entry(images.IDS, pid).files_id
    fdinfo = f"fdinfo-{files_id}.img"

    def add_fd(entries):
        entries.append(files_pb.fdinfo_entry(id=entries[0].id, flags=1, type=entries[0].type, fd=77))

    rewrite(ours, fdinfo, add_fd)
    d = only(diff.diff_dirs(ours, src))
    assert d.image == f"fdinfo-<files@{pid}>.img" and d.entry == "fd=77" and d.path == "fdinfo"
    assert d.theirs == diff.ABSENT and '"fd": 77' in d.ours


@pytest.mark.guest
@pytest.mark.parametrize("workload", ["pipetree", "filemap", "container", "ptyprog", "counter"])
def test_renumbered_ids_are_no_difference(golden_of, copy, workload):
    src = golden_of(workload)
    ours = copy(src)
    idir = images.ImageDir(src)
    old_ids = sorted(e.id for e in idir.get(images.FILES).entries)
    new = {old: 1000 + 7 * i for i, old in enumerate(reversed(old_ids))}  # reversed: order changes too

    def files(entries):
        for e in entries:
            e.id = new[e.id]
            for f, sub in e.ListFields():
                if f.message_type is not None and hasattr(sub, "id"):
                    sub.id = e.id
                    if f.name in ("tty", "fifo") and sub.HasField("regf_id"):
                        sub.regf_id = new[sub.regf_id]
        entries.reverse()

    rewrite(ours, images.FILES.filename(), files)
    old_files_ids = {}
    for pid in idir.pids():
        ids = idir.entry(images.IDS, pid)
        if ids is None:
            continue
        rewrite(ours, f"mm-{pid}.img", lambda es: _renumber_mm(es[0], new))
        rewrite(ours, f"fs-{pid}.img", lambda es: (setattr(es[0], "cwd_id", new[es[0].cwd_id]),
                                                     setattr(es[0], "root_id", new[es[0].root_id])))  # fmt: skip
        old_files_ids.setdefault(ids.files_id, 500 + ids.files_id)
    # kcmp-style ids: renumber files_id, which also renames fdinfo-<files_id>.img
    for old, newer in old_files_ids.items():
        fdinfo = images.read_image(ours / f"fdinfo-{old}.img")
        for e in fdinfo.entries:
            e.id = new[e.id]
        (ours / f"fdinfo-{old}.img").unlink()
        images.write_image(ours / f"fdinfo-{newer}.img", images.FDINFO, fdinfo.entries)
    for pid in idir.pids():
        if idir.entry(images.IDS, pid) is not None:
            rewrite(ours, f"ids-{pid}.img", lambda es: setattr(es[0], "files_id", old_files_ids[es[0].files_id]))
    res = diff.diff_dirs(ours, src)
    assert res.same, res.report()
    # ... but a file id pointing elsewhere is a difference
    pid = idir.pids()[0]
    exe = idir.entry(images.MM, pid).exe_file_id
    names = [e.reg.name for e in idir.get(images.FILES).entries if e.HasField("reg")]
    other = next(e.id for e in idir.get(images.FILES).entries
                 if e.HasField("reg") and e.id != exe and names.count(e.reg.name) == 1)  # fmt: skip
    rewrite(ours, f"mm-{pid}.img", lambda es: setattr(es[0], "exe_file_id", new[other]))
    d = only(diff.diff_dirs(ours, src))
    assert d.path == "mm.exe_file_id" and d.ours.startswith("REG:/") and d.ours != d.theirs


def _renumber_mm(mm, new):
    mm.exe_file_id = new[mm.exe_file_id]
    for v in mm.vmas:
        if v.status & diff.VMA_FILE_MAPPED:
            v.shmid = new[v.shmid]


@pytest.mark.guest
def test_pagemap_split_and_pages_renumbering_are_no_difference(golden_of, copy):
    src = golden_of("counter")
    ours = copy(src)
    idir = images.ImageDir(src)
    pid = idir.pids()[0]
    pm = idir.get(images.PAGEMAP, pid)
    head, runs = pm.entries[0], pm.entries[1:]
    split = []
    for r in runs:  # split every run into one-page runs
        for i in range(r.nr_pages):
            e = mm_pb.pagemap_entry()
            e.CopyFrom(r)
            e.vaddr, e.nr_pages = r.vaddr + i * images.PAGE_SIZE, 1
            split.append(e)
    new_head = mm_pb.pagemap_head(pages_id=head.pages_id + 40)
    images.write_image(ours / f"pagemap-{pid}.img", images.PAGEMAP, [new_head, *split])
    (ours / f"pages-{head.pages_id}.img").rename(ours / f"pages-{new_head.pages_id}.img")
    res = diff.diff_dirs(ours, src)
    assert res.same, res.report()
    assert [d.path for d, _ in res.ignored] == ["pagemap.head.pages_id"]


@pytest.mark.guest
def test_ignore_rules_apply_and_can_be_replaced(golden_of, copy):
    src = golden_of("counter")
    ours = copy(src)
    pid = images.ImageDir(src).pids()[0]

    def tick(es):
        es[0].tc.timers.real.vusec += 1
        es[0].tc.timers.real.isec += 1

    rewrite(ours, f"core-{pid}.img", tick)
    res = diff.diff_dirs(ours, src)
    assert [d.path for d in res.differences] == ["core.tc.timers.real.isec"]
    assert [(d.path, r.pattern) for d, r in res.ignored] == [("core.tc.timers.real.vusec", "core.tc.timers.*.vusec")]
    res = diff.diff_dirs(ours, src, ignore=())
    assert {d.path for d in res.differences} == {"core.tc.timers.real.isec", "core.tc.timers.real.vusec"}


def test_ignore_rule_patterns():
    r = IgnoreRule("core.tc.timers.*.vsec", "")
    assert r.matches("core.tc.timers.real.vsec") and not r.matches("core.tc.timers.real.vsecs")
    assert not r.matches("core.tc.timers.real.isec") and not r.matches("core.tc.timersx.real.vsec")
    p = IgnoreRule("core.tc.timers.posix[*].vnsec", "")
    assert p.matches("core.tc.timers.posix[3].vnsec") and not p.matches("core.tc.timers.posix.vnsec")
    whole = IgnoreRule("timens", "")
    assert whole.matches("timens") and whole.matches("timens.monotonic.tv_sec") and not whole.matches("timensx")
    freezer = IgnoreRule("core.tc.flags", "a bit criu's own ptrace stop sets", bits=0x40000000)
    assert freezer.covers("core.tc.flags", 0x400040, 0x40400040)
    assert not freezer.covers("core.tc.flags", 0x400040, 0x40400000)  # another bit differs too
    assert not freezer.covers("core.tc.flags", 0x400040, "0x40400040")
    assert all(rule.reason for rule in diff.DEFAULT_IGNORES)
    deep = IgnoreRule("cgroup.**.properties[name=cgroup.procs]", "")
    assert deep.matches("cgroup.controllers[0].dirs[0].children[2].properties[name=cgroup.procs]")
    assert not deep.matches("cgroup.controllers[0].dirs[0].properties[name=cgroup.procs2]")
    only_absent = IgnoreRule("cgroup.**.properties[name=cgroup.type]", "", theirs_not="threaded")
    where = "cgroup.controllers[0].dirs[0].properties[name=cgroup.type]"
    assert only_absent.covers(where, diff.ABSENT, {"name": "cgroup.type", "value": "domain"})
    assert not only_absent.covers(where, diff.ABSENT, {"name": "cgroup.type", "value": "threaded"})
    assert not only_absent.covers(where, {"value": "domain"}, {"name": "cgroup.type", "value": "domain threaded"})


def _cgroup_dir(tmp_path: Path, name: str, props: list[tuple[str, str]], criu4: bool) -> Path:
    """An images directory holding an inventory (CRIU 4.x's has plugins_entry) and a cgroup.img
    with one directory of `props` below the v2 hierarchy."""
    d = tmp_path / name
    d.mkdir()
    task_pb, ns_pb = pb.criu_task_pb2, pb.criu_ns_pb2
    inventory = task_pb.inventory_entry(img_version=2)
    if criu4:
        inventory.plugins_entry.SetInParent()
    images.write_image(d / "inventory.img", images.INVENTORY, [inventory])
    entry = ns_pb.cgroup_entry()
    entry.sets.add(id=2, ctls=[ns_pb.cg_member_entry(name="", path="/box")])
    ctl = entry.controllers.add(cnames=[""])
    box = ctl.dirs.add(dir_name="box", dir_perms=ns_pb.cgroup_perms(mode=0o40755, uid=0, gid=0))
    for prop, value in props:
        box.properties.add(name=prop, value=value, perms=ns_pb.cgroup_perms(mode=0o100644, uid=0, gid=0))
    if criu4:
        ctl.is_threaded = False
    images.write_image(d / "cgroup.img", images.CGROUP, [entry])
    return d


V2 = [
    ("cgroup.subtree_control", ""),
    ("cgroup.max.descendants", "max"),
    ("cgroup.max.depth", "max"),
    ("cgroup.freeze", "0"),
]


def test_a_cgroup_saved_for_both_criu_versions_equals_each_ones_own(tmp_path):
    """Ours hold 3.x's cgroup.procs and 4.x's v2 files (cgroup.type only when threaded): equal
    to 3.x's images but for 4.x's files, to 4.x's but for 3.x's one and a type restore ignores."""
    ours = _cgroup_dir(tmp_path, "ours", [("cgroup.procs", ""), *V2], criu4=True)
    criu3 = _cgroup_dir(tmp_path, "criu3", [("cgroup.procs", "")], criu4=False)
    criu4 = _cgroup_dir(tmp_path, "criu4", [*V2, ("cgroup.type", "domain")], criu4=True)
    assert diff.diff_dirs(ours, criu3).same and diff.diff_dirs(ours, criu4).same
    threaded = _cgroup_dir(tmp_path, "threaded", [*V2, ("cgroup.type", "threaded")], criu4=True)
    assert [d.path for d in diff.diff_dirs(ours, threaded).differences] == [
        "cgroup.controllers[0].dirs[0].properties[name=cgroup.type]"
    ]
    frozen = _cgroup_dir(tmp_path, "frozen", [*V2[:3], ("cgroup.freeze", "1")], criu4=True)
    assert [d.path for d in diff.diff_dirs(ours, frozen).differences] == [
        "cgroup.controllers[0].dirs[0].properties[name=cgroup.freeze].value"
    ]


@pytest.mark.guest
def test_cli_exit_status(golden_of, copy, capsys):
    src = golden_of("counter")
    assert diff.main([str(src), str(src)]) == 0
    ours = copy(src)
    (ours / "pstree.img").write_bytes(b"garbage!")
    assert diff.main([str(ours), str(src)]) == ExitCode.IMAGES  # a corrupt image, as the exit-code table says
    assert "pstree.img" in capsys.readouterr().err
    pid = images.ImageDir(src).pids()[0]
    (ours / "pstree.img").write_bytes((src / "pstree.img").read_bytes())
    rewrite(ours, f"core-{pid}.img", lambda es: setattr(es[0].tc, "comm", "other"))
    assert diff.main([str(ours), str(src)]) == 1
    assert "core.tc.comm: ours 'other'" in capsys.readouterr().out


@pytest.mark.guest
@pytest.mark.timeout(len(GOLDEN_CASES) * 300)  # may record every standard guest on first use
def test_show_renders_every_golden_dir(all_golden):
    for g in all_golden:
        text = show.show_dir(str(g))
        assert "== pstree.img" in text and "dump.log" not in text
        assert '"pages":' in text and '"sha256":' in text
    assert show.main([str(all_golden[0]), "pstree.img"]) == 0


def test_show_cli_error_is_one_line(tmp_path, capsys):
    (tmp_path / "core-1.img").write_bytes(b"\x00" * 3)
    assert show.main([str(tmp_path)]) == images.ImageError.exit_code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "core-1.img" in err


@pytest.mark.guest
def test_show_takes_a_single_image_file(golden_of):
    g = golden_of("pipetree")
    one = ovm("show", str(g / "pstree.img"))
    assert one.returncode == 0 and one.stdout.startswith("== pstree.img") and "== core" not in one.stdout
    both = ovm("show", str(g / "pstree.img"), "core-10000.img")
    assert both.returncode != 0 and both.stderr.count("\n") == 1 and "is an image file" in both.stderr


def _queues_dir(tmp_path: Path, name: str, packets: list[tuple[int, bytes, list[int]]]) -> Path:
    """An images directory with a stream socket (file id 1), a datagram socket (file id 2) and
    `packets` (file id, bytes, files in flight) queued for them."""
    d = tmp_path / name
    d.mkdir()
    task_pb, net_pb = pb.criu_task_pb2, pb.criu_net_pb2
    images.write_image(d / "inventory.img", images.INVENTORY, [task_pb.inventory_entry(img_version=2)])
    socks = []
    for fid, sock_type in ((1, 1), (2, 2)):
        usk = net_pb.unix_sk_entry(id=fid, ino=100 + fid, type=sock_type, state=1, flags=2, uflags=0, backlog=0,
                                   peer=0, name=b"", fown=pb.criu_common_pb2.fown_entry(uid=0, euid=0, signum=0, pid_type=0,
                                   pid=0), opts=net_pb.sk_opts_entry(so_sndbuf=1, so_rcvbuf=1, so_snd_tmo_sec=0,
                                   so_snd_tmo_usec=0, so_rcv_tmo_sec=0, so_rcv_tmo_usec=0))  # fmt: skip
        socks.append(files_pb.file_entry(type=files_pb.UNIXSK, id=fid, usk=usk))
    images.write_image(d / "files.img", images.FILES, socks)
    entries = []
    for fid, data, rights in packets:
        entry = net_pb.sk_packet_entry(id_for=fid, length=len(data))
        if rights:
            entry.scm.add(type=1, rights=rights)
        entries.append(entry)
    images.write_image(d / "sk-queues.img", images.SK_QUEUES, entries, [data for _, data, _ in packets])
    return d


def test_stream_packets_compare_as_criu_peeks_glue_them(tmp_path):
    """criu's peek glues a stream's bytes before files into the packet with the files; ours sends
    them apart. The same bytes with the same files in the same place are no difference; files
    moved to other bytes, or datagrams joined, are."""
    theirs = _queues_dir(tmp_path, "theirs", [(1, b"hdxyz", [7, 8]), (1, b"wk", [7]), (2, b"a", []), (2, b"b", [])])
    ours = _queues_dir(tmp_path, "ours", [(1, b"hd", []), (1, b"xyz", [7, 8]), (1, b"w", []), (1, b"k", [7]),
                                          (2, b"a", []), (2, b"b", [])])  # fmt: skip
    assert diff.diff_dirs(ours, theirs).same, diff.diff_dirs(ours, theirs).report()
    moved = _queues_dir(tmp_path, "moved", [(1, b"hd", [7, 8]), (1, b"xyz", []), (1, b"wk", [7]),
                                            (2, b"a", []), (2, b"b", [])])  # fmt: skip
    assert not diff.diff_dirs(moved, theirs).same
    joined = _queues_dir(tmp_path, "joined", [(1, b"hdxyz", [7, 8]), (1, b"wk", [7]), (2, b"ab", [])])
    assert not diff.diff_dirs(joined, theirs).same
