"""Shared fixtures, and the rules the markers keep. Guest recordings come from the corpus
recorder (cached by their inputs, recorded on first use), never from mocks; helpers that are
no fixtures live in tests/support."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from corpus import matrix, recorder
from tests.support.cli import dump_from, dump_or_moment
from tests.support.corpus_cases import GOLDEN_CASES, skip_outside_subset

# Guests under TCG and parallel recordings load the 2 cores: timing is no property of a parser.
settings.register_profile("ovm", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ovm")

#: Per-test time limits in seconds (pytest-timeout), for tests that set none themselves.
#: pyproject's `timeout` holds for tests without a guest. A guest test may record what it
#: reads on first use (boot, workload, criu dump under TCG: minutes on a loaded machine);
#: a slow one also boots a guest of its own (criu restore, a live guest).
GUEST_TIMEOUT = 1800
SLOW_TIMEOUT = 3600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        guest = item.get_closest_marker("guest") is not None
        slow = item.get_closest_marker("slow") is not None
        if "recording" in getattr(item, "fixturenames", ()) and not guest:
            raise pytest.UsageError(f"{item.nodeid} reads a recorded guest (fixture 'recording'): mark it guest")
        if slow and not guest:
            raise pytest.UsageError(f"{item.nodeid} is marked slow (it boots a guest): mark it guest too")
        if guest and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT if slow else GUEST_TIMEOUT))


@pytest.fixture(scope="session")
def recording():
    """recording(kernel, workload, take=0) -> corpus.recorder.Recording, recorded once per
    session unless the cache already has it (takes: the recordings of an as-is workload)."""
    made: dict[tuple[str, str, int], recorder.Recording] = {}

    def get(kernel: str, workload: str, take: int = 0) -> recorder.Recording:
        key = (kernel, workload, take)
        skip_outside_subset(kernel, workload, take)
        if key not in made:
            made[key] = recorder.record(kernel, workload, log=lambda m: print(m, file=sys.stderr), take=take)
        return made[key]

    return get


@pytest.fixture
def golden(request, recording):
    """The golden images dir of the case named by indirect parametrization ("6.1-counter")."""
    kernel, workload = matrix.case_parts(request.param)
    return recording(kernel, workload).golden


@pytest.fixture
def golden_of(recording):
    """golden_of(workload) -> the golden images dir of that workload on 6.1."""
    return lambda workload: recording("6.1", workload).golden


@pytest.fixture
def all_golden(recording):
    """Every standard golden images dir (recording any that is missing)."""
    return [recording(*matrix.case_parts(case)).golden for case in GOLDEN_CASES]


@pytest.fixture(scope="session")
def dumped(recording, tmp_path_factory):
    """dumped(kernel, workload, take=0) -> our images of the workload's root from its ELF dump
    (once), with the vCPU state captured with it for an as-is recording (threads on a vCPU);
    for an as-is recording, the checked MomentRefused when the recorder's random pause caught
    a thread mid-way (tests of a moment accept that as its outcome)."""
    made: dict[tuple[str, str, int], object] = {}

    def get(kernel: str, workload: str, take: int = 0):
        if (kernel, workload, take) not in made:
            rec = recording(kernel, workload, take)
            out = tmp_path_factory.mktemp(f"{kernel}-{workload}-{take}") / "images"
            if rec.manifest.get("moment") == "as-is":
                made[(kernel, workload, take)] = dump_or_moment(rec, out)
            else:
                made[(kernel, workload, take)] = dump_from(rec.elf, rec.manifest["root_pid"], out)
        return made[(kernel, workload, take)]

    return get


@pytest.fixture
def ram_on_tmpfs():
    """Guest RAM on /dev/shm: a background snapshot write-protects tmpfs memory only."""
    ram_dir = Path(tempfile.mkdtemp(prefix="ovm-test-ram-", dir="/dev/shm"))
    yield ram_dir
    shutil.rmtree(ram_dir, ignore_errors=True)
