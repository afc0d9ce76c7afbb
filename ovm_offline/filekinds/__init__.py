"""Kinds of open files: one module per kind, one row per kind in `FILE_KINDS`.

Each row (`FileKind`, see base.py) says how the kernel marks a file of the kind, the words a
refusal uses for it, and, for the kinds ovm-offline saves, the state it extracts (its own
dataclass), its CRIU FdTypes value and the writer of its entries. `classify` tells a ``struct
file`` 's kind by trying the rows in order; `new_writers` gives the writers of one dump. Adding a
kind is a module here and a row below; tests/test_filekinds.py checks every row is complete.
"""

from .base import ExtractContext, FileKind, Marks, Saved, describe
from .extract import attach_file_states, leave_out_dangling_files
from .registry import FILE_KINDS, classify, kind_named, new_writers, saved_kinds

__all__ = [
    "FILE_KINDS",
    "ExtractContext",
    "FileKind",
    "Marks",
    "Saved",
    "attach_file_states",
    "classify",
    "describe",
    "kind_named",
    "leave_out_dangling_files",
    "new_writers",
    "saved_kinds",
]
