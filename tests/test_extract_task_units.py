"""Task-state helpers on constructed data: the syscall-restart rules, TLS descriptors,
XSAVE conversion (the corpus guests run the qemu64 CPU, which has no XSAVE), and kernel
objects laid out in fake memory from the real 6.1 and 6.12 ISFs for what the corpus
workloads never use (POSIX timers, armed itimers, user namespaces, queued signals,
scheduling policies)."""

from __future__ import annotations

import struct

import pytest

from ovm_offline.errors import GuestDataError
from ovm_offline.extract.syscall import restart_syscall_fixup
from ovm_offline.kernel.cpu.fpu import XstateLayout, compacted_offsets, uabi_xstate
from ovm_offline.kernel.cpu.regs import user_desc
from ovm_offline.kernel.cpu.syscalls import SYSCALLS, interrupted_syscall
from ovm_offline.kernel.task.cred import kernel_cap_value, task_credentials
from ovm_offline.kernel.task.sched import task_nice, task_policy
from ovm_offline.kernel.task.signal import (
    sigpending_mask,
    sigpending_queue,
    task_sigaltstack,
    task_sigmask,
)
from ovm_offline.kernel.task.timers import (
    clock_now,
    itimer_cpu,
    itimer_real,
    signal_posix_timers,
)
from ovm_offline.state import Registers
from tests.support.memory import FakeKernelMemory

U64 = (1 << 64) - 1


# ---------------------------------------------------------------------------- syscall restart


@pytest.mark.parametrize(
    "ax,orig_ax,want_ax,want_ip,changed",
    [
        (-514, 130, 130, 0x1000 - 2, True),  # ERESTARTNOHAND (sigsuspend)
        (-512, 0, 0, 0x1000 - 2, True),  # ERESTARTSYS (read)
        (-513, 61, 61, 0x1000 - 2, True),  # ERESTARTNOINTR (wait4)
        (-516, 230, -4, 0x1000, True),  # ERESTART_RESTARTBLOCK (clock_nanosleep): -EINTR
        (0, 230, 0, 0x1000, False),  # the call completed
        (-4, 230, -4, 0x1000, False),  # a real EINTR
        (-514, -1, -514, 0x1000, False),  # not in a syscall (interrupt or fault)
    ],
)
def test_restart_syscall_fixup(ax, orig_ax, want_ax, want_ip, changed):
    regs = Registers(ax=ax & U64, orig_ax=orig_ax & U64, ip=0x1000)
    fixed, did = restart_syscall_fixup(regs)
    assert (fixed.ax, fixed.ip, did) == (want_ax & U64, want_ip, changed)
    assert fixed.orig_ax == regs.orig_ax


@pytest.mark.parametrize(
    "regs,name,how,unknowable",
    [
        (Registers(orig_ax=0), "read", "restart", False),
        (Registers(orig_ax=35), "nanosleep", "eintr", False),
        (Registers(orig_ax=230, si=0), "clock_nanosleep", "eintr", False),  # relative: restart block
        (Registers(orig_ax=230, si=1), "clock_nanosleep", "restart", False),  # TIMER_ABSTIME: ERESTARTNOHAND
        (Registers(orig_ax=202, si=0x80, r10=0), "futex", "restart", False),  # FUTEX_WAIT_PRIVATE, no timeout
        (Registers(orig_ax=202, si=0x89, r10=0x7FF0), "futex", "eintr", False),  # WAIT_BITSET with a timeout
        (Registers(orig_ax=202, si=0x86), "futex", "restart", False),  # LOCK_PI: ERESTARTNOINTR
        (Registers(orig_ax=202, si=0x8B), "futex", "unknown", True),  # WAIT_REQUEUE_PI
        (Registers(orig_ax=45, r10=0x100), "recvfrom", "restart", True),  # MSG_WAITALL may be partial
        (Registers(orig_ax=47, dx=0), "recvmsg", "restart", False),
        (Registers(orig_ax=232), "epoll_wait", "eintr", False),
        (Registers(orig_ax=7), "poll", "eintr", False),  # always a restart block
        (Registers(orig_ax=271), "ppoll", "restart", False),
        (Registers(orig_ax=9999), "syscall 9999", "unknown", True),
    ],
)
def test_how_a_signal_ends_each_blocking_call(regs, name, how, unknowable):
    call = interrupted_syscall(regs)
    assert (call.name, call.interruption, bool(call.unknowable)) == (name, how, unknowable)


def test_the_syscall_table_names_each_number_once_and_counts_data_where_it_can():
    assert len({info.name for info in SYSCALLS.values()}) == len(SYSCALLS)
    for info in SYSCALLS.values():
        if info.moves_data:
            assert info.data_regs and all(hasattr(Registers(), r) for r in info.data_regs), info
        if info.recv_flags_reg:
            assert hasattr(Registers(), info.recv_flags_reg), info


# ---------------------------------------------------------------------------- TLS


def fill_ldt(
    base: int,
    limit: int,
    seg_32bit: int,
    contents: int,
    read_exec_only: int,
    limit_in_pages: int,
    seg_not_present: int,
    useable: int,
) -> int:
    """arch/x86/include/asm/desc.h fill_ldt: how set_thread_area() encodes a user_desc."""
    type_ = ((read_exec_only ^ 1) << 1) | (contents << 2) | 1
    return (
        (limit & 0xFFFF)
        | (base & 0xFFFF) << 16
        | (base >> 16 & 0xFF) << 32
        | type_ << 40
        | 1 << 44
        | 3 << 45
        | (seg_not_present ^ 1) << 47
        | (limit >> 16 & 0xF) << 48
        | useable << 52
        | seg_32bit << 54
        | limit_in_pages << 55
        | (base >> 24 & 0xFF) << 56
    )


@pytest.mark.parametrize(
    "fields",
    [
        (0x12345678, 0xFFFFF, 1, 0, 0, 1, 0, 1),  # a glibc-style i386 TLS segment
        (0xF7F00000, 0x123, 0, 2, 1, 0, 0, 0),  # code segment, read/exec only
        (0, 0, 1, 0, 1, 0, 1, 0),
    ],
)
def test_user_desc_round_trip(fields):
    e = user_desc(12, fill_ldt(*fields))
    assert (
        e.base_addr,
        e.limit,
        e.seg_32bit,
        e.contents,
        e.read_exec_only,
        e.limit_in_pages,
        e.seg_not_present,
        e.usable,
    ) == tuple(type(x)(f) for x, f in zip((0, 0, True, 0, True, True, True, True), fields))


def test_empty_tls_slot_reads_like_get_thread_area():
    e = user_desc(13, 0)
    assert (e.entry_number, e.read_exec_only, e.seg_not_present, e.base_addr, e.limit) == (13, True, True, 0, 0)


# ---------------------------------------------------------------------------- XSAVE

# A Skylake-AVX512-like CPUID layout: standard offsets and sizes per feature, and which
# features CPUID asks to align to 64 bytes in the compacted form.
OFFSETS = (0, 160, 576, 960, 1024, 1088, 1152, 1664, 2688, 2688)
SIZES = (160, 256, 256, 64, 64, 64, 512, 1024, 8, 8)
ALIGNED = (False, False, False, False, False, True, False, False, False, False)
LAYOUT = XstateLayout(OFFSETS, SIZES, ALIGNED, user_features=0x2E7)  # FP SSE YMM opmask ZMM_H Hi16 PKRU
INIT_LEGACY = struct.pack("<HHHHQQII", 0x37F, 0, 0, 0, 0, 0, 0x1F80, 0xFFFF).ljust(512, b"\0")
SW = bytes(range(48))


def pattern(feature: int, size: int) -> bytes:
    return bytes((feature * 16 + i) & 0xFF for i in range(size))


def xsave_image(xfeatures: int, compacted: bool) -> bytes:
    legacy = bytearray(pattern(0, 512))
    struct.pack_into("<II", legacy, 24, 0x1F80, 0xFFFF)
    buf = bytearray(legacy) + bytearray(64) + bytearray(4096)
    xcomp = (LAYOUT.user_features | 1 << 63) if compacted else 0
    struct.pack_into("<QQ", buf, 512, xfeatures, xcomp)
    where = compacted_offsets(xcomp, LAYOUT) if compacted else {i: OFFSETS[i] for i in range(2, 10)}
    for i in range(2, 10):
        if xfeatures >> i & 1:
            buf[where[i] : where[i] + SIZES[i]] = pattern(i, SIZES[i])
    return bytes(buf)


def test_compacted_offsets_pack_and_align():
    offs = compacted_offsets(LAYOUT.user_features | 1 << 63, LAYOUT)
    # YMM at 576 (256), opmask aligned to 64 after it: 832, ZMM_Hi256 at 896, Hi16 at 1408, PKRU at 2432
    assert offs == {2: 576, 5: 832, 6: 896, 7: 1408, 9: 2432}


@pytest.mark.parametrize("compacted", [False, True])
def test_uabi_xstate_standard_and_compacted_agree(compacted):
    xfeatures = 0x2E7 & ~(1 << 7)  # Hi16_ZMM in init state
    st = uabi_xstate(xsave_image(xfeatures, compacted), INIT_LEGACY, SW, LAYOUT, LAYOUT.user_features, 0x55555554)
    assert st.xstate_bv == xfeatures
    assert st.fxsave[:416] == xsave_image(xfeatures, compacted)[:416]
    assert st.fxsave[416:464] == bytes(48) and st.fxsave[464:] == SW
    assert st.components[2] == pattern(2, 256) and st.components[6] == pattern(6, 512)
    assert st.components[7] == bytes(1024)  # init state reads as zeros
    assert st.components[9] == struct.pack("<II", 0x55555554, 0)  # PKRU from thread.pkru
    assert set(st.components) == {2, 5, 6, 7, 9}


@pytest.mark.parametrize("compacted", [False, True])
def test_before_5_14_pkru_is_the_xsave_images_own_component(compacted):
    """5.10's thread_struct has no pkru: ptrace copies PKRU from the XSAVE image like any other
    component, its init state (header bit clear) zeros (a 5.10 guest's counter-la57 was saved with
    PKRU 0 where criu read 0x55555554, the kernel's default for user tasks)."""
    st = uabi_xstate(xsave_image(0x2E7, compacted), INIT_LEGACY, SW, LAYOUT, LAYOUT.user_features, None)
    assert st.components[9] == pattern(9, SIZES[9])
    st = uabi_xstate(xsave_image(0x2E7 & ~(1 << 9), compacted), INIT_LEGACY, SW, LAYOUT, LAYOUT.user_features, None)
    assert st.components[9] == bytes(SIZES[9])


def test_uabi_xstate_takes_init_legacy_state_for_unused_fp_and_sse():
    st = uabi_xstate(xsave_image(0x4, True), INIT_LEGACY, SW, LAYOUT, LAYOUT.user_features, 0)
    assert st.fxsave[:24] == INIT_LEGACY[:24]  # FP bit clear: cwd=0x37f etc.
    assert st.fxsave[24:32] == xsave_image(0x4, True)[24:32]  # YMM set: MXCSR kept
    assert st.fxsave[160:416] == bytes(256)  # SSE bit clear: xmm from init (zeros)
    assert st.xstate_bv == 0x4


def test_uabi_xstate_masks_header_with_user_features():
    st = uabi_xstate(xsave_image(0x2E7 | 1 << 8, False), INIT_LEGACY, SW, LAYOUT, 0x7, 0)
    assert st.xstate_bv == 0x7 and set(st.components) == {2}


def test_uabi_xstate_rejects_truncated_image():
    with pytest.raises(GuestDataError):
        uabi_xstate(bytes(100), INIT_LEGACY, SW, LAYOUT, 0x7, 0)


# ---------------------------------------------------------------------------- fake kernel memory


class FakeKernel(FakeKernelMemory):
    """Timers, signals, credentials and tasks in fake memory; lists linked, the clock set."""

    def struct(self, type_name: str, addr: int):
        return self.prog.struct(type_name, addr)

    def link_list(self, head: int, nodes: list[int], hlist: bool = False) -> None:
        """Chain nodes (addresses of list_head / hlist_node) after head, in order."""
        if hlist:
            self.src.write(self.phys(head), (nodes[0] if nodes else 0).to_bytes(8, "little"))
            for i, n in enumerate(nodes):
                nxt = nodes[i + 1] if i + 1 < len(nodes) else 0
                self.src.write(self.phys(n), nxt.to_bytes(8, "little"))
            return
        ring = [head] + nodes
        for i, n in enumerate(ring):
            self.src.write(self.phys(n), ring[(i + 1) % len(ring)].to_bytes(8, "little"))
            self.src.write(self.phys(n) + 8, ring[i - 1].to_bytes(8, "little"))

    def set_now(self, mono_ns: int, offs_real: int = 0) -> None:
        """tk_core.timekeeper so that CLOCK_MONOTONIC reads `mono_ns`."""
        tk = self.prog.symbol_address("tk_core") + self.prog.member_offset(
            self.symbols.symbol_type("tk_core"), "timekeeper"
        )
        self.set(tk, "timekeeper", "tkr_mono.base", mono_ns - 5)
        self.set(tk, "timekeeper", "tkr_mono.shift", 8)
        self.set(tk, "timekeeper", "tkr_mono.xtime_nsec", 5 << 8)
        self.set(tk, "timekeeper", "offs_real", offs_real)


@pytest.fixture(scope="module", params=["6.1", "6.12"])
def fk(request) -> FakeKernel:
    return FakeKernel(request.param)


def _clock_base(fk: FakeKernel, clockid: int) -> int:
    base = fk.alloc("hrtimer_clock_base")
    fk.set(base, "hrtimer_clock_base", "clockid", clockid)
    return base


def test_clock_now_from_timekeeper(fk):
    fk.set_now(7_000_000_123, offs_real=1_700_000_000_000_000_000)
    assert clock_now(fk.prog, 1) == 7_000_000_123
    assert clock_now(fk.prog, 0) == 1_700_000_007_000_000_123


@pytest.mark.parametrize(
    "state,expires,want_us",
    [
        (1, 10_400_000_000, 400_000),  # queued: 0.4 s left
        (1, 9_000_000_000, 1),  # queued but overdue: getitimer says 1 us
        (0, 9_000_000_000, 0),  # fired and not re-armed (SIGALRM pending)
    ],
)
def test_itimer_real(fk, state, expires, want_us):
    fk.set_now(10_000_000_000)
    sig = fk.alloc("signal_struct")
    fk.set(sig, "signal_struct", "real_timer.base", _clock_base(fk, 1))
    fk.set(sig, "signal_struct", "real_timer.state", state)
    fk.set(sig, "signal_struct", "real_timer.node.expires", expires)
    fk.set(sig, "signal_struct", "it_real_incr", 250_000_000)
    it = itimer_real(fk.struct("signal_struct", sig))
    assert (it.interval_us, it.value_us) == (250_000, want_us)


def test_itimer_prof_and_virt(fk):
    sig = fk.alloc("signal_struct")
    fk.set(sig, "signal_struct", "cputimer.cputime_atomic.utime.counter", 3_000_000_000)
    fk.set(sig, "signal_struct", "cputimer.cputime_atomic.stime.counter", 1_000_000_000)
    it_size = fk.symbols.struct_type("cpu_itimer").size
    base = sig + fk.prog.member_offset("signal_struct", "it")
    fk.set(base, "cpu_itimer", "expires", 4_500_000_000)  # PROF: 0.5 s of CPU left
    fk.set(base, "cpu_itimer", "incr", 1_000_000_000)
    fk.set(base + it_size, "cpu_itimer", "expires", 2_000_000_000)  # VIRT: overdue, fires next tick
    fk.src.write(fk.phys(fk.prog.symbol_address("tick_nsec")), struct.pack("<Q", 10_000_000))  # HZ=100
    s = fk.struct("signal_struct", sig)
    assert itimer_cpu(s, 0).value_us == 500_000 and itimer_cpu(s, 0).interval_us == 1_000_000
    assert itimer_cpu(s, 1).value_us == 10_000  # get_cpu_itimer: "about to fire" = one tick


def _k_itimer(
    fk: FakeKernel,
    sig: int,
    it_id: int,
    *,
    clock: int,
    notify: int,
    signo: int,
    sival: int,
    interval: int,
    expires: int,
    active: int,
    overrun: int = 0,
    tid_pid: int = 0,
) -> int:
    t = fk.alloc("k_itimer")
    for path, v in (
        ("it_id", it_id),
        ("it_clock", clock),
        ("it_sigev_notify", notify),
        ("it_interval", interval),
        ("it_active", active),
        ("it_overrun_last", overrun),
        ("it_signal", sig),
        ("it_pid", tid_pid),
    ):
        fk.set(t, "k_itimer", path, v)
    fk.set(t, "k_itimer", "it.real.timer.node.expires", expires)
    fk.set(t, "k_itimer", "it.real.timer.base", _clock_base(fk, clock))
    q = fk.alloc("sigqueue")
    info = q + fk.prog.member_offset("sigqueue", "info")
    fk.src.write(fk.phys(info), struct.pack("<iii", signo, 0, -2).ljust(24, b"\0") + struct.pack("<Q", sival))
    fk.set(t, "k_itimer", "sigq", q)
    return t


def test_posix_timers(fk):
    fk.set_now(50_000_000_000, offs_real=1_000_000_000_000)
    pid_ns = fk.alloc("pid_namespace")
    fk.set(pid_ns, "pid_namespace", "level", 1)
    upid = fk.symbols.struct_type("upid").size
    pid = fk.alloc("pid", extra=2 * upid)
    fk.set(pid, "pid", "level", 1)
    numbers = pid + fk.prog.member_offset("pid", "numbers")
    fk.src.write(fk.phys(numbers), struct.pack("<iiQ", 10007, 0, 0) + struct.pack("<iiQ", 7, 0, pid_ns))
    sig = fk.alloc("signal_struct")
    # created in this order: id 0 (one-shot, CLOCK_MONOTONIC), id 1 (periodic, REALTIME, to thread 7)
    t0 = _k_itimer(fk, sig, 0, clock=1, notify=0, signo=10, sival=0xABC, interval=0, expires=52_500_000_000, active=1)
    t1 = _k_itimer(
        fk,
        sig,
        1,
        clock=0,
        notify=4,
        signo=34,
        sival=0xDEF,
        interval=100_000_000,
        expires=1_050_000_000_000 + 30_000_000,
        active=1,
        overrun=3,
        tid_pid=pid,
    )
    hlist = fk.symbols.struct_type("signal_struct").member("posix_timers").type.describe().endswith("hlist_head")
    assert hlist == (fk.kernel == "6.12")
    off = fk.prog.member_offset("k_itimer", "list")
    fk.link_list(sig + fk.prog.member_offset("signal_struct", "posix_timers"), [t1 + off, t0 + off], hlist=hlist)
    timers = signal_posix_timers(fk.struct("signal_struct", sig), fk.struct("pid_namespace", pid_ns))
    assert [t.timer_id for t in timers] == [0, 1]  # creation order, as criu writes them
    a, b = timers
    assert (a.clock_id, a.signal, a.sival_ptr, a.notify, a.notify_thread_id, a.interval_ns, a.value_ns) == (
        1,
        10,
        0xABC,
        0,
        0,
        0,
        2_500_000_000,
    )
    assert (b.clock_id, b.signal, b.sival_ptr, b.notify, b.notify_thread_id, b.interval_ns, b.value_ns, b.overrun) == (
        0,
        34,
        0xDEF,
        4,
        7,
        100_000_000,
        30_000_000,
        3,
    )


def _task(fk: FakeKernel) -> int:
    t = fk.alloc("task_struct")
    fk.set(t, "task_struct", "pid", 10000)
    return t


def test_credentials_in_a_user_namespace(fk):
    t = _task(fk)
    cred = fk.alloc("cred")
    ns = fk.alloc("user_namespace")
    for kind in ("uid_map", "gid_map"):
        fk.set(ns, "user_namespace", f"{kind}.nr_extents", 1)
        ext = ns + fk.prog.member_offset("user_namespace", f"{kind}.extent")
        fk.src.write(fk.phys(ext), struct.pack("<III", 0, 100000, 65536))
    fk.set(cred, "cred", "user_ns", ns)
    for sym in ("overflowuid", "overflowgid"):  # initialised data in a real image
        fk.src.write(fk.phys(fk.prog.symbol_address(sym)), struct.pack("<i", 65534))
    for f, v in (
        ("uid", 100000),
        ("euid", 100000),
        ("suid", 101000),
        ("fsuid", 100000),
        ("gid", 100005),
        ("egid", 100005),
        ("sgid", 5),
        ("fsgid", 100005),
    ):
        fk.set(cred, "cred", f"{f}.val", v)
    caps = fk.alloc("group_info", extra=8)
    fk.set(caps, "group_info", "ngroups", 2)
    fk.src.write(fk.phys(caps + fk.prog.member_offset("group_info", "gid")), struct.pack("<II", 100010, 7))
    fk.set(cred, "cred", "group_info", caps)
    cap = fk.prog.member_offset("cred", "cap_permitted")
    fk.src.write(fk.phys(cred + cap), struct.pack("<Q", 0x1_0000_0021))  # CHOWN, KILL, MAC_OVERRIDE (bit 32)
    fk.src.write(fk.phys(cred + fk.prog.member_offset("cred", "cap_bset")), struct.pack("<Q", U64))
    fk.set(cred, "cred", "securebits", 0x2F)
    fk.set(t, "task_struct", "cred", cred)
    c = task_credentials(fk.struct("task_struct", t))
    assert (c.uid, c.euid, c.suid, c.fsuid) == (0, 0, 1000, 0)
    assert (c.gid, c.egid, c.sgid, c.fsgid) == (5, 5, 65534, 5)  # kgid 5 has no mapping: overflowgid
    assert c.groups == [10, 65534]
    assert c.cap_prm == 0x1_0000_0021 and c.cap_bnd == (1 << 41) - 1 and c.secbits == 0x2F
    assert kernel_cap_value(fk.struct("cred", cred).cap_permitted) == 0x1_0000_0021


def test_signal_queue_masks_and_altstack(fk):
    t = _task(fk)
    pending = t + fk.prog.member_offset("task_struct", "pending")
    qs = []
    for signo in (34, 35):
        q = fk.alloc("sigqueue")
        info = q + fk.prog.member_offset("sigqueue", "info")
        fk.src.write(fk.phys(info), struct.pack("<iiii", signo, 0, -1, 4242))  # SI_QUEUE from pid 4242
        qs.append(q + fk.prog.member_offset("sigqueue", "list"))
    fk.link_list(pending + fk.prog.member_offset("sigpending", "list"), qs)
    fk.set(t, "task_struct", "pending.signal.sig", 0b11 << 33)
    fk.set(t, "task_struct", "blocked.sig", 0)
    fk.set(t, "task_struct", "saved_sigmask.sig", 1 << 9)
    task = fk.struct("task_struct", t)
    queue = sigpending_queue(task.pending)
    assert [struct.unpack_from("<iiii", q) for q in queue] == [(34, 0, -1, 4242), (35, 0, -1, 4242)]
    assert all(len(q) == 128 and q[48:] == bytes(80) for q in queue)
    assert sigpending_mask(task.pending) == 0b11 << 33
    assert task_sigmask(task) == 0
    fk.set(t, "task_struct", "restore_sigmask", 1)  # inside sigsuspend: ptrace reports saved_sigmask
    assert task_sigmask(task) == 1 << 9
    fk.set(t, "task_struct", "sas_ss_sp", 0x7000_0000)
    fk.set(t, "task_struct", "sas_ss_size", 0x4000)
    fk.set(t, "task_struct", "sas_ss_flags", 1 << 31)
    assert task_sigaltstack(task) == (0x7000_0000, 0x4000, 1 << 31)
    fk.set(t, "task_struct", "sas_ss_size", 0)
    assert task_sigaltstack(task)[2] == 2  # SS_DISABLE


def test_sched_policy_and_nice(fk):
    t = _task(fk)
    fk.set(t, "task_struct", "policy", 2)  # SCHED_RR
    fk.set(t, "task_struct", "static_prio", 125)
    fk.set(t, "task_struct", "sched_reset_on_fork", 1)
    task = fk.struct("task_struct", t)
    assert task_policy(task) == 2 | 0x40000000
    assert task_nice(task) == 5
    fk.set(t, "task_struct", "static_prio", 500)
    with pytest.raises(GuestDataError):
        task_nice(task)
