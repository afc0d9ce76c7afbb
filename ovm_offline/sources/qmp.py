"""A synchronous QMP session with QEMU, and who is at its other end.

qemu.qmp is asyncio-only (its legacy wrapper waits forever for a greeting that a non-QEMU
socket never sends): every step here runs on a private event loop with a timeout. The socket
is connected by us and handed to qemu.qmp, so that its peer's credentials (SO_PEERCRED: the
QEMU process, whose /proc/PID/fd holds a memfd-backed guest's RAM) are read from the very
connection that talks to it, not guessed from a process list.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any

from ._files import fail

__all__ = ["QMP_TIMEOUT", "QmpSession", "one_line"]

QMP_TIMEOUT = 10.0


class QmpSession:
    """QMP commands to the QEMU behind `socket_path`, each bounded by `timeout` seconds."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        from qemu.qmp import QMPClient

        self.where = socket_path
        self.timeout = timeout
        self.peer_pid: int | None = None
        import asyncio  # here, not at the top: only a live source pays for importing it

        self._loop = asyncio.new_event_loop()
        self._client = QMPClient("ovm-offline")
        if not os.path.exists(socket_path):
            self._loop.close()
            raise fail(socket_path, "no such QMP socket")
        try:
            self._run(self._client.connect(self._connected_socket()), "connecting")
        except BaseException:
            self.close()
            raise

    def _connected_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.where)
            sock.settimeout(None)
            self.peer_pid = _peer_pid(sock)
        except OSError as exc:
            sock.close()
            raise fail(self.where, f"QMP connection failed while connecting: {one_line(exc)}") from None
        sock.setblocking(False)
        return sock

    def _run(self, coro: Any, doing: str) -> Any:
        from qemu.qmp import QMPError

        try:
            return self._loop.run_until_complete(_with_timeout(coro, self.timeout))
        except TimeoutError:
            raise fail(
                self.where, f"no answer within {self.timeout:g} s while {doing}; is this a QEMU QMP socket?"
            ) from None
        except QMPError as exc:
            raise fail(self.where, f"QMP error while {doing}: {one_line(exc)}") from None
        except (OSError, EOFError, ValueError) as exc:
            raise fail(self.where, f"QMP connection failed while {doing}: {one_line(exc)}") from None

    def execute(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        return self._run(self._client.execute(command, arguments), command)

    def hmp(self, command_line: str) -> str:
        return self.execute("human-monitor-command", {"command-line": command_line})

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(_with_timeout(self._client.disconnect(), self.timeout))
        except Exception:
            pass
        self._loop.close()


def _peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process that listens at the other end (None where the kernel cannot say:
    a peer in another pid namespace is 0)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid = struct.unpack("3i", creds)[0]
    return pid if pid > 0 else None


def _with_timeout(coro: Any, seconds: float) -> Any:
    import asyncio

    return asyncio.wait_for(coro, seconds)


def one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {cause}"
    return " ".join(text.split())
