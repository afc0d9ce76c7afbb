"""One QEMU guest of the corpus: started, driven over QMP and a control serial port, and always
ended (by PID) on every exit path."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from qemu.qmp.legacy import QEMUMonitorProtocol
from qemu.qmp.protocol import ConnectError

from .errors import GuestBroken, GuestDied, GuestError, GuestStuck

PR_SET_PDEATHSIG = 1
#: what init.sh writes on the console as it starts the job the host gave it
JOB_STARTED = "OVM-INIT: running job"
#: cgroup.memory: QEMU 7.2's multi-threaded TCG can run a stale translation of kernel text
#: that another vCPU is patching: 6.12 guests took `Oops: int3` (and then panicked) at
#: __alloc_pages' site of memcg_kmem_online_key, which the kernel switches on when runc makes
#: the first memory cgroup. Kernel-memory and socket accounting of memory cgroups are what
#: switch such keys on, and nothing here reads them: off, runc's cgroups patch no kernel text.
KERNEL_ARGS = "console=ttyS0 panic=-1 quiet loglevel=4 cgroup.memory=nokmem,nosocket"
#: a CPU stuck in the guest kernel this long is a hang, not a vCPU the loaded host starved
STUCK_SECONDS = 120
_KERNEL_FAILED = re.compile(rb"\bOops: |Kernel panic - not syncing")
_SOFT_LOCKUP = re.compile(rb"^\[\s*(\d+)\.\d+\].*BUG: soft lockup - CPU#(\d+) stuck for (\d+)s! \[(.*)\]", re.M)
#: seconds a repeated soft-lockup report may come late and still continue the same lockup
_LOCKUP_REPORT_SLACK = 10


class KernelConsole:
    """Reads a guest console's new whole lines for the kernel saying it failed by itself.

    A soft lockup is reported again every ~20 s while it lasts. Kernels since 5.14 give the
    whole time stuck; 5.10 restarts its count at each report (a CI guest's two vCPUs were stuck
    in runc for minutes in reports of 22 s each). So a lockup's length is measured from the
    console clock: its first report's time, less the seconds that report gives, to its latest
    report on the same CPU and task."""

    def __init__(self) -> None:
        # per CPU: (task, console second the lockup began, console second of its latest report)
        self._lockups: dict[bytes, tuple[bytes, int, int]] = {}

    def failure(self, lines: bytes) -> str | None:
        """The first of these lines by which the kernel says it failed, if any."""
        found = [(m.start(), m.end()) for m in _KERNEL_FAILED.finditer(lines)]
        for lockup in _SOFT_LOCKUP.finditer(lines):
            if self._stuck_seconds(lockup) >= STUCK_SECONDS:
                found.append((lockup.start(), lockup.end()))
        if not found:
            return None
        first, last = min(found)
        start = lines.rfind(b"\n", 0, first) + 1
        end = lines.find(b"\n", last)
        return lines[start : end if end >= 0 else len(lines)].decode(errors="replace").strip()

    def _stuck_seconds(self, report: re.Match[bytes]) -> int:
        at, cpu, seconds, task = int(report[1]), report[2], int(report[3]), report[4]
        began = at - seconds
        previous = self._lockups.get(cpu)
        if previous is not None:
            previous_task, previous_began, previous_at = previous
            if previous_task == task and at - previous_at <= seconds + _LOCKUP_REPORT_SLACK:
                began = min(began, previous_began)
        self._lockups[cpu] = (task, began, at)
        return at - began


def kernel_failure(console: bytes) -> str | None:
    """The first line of a whole console by which its guest kernel says it failed, if any."""
    return KernelConsole().failure(console)


def die_with_parent(sig: int) -> None:
    """Have the kernel send this process `sig` when the thread that started it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, sig)


def _die_with_parent() -> None:
    # If the recorder is SIGKILLed, QEMU goes too: no orphaned guests eating a core.
    die_with_parent(signal.SIGKILL)
    os.setsid()


#: how a guest's RAM is given to QEMU, by name: its options ({ram} MiB in all, {half} of it
#: each, {file} the memory file) and the least RAM the layout needs
MEMORY_LAYOUTS: dict[str, tuple[tuple[str, ...], int]] = {
    # one memory-backend-file: what every recording uses
    "file": (
        ("-machine", "pc,accel={accel},memory-backend=ram0", "-m", "{ram}M", "-object",
         "memory-backend-file,id=ram0,size={ram}M,mem-path={file},share=on"),
        0,
    ),
    # libvirt's <memoryBacking><source type='memfd'/><access mode='shared'/>
    "memfd": (
        ("-machine", "pc,accel={accel},memory-backend=ram0", "-m", "{ram}M", "-object",
         "memory-backend-memfd,id=ram0,size={ram}M,share=on"),
        0,
    ),
    # libvirt's memfd with two NUMA cells: equal memfds, one vCPU on each node
    "numa-memfd": (
        ("-machine", "pc,accel={accel}", "-m", "{ram}M",
         "-object", "memory-backend-memfd,id=m0,size={half}M,share=on",
         "-object", "memory-backend-memfd,id=m1,size={half}M,share=on",
         "-numa", "node,nodeid=0,cpus=0,memdev=m0", "-numa", "node,nodeid=1,cpus=1,memdev=m1"),
        0,
    ),
    # q35 with more than 2.75 GiB: 2 GiB below the PCI hole, the rest from 4 GiB up
    "q35-high": (
        ("-machine", "q35,accel={accel},memory-backend=ram0", "-m", "{ram}M", "-object",
         "memory-backend-file,id=ram0,size={ram}M,mem-path={file},share=on"),
        3072,
    ),
}  # fmt: skip


#: the address a guest reaches the host's guest_forwards at
GUEST_SEES_HOST = "10.0.2.100"


class Guest:
    """A QEMU x86-64 guest with RAM in a shared memory-backend-file, VMCOREINFO, QMP and a
    control serial port. Use as a context manager."""

    def __init__(
        self,
        workdir: Path,
        vmlinuz: Path,
        initramfs: Path,
        ram_mib: int,
        disks: list[Path],
        smp: int = 2,
        accel: str | None = None,
        cpu: str | None = None,
        cmdline_extra: str = "",
        memory_dir: Path | None = None,
        memory_layout: str = "file",
        forwards: dict[int, int] | None = None,
        guest_forwards: dict[int, int] | None = None,
    ):
        self.workdir = workdir
        # memory_dir: where guest RAM's file lives instead (a tmpfs, for a background snapshot)
        self.memory_file = (memory_dir or workdir) / "guest-ram"
        self.memory_layout = memory_layout
        if memory_layout not in MEMORY_LAYOUTS:
            raise ValueError(f"unknown memory layout {memory_layout!r} (known: {', '.join(MEMORY_LAYOUTS)})")
        ram_mib = max(ram_mib, MEMORY_LAYOUTS[memory_layout][1])
        self.console_log = workdir / "console.log"
        self.socket_dir: Path | None = None  # made by start(), removed by stop()
        self.ram_mib = ram_mib
        # TCG by default: nested KVM hangs Linux guests in early boot on the project machines;
        # OVM_ACCEL=kvm opts in where KVM does work
        accel = accel or os.environ.get("OVM_ACCEL", "tcg")
        cmdline = f"{KERNEL_ARGS} {cmdline_extra}".strip()
        self.argv = [
            "qemu-system-x86_64",
            *(
                option.format(accel=accel, ram=ram_mib, half=ram_mib // 2, file=self.memory_file)
                for option in MEMORY_LAYOUTS[memory_layout][0]
            ),
            "-smp",
            str(smp),
            "-kernel",
            str(vmlinuz),
            "-initrd",
            str(initramfs),
            "-append",
            cmdline,
            "-device",
            "vmcoreinfo",
            "-display",
            "none",
            "-no-reboot",
            "-chardev",
            f"file,id=con,path={self.console_log}",
            "-serial",
            "chardev:con",
        ]
        if cpu:
            self.argv += ["-cpu", cpu]
        for i, disk in enumerate(disks):
            self.argv += ["-drive", f"file={disk},if=virtio,format=raw,index={i}"]
        if forwards or guest_forwards:
            # forwards: host port on 127.0.0.1 -> guest port; guest_forwards: a port of
            # GUEST_SEES_HOST -> host port on 127.0.0.1 (through a busybox nc per connection);
            # restrict=on: the guest reaches nothing else
            rules = [f"hostfwd=tcp:127.0.0.1:{host}-:{guest}" for host, guest in (forwards or {}).items()]
            rules += [
                f"guestfwd=tcp:{GUEST_SEES_HOST}:{guest}-cmd:busybox nc 127.0.0.1 {host}"
                for guest, host in (guest_forwards or {}).items()
            ]
            self.argv += [
                "-netdev",
                ",".join(["user,id=net0,restrict=on", *rules]),
                "-device",
                "virtio-net-pci,netdev=net0",
            ]
        self.process: subprocess.Popen | None = None
        self.qmp: QEMUMonitorProtocol | None = None
        self._ctl: socket.socket | None = None
        self._ctl_buffer = b""
        self._console_checked = 0  # bytes of the console log already searched for a kernel failure
        self._kernel_console = KernelConsole()

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Guest:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _make_sockets(self) -> list[str]:
        """QEMU's options for its sockets, in a directory made now: a socket's path must fit
        sun_path's 108 bytes, and a recording's directory can be deeper than that leaves."""
        self.socket_dir = Path(tempfile.mkdtemp(prefix="ovm-qemu-", dir="/tmp"))
        self.qmp_path = self.socket_dir / "qmp.sock"
        # QEMU serves one client per QMP socket; this one is for tools outside the harness
        self.qmp_tool_path = self.socket_dir / "qmp-tool.sock"
        self.ctl_path = self.socket_dir / "ctl.sock"
        return [
            "-qmp",
            f"unix:{self.qmp_path},server=on,wait=off",
            "-qmp",
            f"unix:{self.qmp_tool_path},server=on,wait=off",
            "-chardev",
            f"socket,id=ctl,path={self.ctl_path},server=on,wait=off",
            "-serial",
            "chardev:ctl",
        ]

    def start(self) -> None:
        self.console_log.unlink(missing_ok=True)
        argv = self.argv + self._make_sockets()
        try:
            with open(self.workdir / "qemu-stderr.log", "wb") as stderr:
                self.process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, preexec_fn=_die_with_parent
                )
        except BaseException:
            self.stop()
            raise
        try:
            self._wait_for_socket(self.qmp_path)
            self.qmp = self._when_listening(self.qmp_path, self._connect_qmp)
            self._wait_for_socket(self.ctl_path)
            self._ctl = self._when_listening(self.ctl_path, self._connect_ctl)
        except BaseException:
            self.stop()
            raise

    def _connect_qmp(self) -> QEMUMonitorProtocol:
        qmp = QEMUMonitorProtocol(str(self.qmp_path))
        qmp.connect()
        return qmp

    def _connect_ctl(self) -> socket.socket:
        ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ctl.connect(str(self.ctl_path))
        except BaseException:
            ctl.close()
            raise
        return ctl

    def _when_listening(self, path: Path, connect, timeout: float = 20):
        """connect() once QEMU listens on `path`: the socket file appears when QEMU binds it,
        a moment before it listens, and a loaded machine stretches that moment."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return connect()
            except (ConnectionRefusedError, ConnectError) as e:
                self._check_alive("starting QEMU")
                if time.monotonic() > deadline:
                    raise GuestError(
                        f"QEMU did not listen on {path.name} within {timeout:.0f} s", self.log_tail()
                    ) from e
                time.sleep(0.05)

    def _wait_for_socket(self, path: Path, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            self._check_alive("starting QEMU")
            if time.monotonic() > deadline:
                raise GuestError(f"QEMU did not create {path.name} within {timeout:.0f} s", self.log_tail())
            time.sleep(0.05)

    def stop(self) -> None:
        """End QEMU: politely over QMP first, then by PID. Safe to call more than once."""
        with contextlib.suppress(Exception):
            if self._ctl:
                self._ctl.close()
        if self.process and self.process.poll() is None:
            with contextlib.suppress(Exception):
                if self.qmp:
                    self.qmp.settimeout(2)
                    self.qmp.cmd("quit")
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        with contextlib.suppress(Exception):
            if self.qmp:
                self.qmp.close()
        self.qmp = None
        self._ctl = None
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            self.socket_dir = None

    def wait_exit(self, timeout: float) -> int:
        assert self.process
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GuestError(f"guest did not power off within {timeout:.0f} s", self.log_tail()) from None

    def _check_alive(self, doing: str) -> None:
        if self.process and self.process.poll() is not None:
            stderr = (self.workdir / "qemu-stderr.log").read_text(errors="replace").strip()
            raise GuestDied(
                f"QEMU exited (status {self.process.returncode}) while {doing}"
                + (f": {stderr.splitlines()[-1]}" if stderr else ""),
                self.log_tail(),
            )

    def _check_kernel(self, doing: str) -> None:
        """GuestBroken if the console's new whole lines say the guest kernel failed."""
        try:
            with open(self.console_log, "rb") as console:
                console.seek(self._console_checked)
                new = console.read()
        except FileNotFoundError:
            return
        whole = new[: new.rfind(b"\n") + 1]
        self._console_checked += len(whole)
        failure = self._kernel_console.failure(whole)
        if failure is not None:
            raise GuestBroken(f"the guest kernel failed while {doing}: {failure}", self.log_tail())

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.console_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_for_job(self, timeout: float, doing: str) -> None:
        """Wait until init has started the job (it says so on the console). A guest that has not
        by `timeout` is stuck in its kernel or init, not failing its job: the error says where
        its vCPUs were."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(doing)
            with contextlib.suppress(FileNotFoundError):
                if JOB_STARTED in self.console_log.read_text(errors="replace"):
                    return
            if time.monotonic() > deadline:
                raise GuestStuck(
                    f"the guest did not start its job within {timeout:.0f} s while {doing}; {self.vcpus_now()}",
                    self.log_tail(),
                )
            time.sleep(0.2)

    def vcpus_now(self) -> str:
        """Where each vCPU is, in one line (for an error about a guest that does not progress)."""
        try:
            status = self.command("query-status", timeout=5)
            text = self.hmp("info registers -a")
        except Exception as e:
            return f"its vCPUs could not be read: {e}"
        places = [
            f"vCPU {n}: RIP {rip} CPL {cpl}{' halted' if hlt == '1' else ''}"
            for n, (rip, cpl, hlt) in enumerate(re.findall(r"RIP=([0-9a-f]+).*?CPL=(\d).*?HLT=(\d)", text, re.S))
        ]
        return f"QEMU {(status or {}).get('status', '?')}, " + ", ".join(places or ["no vCPU registers"])

    # -- control channel -------------------------------------------------------------------
    def read_line(self, timeout: float, doing: str) -> str:
        """Next line the guest job wrote to /dev/ttyS1."""
        assert self._ctl
        deadline = time.monotonic() + timeout
        while b"\n" not in self._ctl_buffer:
            self._check_alive(doing)
            self._check_kernel(doing)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GuestError(f"timed out after {timeout:.0f} s {doing}", self.log_tail())
            self._ctl.settimeout(min(remaining, 0.5))
            try:
                data = self._ctl.recv(65536)
            except TimeoutError:
                continue
            if not data:
                # QEMU closes its sockets as it exits: give it a moment so the error says so
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=5)
                self._check_alive(doing)
                raise GuestError(f"control channel closed while {doing}", self.log_tail())
            self._ctl_buffer += data
        line, _, self._ctl_buffer = self._ctl_buffer.partition(b"\n")
        return line.decode(errors="replace").strip()

    def expect(self, prefix: str, timeout: float, doing: str) -> str:
        """Wait for a control line starting with `prefix`; a job failure line ends the wait."""
        while True:
            line = self.read_line(timeout, doing)
            if line.startswith(prefix):
                return line
            if line.startswith(("FAIL", "OVM-EXIT")):
                raise GuestError(f"guest job failed while {doing}: {line}", self.log_tail())

    def send(self, line: str) -> None:
        assert self._ctl
        self._ctl.sendall(line.encode() + b"\n")

    def memory_files(self) -> list[Path]:
        """The host files of guest RAM: the memory file, or QEMU's memfds (as /proc/PID/fd/N)."""
        if "memfd" not in self.memory_layout:
            return [self.memory_file]
        assert self.process
        fd_dir = Path(f"/proc/{self.process.pid}/fd")
        return sorted(p for p in fd_dir.iterdir() if os.readlink(p).startswith("/memfd:memory-backend-memfd"))

    # -- monitor ---------------------------------------------------------------------------
    def command(self, name: str, timeout: float = 600, **arguments) -> object:
        assert self.qmp
        self.qmp.settimeout(timeout)
        reply = self.qmp.cmd_raw(name, arguments or None)
        if "error" in reply:
            raise GuestError(f"QMP {name} failed: {reply['error'].get('desc', json.dumps(reply['error']))}")
        return reply.get("return")

    def hmp(self, command_line: str) -> str:
        return str(self.command("human-monitor-command", **{"command-line": command_line}))
