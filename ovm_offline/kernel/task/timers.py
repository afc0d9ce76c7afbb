"""Time and timers of a process: the guest's clocks as of the snapshot, interval timers
(setitimer) and POSIX timers (timer_create), as getitimer(2) / timer_gettime(2) would
report them at that instant.

* "Now" comes from the timekeeper (``tk_core.timekeeper``): CLOCK_MONOTONIC =
  ``tkr_mono.base + (tkr_mono.xtime_nsec >> tkr_mono.shift)`` is the clock as of the
  timekeeper's last update; the cycles the clocksource counted since then are not in
  memory, so "now" may lag the snapshot by up to a tick (longer if every CPU idled
  without ticks). Other clocks add ``offs_real`` / ``offs_boot`` / ``offs_tai``.
* ITIMER_REAL is ``signal->real_timer`` (an hrtimer on CLOCK_MONOTONIC) with interval
  ``signal->it_real_incr``; after it fires it stays unqueued until the SIGALRM is
  dequeued (which re-arms it), so a stopped process with a pending SIGALRM has 0 left.
* ITIMER_PROF / ITIMER_VIRT are ``signal->it[CPUCLOCK_PROF / CPUCLOCK_VIRT]``: absolute
  expiry in process CPU time, compared with ``signal->cputimer`` (kernel/time/itimer.c).
* POSIX timers are ``struct k_itimer`` on ``signal->posix_timers`` (a list_head before
  6.11, an hlist since; the 6.1 and 6.12 pinned kernels differ here).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError, UnsupportedError
from ...state import Itimer, PosixTimer
from ..core.objects import Pointer, Struct
from ..cpu.percpu import nr_cpu_ids, per_cpu_address
from ..cpu.regs import task_stack_from
from ..ds.list import hlist_for_each_entry, list_for_each_entry
from .pid import pid_nr_ns
from .timekeeping import timekeeper, tk_read_base_nsec

__all__ = [
    "CLOCK_BOOTTIME",
    "CLOCK_BOOTTIME_ALARM",
    "CLOCK_REALTIME",
    "CLOCK_REALTIME_ALARM",
    "clock_now",
    "hrtimer_remaining",
    "hrtimer_soft_remaining",
    "itimer_cpu",
    "itimer_real",
    "signal_itimers",
    "signal_posix_timers",
    "task_fired_sleep_hrtimer",
    "task_sleep_hrtimer",
    "tick_nsec",
]


if TYPE_CHECKING:
    from ..core.memory import Program

#: include/uapi/linux/time.h
CLOCK_REALTIME = 0
CLOCK_MONOTONIC = 1
CLOCK_MONOTONIC_RAW = 4
CLOCK_REALTIME_COARSE = 5
CLOCK_MONOTONIC_COARSE = 6
CLOCK_BOOTTIME = 7
CLOCK_REALTIME_ALARM = 8
CLOCK_BOOTTIME_ALARM = 9
CLOCK_TAI = 11
#: include/linux/posix-timers.h
CPUCLOCK_PROF = 0
CPUCLOCK_VIRT = 1
REQUEUE_PENDING = 1
#: include/uapi/asm-generic/siginfo.h
SIGEV_NONE = 1
SIGEV_THREAD_ID = 4
#: include/linux/hrtimer.h
HRTIMER_STATE_ENQUEUED = 0x01
NSEC_PER_USEC = 1000
DEFAULT_TICK_NSEC = 4_000_000  # HZ=250, Debian's
INT_MAX = (1 << 31) - 1
#: A process cannot have more timers than this (the kernel caps ids at INT_MAX, memory far lower).
MAX_POSIX_TIMERS = 1 << 20


def _tkr_now(tk: Struct, which: str) -> int:
    tkr = tk.member_(which)
    return tkr.base + tk_read_base_nsec(tkr, which)


def clock_now(prog: Program, clock_id: int) -> int:
    """The value in ns of clock `clock_id` as of the timekeeper's last update."""
    tk = timekeeper(prog)
    if clock_id == CLOCK_MONOTONIC_RAW:
        return _tkr_now(tk, "tkr_raw")
    mono = _tkr_now(tk, "tkr_mono")
    if clock_id in (CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE):
        return mono
    if clock_id in (CLOCK_REALTIME, CLOCK_REALTIME_COARSE, CLOCK_REALTIME_ALARM):
        return mono + tk.offs_real
    if clock_id in (CLOCK_BOOTTIME, CLOCK_BOOTTIME_ALARM):
        return mono + tk.offs_boot
    if clock_id == CLOCK_TAI:
        return mono + tk.offs_tai
    raise UnsupportedError(f"clock {clock_id} has no timekeeper reading")


def tick_nsec(prog: Program) -> int:
    """TICK_NSEC: the length of one scheduler tick in ns (``tick_nsec``)."""
    if prog.has_symbol("tick_nsec"):
        v = prog["tick_nsec"]
        if isinstance(v, int) and 0 < v <= 1_000_000_000:
            return v
    return DEFAULT_TICK_NSEC


def hrtimer_clock_id(timer: Struct) -> int:
    """The clock of a ``struct hrtimer`` (``timer->base->clockid``)."""
    base = timer.base
    if not base:
        raise GuestDataError(f"hrtimer at 0x{timer.address_:x} has no clock base")
    return base.clockid


def hrtimer_queued(timer: Struct) -> bool:
    """Is a ``struct hrtimer`` in its clock base's queue: ``state`` & HRTIMER_STATE_ENQUEUED,
    or the ``is_queued`` flag (7.x)?"""
    if timer.has_member_("is_queued"):
        return bool(timer.is_queued)
    return bool(timer.state & HRTIMER_STATE_ENQUEUED)


def hrtimer_active(timer: Struct) -> bool:
    """Is a ``struct hrtimer`` queued or its callback running (hrtimer_active)?"""
    if hrtimer_queued(timer):
        return True
    base = timer.base
    return bool(base) and int(base.running) == timer.address_


def hrtimer_expires(timer: Struct) -> int:
    """The hard expiry of a ``struct hrtimer`` in ns of its clock."""
    return timer.node.expires


def hrtimer_remaining(timer: Struct, now: int | None = None) -> int:
    """Expiry minus now, in ns (negative when overdue), "now" read from the timekeeper
    for the timer's clock unless given."""
    if now is None:
        now = clock_now(timer.prog_, hrtimer_clock_id(timer))
    return hrtimer_expires(timer) - now


def hrtimer_clock_bases(prog: Program) -> frozenset[int]:
    """The address of every ``struct hrtimer_clock_base`` of every possible CPU (the
    ``clock_base`` array of per-CPU ``hrtimer_bases``): hrtimer_init points each timer's
    ``base`` at one of them, and migration moves it only to another."""
    array = prog.struct("hrtimer_cpu_base", 0).clock_base  # only its offset and type
    size, count = array.type_.element.size, len(array)
    return frozenset(
        per_cpu_address(prog, "hrtimer_bases", cpu) + array.address_ + i * size
        for cpu in range(nr_cpu_ids(prog))
        for i in range(count)
    )


def _stack_sleepers(task: Struct, sp: int | None) -> Iterator[Struct]:
    """Every ``struct hrtimer_sleeper`` on the kernel stack of a ``struct task_struct`` (from
    `sp` up, or all of it), found by its timer's function, ``hrtimer_wakeup``, and kept only
    if its timer's clock base is one of the kernel's: the function's address may also lie
    in stack memory that is no sleeper (an argument or a stale word)."""
    prog = task.prog_
    if not prog.has_symbol("hrtimer_wakeup"):
        return
    frames = task_stack_from(task, sp)
    if frames is None:
        return
    start, raw = frames
    wakeup = prog.symbol_address("hrtimer_wakeup")
    at = prog.member_offset("hrtimer_sleeper", "timer") + prog.member_offset("hrtimer", "function")
    bases: frozenset[int] | None = None
    for i in range(at, len(raw) - 7, 8):
        if int.from_bytes(raw[i : i + 8], "little") == wakeup:
            sleeper = prog.struct("hrtimer_sleeper", start + i - at)
            bases = hrtimer_clock_bases(prog) if bases is None else bases
            if int(sleeper.timer.base) in bases:
                yield sleeper


def task_sleep_hrtimer(task: Struct) -> Struct | None:
    """The ``struct hrtimer`` that ends the timed sleep of a ``struct task_struct`` asleep in
    nanosleep, select, poll and the like: the ``struct hrtimer_sleeper`` those keep on the
    sleeper's kernel stack (do_nanosleep, schedule_hrtimeout_range), pointing back at the task
    with its timer active; None when the sleep has no timer."""
    for sleeper in _stack_sleepers(task, None):
        if int(sleeper.task) == task.address_ and hrtimer_active(sleeper.timer):
            return sleeper.timer
    return None


#: how long before the snapshot a sleeper's timer may have fired for it to be this call's
FIRED_RECENTLY_NS = 50_000_000
#: how far the timekeeping base the snapshot reads may lag the clock: one tick at HZ=100
CLOCK_LAG_NS = 10_000_000


def task_fired_sleep_hrtimer(task: Struct, sp: int | None = None) -> Struct | None:
    """The ``struct hrtimer`` of the timed sleep a runnable ``struct task_struct`` was woken
    from by its own timer: hrtimer_wakeup has cleared the sleeper's task and the timer is
    no longer queued, so do_nanosleep will return 0 when the task runs (its callback may still
    be running on another CPU, waking the task: once the task is cleared, that is the outcome
    whatever comes next, and the task may be TASK_WAKING). Searched only in the
    task's live frames (from `sp`, by default the kernel SP saved when it was switched out,
    up), and only a timer that fired within FIRED_RECENTLY_NS of the snapshot's clock (which
    lags by up to a tick): a sleeper an earlier call left in stale stack memory must not be
    taken for it. None unless exactly one fits."""
    fired = [
        s.timer
        for s in _stack_sleepers(task, int(task.thread.sp) if sp is None else sp)
        if not s.task
        and not hrtimer_queued(s.timer)
        and -FIRED_RECENTLY_NS <= hrtimer_soft_remaining(s.timer) <= CLOCK_LAG_NS
    ]
    return fired[0] if len(fired) == 1 else None


def hrtimer_soft_remaining(timer: Struct) -> int:
    """ns from now to the soft expiry of a ``struct hrtimer`` (the deadline a sleeper asked
    for, before the slack the kernel may add), negative when overdue."""
    return timer.member_("_softexpires") - clock_now(timer.prog_, hrtimer_clock_id(timer))


def itimer_real(signal: Struct, now: int | None = None) -> Itimer:
    """ITIMER_REAL of a ``struct signal_struct`` as getitimer() reports it: 1 us left for
    a timer that is due but has not fired yet, 0 for one not armed or already fired."""
    timer = signal.real_timer
    if hrtimer_active(timer):
        rem = hrtimer_remaining(timer, now)
        rem = rem if rem > 0 else NSEC_PER_USEC
    else:
        rem = 0
    return Itimer(interval_us=max(signal.it_real_incr, 0) // NSEC_PER_USEC, value_us=rem // NSEC_PER_USEC)


def signal_cputime_samples(signal: Struct) -> tuple[int, int]:
    """(prof, virt) process CPU time in ns from ``signal->cputimer`` (utime+stime, utime),
    which the kernel keeps running while a CPU itimer is armed."""
    atomic = signal.cputimer.cputime_atomic
    utime, stime = atomic.utime.counter, atomic.stime.counter
    return utime + stime, utime


def itimer_cpu(signal: Struct, clock: int) -> Itimer:
    """ITIMER_PROF (`clock` CPUCLOCK_PROF) or ITIMER_VIRTUAL (CPUCLOCK_VIRT) of a ``struct
    signal_struct`` as getitimer() reports it (kernel/time/itimer.c get_cpu_itimer)."""
    it = signal.it[clock]
    expires, incr = it.expires, it.incr
    if expires:
        sample = signal_cputime_samples(signal)[clock]
        expires = tick_nsec(signal.prog_) if expires < sample else expires - sample
    return Itimer(interval_us=incr // NSEC_PER_USEC, value_us=expires // NSEC_PER_USEC)


def signal_itimers(signal: Struct) -> dict[str, Itimer]:
    """The three interval timers of a ``struct signal_struct``: "real", "virt", "prof"."""
    return {
        "real": itimer_real(signal),
        "virt": itimer_cpu(signal, CPUCLOCK_VIRT),
        "prof": itimer_cpu(signal, CPUCLOCK_PROF),
    }


def for_each_posix_timer(signal: Struct) -> Iterator[Struct]:
    """Every ``struct k_itimer`` on ``signal->posix_timers``, newest first (the kernel adds
    new timers at the head)."""
    prog = signal.prog_
    head = signal.member_address_("posix_timers")
    name = f"posix_timers of signal_struct 0x{signal.address_:x}"
    if signal.type_.member("posix_timers").type.describe().endswith("hlist_head"):
        yield from hlist_for_each_entry(prog, "k_itimer", head, "list", name=name, limit=MAX_POSIX_TIMERS)
    else:
        yield from list_for_each_entry(
            prog, "k_itimer", head, "list", name=name, limit=MAX_POSIX_TIMERS, check_prev=True
        )


def _k_itimer_sigev(timer: Struct) -> tuple[int, int]:
    """(si_signo, sival_ptr) a timer sends: from its preallocated sigqueue (a pointer, or
    embedded in the timer), or the it_sigev_* fields that replaced it in some kernels."""
    if timer.has_member_("sigq"):
        q = timer.sigq
        if isinstance(q, Pointer):
            if not q:
                raise GuestDataError(f"k_itimer {timer.it_id} has no sigqueue")
            q = q.deref()
        raw = q.info.read_()
        signo = int.from_bytes(raw[0:4], "little", signed=True)
        sival = int.from_bytes(raw[24:32], "little")  # _sifields._timer._sigval (after _tid, _overrun)
        return signo, sival
    return timer.it_sigev_signo, int(timer.it_sigev_value.sival_ptr)


def _k_itimer_status(timer: Struct) -> tuple[bool, bool]:
    """(armed or its signal pending, signal pending to be requeued) of a ``struct k_itimer``:
    ``it_active`` and ``it_requeue_pending``, or one ``it_status`` (POSIX_TIMER_DISARMED,
    _ARMED, _REQUEUE_PENDING; 6.13+)."""
    if timer.has_member_("it_status"):
        status = timer.it_status
        armed = timer.prog_.symbols.enum_value("posix_timer_state", "POSIX_TIMER_ARMED")
        disarmed = timer.prog_.symbols.enum_value("posix_timer_state", "POSIX_TIMER_DISARMED")
        return status != disarmed, status not in (armed, disarmed)
    return bool(timer.it_active), bool(timer.it_requeue_pending & REQUEUE_PENDING)


def _k_itimer_remaining(timer: Struct) -> int:
    """Expiry minus now of a ``struct k_itimer``, in ns. A relative CLOCK_REALTIME timer is
    armed on the CLOCK_MONOTONIC hrtimer base (common_hrtimer_arm: "Posix magic"), so the
    timer's own base says which clock its expiry counts, not ``it_clock``."""
    clock = timer.it_clock
    if clock in (CLOCK_REALTIME_ALARM, CLOCK_BOOTTIME_ALARM):
        return int(timer.it.alarm.alarmtimer.node.expires) - clock_now(timer.prog_, clock)
    return hrtimer_remaining(timer.it.real.timer)


def k_itimer_state(timer: Struct, pid_ns: Pointer | Struct) -> PosixTimer:
    """A ``struct k_itimer`` as /proc/PID/timers, timer_gettime() and timer_getoverrun()
    show it (kernel/time/posix-timers.c common_timer_get), thread ids seen from `pid_ns`.
    Timers on CPU-time clocks (negative clock ids) are not supported."""
    clock = timer.it_clock
    if clock < 0:
        raise UnsupportedError(f"posix timer {timer.it_id} counts CPU time (clock {clock}): not supported")
    notify = timer.it_sigev_notify
    signo, sival = _k_itimer_sigev(timer)
    tid = pid_nr_ns(timer.it_pid, pid_ns) if notify & SIGEV_THREAD_ID else 0
    interval = timer.it_interval
    overrun = timer.it_overrun_last
    if interval < 0 or overrun < 0:
        # timer_settime refuses a negative interval; overruns only ever grow from 0
        raise GuestDataError(f"posix timer {timer.it_id} has interval {interval} ns and overrun {overrun}")
    sig_none = notify & ~SIGEV_THREAD_ID == SIGEV_NONE
    value = 0
    active, requeue_pending = _k_itimer_status(timer)
    if interval or active or sig_none:
        remaining = _k_itimer_remaining(timer)
        if interval > 0 and remaining <= 0 and (requeue_pending or sig_none):
            # timer_get forwards a periodic timer whose signal is still queued past now
            remaining += ((-remaining) // interval + 1) * interval
        value = remaining if remaining > 0 else (0 if sig_none else 1)
    return PosixTimer(
        timer_id=timer.it_id,
        clock_id=clock,
        signal=signo,
        notify=notify,
        notify_thread_id=tid,
        sival_ptr=sival,
        overrun=min(overrun, INT_MAX),
        interval_ns=interval,
        value_ns=value,
    )


def signal_posix_timers(signal: Struct, pid_ns: Pointer | Struct) -> list[PosixTimer]:
    """Every POSIX timer of a ``struct signal_struct``, oldest first: the kernel adds new
    timers at the head of its list and /proc/PID/timers lists them in list order; CRIU
    prepends each line it parses, so its images hold them in creation order."""
    return [k_itimer_state(t, pid_ns) for t in reversed(list(for_each_posix_timer(signal)))]
