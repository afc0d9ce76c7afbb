"""The watchdog: a live guest is never left as ovm-offline changed it, even if ovm-offline dies.

ovm-offline puts a guest back on every error, Ctrl-C and SIGTERM itself; SIGKILL (the OOM
killer, `kill -9`, a runtime's timeout) or a crash of the interpreter leaves it no chance. So
before it changes anything of a live guest, it starts this module as a process of its own (in
a session of its own, so that a terminal's Ctrl-C reaches only ovm-offline) and tells it, over a
pipe, what it has changed: a line of JSON with the QMP commands that would undo it, written
before each change. The watchdog blocks reading the pipe. When the pipe ends, ovm-offline has
ended: normally it said "nothing to undo" first, and the watchdog just exits; otherwise ovm-offline
died holding the guest, and the watchdog connects to the same QMP socket (QEMU serves one
client per socket, and the dead process's connection closed with it), undoes the changes it was
told of (cancels the migration, lets a guest run again that ran before, gives back the migration
settings), says so on stderr, and exits. It holds a copy of a migration stream's socket and
drains it then: a background snapshot whose reader died would leave the guest's vCPU asleep
on a write-protect fault for good; drained, it ends on its own.

What it does not guarantee: both processes killed at once (their process group by SIGKILL, or
the machine), and a QMP socket someone else took meanwhile. A guest someone else paused stays
paused: the watchdog resumes only a guest ovm-offline stopped after finding it running.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any

from ._files import fail
from .forked import ForkedHelper, can_fork

__all__ = ["MIGRATION_RUNNING", "Watchdog", "put_back"]

#: query-migrate's states of a migration that has not ended
MIGRATION_RUNNING = ("setup", "active", "pre-switchover", "device", "cancelling")
#: how long a cancelled migration may take to end before the settings are given back anyway
CANCEL_SECONDS = 10.0
CANCEL_POLL_SECONDS = 0.01
#: how long the watchdog tries to reach QEMU after ovm-offline died (QEMU frees the socket when it
#: sees the dead process's connection close, at once in practice)
CONNECT_SECONDS = 5.0
#: how long a start waits for the watchdog to be ready
START_SECONDS = 30.0
READY = b"ready\n"
#: a watchdog forked from ovm-offline, by name (its command line is ovm-offline's)
FORKED_NAME = "ovm-watchdog"


class Watchdog:
    """The watchdog process of one live session with the guest behind `qmp_socket`."""

    def __init__(self, qmp_socket: str, stream: socket.socket | None = None, *, wait: bool = True) -> None:
        # `stream`: our end of a migration's stream, which the watchdog drains if we die (a
        # background snapshot whose reader is gone leaves the guest hung on a write-protect fault).
        # `wait=False`: return at once; the first hold() waits for it (a live dump starts it
        # before it maps RAM and finds the kernel, so that its 40 ms of start-up overlap them)
        fds = [stream.fileno()] if stream is not None else []
        self._qmp_socket = qmp_socket
        self._proc: subprocess.Popen[bytes] | ForkedHelper
        if can_fork():  # this process has what the watchdog runs imported: ready at once
            stream_fd = fds[0] if fds else None
            self._proc = ForkedHelper(
                FORKED_NAME, lambda commands, ready: _watch(qmp_socket, stream_fd, commands, ready), fds
            )
        else:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ovm_offline.sources.watchdog", qmp_socket, *map(str, fds)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,  # a terminal's Ctrl-C is ovm-offline's to handle, not its watchdog's
                close_fds=True,
                pass_fds=fds,
            )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._pipe: IO[bytes] | None = self._proc.stdin
        self._started = False
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        """Wait until it has started (its imports done): starting beside the stop would slow it."""
        if self._started:
            return
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], START_SECONDS)
        if not ready or self._proc.stdout.readline() != READY:
            self._pipe = None
            self._proc.kill()
            self._proc.wait()
            raise fail(self._qmp_socket, "the watchdog that would put the guest back if ovm-offline died did not start")
        self._proc.stdout.close()
        self._started = True

    def hold(
        self,
        *,
        resume: bool,
        migrating: bool = False,
        give_back: list[tuple[str, dict[str, Any]]],
        let_finish: bool = False,
    ) -> None:
        """What to undo if ovm-offline dies from now on (said before the change it covers):
        `resume` a guest we stop (or QEMU stops for us) that was running, cancel our migration
        (after letting it end on its own, with `let_finish`), and the QMP commands that give back
        the settings we changed."""
        self.wait_started()
        self._say({"resume": resume, "migrating": migrating, "give_back": give_back, "let_finish": let_finish})

    def release(self) -> None:
        """Nothing is left to undo: the watchdog exits."""
        if self._pipe is None:
            return
        if self._proc.stdout is not None and not self._proc.stdout.closed:
            self._proc.stdout.close()  # never waited for: told to exit all the same
        try:
            self._say({"resume": False, "migrating": False, "give_back": []})
            self._pipe.close()
        except OSError:
            pass
        self._pipe = None
        # not waited for: it exits on its own once it has read that nothing is left (waiting
        # took 15 ms of a 0.2 s dump); Popen reaps it later, or init once we have exited
        self._proc.poll()

    def _say(self, state: dict[str, Any]) -> None:
        if self._pipe is None:
            return
        try:
            self._pipe.write(json.dumps(state).encode() + b"\n")
            self._pipe.flush()
        except OSError:
            pass  # a watchdog that died cannot be told; ovm-offline goes on guarding the guest itself


def put_back(
    qmp: Any,
    migrating: bool,
    was_running: bool,
    give_back: list[tuple[str, dict[str, Any]]],
    *,
    let_finish: bool = False,
) -> None:
    """Undo what a live session changed of a guest: cancel our migration, let a guest that was
    running run on, whatever stopped it (QEMU or we, for the snapshot's moment), and give back
    the migration settings we changed; each step quietly (one that fails does not stop the
    others). `let_finish`: wait for the migration to end on its own first (its stream still
    drained), cancelling it only if it does not. `qmp` is a connected session (sources.live's)."""

    def quietly(command: str, arguments: dict[str, Any] | None = None) -> Any:
        try:
            return qmp.execute(command, arguments)
        except Exception:
            return None  # cont of a guest still running fails harmlessly

    if migrating and let_finish:
        deadline = time.monotonic() + CANCEL_SECONDS
        while (quietly("query-migrate") or {}).get("status") in MIGRATION_RUNNING and time.monotonic() < deadline:
            time.sleep(CANCEL_POLL_SECONDS)
        migrating = (quietly("query-migrate") or {}).get("status") in MIGRATION_RUNNING
    if migrating:
        quietly("migrate_cancel")
        # QEMU refuses to change capabilities until the cancel has ended (a background
        # snapshot's capability would then stay on for the user's next migration)
        deadline = time.monotonic() + CANCEL_SECONDS
        while (quietly("query-migrate") or {}).get("status") in MIGRATION_RUNNING and time.monotonic() < deadline:
            time.sleep(CANCEL_POLL_SECONDS)
    if was_running:
        quietly("cont")
    for command, arguments in give_back:
        quietly(command, arguments)


def _last_state(pipe: IO[bytes]) -> dict[str, Any]:
    """Read the pipe to its end; the last whole line that parses (a line cut short by a death
    mid-write is not one)."""
    state: dict[str, Any] = {}
    for line in pipe:
        if not line.endswith(b"\n"):
            break
        try:
            said = json.loads(line)
        except ValueError:
            continue
        if isinstance(said, dict):
            state = said
    return state


def _drain(fd: int) -> None:
    """Read a migration stream to its end, so that QEMU never waits for its dead reader."""
    try:
        while os.read(fd, 1 << 20):
            pass
    except OSError:
        pass


def _connect(qmp_socket: str) -> Any:
    from .qmp import QMP_TIMEOUT, QmpSession

    deadline = time.monotonic() + CONNECT_SECONDS
    while True:
        try:
            return QmpSession(qmp_socket, QMP_TIMEOUT)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def main(argv: list[str]) -> int:
    return _watch(argv[0], int(argv[1]) if len(argv) > 1 else None, sys.stdin.buffer, sys.stdout.buffer)


def _watch(qmp_socket: str, stream_fd: int | None, commands: IO[bytes], ready: IO[bytes]) -> int:
    """Says it is ready, reads what to undo until the pipe ends, and undoes it."""
    from . import qmp as _qmp_module  # noqa: F401  (imported before it is needed: the undo must not wait for it)

    ready.write(READY)
    ready.flush()
    ready.close()
    state = _last_state(commands)
    resume, migrating = bool(state.get("resume")), bool(state.get("migrating"))
    give_back = [(str(c), dict(a)) for c, a in state.get("give_back", [])]
    if not (resume or migrating or give_back):
        return 0
    if stream_fd is not None and migrating:
        threading.Thread(target=_drain, args=(stream_fd,), daemon=True).start()
    try:
        qmp = _connect(qmp_socket)
    except Exception as exc:
        print(f"ovm-offline watchdog: ovm-offline ended holding the guest, and {exc}", file=sys.stderr)
        return 1
    try:
        put_back(qmp, migrating, resume, give_back, let_finish=bool(state.get("let_finish")))
    finally:
        qmp.close()
    done = [what for what, did in (("cancelled its migration", migrating), ("let it run again", resume)) if did]
    done += ["gave back its migration settings"] if give_back else []
    print(f"ovm-offline watchdog: ovm-offline ended holding the guest; {', '.join(done)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
