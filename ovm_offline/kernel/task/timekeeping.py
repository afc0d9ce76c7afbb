"""The guest's clocks as of the snapshot, from the timekeeper (kernel/time/timekeeping.c).

The timekeeper is updated every tick; the cycles since the last update are not in memory, so
these readings lag the true instant of the snapshot by less than one tick.
"""

from __future__ import annotations

from ...errors import GuestDataError
from ..core.memory import Program
from ..core.objects import Struct

__all__ = ["ktime_get_boottime_ns", "ktime_get_ns", "timekeeper"]


NSEC_PER_SEC = 10**9
#: a clock since boot past this (about 292 years) is no clock: ktime_t is a signed 64-bit ns count
KTIME_MAX = (1 << 63) - 1


def _since_boot(name: str, ns: int) -> int:
    if not 0 <= ns <= KTIME_MAX:
        raise GuestDataError(f"the timekeeper (tk_core) gives {name} {ns} ns: not a clock since boot")
    return ns


def timekeeper(prog: Program) -> Struct:
    """The ``struct timekeeper`` of the system clocks: ``tk_core.timekeeper``, or where
    timekeepers are an array (auxiliary clocks, 6.17+), ``timekeeper_data[TIMEKEEPER_CORE]``'s."""
    if prog.has_symbol("tk_core"):
        return prog["tk_core"].timekeeper
    core = prog.symbols.enumerator("TIMEKEEPER_CORE")
    data = prog["timekeeper_data"]
    if core is None or not 0 <= core < len(data):
        raise GuestDataError("the kernel has timekeeper_data but no TIMEKEEPER_CORE entry in it")
    return data[core].timekeeper


def ktime_get_real_ns(prog: Program) -> int:
    """CLOCK_REALTIME in ns (xtime)."""
    tk = timekeeper(prog)
    return tk.xtime_sec * NSEC_PER_SEC + (tk.tkr_mono.xtime_nsec >> tk.tkr_mono.shift)


def ktime_get_ns(prog: Program) -> int:
    """CLOCK_MONOTONIC in ns: xtime + wall_to_monotonic."""
    tk = timekeeper(prog)
    wtm = tk.wall_to_monotonic
    return _since_boot("CLOCK_MONOTONIC", ktime_get_real_ns(prog) + wtm.tv_sec * NSEC_PER_SEC + wtm.tv_nsec)


def ktime_get_boottime_ns(prog: Program) -> int:
    """CLOCK_BOOTTIME in ns: monotonic plus the time spent suspended (offs_boot)."""
    return _since_boot("CLOCK_BOOTTIME", ktime_get_ns(prog) + timekeeper(prog).offs_boot)
