"""Issue 34's host-side holes, each closed: what is printed is printable, every output error
is one line, no special file is replaced, every input is bounded, and a segment that shadows
RAM is named rather than read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from ovm_offline.criu.images import PAGES
from ovm_offline.criu.show import render, show_dir
from ovm_offline.errors import OutputError, OutputExistsError, SourceError, SymbolError
from ovm_offline.kernel.core.isf_cache import MAX_ISF_BYTES, find_isf_files
from ovm_offline.kernel.core.symbols import _parse_isf
from ovm_offline.output import atomic_directory, atomic_file
from ovm_offline.sources.elf import ElfSource
from ovm_offline.sources.elf_writer import core_layout
from ovm_offline.sources.kdump_format import FLAT_HEADER, FLAT_HEADER_SIZE, FLAT_RECORD, FLAT_TYPE, FLAT_VERSION
from ovm_offline.sources.live import RecordedLiveSource
from ovm_offline.terminal import escaped_unprintable, printable, printable_lines, say
from tests.support.checks import assert_one_line_failure

BIDI_AND_CONTROLS = "evil\u202egpj.exe\u2066x\u2069\x85\x9b\x1b[2J"


def test_bidi_format_and_c1_characters_never_reach_a_terminal():
    assert printable(BIDI_AND_CONTROLS) == "evil?gpj.exe?x????[2J"
    assert printable_lines("a\u202eb\nc") == "a?b\nc"
    assert printable("kworker/0:1 ünï") == "kworker/0:1 ünï"


def test_show_escapes_what_json_leaves_raw_and_stays_the_same_json():
    text = render({"comm": BIDI_AND_CONTROLS, "name": "ü", "wide": "\U000e0001"})
    assert text.isprintable() and "ü" in text
    assert json.loads(text) == {"comm": BIDI_AND_CONTROLS, "name": "ü", "wide": "\U000e0001"}
    assert escaped_unprintable('"plain"') == '"plain"'


def test_standard_output_on_a_full_device_is_one_error(monkeypatch):
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        with pytest.raises(OutputError, match="^cannot write standard output: No space left on device$"):
            say("x" * 100_000)


def test_show_to_a_full_device_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "pages-1.img").write_bytes(bytes(4096))
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "ovm_offline", "show", str(tmp_path)], stdout=full, stderr=subprocess.PIPE, text=True
        )
    result.stdout = ""
    assert_one_line_failure(result, "cannot write standard output: No space left on device")
    assert result.returncode == 1


def test_show_with_standard_output_closed_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "pages-1.img").write_bytes(bytes(4096))
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "show", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
    )
    assert_one_line_failure(result, "cannot write standard output: it is closed")
    assert result.returncode == 1


def test_show_into_a_pipe_whose_reader_left_ends_quietly_with_0(tmp_path):
    """`ovm-offline show DIR | head`: not an error of ours (click alone would exit 1)."""
    (tmp_path / "pages-1.img").write_bytes(bytes(4096))
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "ovm_offline", "show", str(tmp_path)],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("where", ["/proc/ovm-images", "/proc/self/ovm-images", "/sys/ovm-images"])
def test_an_images_directory_where_none_can_be_made_is_one_error(where):
    with pytest.raises(OutputError, match="cannot write .*; nothing was written$"):
        with atomic_directory(where):
            pass


def test_an_images_directory_in_a_directory_not_writable_is_one_error(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    os.chmod(parent, 0o555)
    if os.access(parent, os.W_OK):  # root ignores modes; an immutable directory stops root
        if subprocess.run(["chattr", "+i", str(parent)], capture_output=True).returncode:
            pytest.skip("cannot make a directory no one may write")
    try:
        with pytest.raises(OutputError, match=f"{parent}/out: cannot write {parent}: .*; nothing was written$"):
            with atomic_directory(parent / "out"):
                pass
    finally:
        subprocess.run(["chattr", "-i", str(parent)], capture_output=True)
        os.chmod(parent, 0o755)


def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(path.parent / "elsewhere")
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "socket"])
def test_an_output_file_never_replaces_what_is_not_a_regular_file(tmp_path, kind):
    target = tmp_path / "out.elf"
    _special(kind, target)
    with pytest.raises(OutputExistsError, match="never replaced"):
        with atomic_file(target, force=True) as out:
            out.write(b"x")
    assert [p.name for p in tmp_path.iterdir()] == ["out.elf"]  # no partial file left either
    assert target.is_symlink() or not target.is_file()


def test_convert_onto_a_fifo_is_refused_with_force_before_reading(tmp_path):
    os.mkfifo(tmp_path / "out.elf")
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "convert", "/nonexistent.kdump", str(tmp_path / "out.elf"), "--force"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_line_failure(result, "exists and is a FIFO; it is never replaced")


def test_an_output_file_is_whole_or_absent_and_a_killed_runs_file_is_removed_by_the_next(tmp_path):
    target = tmp_path / "out.elf"
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".out.elf.partial-{dead.pid}-abc123"
    left.write_bytes(b"half")
    alive = tmp_path / f".out.elf.partial-{os.getpid()}-def456"
    alive.write_bytes(b"writing")
    with pytest.raises(RuntimeError):
        with atomic_file(target) as out:
            out.write(b"half")
            raise RuntimeError("stopped")
    assert not target.exists() and not left.exists() and alive.exists()
    with atomic_file(target) as out:
        out.write(b"whole")
    assert target.read_bytes() == b"whole"
    with pytest.raises(OutputExistsError, match="pass --force"):
        with atomic_file(target):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.elf", alive.name])


def _live_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "live"
    directory.mkdir()
    (directory / "guest-ram").write_bytes(bytes(4096))
    (directory / "mtree.txt").write_text("")
    (directory / "registers.txt").write_text("")
    return directory


@pytest.mark.parametrize("name", ["mtree.txt", "registers.txt"])
@pytest.mark.parametrize(
    "kind, said",
    [("fifo", "is a FIFO"), ("device", "is a character device"), ("huge", "is 68719476736 bytes, more than 16 MiB")],
)
def test_a_recorded_live_directorys_text_is_read_only_from_a_sane_regular_file(tmp_path, name, kind, said):
    directory = _live_dir(tmp_path)
    (directory / name).unlink()
    if kind == "fifo":
        os.mkfifo(directory / name)
    elif kind == "device":
        (directory / name).symlink_to("/dev/zero")
    else:
        with open(directory / name, "wb") as f:
            f.truncate(64 << 30)
    with pytest.raises(SourceError, match=f"{name}: {said}"):
        RecordedLiveSource(directory)


def test_an_isf_nested_deeper_than_json_parses_is_refused_by_name(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(SymbolError, match="nests JSON deeper than any ISF does"):
        _parse_isf(deep)


def test_a_symbols_file_larger_than_any_isf_is_ignored_unread(tmp_path, caplog):
    with open(tmp_path / "big.json", "wb") as f:
        f.truncate(MAX_ISF_BYTES + 1)  # sparse: hashing it would read it all
    (tmp_path / "small.json").write_text("{}")
    found = find_isf_files([tmp_path], include_default=False)
    assert [p.name for p in found] == ["small.json"]
    assert "big.json is larger than 512 MiB: not an ISF; ignored" in caplog.text


def test_a_flattened_header_before_gigabytes_of_sparse_zeros_is_refused_at_once(tmp_path):
    flat = tmp_path / "zeros.kdump"
    with open(flat, "wb") as f:
        f.write(FLAT_HEADER.pack(b"makedumpfile", FLAT_TYPE, FLAT_VERSION).ljust(FLAT_HEADER_SIZE, b"\0"))
        f.write(FLAT_RECORD.pack(0, 0) * 4)  # a few empty records as data, then 64 GiB of holes
        f.truncate(64 << 30)
    result = subprocess.run(
        [sys.executable, "-m", "ovm_offline", "ps", str(flat)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OVM_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert_one_line_failure(result, "flattened stream ends without its end marker")


def test_show_sums_a_sparse_pages_image_in_bounded_memory(tmp_path):
    with open(tmp_path / "pages-1.img", "wb") as f:
        f.truncate(256 << 20)
    tracemalloc.start()
    try:
        text = show_dir(str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f'"pages": {(256 << 20) // 4096}' in text and PAGES.name in text
    assert peak < 8 << 20, peak


def _elf(path: Path, segments: list[tuple[int, bytes]]) -> None:
    layout = core_layout(b"", [(start, len(data)) for start, data in segments])
    with open(path, "wb") as f:
        f.write(layout.header)
        for (_, data), offset in zip(segments, layout.segment_offsets):
            f.seek(offset)
            f.write(data)


def test_pt_loads_that_give_one_address_two_contents_are_refused(tmp_path):
    ram = os.urandom(3 << 20)
    _elf(tmp_path / "same.elf", [(0, ram), (1 << 20, ram[1 << 20 : 2 << 20])])
    with ElfSource(tmp_path / "same.elf") as source:  # the same memory twice, as vmcores show it
        assert source.read(0, len(ram)) == ram
    _elf(tmp_path / "shadow.elf", [(0, ram), (1 << 20, bytes(1 << 20))])
    with pytest.raises(SourceError, match=r"PT_LOAD #\d and #\d both hold guest-physical 0x100000 .* different bytes"):
        ElfSource(tmp_path / "shadow.elf")
