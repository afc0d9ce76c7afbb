"""A helper process forked from this one, for a process that has imported what the helper
runs: it is ready at once, where a fresh interpreter spends 40 ms importing (the watchdog's
start-up, most of it beside a live dump's first steps). It has the few members of
`subprocess.Popen` its users need: pipes to its standard input and output, poll, kill, wait.

Forking is safe only in a process with one thread (another thread may hold a lock the child
would inherit held); `can_fork` says so, and otherwise the caller starts a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
from collections.abc import Callable
from typing import IO

__all__ = ["ForkedHelper", "can_fork"]


def can_fork() -> bool:
    return threading.active_count() == 1


class ForkedHelper:
    """`run(stdin, stdout)` in a child of ours, in a session of its own (a terminal's Ctrl-C is
    ours to handle), holding no descriptor of ours but its pipes, its stderr and `pass_fds`;
    its return value is its exit status. `name` is its name in `ps -o comm` and `pgrep` (its
    command line is ours)."""

    def __init__(self, name: str, run: Callable[[IO[bytes], IO[bytes]], int], pass_fds: list[int]) -> None:
        _reap_ended()
        child_in, self_out = os.pipe()
        self_in, child_out = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # objects inherited from the parent are never freed here: a collected socket
                # would close a descriptor number the child has since reused
                gc.disable()
                with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
                    comm.write(name[:15])
                os.setsid()
                signal.signal(signal.SIGINT, signal.default_int_handler)
                for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
                    signal.signal(signum, signal.SIG_DFL)
                os.dup2(child_in, 0)
                os.dup2(child_out, 1)
                _close_all_but({0, 1, 2, *pass_fds})
                code = run(os.fdopen(0, "rb"), os.fdopen(1, "wb"))
            except BaseException:  # noqa: BLE001 - a child never unwinds into its parent's code
                pass
            os._exit(code)
        os.close(child_in)
        os.close(child_out)
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = os.fdopen(self_out, "wb")
        self.stdout: IO[bytes] | None = os.fdopen(self_in, "rb")
        _unreaped.append(self)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = -1
                break
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


#: helpers not yet known to have ended: a long-lived process (a Volatility session) reaps those
#: that have at each new start, as subprocess reaps its Popens
_unreaped: list[ForkedHelper] = []


def _reap_ended() -> None:
    _unreaped[:] = [helper for helper in _unreaped if helper.poll() is None]


def _close_all_but(keep: set[int]) -> None:
    start = 0
    for fd in sorted(keep):
        if start < fd:  # os.closerange(n, n) is close_range(n, n - 1): with n = 0, every descriptor
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))
