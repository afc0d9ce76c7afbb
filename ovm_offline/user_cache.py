"""The user's cache directory and how files get into it.

``$OVM_CACHE_DIR``, else ``$XDG_CACHE_HOME/ovm-offline`` (``~/.cache/ovm-offline``), holds what
a run can rebuild but should not have to: ISF tables (``isf/``), our dataclasses' compiled
methods (``code/``) and flattened kdumps' record indexes (``kdump-index/``). Every file is
written whole to a temporary name and renamed into place, so concurrent runs never read half
of one, and a directory that cannot be written only costs the next run the rebuilding.
"""

from __future__ import annotations

import os

__all__ = ["atomic_write", "cache_root"]


def cache_root() -> str:
    """``$OVM_CACHE_DIR``, else ``$XDG_CACHE_HOME/ovm-offline`` (``~/.cache/ovm-offline``)."""
    root = os.environ.get("OVM_CACHE_DIR")
    if root:
        return root
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "ovm-offline")


def atomic_write(path: str | os.PathLike[str], data: bytes) -> bool:
    """Write `data` to `path` by a rename; False if the cache could not be written."""
    directory = os.path.dirname(os.fspath(path))
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        return False
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
