"""Writing a pages-N.img from chunks of page data, for tests that build image directories."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import BinaryIO

from ovm_offline.criu.images import PAGE_SIZE, ImageError


def write_pages(dest: str | os.PathLike[str] | BinaryIO, chunks: Iterable[bytes]) -> int:
    """Stream page data into a pages-N.img without building it in memory; returns its size."""
    if not isinstance(dest, (str, os.PathLike)):
        return _copy_pages(dest, chunks)
    try:
        with open(dest, "wb") as f:
            return _copy_pages(f, chunks)
    except OSError as e:
        raise ImageError(f"{dest}: cannot write: {e.strerror or e}") from None


def _copy_pages(f: BinaryIO, chunks: Iterable[bytes]) -> int:
    total = 0
    for c in chunks:
        if len(c) % PAGE_SIZE:
            raise ImageError(f"pages data chunk of {len(c)} bytes is not a multiple of {PAGE_SIZE}")
        f.write(c)
        total += len(c)
    return total
