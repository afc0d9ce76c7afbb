"""`ovm-offline dump`: images from guest memory that `criu restore` continues and that match
`criu dump`'s own, from every source, on both kernels."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from corpus import kernels
from corpus.restore import restore
from ovm_offline.criu import images
from ovm_offline.criu.diff import diff_dirs
from tests.support.checks import assert_one_line_failure
from tests.support.cli import dump_from, ovm, tree_digest
from tests.support.corpus_cases import skip_unless_every_source

KERNELS = list(kernels.KERNELS)
# every standard workload: single processes, threads, process trees with pipes, a container (with a
# UTS namespace of its own too), IPC of every kind the corpus has (FIFOs, UNIX sockets, shared and
# System V memory, eventfd/signalfd/timerfd/epoll), a stopped child with a SIGSTOP pending and POSIX
# timers on every clock, seccomp filters, memfds and namespace files held open, zombies, files with
# no name left (unlinked while open or mapped, a removed cwd), files in flight, a pty's unread bytes
# and a hung-up pty slave, IPv4/IPv6 TCP listeners and UDP sockets, and a
# container runc made (its golden images are `runc checkpoint`'s, restored with `runc restore`),
# with a user namespace, under a seccomp profile like Docker's default, and with TCP connections
# over its loopback
WORKLOADS = [
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
    "ipc",
    "shmem",
    "sysvshm",
    "evfds",
    "sigstate",
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
    "inet",
    "runc",
    "runc-userns",
    "runc-seccomp",
    "runc-inet",
]
CRIT = Path("/usr/bin/crit")
pytestmark = pytest.mark.guest


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_images_match_criu_dump_of_the_same_process(recording, dumped, kernel, workload):
    rec = recording(kernel, workload)
    result = diff_dirs(dumped(kernel, workload), rec.golden)
    assert result.same, result.report()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_source_gives_byte_identical_images(recording, dumped, tmp_path, kernel, workload):
    skip_unless_every_source(kernel, workload)
    rec = recording(kernel, workload)
    reference = tree_digest(dumped(kernel, workload))
    for name, source in {**rec.kdumps, "live": rec.live_dir}.items():
        out = dump_from(source, rec.manifest["root_pid"], tmp_path / name)
        assert tree_digest(out) == reference, f"{name} differs from the ELF dump's images"


@pytest.mark.skipif(not CRIT.exists(), reason="crit (Debian package criu) is not installed")
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_crit_decodes_every_image_we_write(dumped, kernel, workload):
    for path in sorted(dumped(kernel, workload).iterdir()):
        kind = images.kind_for_filename(path.name)
        if kind is None or kind.raw:  # pages, a tar archive: not protobuf images
            continue
        result = subprocess.run([str(CRIT), "decode", "-i", str(path)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"crit decode {path.name}: {result.stderr.strip()[-500:]}"


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_criu_restore_of_our_images_passes_the_workload_check(recording, dumped, kernel, workload):
    rec = recording(kernel, workload)
    result = restore(rec, dumped(kernel, workload), log=lambda m: None)
    assert result.ok, f"{result.detail}\n{result.restore_log[-3000:]}"


def test_refusals_leave_no_output_directory(recording, tmp_path):
    rec = recording("6.1", "counter")
    out = tmp_path / "out"
    assert_one_line_failure(ovm("dump", str(rec.elf), "--pid", "4242", "-D", str(out)), "no process with PID 4242")
    assert not out.exists()
    assert_one_line_failure(ovm("dump", str(rec.elf), "--pid", "2", "-D", str(out)), "kernel thread")
    assert not out.exists()
    # busybox init holds /dev/console: not a terminal ovm-offline can save yet
    assert_one_line_failure(
        ovm("dump", str(rec.elf), "--pid", "1", "-D", str(out)), "PID 1 (init) fd 0: a console terminal"
    )
    assert not out.exists()
    out.mkdir()
    (out / "keep").write_text("x")
    assert_one_line_failure(ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out)), "not empty")
    assert (out / "keep").read_text() == "x"
    assert list(tmp_path.iterdir()) == [out], "a partial directory was left behind"


def test_force_replaces_and_an_empty_directory_is_used(recording, tmp_path):
    rec = recording("6.1", "counter")
    out = tmp_path / "out"
    out.mkdir()
    dump_from(rec.elf, 10000, out)
    first = tree_digest(out)
    (out / "stale.img").write_text("x")
    result = ovm("dump", str(rec.elf), "--pid", "10000", "-D", str(out), "--force")
    assert result.returncode == 0, result.stderr
    assert tree_digest(out) == first


def test_every_unsupported_file_is_named_and_can_be_skipped_explicitly(recording, tmp_path):
    rec = recording("6.1", "counter")
    out = tmp_path / "out"
    refused = ovm("dump", str(rec.elf), "--pid", "1", "-D", str(out))
    assert_one_line_failure(refused, "cannot save")
    assert "PID 1 (init) fd 0" in refused.stderr and "fd 3: a serial terminal (/dev/ttyS1)" in refused.stderr
    assert not out.exists()
    skipped = ovm("dump", str(rec.elf), "--pid", "1", "-D", str(out), "--skip-unsupported")
    assert skipped.returncode == 0, skipped.stderr
    assert "warning: left out PID 1 (init) fd 0: a console terminal" in skipped.stderr
    fdinfo = images.ImageDir(out).get(images.FDINFO, 2)
    assert 0 not in {e.fd for e in fdinfo.entries}


def test_container_option_dumps_the_container_tree(recording, dumped, tmp_path):
    rec = recording("6.12", "container")
    listed = ovm("ps", str(rec.elf), "--json")
    container = next(c for c in (json.loads(line)["container"] for line in listed.stdout.splitlines()) if c)
    out = tmp_path / "images"
    result = ovm("dump", str(rec.elf), "--container", container, "-D", str(out))
    assert result.returncode == 0, result.stderr
    assert tree_digest(out) == tree_digest(dumped("6.12", "container"))
    assert_one_line_failure(
        ovm("dump", str(rec.elf), "--container", "nosuch", "-D", str(tmp_path / "x")), "no container 'nosuch'"
    )


def test_every_refusal_is_decided_before_anything_is_written(recording, tmp_path, monkeypatch):
    """A process that cannot be saved, found last in the tree, still fails the dump before a
    directory is begun, and the error names it together with the refused files met before."""
    from ovm_offline import dump as dump_module
    from ovm_offline.errors import UnsupportedError
    from ovm_offline.kernel import open_kernel
    from ovm_offline.sources import open_source

    rec = recording("6.1", "counter")
    real = dump_module.extract_process
    met: list[int] = []

    def last_one_refused(prog, task, *args):
        met.append(task.pid)
        if task.pid == 10000:  # the workload: the last process of init's tree, depth first
            raise UnsupportedError(f"PID {task.pid} (counter) uses something made up for this test")
        return real(prog, task, *args)

    monkeypatch.setattr(dump_module, "extract_process", last_one_refused)
    out = tmp_path / "out"
    src = open_source(str(rec.elf))
    try:
        prog = open_kernel(src)
        with pytest.raises(UnsupportedError) as refused:
            dump_module.dump(src, prog, 1, out)
    finally:
        src.close()
    message = str(refused.value)
    assert met[-1] == 10000 and len(met) > 1
    assert "\n" not in message
    assert "PID 10000 (counter) uses something made up for this test" in message
    assert "PID 1 (init) fd 0: a console terminal" in message and "--skip-unsupported" in message
    assert list(tmp_path.iterdir()) == [], "a directory or partial output was begun"


@pytest.mark.parametrize("skip_unsupported", [False, True])
def test_a_moment_refused_still_names_the_files_no_moment_would_save(
    recording, tmp_path, monkeypatch, skip_unsupported
):
    """init's threads refused for their moment, its console terminal refused for what it is:
    another moment would not save the terminal, so the refusal is not the moment's alone
    (exit 5, both named), unless the terminal is left out as asked (then exit 8)."""
    from ovm_offline import dump as dump_module
    from ovm_offline.errors import MomentError, UnsupportedError
    from ovm_offline.kernel import open_kernel
    from ovm_offline.sources import open_source

    rec = recording("6.1", "counter")
    real = dump_module.extract_task_common

    def init_caught_mid_way(prog, task, *args):
        if task.pid == 1:
            raise MomentError("thread 1 is inside made_up(): it was running there on vCPU 0")
        return real(prog, task, *args)

    monkeypatch.setattr(dump_module, "extract_task_common", init_caught_mid_way)
    out = tmp_path / "out"
    with open_source(str(rec.elf)) as src:
        with pytest.raises(UnsupportedError) as refused:
            dump_module.dump(src, open_kernel(src), 1, out, skip_unsupported=skip_unsupported)
    message = str(refused.value)
    assert isinstance(refused.value, MomentError) == skip_unsupported, message
    assert "thread 1 is inside made_up()" in message
    assert ("fd 0: a console terminal" in message) != skip_unsupported, message
    assert list(tmp_path.iterdir()) == []
