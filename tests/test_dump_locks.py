"""`ovm-offline dump --file-locks` of the locks workload: POSIX, OFD and flock locks and a read
lease, held by a root and its child (zdtm's file_locks and file_lease00 state). Without the
option every lock is refused by name, as criu dump refuses them; with it filelocks.img holds
what criu dump --file-locks writes, and `criu restore --file-locks` of our images gives locks
that still exclude a process that asks for them (the workload's own probe)."""

from __future__ import annotations

import pytest

from corpus import kernels
from corpus.restore import restore
from ovm_offline.criu import images
from ovm_offline.criu.diff import diff_dirs
from ovm_offline.errors import ExitCode
from tests.support.checks import assert_one_line_failure
from tests.support.cli import dump_from, ovm, tree_digest

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

# criu/include/file-lock.h flags; F_RDLCK, F_WRLCK
FL_POSIX, FL_FLOCK, FL_OFD, FL_LEASE = 1, 2, 4, 8
F_RDLCK, F_WRLCK = 0, 1
# the root's fds as locks.c opens them after 0-2: posix, ofd, flock, then lease; the child's
ROOT_POSIX, ROOT_OFD, ROOT_FLOCK, ROOT_LEASE = 3, 4, 5, 6
CHILD_POSIX, CHILD_SHARED = 6, 7


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """our images of the locks workload per kernel, made with --file-locks as criu's were"""
    made = {}

    def get(recording, kernel):
        if kernel not in made:
            rec = recording(kernel, "locks")
            made[kernel] = dump_from(
                rec.elf, 10000, tmp_path_factory.mktemp(f"locks-{kernel}") / "images", "--file-locks"
            )
        return made[kernel]

    return get


def _child_pid(rec) -> int:
    return int(rec.manifest["ready"].split("child=")[1].split()[0])


@pytest.mark.parametrize("kernel", KERNELS)
def test_without_file_locks_every_lock_is_refused_by_name(recording, tmp_path, kernel):
    rec = recording(kernel, "locks")
    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out))
    assert result.returncode == ExitCode.UNSUPPORTED
    child = _child_pid(rec)
    assert_one_line_failure(
        result,
        f"PID 10000 (locks) fd {ROOT_POSIX} holds a POSIX write lock on bytes 0-9 of /run/ovm/locks/posix",
        f"PID 10000 (locks) fd {ROOT_OFD} holds an OFD read lock on bytes 0-EOF of /run/ovm/locks/ofd",
        f"PID 10000 (locks) fd {ROOT_FLOCK} holds an exclusive flock on /run/ovm/locks/flock",
        f"PID 10000 (locks) fd {ROOT_LEASE} holds a read lease on /run/ovm/locks/lease",
        f"PID {child} (locks) fd {CHILD_POSIX} holds a POSIX read lock on bytes 100-199 of /run/ovm/locks/posix",
        f"PID {child} (locks) fd {CHILD_SHARED} holds a shared flock on /run/ovm/locks/shared",
        "--file-locks saves it",
    )
    assert not out.exists()


@pytest.mark.parametrize("kernel", KERNELS)
def test_filelocks_img_holds_every_lock_with_its_holder_and_fd(recording, locked, kernel):
    rec = recording(kernel, "locks")
    entries = images.read_image(locked(recording, kernel) / images.FILE_LOCKS.filename()).entries
    child = _child_pid(rec)
    assert sorted((e.pid, e.fd, e.flag, e.type, e.start, e.len) for e in entries) == sorted(
        [
            (10000, ROOT_POSIX, FL_POSIX, F_WRLCK, 0, 10),
            (10000, ROOT_OFD, FL_OFD, F_RDLCK, 0, 0),
            (10000, ROOT_FLOCK, FL_FLOCK, F_WRLCK, 0, 0),
            (10000, ROOT_LEASE, FL_LEASE, F_RDLCK, 0, 0),
            (child, CHILD_POSIX, FL_POSIX, F_RDLCK, 100, 100),
            (child, CHILD_SHARED, FL_FLOCK, F_RDLCK, 0, 0),
        ]
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_locks_match_criu_dump_file_locks(recording, locked, kernel):
    result = diff_dirs(locked(recording, kernel), recording(kernel, "locks").golden)
    assert result.same, result.report()


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_source_gives_the_same_locks(recording, locked, tmp_path, kernel):
    rec = recording(kernel, "locks")
    reference = tree_digest(locked(recording, kernel))
    for name, source in {**rec.kdumps, "live": rec.live_dir}.items():
        out = dump_from(source, 10000, tmp_path / name, "--file-locks")
        assert tree_digest(out) == reference, f"{name} differs from the ELF dump's images"


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
def test_criu_restore_of_our_locks_still_excludes_others(recording, locked, kernel):
    """Restored with criu restore --file-locks (the workload's criu options): a probe process
    finds every lock held by its owner, and the lease still held."""
    rec = recording(kernel, "locks")
    result = restore(rec, locked(recording, kernel), log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"
