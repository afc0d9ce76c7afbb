"""refusals.decide: which refusals stand, and whether another moment of the guest could pass
(exit 8, a live dump tries again) or not (exit 5)."""

from __future__ import annotations

import pytest

from ovm_offline.errors import ExitCode, MomentError, UnsupportedError
from ovm_offline.refusals import Refusal, decide
from tests.support.cli import ovm

ON_ITS_WAY = Refusal(10000, "srv", "PID 10000 (srv) thread 10001 is inside read(): it is runnable there", moment=True)
ZOMBIE = Refusal(10002, "kid", "PID 10002 (kid) is being reaped by its parent; it has no state left to save")
SOCKET = Refusal.open_file(10000, "srv", 4, "an IPv4 TCP socket in state SYN_SENT")


@pytest.mark.parametrize(
    ("refusals", "skip", "error", "code"),
    [
        ([ON_ITS_WAY], False, MomentError, ExitCode.MOMENT),
        ([ON_ITS_WAY, ON_ITS_WAY], False, MomentError, ExitCode.MOMENT),
        ([ON_ITS_WAY, SOCKET], True, MomentError, ExitCode.MOMENT),  # the file is left out as asked
        ([ON_ITS_WAY, SOCKET], False, UnsupportedError, ExitCode.UNSUPPORTED),  # no moment saves the file
        ([ON_ITS_WAY, ZOMBIE], False, UnsupportedError, ExitCode.UNSUPPORTED),
        ([SOCKET], False, UnsupportedError, ExitCode.UNSUPPORTED),
    ],
)
def test_only_refusals_of_the_moment_alone_say_another_moment_may_pass(refusals, skip, error, code):
    with pytest.raises(UnsupportedError) as raised:
        decide(refusals, skip_unsupported=skip)
    assert type(raised.value) is error and raised.value.exit_code == code
    assert "is inside read()" in str(raised.value) or not any(r.moment for r in refusals)


def test_files_left_out_are_returned_when_nothing_else_stands():
    assert decide([SOCKET], skip_unsupported=True) == [SOCKET]
    assert decide([], skip_unsupported=False) == []


def test_attempts_are_moments_of_a_live_guest_only(tmp_path):
    out = tmp_path / "images"
    result = ovm("dump", "guest.elf", "-t", "1", "-D", str(out), "--attempts", "3")
    assert result.returncode == 2 and "--attempts takes --live: a dump file holds one moment" in result.stderr
    assert not out.exists()
