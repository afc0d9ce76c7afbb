"""The guest's clocks as of the snapshot, from the timekeeper (kernel/time/timekeeping.c).

The timekeeper is updated every tick; the cycles since the last update are not in memory, so
these readings lag the true instant of the snapshot by less than one tick.
"""

from __future__ import annotations

from ...errors import GuestDataError, MomentError
from ..core.invariants import broken
from ..core.memory import Program
from ..core.objects import Struct
from ..locking.seqlock import seqcount_write_in_progress

__all__ = ["ktime_get_boottime_ns", "ktime_get_ns", "timekeeper", "tk_read_base_nsec"]


NSEC_PER_SEC = 10**9
#: a clock since boot past this (about 292 years) is no clock: ktime_t is a signed 64-bit ns count
KTIME_MAX = (1 << 63) - 1
#: kernel/time/clocksource.c: clocks_calc_mult_shift() picks a shift of 32 at most
MAX_CLOCKSOURCE_SHIFT = 32


def _since_boot(name: str, ns: int) -> int:
    if not 0 <= ns <= KTIME_MAX:
        raise GuestDataError(f"the timekeeper (tk_core) gives {name} {ns} ns: not a clock since boot")
    return ns


def timekeeper(prog: Program) -> Struct:
    """The ``struct timekeeper`` of the system clocks: ``tk_core.timekeeper``, or where
    timekeepers are an array (auxiliary clocks, 6.17+), ``timekeeper_data[TIMEKEEPER_CORE]``'s.
    A timekeeper being written at the pause (its sequence count odd) is half old and half new:
    another moment must be taken (MomentError)."""
    if prog.has_symbol("tk_core"):
        data = prog["tk_core"]
    else:
        core = prog.symbols.enumerator("TIMEKEEPER_CORE")
        array = prog["timekeeper_data"]
        if core is None or not 0 <= core < len(array):
            raise GuestDataError("the kernel has timekeeper_data but no TIMEKEEPER_CORE entry in it")
        data = array[core]
    if seqcount_write_in_progress(data.seq):
        raise MomentError(
            "the kernel was updating its clocks at the pause (the timekeeper's sequence count is odd):"
            " they are half written; pause the guest at another moment"
        )
    return data.timekeeper


def tk_read_base_nsec(tkr: Struct, which: str) -> int:
    """The nanoseconds a ``struct tk_read_base`` (the timekeeper's `which`: "tkr_mono",
    "tkr_raw") adds to its whole part: ``xtime_nsec >> shift``, checked against the invariants
    ``tk_read_base.shift`` and ``tk_read_base.xtime_nsec``."""
    shift, nsec = tkr.shift, tkr.xtime_nsec
    if shift > MAX_CLOCKSOURCE_SHIFT:
        raise broken("tk_read_base.shift", f"the timekeeper's {which}", f"has shift {shift}")
    if nsec >= NSEC_PER_SEC << shift:
        raise broken("tk_read_base.xtime_nsec", f"the timekeeper's {which}", f"has xtime_nsec {nsec} (shift {shift})")
    return nsec >> shift


def ktime_get_real_ns(prog: Program) -> int:
    """CLOCK_REALTIME in ns (xtime)."""
    tk = timekeeper(prog)
    return tk.xtime_sec * NSEC_PER_SEC + tk_read_base_nsec(tk.tkr_mono, "tkr_mono")


def ktime_get_ns(prog: Program) -> int:
    """CLOCK_MONOTONIC in ns: xtime + wall_to_monotonic."""
    tk = timekeeper(prog)
    wtm = tk.wall_to_monotonic
    return _since_boot("CLOCK_MONOTONIC", ktime_get_real_ns(prog) + wtm.tv_sec * NSEC_PER_SEC + wtm.tv_nsec)


def ktime_get_boottime_ns(prog: Program) -> int:
    """CLOCK_BOOTTIME in ns: monotonic plus the time spent suspended (offs_boot)."""
    return _since_boot("CLOCK_BOOTTIME", ktime_get_ns(prog) + timekeeper(prog).offs_boot)
