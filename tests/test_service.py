"""`ovm-offline service SOCKET` and the `ovm-offline` command handed to it: the same output,
status, files and interruptions as the command run on its own, and nothing handed to anyone
but the caller's own uid."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpus.recorder import record_with_live_dump
from corpus.restore import restore
from ovm_offline.service import Request, decode_request
from ovm_offline.service_client import SERVICE_ENV, encode_request
from tests.support.cli import MOMENTS, tree_digest
from tests.support.corpus_cases import skip_unless_live
from tests.test_sources_kdump import build_kdump

#: the `ovm-offline` console script of this install: the entry point that hands commands over
OVM = str(Path(sys.executable).with_name("ovm-offline"))


def _command(args, env_service: str | None, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != SERVICE_ENV}
    if env_service is not None:
        env[SERVICE_ENV] = env_service
    return subprocess.run([OVM, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60, **kwargs)


def _descendants(pid: int) -> list[int]:
    """Every living process under `pid`, from each process's parent in /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # the name in parentheses may hold spaces: the fields after its last ')'
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@pytest.fixture
def service(tmp_path):
    """A running service at tmp_path/ovm.sock; stopped (and checked to end) after the test."""
    path = tmp_path / "ovm.sock"
    proc = subprocess.Popen([OVM, "service", str(path)], stderr=subprocess.PIPE, text=True)
    # its first line comes once it listens (the socket's file exists a moment before)
    assert "serving commands at" in proc.stderr.readline()
    yield proc, path
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert not path.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["dump", "--bogus"],  # a usage error: status 2, click's lines with the program's name
        ["ps", "missing.elf"],  # a relative path, in the caller's directory
        ["show", "."],  # the caller's directory is the command's
        ["diff", ".", "."],
    ],
)
def test_a_command_through_the_service_says_and_returns_what_it_does_on_its_own(service, tmp_path, args):
    _, path = service
    alone = _command(args, None, tmp_path)
    handed = _command(args, str(path), tmp_path)
    assert (handed.returncode, handed.stdout, handed.stderr) == (alone.returncode, alone.stdout, alone.stderr)


def test_files_a_command_writes_are_the_callers_in_its_directory_with_its_umask(service, tmp_path):
    _, path = service
    work = tmp_path / "work"
    work.mkdir()
    pages = {0: b"page" * 1024, 1: bytes(4096)}
    build_kdump(work / "a.kdump", (16, {0: True, 1: True}, pages), "zlib", flattened=False)
    for umask in (0o077, 0o022):
        old = os.umask(umask)
        try:
            handed = _command(["convert", "a.kdump", f"handed-{umask:o}.elf"], str(path), work)
            alone = _command(["convert", "a.kdump", f"alone-{umask:o}.elf"], None, work)
        finally:
            os.umask(old)
        said = handed.stderr.replace("handed-", "alone-")
        assert (handed.returncode, handed.stdout, said) == (alone.returncode, alone.stdout, alone.stderr)
        assert handed.returncode == 0, handed.stderr
        made, reference = work / f"handed-{umask:o}.elf", work / f"alone-{umask:o}.elf"
        assert made.read_bytes() == reference.read_bytes()
        assert stat.S_IMODE(made.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode) == 0o666 & ~umask


def test_the_environment_is_the_callers_and_not_the_services(service, tmp_path):
    """COLUMNS decides how click wraps help: the caller's, whatever the service started with."""
    _, path = service
    said = {}
    for columns in ("50", "150"):
        for handed in (True, False):
            env = {**os.environ, "COLUMNS": columns}
            env.pop(SERVICE_ENV, None)
            if handed:
                env[SERVICE_ENV] = str(path)
            run = subprocess.run([OVM, "dump", "--help"], capture_output=True, text=True, env=env, timeout=60)
            assert run.returncode == 0, run.stderr
            said[columns, handed] = run.stdout
        assert said[columns, True] == said[columns, False]
    assert said["50", True] != said["150", True]


def test_the_socket_is_the_owners_alone(service):
    _, path = service
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def _blocked_dump(path: Path, tmp_path: Path, ctrl_c=signal.SIG_DFL) -> tuple[subprocess.Popen, socket.socket]:
    """A live dump handed to the service, waiting for a QMP greeting that never comes; its
    caller's SIGINT disposition `ctrl_c` (set either way: a test run started in the background,
    as CI's, ignores SIGINT, and its children inherit that)."""
    qmp = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    qmp.bind(str(tmp_path / "qmp.sock"))
    qmp.listen()
    env = {**os.environ, SERVICE_ENV: str(path)}
    args = [OVM, "dump", "--live", "--qmp", str(tmp_path / "qmp.sock"), "--pid", "1", "-D", str(tmp_path / "out")]
    caller = subprocess.Popen(
        args,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, ctrl_c),
    )
    qmp.settimeout(30)
    greeted_never, _ = qmp.accept()  # kept open, silent
    qmp.close()
    return caller, greeted_never


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_caller_interrupts_the_command_in_the_service(service, tmp_path, sig):
    proc, path = service
    caller, qmp = _blocked_dump(path, tmp_path)
    time.sleep(0.5)
    assert _descendants(proc.pid), "the command runs in the service"
    caller.send_signal(sig)
    assert caller.wait(timeout=30) == 130
    assert caller.stderr.read().strip().splitlines()[-1] == "ovm-offline: interrupted"
    assert not (tmp_path / "out").exists()
    qmp.close()
    _until_no_descendants(proc.pid)


def _until_no_descendants(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _descendants(pid):
        assert time.monotonic() < deadline, f"the service still runs {_descendants(pid)}"
        time.sleep(0.05)


def test_a_caller_killed_outright_has_its_command_interrupted(service, tmp_path):
    proc, path = service
    caller, qmp = _blocked_dump(path, tmp_path)
    time.sleep(0.5)
    caller.kill()
    caller.wait(timeout=10)
    _until_no_descendants(proc.pid)
    assert not (tmp_path / "out").exists()
    qmp.close()


def test_without_a_service_answering_the_command_runs_on_its_own(tmp_path):
    for where in (tmp_path / "none.sock", tmp_path):  # no socket; a directory
        handed = _command(["--version"], str(where), tmp_path)
        assert handed.returncode == 0 and "version" in handed.stdout, handed.stderr


def test_a_socket_another_uid_listens_on_gets_nothing(tmp_path):
    """Someone else's socket where ours was expected: refused by name, before anything of ours
    (argv, environment, descriptors) is sent."""
    nobody = pwd.getpwnam("nobody").pw_uid
    if os.getuid() == nobody:
        pytest.skip("runs as nobody itself")
    if os.getuid() != 0:
        pytest.skip("making a listener of another uid needs root")
    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # a directory nobody can reach (tmp_path's parents are root's)
    shared.chmod(0o777)
    sock = shared / "theirs.sock"
    listener = subprocess.Popen(
        [
            "/usr/bin/python3",  # one that nobody may run (this venv's may be under /root)
            "-c",
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print('ready', flush=True)\n"
            "c, _ = s.accept(); c.settimeout(5); n = 0\n"
            "try:\n"
            "    while (d := c.recv(65536)): n += len(d)\n"
            "except OSError: pass\n"
            "print(n, flush=True)\n",
            str(sock),
        ],
        stdout=subprocess.PIPE,
        text=True,
        user=nobody,
    )
    assert listener.stdout.readline().strip() == "ready"
    sock.chmod(0o777)
    handed = _command(["--version"], str(sock), tmp_path)
    assert handed.returncode == 1 and handed.stdout == ""
    assert handed.stderr == f"ovm-offline: the service at {sock} runs as uid {nobody}, not as you (uid 0): not used\n"
    assert listener.stdout.readline().strip() == "0"
    listener.wait(timeout=10)
    shutil.rmtree(shared)


def test_a_second_service_at_the_same_socket_is_refused_and_a_stale_socket_replaced(service, tmp_path):
    _, path = service
    second = _command(["service", str(path)], None, tmp_path)
    assert second.returncode == 6 and second.stderr == f"ovm-offline: a service already answers at {path}\n"
    stale = tmp_path / "stale.sock"
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(stale))
    leftover.close()  # a socket file no one answers at: a service that was killed
    proc = subprocess.Popen([OVM, "service", str(stale)], stderr=subprocess.PIPE, text=True)
    try:
        assert "serving commands at" in proc.stderr.readline()
        assert _command(["--version"], str(stale), tmp_path).returncode == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    not_a_socket = tmp_path / "file"
    not_a_socket.write_text("")
    refused = _command(["service", str(not_a_socket)], None, tmp_path)
    assert refused.returncode == 6 and refused.stderr == f"ovm-offline: {not_a_socket} exists and is not a socket\n"


@pytest.mark.guest
def test_a_dump_through_the_service_writes_the_images_a_dump_on_its_own_writes(recording, service, tmp_path):
    _, path = service
    rec = recording("6.1", "counter")
    pid = str(rec.manifest["root_pid"])
    said = {}
    for name, through in (("handed", str(path)), ("alone", None)):
        run = _command(["dump", str(rec.elf), "--pid", pid, "-D", name], through, tmp_path)
        assert run.returncode == 0, run.stderr
        said[name] = re.sub(r"in [\d.]+ s", "in T s", run.stderr.replace(name, "IMAGES"))
    assert said["handed"] == said["alone"]
    assert tree_digest(tmp_path / "handed") == tree_digest(tmp_path / "alone")


@pytest.mark.guest
@pytest.mark.slow
def test_a_live_dump_through_the_service_restores(service, tmp_path):
    """The race's case: a running guest dumped by a command the service ran, restored in a
    fresh guest with the workload's checks passing."""
    _, path = service
    kernel, workload = "6.1", "spinners"
    skip_unless_live(kernel, workload)
    images = tmp_path / "images"

    def dump_live(guest, root):
        args = ["dump", "--live", "--qmp", str(guest.qmp_tool_path), "--pid", str(root), "-D", str(images)]
        result = _command([*args, "--attempts", str(MOMENTS)], str(path), tmp_path)
        assert result.returncode == 0, result.stderr
        assert f"dumped pid {root}" in result.stderr

    rec = record_with_live_dump(kernel, workload, tmp_path / "rec", dump_live, log=lambda m: None)
    result = restore(rec, images, log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"


@given(
    st.lists(st.binary().filter(lambda b: b"\0" not in b), min_size=1, max_size=5),
    st.dictionaries(
        st.binary(min_size=1).filter(lambda b: b"\0" not in b and b"=" not in b),
        st.binary().filter(lambda b: b"\0" not in b),
        max_size=5,
    ),
    st.integers(0, 0o777),
)
def test_a_request_decodes_to_what_was_encoded(argv, env, umask):
    """Arguments and environment as the bytes they are, UTF-8 or not."""
    args = [os.fsdecode(arg) for arg in argv]
    encoded = encode_request(args, env, umask)
    assert struct.unpack("!I", encoded[:4])[0] == len(encoded) - 4
    assert decode_request(encoded[4:]) == Request(args, env, umask)


@pytest.mark.parametrize(
    "body", [b"", b"18", b"x\x001\x00a", b"18\x002\x00a", b"18\x001\x00a\x00NOEQUALS", b"1000\x000"]
)
def test_a_malformed_request_is_none(body):
    assert decode_request(body) is None


def test_a_name_that_is_not_utf8_reaches_the_command_as_it_is(service, tmp_path):
    _, path = service
    odd = os.fsdecode(b"images-\xff")
    (tmp_path / odd).mkdir()
    handed = _command(["show", odd], str(path), tmp_path)
    alone = _command(["show", odd], None, tmp_path)
    assert (handed.returncode, handed.stdout, handed.stderr) == (alone.returncode, alone.stdout, alone.stderr)


def test_a_ctrl_c_the_caller_ignores_is_ignored_as_the_command_alone_ignores_it(service, tmp_path):
    proc, path = service
    caller, greeted_never = _blocked_dump(path, tmp_path, ctrl_c=signal.SIG_IGN)
    time.sleep(0.5)
    caller.send_signal(signal.SIGINT)
    time.sleep(1)
    assert caller.poll() is None and _descendants(proc.pid), "the ignored Ctrl-C ended the command"
    caller.send_signal(signal.SIGTERM)
    assert caller.wait(timeout=30) == 130
    greeted_never.close()
    _until_no_descendants(proc.pid)
