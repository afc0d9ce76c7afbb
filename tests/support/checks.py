"""Assertions more than one test file makes."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from ovm_offline.errors import GuestDataError


def assert_one_line_error(fn: Callable[[], object], needle: str, error: type[Exception] = GuestDataError) -> None:
    """fn() raises `error` with a one-line message that contains `needle`."""
    with pytest.raises(error) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg and needle in msg, msg


def assert_one_line_failure(result: subprocess.CompletedProcess, *needles: str) -> None:
    """A command failed with one line on stderr, no traceback, naming every one of `needles`."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
