"""The corpus workloads: what each runs in the guest, how big a guest it needs, and how its
restored run is judged. The C programs live in workloads/*.c (see workloads/README.md)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Literal

from .errors import CorpusError


@dataclasses.dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str


def _count_lines(log: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^count (\d+)$", log, re.M)]


def check_reported(before: str, after: str) -> Verdict:
    """The workload's own self-check after restore: one `CHECK OK` line, no `CHECK FAIL`."""
    checks = [line for line in after.splitlines() if line.startswith("CHECK")]
    if not checks:
        return Verdict(False, "no CHECK line after restore")
    if not checks[0].startswith("CHECK OK"):
        return Verdict(False, checks[0])
    return Verdict(True, checks[0])


def check_counter(before: str, after: str) -> Verdict:
    """The counter goes on from the value it had when dumped: the first count printed after
    restore is the last one before plus one, and it keeps counting in steps of one."""
    reported = check_reported(before, after)
    if not reported.ok:
        return reported
    dumped, resumed = _count_lines(before), _count_lines(after)
    last = dumped[-1] if dumped else 0
    if len(resumed) < 2:
        return Verdict(False, f"counter printed {len(resumed)} values after restore (dumped at {last})")
    if resumed[0] != last + 1 or any(b != a + 1 for a, b in zip(resumed, resumed[1:])):
        return Verdict(False, f"dumped at count {last}, counted {resumed[:8]} after restore")
    return Verdict(True, f"dumped at count {last}, continued {resumed[0]}..{resumed[-1]}; {reported.detail}")


def check_counter_resumed(before: str, after: str) -> Verdict:
    """As check_counter, for a counter caught as it runs: the log the restore recreates is
    taken after the memory (the tree ran on until criu dumped it), so it may end a few counts
    past the moment the images hold. The first count after restore must follow one the
    program really printed (or be 1), and every later one must follow it by one."""
    reported = check_reported(before, after)
    if not reported.ok:
        return reported
    dumped, resumed = _count_lines(before), _count_lines(after)
    if len(resumed) < 2:
        return Verdict(False, f"counter printed {len(resumed)} values after restore (log ends at {dumped[-1:]})")
    if resumed[0] - 1 not in {0, *dumped} or any(b != a + 1 for a, b in zip(resumed, resumed[1:])):
        return Verdict(False, f"log ends at count {dumped[-1:]}, counted {resumed[:8]} after restore")
    return Verdict(True, f"resumed at count {resumed[0]} (log ends at {dumped[-1:]}); {reported.detail}")


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    program: str
    args: tuple[str, ...] = ()
    ram_mib: int = 512
    # key of the READY line naming the pid that leads the checkpointed tree (default: the
    # launched process itself)
    root_key: str | None = None
    check: Callable[[str, str], Verdict] = check_reported
    # guest seconds the workload runs after READY before it is stopped and recorded
    settle_seconds: float = 0.5
    # guest seconds to let the restored workload run before asking it to check itself
    run_after_restore: float = 1.0
    description: str = ""
    # shell run in the restoring guest before `criu restore` (what the system must provide)
    restore_prepare: str = ""
    # QEMU -cpu model; "max" under TCG gives 5-level paging (LA57) and AVX/XSAVE state
    cpu: str | None = None
    # "stopped": the tree is stopped with SIGSTOP before the snapshot (its threads parked in
    # signal delivery, the state criu's golden dump sees too); "as-is": it runs on and the
    # host pauses the guest at a random moment within a second, as a user's VM is paused
    moment: Literal["stopped", "as-is"] = "stopped"
    # how many recordings (each paused at its own moment) the suite makes of an as-is workload
    takes: int = 1
    # options of criu's golden dump and of every restore (e.g. --tcp-established)
    criu_options: str = ""
    # False for a tree criu dump refuses too (nested namespaces): it is recorded without
    # golden images, and only a dump's refusal of it is tested
    golden: bool = True
    # "criu": golden images from `criu dump -t ROOT`; "runc": from `runc checkpoint` of the
    # workload's runc container
    golden_tool: Literal["criu", "runc"] = "criu"
    # what the workload's check reports when criu restores its own golden images, where criu's
    # dump loses what ovm-offline's keeps ("" when criu's pass)
    golden_check_fails: str = ""
    # files the tree only appends to, as (the path the images name, its path in files.tar): a
    # restore cuts each to the offset the images hold, the file as it was at their moment (as a
    # VM snapshot's disk is), where files.tar holds it as it grew until criu's dump seconds later
    appended_files: tuple[tuple[str, str], ...] = ()

    @property
    def log_name(self) -> str:
        return f"{self.name}.log"


# a stopped workload's check, where it reads the log as of the snapshot, and its as-is form
_AS_IS_CHECK: dict[Callable[[str, str], Verdict], Callable[[str, str], Verdict]] = {
    check_counter: check_counter_resumed
}


def _as_is(stopped: Workload, takes: int = 3) -> Workload:
    """The workload recorded as it runs: the same program, its tree caught mid-syscall."""
    return dataclasses.replace(
        stopped,
        name=f"{stopped.name}-asis",
        moment="as-is",
        takes=takes,
        check=_AS_IS_CHECK.get(stopped.check, stopped.check),
        description=f"{stopped.name}, paused as it runs (no SIGSTOP)",
    )


def _memhog(mib: int) -> Workload:
    return Workload(
        f"memhog-{mib}",
        "memhog",
        (str(mib),),
        ram_mib=512 + 2 * mib + mib // 2,  # the workload, criu's images of it, and slack
        description=f"{mib} MiB of anonymous memory with a verifiable pattern",
    )


_STOPPED = {
    w.name: w
    for w in (
        Workload(
            "counter",
            "counter",
            check=check_counter,
            settle_seconds=3.5,
            run_after_restore=3.0,
            description="interval timer, SIGALRM, prints its count each second",
        ),
        _memhog(0),
        _memhog(64),
        _memhog(1024),
        Workload(
            "counter-la57",
            "counter",
            check=check_counter,
            settle_seconds=3.5,
            run_after_restore=3.0,
            cpu="max",
            description="counter on -cpu max: 5-level page tables, XSAVE/AVX registers",
        ),
        Workload("filemap", "filemap", description="dynamically linked; file mappings; files at offsets and flags"),
        Workload(
            "ptyprog", "ptyprog", description="a session on a pty pair it holds both ends of, and /dev/tty (zdtm pty00)"
        ),
        Workload("threads", "threads", ("4",), run_after_restore=1.0, description="four worker threads"),
        Workload("pipetree", "pipetree", run_after_restore=1.0, description="a process tree joined by pipes"),
        Workload(
            "container",
            "container",
            root_key="outer_pid",
            run_after_restore=2.0,
            description="a PID namespace init and its child in cgroup /ovmbox",
            restore_prepare="mkdir -p /sys/fs/cgroup/ovmbox",
        ),
        Workload(
            "container-uts",
            "container",
            ("uts",),
            root_key="outer_pid",
            run_after_restore=2.0,
            description="container plus a UTS namespace of its own with a host and domain name",
            restore_prepare="mkdir -p /sys/fs/cgroup/ovmbox",
        ),
        Workload(
            "container-unsaved",
            "container",
            ("unsaved",),
            root_key="outer_pid",
            golden=False,
            description="container-uts in mount and network namespaces of its own, its child in nested user,"
            " UTS and time namespaces (a dump must refuse them by name)",
        ),
        Workload(
            "runc",
            "runc-box",
            root_key="container_init",
            golden_tool="runc",
            restore_prepare="runc-box prepare",
            appended_files=(("/data/log", "runc-box.files/log"),),
            description="pipetree (a UNIX socket pair in its ring, a file under the bind mount /data) in a"
            " container runc makes from its default spec (mount, UTS, IPC, network, PID and cgroup namespaces);"
            " its check sees the host name and mounts unchanged",
        ),
        Workload(
            "runc-userns",
            "runc-box",
            ("userns",),
            root_key="container_init",
            golden_tool="runc",
            restore_prepare="runc-box prepare userns",
            appended_files=(("/data/log", "runc-box.files/log"),),
            description="the runc container with a user namespace too (root is 100000 outside)",
        ),
        Workload(
            "runc-seccomp",
            "runc-box",
            ("seccomp",),
            root_key="container_init",
            golden_tool="runc",
            restore_prepare="runc-box prepare seccomp",
            appended_files=(("/data/log", "runc-box.files/log"),),
            description="the runc container under a seccomp profile shaped like Docker's default (what every"
            " Docker, Podman and Kubernetes container runs under); its check sees keyctl still refused",
        ),
        Workload(
            "runc-inet",
            "runc-box",
            ("inet",),
            root_key="container_init",
            golden_tool="runc",
            restore_prepare="runc-box prepare inet",
            criu_options="--tcp-established",
            description="inet's established TCP connections (bytes unread both ways) and listeners in the runc"
            " container, over its own loopback, which a prestart hook sets up as a network hook would",
        ),
        Workload(
            "ipc",
            "ipc",
            run_after_restore=1.0,
            description="a FIFO and UNIX sockets (pairs, named, stream and datagram) with data queued",
        ),
        Workload(
            "shmem",
            "shmem",
            run_after_restore=1.0,
            description="shared anonymous memory and shared file mappings across a fork",
        ),
        Workload(
            "sysvshm",
            "sysvshm",
            run_after_restore=1.0,
            description="System V shared memory in the tree's own IPC namespace",
        ),
        Workload(
            "evfds",
            "evfds",
            run_after_restore=1.0,
            description="eventfds, a signalfd, timerfds and an epoll set over them",
        ),
        Workload(
            "sigstate",
            "sigstate",
            root_key="pid",
            run_after_restore=1.0,
            description="a child stopped by SIGSTOP with a second SIGSTOP pending, POSIX timers one-shot"
            " INT_MAX ms ahead on the realtime, monotonic and boottime clocks (zdtm stopped01, posix_timers)",
        ),
        Workload(
            "locks",
            "locks",
            root_key="pid",
            run_after_restore=1.0,
            criu_options="--file-locks",
            description="POSIX, OFD and flock locks and a read lease held by a root and its child (zdtm"
            " file_locks, file_lease00); saved only with --file-locks, as criu does",
        ),
        Workload(
            "seccomp",
            "seccomp",
            root_key="pid",
            run_after_restore=1.0,
            description="seccomp filters: the root under one, its child's main thread under two (one logging),"
            " its worker thread under one (zdtm seccomp_filter); each makes one call fail with its own errno",
        ),
        Workload(
            "memfd",
            "memfd",
            root_key="pid",
            run_after_restore=1.0,
            description="memfds held open (sealed, dup'ed; mapped too) and a shared anonymous mapping's file"
            " opened through map_files (zdtm memfd00, memfd01, shmemfd)",
        ),
        Workload(
            "nsfiles",
            "nsfiles",
            root_key="pid",
            run_after_restore=1.0,
            description="namespace files held open: /proc/self/ns/net, uts, ipc and mnt (zdtm proc-self)",
        ),
        Workload(
            "zombies",
            "zombies",
            root_key="pid",
            run_after_restore=1.0,
            description="three children ended and not yet waited for: exited 7, killed by SIGTERM, and a"
            " process-group leader (zdtm zombie00, zombie01); the check reaps each and wants its status",
        ),
        Workload(
            "ghosts",
            "ghosts",
            root_key="pid",
            run_after_restore=1.0,
            description="files with no name left: two fds on an unlinked file, an unlinked file with a hole"
            " (held open, and mapped privately), an unlinked file only a shared mapping holds, a removed"
            " directory that is the cwd and open, a child's cwd in the /proc directory of its own child"
            " reaped since (zdtm unlink_fstat00, unlink_mmap00/01, cwd01, cwd02, unhashed_proc)",
        ),
        Workload(
            "scmrights",
            "scmrights",
            root_key="pid",
            run_after_restore=1.0,
            description="a pipe end and a file in flight over a UNIX datagram socket (SCM_RIGHTS), no fd"
            " holding them (zdtm scm00); the check receives both and uses them",
        ),
        Workload(
            "scmrights-stream",
            "scmrights",
            ("stream",),
            root_key="pid",
            run_after_restore=1.0,
            # criu's peek glues "hd" into the read that ends with the files, and its restore sends
            # them with the "hd"
            golden_check_fails='message 1: read "hd" with 2 files, not "hd" with 0',
            description="scmrights on a UNIX stream socket: files in flight with bytes queued before,"
            " between and after them; the check reads each message with exactly its files",
        ),
        Workload(
            "inotify",
            "inotify",
            root_key="pid",
            run_after_restore=1.0,
            description="two inotify instances watching a directory and files on a tmpfs, one watch"
            " removed; the check makes events and wants exactly the watched ones, and the next wd (zdtm inotify00)",
        ),
        Workload(
            "fanotify",
            "fanotify",
            root_key="pid",
            run_after_restore=1.0,
            description="three fanotify instances: inode marks on a tmpfs directory and files, one an ignore"
            " mask that survives modification, and a mount mark on a tmpfs of its own; the check wants exactly"
            " the marked events (zdtm fanotify00)",
            restore_prepare="mkdir -p /run/ovm/fanotify/mnt && mount -t tmpfs -o size=64k none /run/ovm/fanotify/mnt",
        ),
        Workload(
            "ptydata",
            "ptydata",
            root_key="pid",
            run_after_restore=1.0,
            description="a pty pair with two lines queued for the slave's reader and four bytes for the"
            " master's (zdtm pty02); the check reads each as it was, and nothing more",
        ),
        Workload(
            "ptyhup",
            "ptyhup",
            root_key="pid",
            run_after_restore=1.0,
            description="two fds on a pty slave whose master is closed, hung up (zdtm pty04); the check"
            " reads end of file and EIO from each, and finds no controlling terminal",
        ),
        Workload(
            "sigpending",
            "sigpending",
            root_key="pid",
            run_after_restore=1.0,
            description="signals queued and blocked with their siginfo: twice to the process, to each"
            " thread, a tgkill, and a dead child's SIGCHLD (zdtm sigpending); the check takes each",
        ),
        Workload(
            "hazards",
            "hazards",
            root_key="root",
            golden=False,
            description="a child per state zdtm checks that a dump must save or refuse by name: an nsfs fd,"
            " a pty with queued input its terminal echoes, inotify watches with an event unread, with"
            " IN_ONESHOT, on a directory a mount hides",
        ),
        Workload(
            "inet",
            "inet",
            run_after_restore=1.0,
            description="TCP listeners (IPv4, IPv6, dual-stack), bound and unbound TCP and UDP sockets, datagrams queued",
        ),
        Workload(
            "inet-established",
            "inet",
            ("established",),
            run_after_restore=1.0,
            criu_options="--tcp-established --network-lock nftables",
            description="inet plus an established TCP connection with bytes unread both ways (refused until saved)",
        ),
    )
}

_AS_IS = (
    Workload(
        "blockers",
        "blockers",
        moment="as-is",
        takes=3,
        run_after_restore=1.0,
        description="a thread blocked in each kind of system call a program waits in, each result checked",
    ),
    Workload(
        "blockers-partial",
        "blockers",
        ("partial-write",),
        moment="as-is",
        description="blockers plus a 1 MiB write blocked after moving part of it (ended short with that count)",
    ),
    Workload(
        "blockers-unknown",
        "blockers",
        ("unknown-call",),
        moment="as-is",
        description="blockers plus a child blocked in recvmmsg, a call a dump must refuse by name",
    ),
    Workload(
        "spinners",
        "spinners",
        ("2",),
        moment="as-is",
        takes=3,
        run_after_restore=0.5,
        description="two threads busy on the vCPUs, a computation carried in general and SSE registers",
    ),
    Workload(
        "spinners-crowded",
        "spinners",
        ("3",),
        moment="as-is",
        golden=False,
        run_after_restore=0.5,
        description="spinners with three threads on the two vCPUs: two share one, and a kernel thread that runs"
        " between them hands the CPU to a thread whose FPU registers are not loaded (not a standard recording:"
        " tests/test_dump_switch.py records it)",
    ),
    Workload(
        "spinners-avx",
        "spinners",
        ("2",),
        moment="as-is",
        takes=3,
        run_after_restore=0.5,
        cpu="max",
        description="spinners on -cpu max: the computation also in ymm registers (AVX2), 5-level paging",
    ),
    *(_as_is(_STOPPED[name]) for name in ("counter", "threads", "pipetree", "ipc", "evfds", "runc")),
    Workload(
        "churn-asis",
        "churn",
        moment="as-is",
        takes=3,
        golden=False,
        description="processes and threads made and ended without pause (fork and exit, a thread created"
        " and joined, a child that makes a thread): paused half made or half gone (not a standard recording:"
        " tests/test_cross_view.py records it)",
    ),
    Workload(
        "memhog-writer",
        "memhog",
        ("64", "write", "10"),
        ram_mib=512 + 2 * 64 + 32,
        moment="as-is",
        run_after_restore=1.0,
        description="memhog-64 rewriting 1% of its pages each second with the next generation of their pattern",
    ),
    Workload(
        "inet-stream-asis",
        "inet",
        ("stream",),
        moment="as-is",
        takes=3,
        run_after_restore=1.0,
        criu_options="--tcp-established --network-lock nftables",
        description="inet plus a TCP stream from a fast writer thread to a slow reader thread, both queues full",
    ),
    Workload(
        "runc-inet-stream-asis",
        "runc-box",
        ("inet-stream",),
        root_key="container_init",
        golden_tool="runc",
        restore_prepare="runc-box prepare inet-stream",
        moment="as-is",
        takes=3,
        run_after_restore=1.0,
        criu_options="--tcp-established",
        description="inet-stream-asis in the runc container: a TCP stream over its own loopback, paused as it runs",
    ),
    Workload(
        "inet-bursts-asis",
        "inet",
        ("bursts",),
        moment="as-is",
        takes=3,
        run_after_restore=1.0,
        criu_options="--tcp-established --network-lock nftables",
        description="inet plus a TCP stream of 64 KiB bursts between two threads, the reader keeping up",
    ),
)

WORKLOADS = {**_STOPPED, **{w.name: w for w in _AS_IS}}

# what the test suite records on both kernels; memhog-1024 is recorded for benchmarks on demand
STANDARD = (
    "counter",
    "counter-la57",
    "memhog-0",
    "memhog-64",
    "filemap",
    "ptyprog",
    "threads",
    "pipetree",
    "container",
    "container-uts",
    "container-unsaved",
    "runc",
    "runc-userns",
    "runc-seccomp",
    "runc-inet",
    "ipc",
    "shmem",
    "sysvshm",
    "evfds",
    "sigstate",
    "locks",
    "seccomp",
    "memfd",
    "nsfiles",
    "zombies",
    "ghosts",
    "scmrights",
    "scmrights-stream",
    "inotify",
    "fanotify",
    "ptydata",
    "ptyhup",
    "sigpending",
    "hazards",
    "inet",
    "inet-established",
    "blockers",
    "blockers-partial",
    "blockers-unknown",
    "spinners",
    "spinners-avx",
    "counter-asis",
    "threads-asis",
    "pipetree-asis",
    "ipc-asis",
    "evfds-asis",
    "runc-asis",
    "inet-stream-asis",
    "inet-bursts-asis",
    "runc-inet-stream-asis",
)


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        pass
    larger = re.fullmatch(r"memhog-([1-9][0-9]*)", name)
    if larger and int(larger.group(1)) <= MEMHOG_MAX_MIB:
        return _memhog_without_golden(int(larger.group(1)))
    raise CorpusError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}, memhog-N (N <= {MEMHOG_MAX_MIB})")


#: memhog.c's own limit
MEMHOG_MAX_MIB = 8192


def _memhog_without_golden(mib: int) -> Workload:
    """memhog-N of any size, for benchmarks (bench/bench_dump.py --workloads memhog-4096): no
    criu runs in the guest, so its RAM needs no room for criu's copy."""
    return dataclasses.replace(
        _memhog(mib),
        ram_mib=512 + mib + mib // 4,
        golden=False,
        description=f"{mib} MiB of anonymous memory with a verifiable pattern (no golden images)",
    )
