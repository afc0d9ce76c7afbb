"""`ovm-offline service SOCKET`: a resident process with every module imported, that runs each
`ovm-offline` command handed to it (`service_client`) in a child of its own, forked per
command, on the caller's own descriptors, directory, environment and umask. As `criu
service` spares criu's start-up, this spares ours: importing the CLI, the walkers, the image
writer, protobuf and qemu.qmp is about 0.1 s, most of a small live dump.

The socket is the caller's only way in: it is made mode 0600, and a connection from another
uid (SO_PEERCRED) is closed unread. The protocol, one connection per command:

- caller -> service: a 4-byte length and the umask, argc, argv and the environment's
  KEY=VALUE, NUL-separated, with the descriptors 0, 1, 2 and the working directory attached
  (SCM_RIGHTS);
- caller -> service, any time after: `S<signum>\\n`, a signal for the command;
- service -> caller: `X<status>\\n` once the command has ended (128 + N for signal N).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gc
import importlib
import io
import os
import pkgutil
import select
import signal
import socket
import stat
import struct
import sys
import time

from .errors import INTERRUPTING_SIGNALS, OutputExistsError, OvmError
from .service_client import SERVICE_ENV, peer_uid

__all__ = ["serve"]

#: a request larger than this is not a caller's (argv and environment are kilobytes)
MAX_REQUEST = 1 << 20
#: the standard streams and the working directory
REQUEST_FDS = 4
#: descriptors received are moved at least this high before the streams are put in place
_ABOVE_STREAMS = 10


def _preload() -> None:
    """Every module a command may import, imported once here instead of in each command."""
    import qemu.qmp  # noqa: F401  (live sources)

    package = sys.modules[__package__]
    for module in pkgutil.walk_packages(package.__path__, prefix=f"{__package__}."):
        importlib.import_module(module.name)


def _listening(path: str) -> socket.socket:
    """The service's socket at `path`, mode 0600; a stale socket there (no one answers) is
    replaced, anything else refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None:
        if not stat.S_ISSOCK(mode):
            raise OutputExistsError(f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # stale: its service is gone
        else:
            raise OutputExistsError(f"a service already answers at {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise OvmError(f"cannot listen at {path}: {exc.strerror}") from None
    finally:
        os.umask(umask)
    sock.listen(64)
    return sock


def serve(path: str) -> None:
    """Runs commands handed over at `path` until SIGTERM or SIGINT, then removes the socket."""
    _preload()
    # what is imported stays out of the collector's passes: a forked command would otherwise copy
    # each page the collector touches (copy-on-write)
    gc.freeze()
    server = _listening(path)
    ours = os.stat(path).st_ino
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # each command's session is reaped by the kernel
        # said once it listens: a script may start commands as soon as it reads this
        sys.stderr.write(f"ovm-offline: serving commands at {path} (OVM_OFFLINE_SERVICE={path})\n")
        sys.stderr.flush()
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # out of descriptors or memory for now: the next caller may fare better
                time.sleep(0.1)
                continue
            if peer_uid(conn) != os.getuid():
                conn.close()
                continue
            try:
                pid = os.fork()
            except OSError:
                conn.close()  # the caller sees the service go away before the command ran
                continue
            if pid == 0:
                server.close()
                _session(conn)
            conn.close()
    except KeyboardInterrupt:
        pass  # SIGTERM and SIGINT are how a service is stopped
    finally:
        server.close()
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:  # not a socket a newer service made there
                os.unlink(path)


@dataclasses.dataclass
class Request:
    """A command as its caller would run it."""

    argv: list[str]
    env: dict[bytes, bytes]
    umask: int


def decode_request(body: bytes) -> Request | None:
    """`service_client.encode_request`'s body (after its length), or None if it is not one."""
    fields = body.split(b"\0")
    if len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    umask, argc = int(fields[0]), int(fields[1])
    if umask > 0o777 or len(fields) < 2 + argc:
        return None
    env = [field.partition(b"=") for field in fields[2 + argc :]]
    if any(not sep for _key, sep, _value in env):
        return None
    argv = [os.fsdecode(arg) for arg in fields[2 : 2 + argc]]
    return Request(argv, {key: value for key, _sep, value in env}, umask)


def _received(conn: socket.socket) -> tuple[Request, list[int]] | None:
    """The caller's request and descriptors, or None for anything malformed."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, REQUEST_FDS)
    try:
        if len(fds) != REQUEST_FDS or len(data) < 4:
            return None
        (length,) = struct.unpack("!I", data[:4])
        if length > MAX_REQUEST:
            return None
        body = bytearray(data[4:])
        while len(body) < length:
            chunk = conn.recv(min(65536, length - len(body)))
            if not chunk:
                return None
            body += chunk
        request = decode_request(bytes(body[:length]))
        if request is None:
            return None
        result = request, fds
        fds = []
        return result
    finally:
        for fd in fds:
            os.close(fd)


def _session(conn: socket.socket) -> None:
    """One command: its runner forked, the caller's signals passed on, its status sent back.
    Never returns."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for signum in INTERRUPTING_SIGNALS:  # the service's own stop is not the command's
            signal.signal(signum, signal.SIG_IGN)
        received = _received(conn)
        if received is None:
            os._exit(1)
        request, fds = received
        runner = os.fork()
        if runner == 0:
            conn.close()
            _run(request, fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(b"X%d\n" % _relay(conn, runner))
    except BaseException:  # noqa: BLE001 - a session never unwinds into the service's loop
        os._exit(1)
    os._exit(0)


def _relay(conn: socket.socket, runner: int) -> int:
    """Passes the caller's signals to the runner until it ends; its exit status."""
    runner_fd = os.pidfd_open(runner)
    caller_gone = False
    pending = b""
    while True:
        ready, _, _ = select.select([runner_fd] + ([] if caller_gone else [conn]), [], [])
        if runner_fd in ready:
            _, status = os.waitpid(runner, 0)
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code
        chunk = conn.recv(256)
        if not chunk:
            # the caller was killed: its command is interrupted as a closed terminal would
            caller_gone = True
            os.kill(runner, signal.SIGHUP)
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line[:1] == b"S" and line[1:].isdigit() and int(line[1:]) in INTERRUPTING_SIGNALS:
                os.kill(runner, int(line[1:]))
        pending = pending[-64:]


def _streams_from(fds: list[int]) -> None:
    """The caller's descriptors as 0, 1, 2 and its directory as ours, and Python's standard
    streams made again over them (line-buffered where they are terminals, as at start-up)."""
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _ABOVE_STREAMS) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in enumerate(moved[:3]):
        os.dup2(fd, target)  # dup2's copy is inheritable, as a process's 0-2 are
        os.close(fd)
    os.fchdir(moved[3])
    os.close(moved[3])
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), errors="surrogateescape")
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
        errors="surrogateescape",
        line_buffering=os.isatty(1),
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), errors="backslashreplace", line_buffering=True
    )


def _run(request: Request, fds: list[int]) -> None:
    """The command, as `ovm-offline` would run it in the caller's place. Never returns."""
    try:
        os.setsid()  # not in the service's terminal session, if it has one
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in INTERRUPTING_SIGNALS[1:]:
            signal.signal(signum, signal.SIG_DFL)
        _streams_from(fds)
        os.umask(request.umask)
        os.environb.clear()
        os.environb.update(request.env)
        os.environ.pop(SERVICE_ENV, None)
        sys.argv = request.argv or ["ovm-offline"]
    except BaseException:  # noqa: BLE001 - the caller's descriptors could not be taken
        os._exit(1)
    from .__main__ import main

    main()
    os._exit(0)
