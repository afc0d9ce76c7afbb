"""`ovm-offline dump` of the sigstate workload: a stopped child with a second SIGSTOP pending
(zdtm stopped01) and POSIX timers one-shot INT_MAX ms ahead on three clocks (zdtm
posix_timers). Each wrong image these tests would have caught claimed success before: the
pending SIGSTOP was kept in the child's queue, so `criu restore` failed ("Task N stopped with
19"), and the relative CLOCK_REALTIME timer (armed on the monotonic hrtimer base) was saved
with 1 ns left, so it fired at once after restore. The general gates (diff against criu's
images, byte-identical from every source, crit, criu restore with the workload's own check)
run in tests/test_dump.py."""

from __future__ import annotations

import pytest

from corpus import kernels
from ovm_offline.criu import images

KERNELS = list(kernels.KERNELS)
pytestmark = pytest.mark.guest

TASK_STOPPED = 3
SIGSTOP, SIGALRM = 19, 14
CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME = 0, 1, 7
INT_MAX_MS_NS = (2**31 - 1) * 10**6


def _core(directory, pid):
    return images.read_image(directory / images.CORE.filename(pid)).entries[0]


def _child(rec) -> int:
    return int(rec.manifest["ready"].split("child=")[1].split()[0])


def _signo(siginfo: bytes) -> int:
    return int.from_bytes(siginfo[:4], "little", signed=True)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_pending_sigstop_is_taken_as_criu_takes_it(recording, dumped, kernel):
    rec = recording(kernel, "sigstate")
    core = _core(dumped(kernel, "sigstate"), _child(rec))
    assert core.tc.task_state == TASK_STOPPED
    queued = [_signo(s.siginfo) for s in [*core.tc.signals_s.signals, *core.thread_core.signals_p.signals]]
    assert SIGSTOP not in queued


@pytest.mark.parametrize("kernel", KERNELS)
def test_one_shot_timers_keep_their_time_left_on_every_clock(recording, dumped, kernel):
    timers = _core(dumped(kernel, "sigstate"), 10000).tc.timers.posix
    one_shots = {t.clock_id: t.vsec * 10**9 + t.vnsec for t in timers if not t.isec and not t.insec}
    assert sorted(one_shots) == [CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME]
    for clock, left in one_shots.items():
        # armed a few guest seconds before the snapshot, and never later than it
        assert INT_MAX_MS_NS - 3600 * 10**9 < left <= INT_MAX_MS_NS, (clock, left)
    periodic = [t for t in timers if t.isec]
    assert [(t.clock_id, t.isec, t.si_signo) for t in periodic] == [(CLOCK_REALTIME, 1, SIGALRM)]
    assert not any(t.HasField("notify_thread_id") for t in timers)  # as criu: only for SIGEV_THREAD_ID
