"""The host comes first: what ovm-offline opens, what it may replace, what it leaves behind
when stopped, and what guest-chosen text it prints to a terminal."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ovm_offline.errors import ExitCode
from ovm_offline.output import atomic_directory, remove_abandoned_partials
from ovm_offline.sources.elf_writer import core_layout
from ovm_offline.terminal import printable
from tests.support.checks import assert_one_line_failure
from tests.support.cli import dump_from, ovm, tree_digest


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [["ps"], ["dump", "--pid", "1", "-D", "out"], ["convert"]])
def test_a_fifo_or_device_given_as_the_dump_is_refused_before_reading(fifo, tmp_path, command):
    """Opening a FIFO waits for a writer forever, /dev/zero never ends: refused by what they are."""
    for source, what in ((fifo, "is a FIFO"), (Path("/dev/zero"), "is a character device")):
        args = [command[0], str(source), *command[1:]] + ([str(tmp_path / "x.elf")] if command == ["convert"] else [])
        result = ovm(*args, timeout=30)
        assert_one_line_failure(result, str(source), what)
        assert result.returncode == ExitCode.SOURCE


def test_vcpu_state_that_is_a_fifo_is_refused(fifo, tmp_path):
    elf = tmp_path / "tiny.elf"
    elf.write_bytes(b"\x7fELF" + bytes(60))
    result = ovm("ps", str(elf), "--vcpu-state", str(fifo), timeout=30)
    assert result.returncode != 0 and "Traceback" not in result.stderr


def test_show_reads_only_regular_files_inside_the_directory(fifo, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    secret = tmp_path / "secret.img"
    secret.write_bytes(b"not yours")
    (images / "core-1.img").symlink_to(secret)
    os.rename(fifo, images / "pstree.img")
    for name, why in (
        ("core-1.img", "is a symbolic link"),
        ("pstree.img", "is a FIFO"),
        ("../secret.img", "not the name"),
    ):
        result = ovm("show", str(images), name, timeout=30)
        assert_one_line_failure(result, why)
        assert result.returncode == ExitCode.IMAGES
    listing = ovm("show", str(images), timeout=30)
    assert "core-1.img" not in listing.stdout and "not yours" not in listing.stdout


def test_the_images_directory_is_never_a_file_a_device_a_link_or_empty(fifo, tmp_path):
    """Refused before the source is even opened; --force changes none of it."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(real)
    plain = tmp_path / "notes.txt"
    plain.write_text("mine")
    cases = [
        (fifo, "is a FIFO, not a directory"),
        (plain, "is a file, not a directory"),
        (link, "is a symbolic link"),
        (real, "holds 'keep.txt', which is no image file"),
    ]
    for target, why in cases:
        result = ovm("dump", "/no/such.elf", "--pid", "1", "-D", str(target), "--force", timeout=30)
        assert_one_line_failure(result, why)
        assert result.returncode == ExitCode.IMAGES
    assert fifo.exists() and plain.read_text() == "mine" and (real / "keep.txt").read_text() == "mine"
    assert link.is_symlink()
    empty = ovm("dump", "/no/such.elf", "--pid", "1", "-D", "", timeout=30)
    assert empty.returncode == ExitCode.SOURCE and "images directory name is empty" in empty.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link", "notes.txt", "real"]


def test_a_killed_runs_partial_directory_is_removed_by_the_next(tmp_path):
    target = tmp_path / "images"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = tmp_path / f".images.partial-{int(gone.stdout)}-x1y2"
    abandoned.mkdir()
    (abandoned / "core-1.img").write_bytes(b"half")
    alive = tmp_path / f".images.partial-{os.getpid()}-a1b2"  # a run still writing: left alone
    alive.mkdir()
    assert remove_abandoned_partials(target) == [abandoned]
    assert not abandoned.exists() and alive.exists()
    with atomic_directory(target) as tmp:
        assert tmp.name.startswith(f".images.partial-{os.getpid()}-")
        (tmp / "inventory.img").write_bytes(b"x")
    assert (target / "inventory.img").read_bytes() == b"x"


def test_guest_text_reaches_the_terminal_without_control_characters():
    assert printable("a\x1b]0;owned\x07b") == "a?]0;owned?b"
    assert printable("kworker/0:1 ünï") == "kworker/0:1 ünï"
    assert printable("two\nlines") == "two?lines"


def digest(path: Path) -> object:
    return tree_digest(path) if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.guest
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT], ids=lambda s: s.name)
def test_an_interrupting_signal_removes_partial_output(recording, tmp_path, signum):
    """SIGTERM, SIGHUP (the terminal closed) or SIGQUIT at any moment of a dump or a
    conversion: the whole output or nothing, never a partial directory or a partial ELF (and
    the command says it was interrupted)."""
    rec = recording("6.1", "memhog-64")
    kdump = rec.kdumps["kdump-zlib"]
    commands = {
        "dump": ["dump", str(kdump), "--pid", str(rec.manifest["root_pid"]), "-D", str(tmp_path / "images")],
        "convert": ["convert", str(kdump), str(tmp_path / "out.elf")],
    }
    target = {"dump": tmp_path / "images", "convert": tmp_path / "out.elf"}
    reference = {}
    for name, args in commands.items():
        subprocess.run([sys.executable, "-m", "ovm_offline", *args], check=True, capture_output=True)
        reference[name] = digest(target[name])
        subprocess.run(["rm", "-rf", str(target[name])], check=True)
    for name, args in commands.items():
        interrupted = 0
        for delay in (0.8, 0.5, 0.3, 0.2, 0.15):
            proc = subprocess.Popen([sys.executable, "-m", "ovm_offline", *args], stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)
            assert "Traceback" not in err
            if proc.returncode == 0:
                for p in tmp_path.iterdir():
                    subprocess.run(["rm", "-rf", str(p)], check=True)
                continue
            # 130 once the handler runs; under load the signal may also land before Python has
            # installed it (killed by SIGTERM; once, not understood, the exit was by SIGINT
            # after "interrupted"): whatever the exit, nothing may be left
            assert proc.returncode in (ExitCode.INTERRUPTED, -signum, -signal.SIGINT), err
            interrupted += proc.returncode == ExitCode.INTERRUPTED
            left = list(tmp_path.iterdir())
            # all or nothing: a signal after the rename into place leaves the whole output
            assert left == [] or (left == [target[name]] and digest(target[name]) == reference[name]), left
            for p in left:
                subprocess.run(["rm", "-rf", str(p)], check=True)
        assert interrupted, f"{name} always finished before {signum.name}; shorten the delays"
    dump_from(rec.elf, rec.manifest["root_pid"], tmp_path / "after")


def _proc(pid: int, ppid: int, comm: str = "x"):
    from ovm_offline.inventory import ProcessInfo
    from ovm_offline.kernel.ns.nsproxy import NamespaceInodes

    return ProcessInfo(
        pid=pid, tgid=pid, ppid=ppid, nthreads=1, comm=comm, state="S", uid=0, euid=0, gid=0, egid=0,
        pgid=pid, sid=pid, ns_pid=pid, pidns_inum=None, pidns_level=None, namespaces=NamespaceInodes(),
        cgroup="/", container=None, kthread=False, task_address=0,
    )  # fmt: skip


def test_ps_tree_shows_every_process_when_parents_loop_or_nest_deep(capsys):
    """A guest can make parent chains loop (hidden from every root before) or nest deeper
    than Python's recursion limit."""
    from ovm_offline.listing import print_tree

    looped = [_proc(1, 0, "init"), _proc(5, 6, "a"), _proc(6, 5, "b\x1b[2J")]
    print_tree(looped)
    out, err = capsys.readouterr()
    assert [line.split()[-3:-1] for line in out.splitlines()] == [["1", "init"], ["5", "a"], ["6", "b?[2J"]]
    assert "parent chain of PID 5 loops" in err
    deep = [_proc(1, 0)] + [_proc(n, n - 1) for n in range(2, 5002)]
    print_tree(deep)
    out, _ = capsys.readouterr()
    assert len(out.splitlines()) == 5001


def test_a_sparse_dump_declaring_a_terabyte_is_searched_only_where_it_holds_data(tmp_path):
    """A dump without VMCOREINFO is searched for the kernel banner, but a hostile (or merely
    sparse) one may declare a terabyte: its holes are skipped unread, what is read is bounded
    ($OVM_BANNER_SCAN_GIB, default 16), and the error says where the search stopped."""
    layout = core_layout(b"", [(0, 1 << 40)])
    sparse = tmp_path / "sparse.elf"
    with open(sparse, "wb") as f:
        f.write(layout.header)
        f.truncate(layout.total_size)
        for gib in range(0, 1024, 7):  # a block of data here and there, none a banner
            f.seek(layout.segment_offsets[0] + (gib << 30))
            f.write(b"Linux versio")

    def ps(scan_gib: str | None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "OVM_BANNER_SCAN_GIB"}
        if scan_gib is not None:
            env["OVM_BANNER_SCAN_GIB"] = scan_gib
        run = [sys.executable, "-m", "ovm_offline", "ps", str(sparse)]
        return subprocess.run(run, capture_output=True, text=True, timeout=60, env=env)

    result = ps(None)
    assert_one_line_failure(result, "no Linux kernel banner found in guest memory")
    assert result.returncode == ExitCode.SYMBOLS
    result = ps("0")
    assert_one_line_failure(
        result, "no Linux kernel banner in the 0 GiB of guest memory searched (up to guest-physical 0x0 of 1024 GiB)"
    )
    assert "-device vmcoreinfo" in result.stderr and "OVM_BANNER_SCAN_GIB" in result.stderr
    assert result.returncode == ExitCode.SYMBOLS


def test_sigint_in_the_interpreters_start_up_is_told_apart_from_one_in_ours(tmp_path):
    """Python's SIGINT handler raises from its first instruction, before a line of ovm-offline
    can run: a Ctrl-C that early gets the interpreter's own traceback (nothing is written),
    and the fuzzer's signals family counts it as that, never a traceback from our frames. Here
    the start-up is held in a sitecustomize, so the signal lands there every time."""
    from fuzz.signals import interrupted_python_startup, sigint_as_from_a_terminal

    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(2)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = tmp_path / "images"
    child = subprocess.Popen(
        [sys.executable, "-m", "ovm_offline", "dump", "guest.elf", "-t", "1", "-D", str(out)],
        stderr=subprocess.PIPE, text=True, env=env, preexec_fn=sigint_as_from_a_terminal,
    )  # fmt: skip
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=30)
    assert interrupted_python_startup(child.returncode, stderr), stderr
    assert "sitecustomize.py" in stderr and not out.exists()
    ours = 'Traceback (most recent call last):\n  File "/x/ovm_offline/cli.py", line 3, in <module>\nKeyboardInterrupt'
    assert not interrupted_python_startup(1, ours)
    assert not interrupted_python_startup(130, "ovm-offline: interrupted")


@pytest.mark.parametrize(
    ("module", "interruption"),
    [("signal", "KeyboardInterrupt"), ("cli", "RuntimeError('Error calling __set_name__') from KeyboardInterrupt()")],
)
def test_a_signal_while_the_entry_module_imports_is_an_interruption_not_a_traceback(module, interruption):
    """The fuzzer's signals family landed a SIGINT 62 ms into a run, inside `import signal` at
    the top of ovm_offline/__main__.py (the stdlib builds its enums there, milliseconds before
    main() exists): a traceback through a frame of ours. Here that import raises
    KeyboardInterrupt every time; and main()'s import of the CLI raises it as Python 3.11
    does when it lands in a dataclass's __set_name__."""
    script = (
        "import builtins, runpy\n"
        "real = builtins.__import__\n"
        "def interrupting(name, *args, **kwargs):\n"
        f"    if name == {module!r}:\n"
        f"        raise {interruption}\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = interrupting\n"
        "runpy.run_module('ovm_offline', run_name='__main__', alter_sys=True)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == ExitCode.INTERRUPTED
    assert result.stderr == "ovm-offline: interrupted\n"


def test_a_signal_while_an_import_builds_a_dataclass_is_an_interruption_not_an_internal_error():
    """The signals family on 6.12: SIGINT or SIGTERM landing while a lazy import built a dataclass
    ended in exit 70, "internal error: RuntimeError: Error calling __set_name__ on 'Field'
    instance 'children' in '_CgDir'": Python 3.11 wraps the KeyboardInterrupt raised inside
    __set_name__. Here the CLI builds a class whose __set_name__ is interrupted."""
    script = (
        "import ovm_offline.cli as cli\n"
        "class Interrupted:\n"
        "    def __set_name__(self, owner, name):\n"
        "        raise KeyboardInterrupt\n"
        "def building(**kwargs):\n"
        "    class Built:\n"
        "        field = Interrupted()\n"
        "cli.cli = building\n"
        "cli.main()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == ExitCode.INTERRUPTED, result.stderr
    assert result.stderr == "ovm-offline: interrupted\n"
