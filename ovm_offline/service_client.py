"""The `ovm-offline` command's entry point. With ``OVM_OFFLINE_SERVICE=SOCKET`` set, it hands
the command to a resident `ovm-offline service SOCKET` and waits for its exit status; the
service has the CLI, the walkers and the image writer imported already, so the command skips
the tenth of a second that importing them costs (most of a small live dump). Without the
variable, or with no service answering, the command runs here as it always did.

This module imports only what the hand-over needs: the point is what it does not import. So
it takes the C modules under `socket` and `signal` (those build enums at import: 7 ms of a
0.1 s command), and the request is plain bytes, not JSON.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # (no stub: signal.py re-exports it)
import _socket as socket
import os
import struct
import sys

__all__ = ["SERVICE_ENV", "main"]

#: names the socket of the service that runs `ovm-offline` commands
SERVICE_ENV = "OVM_OFFLINE_SERVICE"

#: the signals a command takes as an interruption (errors.INTERRUPTING_SIGNALS; not imported:
#: errors.py's own imports cost what this module saves)
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

#: SO_PEERCRED's struct ucred: pid, uid, gid
_UCRED = struct.Struct("3i")


def peer_uid(sock: socket.socket) -> int:  # a socket.socket too: its base class
    """The uid of the process at the other end of a connected Unix socket, as the kernel saw it."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))[1]


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"ovm-offline: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _connected(path: str) -> socket.socket | None:
    """The service's connection, or None where none answers (the command then runs here)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    owner = peer_uid(sock)
    if owner != os.getuid():
        # a socket someone else made where ours was expected: it gets neither our descriptors
        # nor our environment
        sock.close()
        _say(f"the service at {path} runs as uid {owner}, not as you (uid {os.getuid()}): not used")
        os._exit(1)
    return sock


def encode_request(argv: list[str], env: dict[bytes, bytes], umask: int) -> bytes:
    """NUL-separated, each string as the bytes it is (a name that is not UTF-8 included):
    umask, argc, argv, then the environment's KEY=VALUE; after a 4-byte length."""
    fields = [b"%d" % umask, b"%d" % len(argv), *map(os.fsencode, argv)]
    fields += [key + b"=" + value for key, value in env.items()]
    body = b"\0".join(fields)
    return struct.pack("!I", len(body)) + body


def _request(argv: list[str]) -> tuple[bytes, list[int]]:
    """What the service runs the command with: argv, the environment and umask, and as
    descriptors the standard streams and the working directory (by descriptor, not by name:
    the name may mean another directory to the service)."""
    umask = os.umask(0)
    os.umask(umask)
    env = {key: value for key, value in os.environb.items() if key != SERVICE_ENV.encode()}
    cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return encode_request(argv, env, umask), [0, 1, 2, cwd]


def _forward_signals(sock: socket.socket) -> None:
    """An interrupting signal from now on is passed on as `S<signum>`, and the command decides
    (it resumes a paused guest and removes partial output, as it would here)."""

    def forward(signum: int, _frame: object) -> None:
        try:
            sock.sendall(b"S%d\n" % signum)
        except OSError:
            pass

    for signum in _FORWARDED:
        # a Ctrl-C the caller ignores (started in the background by a shell, or by nohup) is
        # ignored, as the command alone ignores it; the others it handles in any case
        if signum != signal.SIGINT or signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, forward)


def _exit_status(sock: socket.socket, path: str) -> int:
    """Waits for the service's `X<status>` line."""
    received = b""
    while b"\n" not in received:
        chunk = sock.recv(64)
        if not chunk:
            _say(f"the service at {path} went away before the command ended")
            return 1
        received += chunk
    line = received.split(b"\n", 1)[0]
    return int(line[1:]) if line[:1] == b"X" and line[1:].isdigit() else 1


def _through_service(path: str) -> int | None:
    """The command's exit status as the service ran it, or None to run it here."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return None  # a closed standard stream cannot be handed over: run here, as it is
    sock = _connected(path)
    if sock is None:
        return None
    message, fds = _request(sys.argv)
    # a signal while the command is handed over waits, and then goes to the command
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    try:
        try:
            rights = struct.pack(f"{len(fds)}i", *fds)
            sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        except OSError:
            return None  # the service went away before it took the command: nothing ran
        finally:
            os.close(fds[-1])
        _forward_signals(sock)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    return _exit_status(sock, path)


def main() -> None:
    try:
        path = os.environ.get(SERVICE_ENV)
        if path and sys.argv[1:2] != ["service"]:
            code = _through_service(path)
            if code is not None:
                os._exit(code)
    except KeyboardInterrupt:
        _say("interrupted")
        os._exit(130)
    from .__main__ import main as run_here

    run_here()
