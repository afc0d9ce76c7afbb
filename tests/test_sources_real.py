"""Real QEMU dumps: the ELF and kdump-zlib files of one guest recorded at the same moment must give
the same bytes for every page, the same vCPUs and the same VMCOREINFO — through every source,
through re-encoded lzo/snappy/raw and plain-layout variants, and through the kdump -> ELF
converter; Volatility 3 must read the kdump (our layer) and the converted ELF like the original.

Samples: the corpus recordings of the counter guest on both kernels (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ovm_offline.sources import ElfSource, KdumpSource, RecordedLiveSource, open_source
from ovm_offline.sources.convert import kdump_to_elf
from tests.support.kdump_writer import reencode, unflatten
from tests.support.volatility import vol_command

pytestmark = pytest.mark.guest

PAGE = 4096
CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class SampleDump:
    name: str
    elf: Path
    kdump: Path
    live: Path | None  # a recorded live snapshot directory, if the recorder made one


@pytest.fixture(scope="session")
def sample_dumps(recording) -> list[SampleDump]:
    """The corpus's counter guest on both kernels: ELF, kdump-zlib and live snapshot of one moment."""
    samples = []
    for kernel in ("6.1", "6.12"):
        rec = recording(kernel, "counter")
        samples.append(SampleDump(kernel, rec.elf, rec.kdumps["kdump-zlib"], rec.live_dir))
    return samples


class HashSink:
    """A write()-only sink keeping one digest per MiB of output (to say where bytes differ)."""

    def __init__(self) -> None:
        self.digests: list[bytes] = []
        self._hash = hashlib.sha1()
        self._filled = 0
        self.size = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        while len(view):
            take = min(len(view), CHUNK - self._filled)
            self._hash.update(view[:take])
            self._filled += take
            self.size += take
            view = view[take:]
            if self._filled == CHUNK:
                self._roll()
        return len(data)

    def _roll(self) -> None:
        self.digests.append(self._hash.digest())
        self._hash = hashlib.sha1()
        self._filled = 0

    def finish(self) -> list[bytes]:
        if self._filled:
            self._roll()
        return self.digests


def digest_runs(source) -> dict[int, list[bytes]]:
    """Per run start: the per-MiB digests of the run's bytes, read through copy_to."""
    result = {}
    for run in source.runs():
        sink = HashSink()
        source.copy_to(run.start, run.length, sink)
        assert sink.size == run.length
        result[run.start] = sink.finish()
    return result


def assert_same_memory(expected: dict[int, list[bytes]], got: dict[int, list[bytes]], what: str) -> None:
    assert sorted(got) == sorted(expected), f"{what}: different runs"
    for start, digests in expected.items():
        if got[start] != digests:
            first = next(i for i, (a, b) in enumerate(zip(digests, got[start])) if a != b)
            pytest.fail(f"{what}: bytes differ in the MiB at guest-physical {start + first * CHUNK:#x}")


@pytest.fixture(scope="session")
def reference(sample_dumps) -> dict[str, dict[int, list[bytes]]]:
    """Each sample's memory digests as the QEMU ELF gives them."""
    refs = {}
    for sample in sample_dumps:
        with ElfSource(sample.elf) as elf:
            refs[sample.name] = digest_runs(elf)
    return refs


VARIANTS = [
    "kdump-zlib flattened (QEMU)",
    "kdump-zlib plain (unflattened)",
    "kdump-lzo flattened",
    "kdump-snappy flattened",
    "kdump-raw plain",
    "kdump-lzo plain",
    "ELF converted from kdump",
]


@pytest.fixture(scope="session")
def variants(sample_dumps, tmp_path_factory):
    """Every sample's kdump in every form we can make from it (removed afterwards: ~300 MB each)."""
    made: dict[str, dict[str, Path]] = {}
    dirs = []
    for sample in sample_dumps:
        out = tmp_path_factory.mktemp(f"variants-{sample.name}")
        dirs.append(out)
        forms = {VARIANTS[0]: sample.kdump}
        unflatten(sample.kdump, out / "zlib.plain")
        forms[VARIANTS[1]] = out / "zlib.plain"
        with KdumpSource(sample.kdump) as kd:
            for name, compression, flattened in [
                (VARIANTS[2], "lzo", True),
                (VARIANTS[3], "snappy", True),
                (VARIANTS[4], "raw", False),
                (VARIANTS[5], "lzo", False),
            ]:
                path = out / name.replace(" ", "-")
                reencode(kd, path, compression, flattened)
                forms[name] = path
        kdump_to_elf(sample.kdump, out / "converted.elf")
        forms[VARIANTS[6]] = out / "converted.elf"
        made[sample.name] = forms
    yield made
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)


# ==== headers and notes ==========================================================================
def test_vcpus_and_vmcoreinfo_agree(sample_dumps):
    for sample in sample_dumps:
        with open_source(sample.elf) as elf, open_source(sample.kdump) as kd:
            assert elf.format_name == "ELF core" and kd.format_name == "kdump-zlib (flattened)"
            assert elf.vcpus() == kd.vcpus() and len(elf.vcpus()) >= 1
            for vcpu in elf.vcpus():
                assert vcpu.cr3 is not None and vcpu.cr3 & 0xFFF == 0 and vcpu.cr3 < 1 << 52  # no PCID in use here
                assert vcpu.cr4 is not None and vcpu.cr4 & (1 << 5)  # PAE: long mode paging
                assert vcpu.gs_base is not None and vcpu.gs_base >> 47 == 0x1FFFF  # per-CPU area, kernel half
                assert vcpu.kernel_gs_base is not None  # QEMU 7.2 writes the 440-byte CPU state
            info = elf.vmcoreinfo()
            assert info == kd.vmcoreinfo()
            assert info["OSRELEASE"] and int(info["KERNELOFFSET"], 16) % (2 << 20) == 0
            assert int(info["SYMBOL(swapper_pg_dir)"], 16) >> 47 == 0x1FFFF
            assert elf.note_bytes() == kd.note_bytes()
            assert kd.header.nr_cpus == len(kd.vcpus())


def test_pt_loads_are_the_kdump_runs(sample_dumps):
    for sample in sample_dumps:
        with ElfSource(sample.elf) as elf, KdumpSource(sample.kdump) as kd:
            assert elf.runs() == kd.runs()
            loads = [(p.p_paddr, p.p_memsz) for p in elf.program_headers if p.p_type == 1]
            assert [(r.start, r.length) for r in elf.runs()] == loads  # QEMU's PT_LOADs never touch
            assert all(p.p_vaddr == p.p_paddr for p in elf.program_headers if p.p_type == 1)


# ==== bytes ======================================================================================
def test_elf_sendfile_path_matches_mmap_path(sample_dumps, reference, tmp_path):
    sample = sample_dumps[0]
    with ElfSource(sample.elf) as elf:
        run = max(elf.runs(), key=lambda r: r.length)
        with open(tmp_path / "copy", "wb") as out:
            elf.copy_to(run.start, run.length, out)
        sink = HashSink()
        with open(tmp_path / "copy", "rb") as f:
            while chunk := f.read(8 << 20):
                sink.write(chunk)
        (tmp_path / "copy").unlink()
        assert sink.finish() == reference[sample.name][run.start]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_form_gives_the_same_bytes(sample_dumps, reference, variants, variant):
    for sample in sample_dumps:
        path = variants[sample.name][variant]
        with open_source(path) as src, ElfSource(sample.elf) as elf:
            assert src.vcpus() == elf.vcpus()
            assert src.vmcoreinfo() == elf.vmcoreinfo()
            assert_same_memory(reference[sample.name], digest_runs(src), f"{sample.name} {variant}")
            # random reads too, unaligned and across pages
            for run in src.runs():
                for addr in (run.start, run.start + run.length // 3 + 123, run.start + run.length - 5000):
                    addr = max(addr, run.start)
                    size = min(9000, run.start + run.length - addr)
                    assert src.read(addr, size) == elf.read(addr, size), f"{variant} at {addr:#x}"


def test_recorded_live_snapshot_matches_elf(sample_dumps):
    live = [s for s in sample_dumps if s.live is not None]
    if not live:
        pytest.skip("no recorded live snapshot (live/guest-ram) among the samples")
    for sample in live:
        with RecordedLiveSource(sample.live) as src, ElfSource(sample.elf) as elf:
            assert [v.cr3 for v in src.vcpus()] == [v.cr3 for v in elf.vcpus()]
            assert [v.cr4 for v in src.vcpus()] == [v.cr4 for v in elf.vcpus()]
            for run in src.runs():
                for start in range(run.start, run.start + run.length, 64 << 20):
                    size = min(64 << 20, run.start + run.length - start)
                    assert src.read(start, size) == elf.read(start, size), f"{sample.name} at {start:#x}"
            if elf.vmcoreinfo() is not None:
                assert src.vmcoreinfo() == elf.vmcoreinfo()


# ==== Volatility 3 ===============================================================================
def _symbols_dir() -> Path | None:
    for candidate in (
        os.environ.get("OVM_SYMBOLS_DIR"),
        Path(__file__).parent.parent / "symbols",
        "/work/shared/symbols",
    ):
        if candidate and list(Path(candidate).glob("linux/*.json*")):
            return Path(candidate)
    return None


def _pslist(dump: Path, plugin_dir: Path, symbols: Path) -> list[tuple]:
    argv = vol_command()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        argv + ["-q", "-r", "json", "-p", str(plugin_dir), "-s", str(symbols), "-f", str(dump), "linux.pslist"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)
    return sorted((r["PID"], r["PPID"], r["COMM"]) for r in rows)


def test_volatility_reads_kdump_and_converted_elf(sample_dumps, variants, tmp_path):
    symbols = _symbols_dir()
    if symbols is None:
        pytest.skip("no Linux ISF symbol files")
    # what the project's Volatility plugins do: import the layer module
    (tmp_path / "ovm_glue.py").write_text("import ovm_offline.volatility.layers  # noqa: F401\n")
    for i, sample in enumerate(sample_dumps):
        expected = _pslist(sample.elf, tmp_path, symbols)
        assert len(expected) > 10 and any(comm == "swapper/0" or pid == 1 for pid, _, comm in expected)
        forms = [sample.kdump, variants[sample.name][VARIANTS[6]]]
        if i == 0:
            forms.append(variants[sample.name][VARIANTS[5]])  # plain layout, lzo
        for form in forms:
            assert _pslist(form, tmp_path, symbols) == expected, form


_PEAK_RSS_OF_A_WHOLE_READ = """
import os, sys
from ovm_offline.sources import open_source
def status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from here
before = status("VmRSS:")
with open_source(sys.argv[1]) as src, open(os.devnull, "wb") as out:
    for run in src.runs():
        src.copy_to(run.start, run.length, out)
print(status("VmHWM:") - before)
"""


def test_reading_a_whole_kdump_does_not_keep_it_resident(recording):
    """Indexing a flattened kdump reads a header on every page of it, and decoding reads every
    compressed page, through an mmap: the reader lets go of those pages as it goes, so the peak
    RSS of a dump does not grow with the dump (a 1 GiB memhog's kdump dump peaked at 1 GiB)."""
    kdump = recording("6.1", "memhog-64").kdumps["kdump-zlib"]
    size = kdump.stat().st_size
    result = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS_OF_A_WHOLE_READ, str(kdump)], capture_output=True, text=True, check=True
    )
    grew = int(result.stdout)
    assert size > 80 << 20, "the kdump is too small to tell a resident file from buffers"
    assert grew < size // 2, f"the peak RSS grew by {grew >> 20} MiB reading a {size >> 20} MiB kdump"
