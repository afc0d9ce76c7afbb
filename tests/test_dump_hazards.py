"""State CRIU's zdtm tests check that ovm-offline does not save yet (the hazards workload, a child
per piece): each is refused by name, in one line, with nothing written, where before each was
written as something else and the dump claimed success (zdtm unhashed_proc, pty02, pty04; its
nsfd child's namespace file, zdtm proc-self's state, is saved now and restored in the nsfiles
workload, and unlinked files and removed cwds, zdtm unlink_fstat00 and cwd01's, are saved as
ghost files in the ghosts workload). The open files among them can be left out with
--skip-unsupported; a dead process's /proc directory as the cwd cannot."""

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
        f"PID {pid['proccwd']} (hazards): its current directory /proc/",
        "is the /proc directory of a process that has exited",
        # the master holds the slave's echo of the 7 bytes ("queued\r\n"), the slave those 7
        f"PID {pid['ptyqueue']} (hazards) fd 3: a pseudo-terminal (/dev/ptmx) with 8 byte(s) of input",
        f"PID {pid['ptyqueue']} (hazards) fd 5: a pseudo-terminal (/dev/pts/",  # its number: who opened first
        ") with 7 byte(s) of input",
        f"PID {pid['ptyorphan']} (hazards) fd 5: a terminal that was hung up",
        f"PID {pid['ptyorphan']} (hazards) fd 6: a terminal that was hung up",
    )
    assert f"PID {pid['nsfd']}" not in result.stderr  # its nsfs fd is saved now (nsfiles workload)
    assert not out.exists()


@pytest.mark.parametrize("kernel", KERNELS)
def test_open_files_can_be_left_out_but_a_lost_cwd_cannot(recording, tmp_path, kernel):
    rec = recording(kernel, "hazards")
    pid = _children(rec)
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(tmp_path / "out"), "--skip-unsupported")
    assert result.returncode == ExitCode.UNSUPPORTED
    assert_one_line_failure(result, f"PID {pid['proccwd']} (hazards)")
    assert "fd 3" not in result.stderr  # the open files are left out, not refused
    # a child with only open files to leave out dumps, naming each
    result = ovm("dump", str(rec.elf), "--pid", str(pid["ptyqueue"]), "-D", str(tmp_path / "pty"), "--skip-unsupported")
    assert result.returncode == 0, result.stderr
    assert "warning: left out PID" in result.stderr and "/dev/ptmx" in result.stderr, result.stderr
