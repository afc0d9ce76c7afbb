"""A thread caught half-way through a context switch, at a real breakpoint in the guest
kernel's __switch_to (QEMU's gdbstub, driven by gdb): `dump --live` of that moment is refused
for the moment (exit 8, nothing written), so that --attempts takes another one.

Both windows were dumped without a word before (7b67b5d), and what was dumped was wrong:
  - fpu-flag (6.1 only: its __switch_to makes the incoming task current, then sets its
    TIF_NEED_FPU_LOAD): the incoming spinner got the FPU registers another task left in the
    CPU; restored, it failed its check ("round 12 word 16 expected 0x5768a73ea3383f42"),
    as a CI run's `dump --live` of spinners-avx on 6.1 had;
  - fs-loaded (both kernels: the FS and GS bases of the incoming task are loaded before it is
    made current): the outgoing spinner, still current, got the incoming task's FS base (0,
    a kernel thread's) instead of its own TLS.
"""

from __future__ import annotations

import sys

import pytest

from corpus.recorder import record_with_live_dump
from ovm_offline.errors import ExitCode
from tests.support.switching import stop_in_switch

pytestmark = pytest.mark.guest

#: (kernel, window, the refusal, workload). The fpu-flag window needs a kernel thread to run
#: between two workload threads on one CPU: with two spinners on two vCPUs each keeps its own
#: CPU, and the window came only with a migration (CI runs waited 300 s for one, in vain);
#: with three, two share a CPU and every kernel thread between them opens it
CASES = [
    (
        "6.1",
        "fpu-flag",
        "was being switched onto CPU {cpu}, whose FPU registers are still another task's",
        "spinners-crowded",
    ),
    ("6.1", "fs-loaded", "was being switched on or off CPU {cpu} at the snapshot", "spinners"),
    ("6.12", "fs-loaded", "was being switched on or off CPU {cpu} at the snapshot", "spinners"),
]


@pytest.mark.slow
@pytest.mark.parametrize("kernel,window,refusal,workload", CASES, ids=[f"{k}-{w}" for k, w, _, _ in CASES])
def test_a_thread_stopped_half_switched_is_a_moment_to_try_again(tmp_path, kernel, window, refusal, workload):
    images = tmp_path / "images"
    stops = []

    def dump_half_switched(guest, root):
        command = [sys.executable, "-m", "ovm_offline", "dump", "--live", "--qmp", str(guest.qmp_tool_path)]
        command += ["--mem", str(guest.memory_file), "--pid", str(root), "-D", str(images)]
        stops.append(stop_in_switch(guest, root, window, command, tmp_path))

    record_with_live_dump(kernel, workload, tmp_path / "rec", dump_half_switched, log=lambda m: None)
    [stop] = stops
    assert stop.returncode == ExitCode.MOMENT, stop.stderr
    line = stop.stderr.strip()
    assert "\n" not in line and any(refusal.format(cpu=cpu) in line for cpu in (0, 1)), line
    assert not images.exists()
