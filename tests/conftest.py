"""Shared fixtures. Guest recordings come from the corpus recorder (cached by their inputs,
recorded on first use), never from mocks."""

from __future__ import annotations

import sys

import pytest

from corpus import recorder


@pytest.fixture(scope="session")
def recording():
    """recording(kernel, workload) -> corpus.recorder.Recording, recorded once per session
    unless the cache already has it."""
    made: dict[tuple[str, str], recorder.Recording] = {}

    def get(kernel: str, workload: str) -> recorder.Recording:
        key = (kernel, workload)
        if key not in made:
            made[key] = recorder.record(kernel, workload, log=lambda m: print(m, file=sys.stderr))
        return made[key]

    return get
