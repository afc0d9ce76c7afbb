"""State CRIU's zdtm tests check that ovm-offline does not save yet (the hazards workload, a child
per piece): each is refused by name, in one line, with nothing written, where before each was
written as something else and the dump claimed success (zdtm pty02 as zdtm sets it up, its
terminal echoing; pty04's hung-up slave is saved now, the ptyhup workload's; its nsfd child's
namespace file, zdtm proc-self's state, is saved now and restored in the nsfiles workload, and
unlinked files, removed cwds and a cwd in an exited process's /proc directory, zdtm
unlink_fstat00, cwd01 and unhashed_proc's, are saved in the ghosts workload; inotify instances
are saved, the inotify workload's, but not with events unread, a watch with IN_ONESHOT, or a watch on a
directory a mount over it hides). The open files
among them can be left out with --skip-unsupported, each named."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline.errors import ExitCode
from tests.support.checks import assert_one_line_failure
from tests.support.cli import ovm

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest


def _children(rec) -> dict[str, int]:
    """hazard name -> the pid of the child holding it, from the READY line"""
    words = rec.manifest["ready"].split()[1:]
    return {k: int(v) for k, v in (w.split("=") for w in words) if k != "root"}


@pytest.mark.parametrize("kernel", KERNELS)
def test_each_piece_is_refused_by_name_and_nothing_is_written(recording, tmp_path, kernel):
    rec = recording(kernel, "hazards")
    pid = _children(rec)
    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out))
    assert result.returncode == ExitCode.UNSUPPORTED
    assert_one_line_failure(
        result,
        # the master holds the slave's echo of the 7 bytes ("queued\r\n"), the slave those 7: criu's
        # restore would write the echo through ONLCR again, and echo the input a second time
        f"PID {pid['ptyqueue']} (hazards) fd 3: a pseudo-terminal (/dev/ptmx) with 8 byte(s) queued for its reader,"
        " which criu's restore would write back changed: ONLCR turns each newline into CR NL",
        f"PID {pid['ptyqueue']} (hazards) fd 5: a pseudo-terminal (/dev/pts/",  # its number: who opened first
        ") with 7 byte(s) queued for its reader, which criu's restore would write back changed: the terminal echoes",
        f"PID {pid['inotifyq']} (hazards) fd 3: an inotify instance with 1 event(s) its reader has not read,"
        " which criu 3.17 drops",
        f"PID {pid['oneshot']} (hazards) fd 3: an inotify watch (wd 1) with IN_ONESHOT, which criu 3.17 restores"
        " as a plain lasting watch",
        f"PID {pid['shadowed']} (hazards) fd 3: an inotify watch (wd 1) on /run/ovm/hazards/shadowed/dir, which a"
        " mount over it hides (criu's restore would reopen what is mounted there by that name)",
    )
    assert f"PID {pid['nsfd']}" not in result.stderr  # its nsfs fd is saved now (nsfiles workload)
    assert not out.exists()


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_open_files_can_be_left_out_each_named(recording, tmp_path, kernel):
    rec = recording(kernel, "hazards")
    pid = _children(rec)
    out = tmp_path / "out"
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out), "--skip-unsupported")
    assert result.returncode == 0, result.stderr
    for fd in (3, 5):
        assert f"warning: left out PID {pid['ptyqueue']} (hazards) fd {fd}:" in result.stderr, result.stderr
    for child in ("inotifyq", "oneshot", "shadowed"):
        assert f"warning: left out PID {pid[child]} (hazards) fd 3:" in result.stderr, result.stderr
    assert f"PID {pid['nsfd']}" not in result.stderr
    assert (out / "pstree.img").exists()
