"""`ovm-offline dump` of files with no name left (the ghosts workload, the state of zdtm's
unlink_fstat00, unlink_mmap00/01, cwd01, cwd02 and unhashed_proc): each inode held by an fd, a
mapping or a cwd after its last name went is saved as criu saves it, a ghost-file image with its
owner, mode, times and contents (holes left out) and a remap-fpath entry for every file that
names it; a cwd in the /proc directory of a process that has exited as its path and a procfs
remap to that PID, which restore gives to a helper process while it opens the directory.
Before, an unlinked open file and a removed cwd were refused, and a mapped unlinked file was
written as its old path, which restore would have opened whatever was there now. The general
gates (diff against criu's images, byte-identical from every source, crit, criu restore with the
workload's check of every byte, time, offset and hole) run in tests/test_dump.py."""

from __future__ import annotations

import stat

import pytest

from corpus import kernels
from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.criu import images
from ovm_offline.errors import ExitCode, UnsupportedError
from ovm_offline.kernel.task.tasks import find_task
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm
from tests.support.dumped_files import process_files
from tests.support.mutate import PatchedSource

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

PAGE = 4096
GHOST, PROCFS = 1, 2  # remap_type GHOST, PROCFS
DIR = "/run/ovm/ghosts"
# ghosts.c's fds: small twice, big, the removed directory
SMALL, SMALL2, BIG, GONE = 3, 4, 5, 6


def _ghosts(d):
    """file id -> its ghost (head entry, [(chunk entry, data)], raw data after the head)."""
    entries = images.read_image(d / images.REMAP_FPATH.filename()).entries
    remaps = {e.orig_id: e for e in entries if e.remap_type == GHOST}
    ghosts = {}
    for fid, remap in remaps.items():
        image = images.read_image(d / images.GHOST_FILE.filename(f"{remap.remap_id:x}"))
        ghosts[fid] = (
            remap.remap_id,
            image.entries[0],
            list(zip(image.entries[1:], image.payloads[1:])),
            image.payloads[0],
        )
    return ghosts


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_file_with_no_name_left_is_a_ghost_with_its_inode(dumped, kernel):
    d = dumped(kernel, "ghosts")
    files, fdinfo = process_files(d)
    by_fd = {fd: e.id for fd, e in fdinfo.items()}
    ghosts = _ghosts(d)
    # the two opens of small: two files, one ghost, named by its old path, written whole
    gid, head, chunks, raw = ghosts[by_fd[SMALL]]
    assert ghosts[by_fd[SMALL2]][0] == gid and by_fd[SMALL] != by_fd[SMALL2]
    assert files[by_fd[SMALL]].reg.name == f"{DIR}/small" and files[by_fd[SMALL]].reg.pos == 123
    assert (head.mode, head.uid, head.gid, head.chunks, chunks) == (stat.S_IFREG | 0o640, 0, 0, False, [])
    assert (head.mtim.tv_sec, head.mtim.tv_usec, head.atim.tv_sec, head.atim.tv_usec) == (
        1100000000,
        987654,
        2000000000,
        123456,
    )
    assert raw == bytes((i * 13 + 5) & 0xFF for i in range(5000))
    # big: its two data stretches as chunks, the hole between left out
    _, head, chunks, raw = ghosts[by_fd[BIG]]
    assert (head.chunks, head.size, raw) == (True, 7 * PAGE + 100, b"")
    assert [(c.off, c.len) for c, _ in chunks] == [(0, 2 * PAGE), (7 * PAGE, 100)]
    assert chunks[1][1] == bytes(250 - i for i in range(100))
    # the removed directory: the cwd and fd 6, one ghost directory with no contents
    fs = images.read_image(d / images.FS.filename(10000)).entries[0]
    gid, head, chunks, raw = ghosts[fs.cwd_id]
    assert ghosts[by_fd[GONE]][0] == gid
    assert (files[fs.cwd_id].reg.name, head.mode, chunks, raw) == (f"{DIR}/gone", stat.S_IFDIR | 0o750, [], b"")
    # mapped: held by a shared mapping alone, its file a ghost too
    mm = images.read_image(d / images.MM.filename(10000)).entries[0]
    mapped = {files[v.shmid].reg.name for v in mm.vmas if v.shmid in ghosts}
    assert mapped == {f"{DIR}/big", f"{DIR}/mapped"}
    shared = next(ghosts[v.shmid] for v in mm.vmas if v.shmid in ghosts and files[v.shmid].reg.name.endswith("mapped"))
    assert [(c.off, c.len) for c, _ in shared[2]] == [(0, 3 * PAGE)]
    assert len({g[0] for g in ghosts.values()}) == 4  # small, big, mapped, gone: one image each


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_cwd_in_an_exited_process_proc_directory_is_remapped_to_its_pid(dumped, recording, kernel):
    procdir = _procdir(recording(kernel, "ghosts"))
    d = dumped(kernel, "ghosts")
    files = {e.id: e for e in images.read_image(d / images.FILES.filename()).entries}
    fs = images.read_image(d / images.FS.filename(procdir)).entries[0]
    name = files[fs.cwd_id].reg.name
    # procdir's own child, killed and reaped before the dump: the helper restore forks takes its PID
    assert name.startswith("/proc/") and int(name.removeprefix("/proc/")) > procdir, name
    remaps = [e for e in images.read_image(d / images.REMAP_FPATH.filename()).entries if e.remap_type == PROCFS]
    assert [(e.orig_id, e.remap_id) for e in remaps] == [(fs.cwd_id, int(name.removeprefix("/proc/")))]


def _procdir(rec) -> int:
    """The ghosts child whose cwd is its own reaped child's /proc directory."""
    return int(dict(w.split("=") for w in rec.manifest["ready"].split()[1:])["procdir"])


@pytest.mark.parametrize("kernel", KERNELS)
def test_an_exited_process_pid_a_dumped_process_has_taken_since_is_refused_by_name(recording, tmp_path, kernel):
    """The PID of the exited process whose /proc directory a cwd is in, taken again by a process
    of the tree (the number renamed in the guest's dentry to the cwd's own process's): criu's
    restore would add no helper and open the cwd in that live process's directory."""
    rec = recording(kernel, "ghosts")
    procdir = _procdir(rec)
    with PatchedSource(sources.open_source(rec.elf)) as source:
        prog = inventory.open_kernel(source)
        name = find_task(prog, procdir).fs.deref().pwd.dentry.deref().d_name
        assert len(str(procdir)) == name.len  # both PIDs of the workload's range
        source.patch_virtual(prog, int(name.name), str(procdir).encode())
        with pytest.raises(UnsupportedError) as refused:
            dumping.dump(source, inventory.open_kernel(source), 10000, tmp_path / "out")
    assert (
        f"PID {procdir} (ghosts): its PID is that of an exited process whose /proc directory a dumped process"
        f" holds (/proc/{procdir}); criu's restore cannot give the PID to both"
    ) in str(refused.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_ghost_over_the_limit_is_refused_by_name_and_the_limit_can_be_raised(recording, tmp_path, kernel):
    rec = recording(kernel, "ghosts")
    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out), "--ghost-limit", "8K")
    assert result.returncode == ExitCode.UNSUPPORTED
    # a mapping's file that cannot be saved refuses the process (the first such mapping is named)
    assert_one_line_failure(
        result,
        "PID 10000 (ghosts): its mapping 0x",
        f" of the file {DIR}/mapped, unlinked, holds 12288 bytes, more than the 8192 a ghost file may"
        " hold (--ghost-limit raises it, as criu dump's)",
    )
    assert not out.exists()
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out), "--ghost-limit", "12q")
    assert result.returncode == ExitCode.SOURCE and "is not a size" in result.stderr
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out), "--ghost-limit", "64K")
    assert result.returncode == 0, result.stderr
