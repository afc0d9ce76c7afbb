"""The features criu probes on its kernel (kdat), as the pinned ISFs show them: criu 3.17 on
5.10 writes no rseq entry and no SO_BUF_LOCK (its restore would fail setting it there); on
6.1 (cloud and PREEMPT_RT), 6.12 and 7.2 it writes both."""

from __future__ import annotations

import pytest

from ovm_offline.kernel.core.features import FEATURES, kernel_has
from ovm_offline.kernel.core.symbols import load_isf
from tests.support.paths import ISF

EXPECTED = {"5.10": False, "6.1": True, "6.1-rt": True, "6.12": True, "7.2": True}


@pytest.mark.parametrize("kdat", sorted(FEATURES))
def test_each_feature_is_seen_where_the_kernel_has_it(kdat):
    assert {kernel: kernel_has(load_isf(path), kdat) for kernel, path in ISF.items()} == EXPECTED
