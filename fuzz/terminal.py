"""Family `terminal`: guest-chosen text made hostile (issue 34). A process's comm, or the name
of a file it has open, is rewritten (same length) with C0 and C1 controls, escape sequences,
bidi overrides and other Unicode format characters, and bytes that are not UTF-8. Everything
ovm-offline would print of it (the `ps` table and tree, the warnings, an error's line, `show`
of the images a dump wrote) must hold no character a terminal acts on or that reorders a
line: a case whose text does is an internal error. The rewrite is a plain value: the result
may change."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import random
import shutil
from pathlib import Path

from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.cli import _PrintableFormatter
from ovm_offline.criu.show import show_dir
from ovm_offline.errors import OvmError
from ovm_offline.kernel.fs.fdtable import for_each_file, task_files
from ovm_offline.kernel.task.tasks import find_task, process_tree, thread_group
from ovm_offline.listing import PS_COLUMNS, print_table, print_tree, ps_row
from ovm_offline.terminal import printable
from tests.support.mutate import PatchedSource

from .harness import Mutation

#: what a hostile name is made of: controls, escapes, bidi and format characters (UTF-8), and
#: bytes that are not UTF-8 at all
PIECES = [
    b"\x1b[2J",
    b"\x1b]0;owned\x07",
    b"\x07",
    b"\r",
    b"\n",
    b"\t",
    b"\x7f",
    "\u202e".encode(),
    "\u2066".encode(),
    "\u2069".encode(),
    "\u200f".encode(),
    "\u061c".encode(),
    "\ufeff".encode(),
    "\u0085".encode(),
    "\u009b".encode(),
    "\U000e0041".encode(),
    b"\xff",
    b"\xc2",
    b"ab",
    "é".encode(),
    b"exe.txt",
]


#: include/linux/sched.h: a comm's bytes, its NUL included
TASK_COMM_LEN = 16


class UnprintableOutput(AssertionError):
    """What ovm-offline would print held a character a terminal acts on: the gate's failure."""


def _check(where: str, text: str) -> str:
    bad = sorted({f"U+{ord(c):04X}" for line in text.split("\n") for c in line if not c.isprintable()})
    if bad:
        raise UnprintableOutput(f"{where} would print {', '.join(bad[:5])}")
    return text


class Terminal:
    family = "terminal"

    def __init__(self, rec, work: Path) -> None:
        self.pid = rec.manifest["root_pid"]
        self.path = rec.elf
        self.out = work / "images"
        self.targets: list[tuple[str, int, int]] = []  # (what, address, bytes there)
        with sources.open_source(self.path) as source:
            prog = inventory.open_kernel(source)
            for task in process_tree(prog, find_task(prog, self.pid)):
                for thread in thread_group(task):
                    address = thread.address_ + prog.member_offset("task_struct", "comm")
                    self.targets.append((f"comm of TID {int(thread.pid)}", address, TASK_COMM_LEN - 1))
                files = task_files(task)
                for fd, file in for_each_file(files) if files else ():
                    name = file.f_path.dentry.d_name
                    if 0 < int(name.len) <= 255:
                        self.targets.append((f"name of PID {int(task.pid)} fd {fd}", int(name.name), int(name.len)))
        self.source: PatchedSource | None = None

    def operation(self) -> str:
        source = self.source or PatchedSource(sources.open_source(self.path))
        said = io.StringIO()
        handler = logging.StreamHandler(said)
        handler.setFormatter(_PrintableFormatter("ovm-offline: warning: %(message)s"))
        logger = logging.getLogger("ovm_offline")
        logger.addHandler(handler)
        try:
            with contextlib.redirect_stdout(io.StringIO()) as shown:
                prog = inventory.open_kernel(source)
                processes = inventory.list_processes(prog)
                for p in processes:
                    for problem in dict.fromkeys(p.problems):
                        said.write(printable(f"ovm-offline: warning: PID {p.pid} ({p.comm}): {problem}") + "\n")
                print_table([ps_row(p) for p in processes], PS_COLUMNS)
                print_tree(processes)
                try:
                    dumping.dump(source, prog, self.pid, self.out)
                    shown.write(show_dir(str(self.out)))
                except OvmError as exc:
                    _check("the error line", f"ovm-offline: {printable(str(exc))}")
                    raise
            text = _check("ps, show and the warnings", shown.getvalue() + said.getvalue())
            return hashlib.sha256(text.encode()).hexdigest()[:16]
        finally:
            logger.removeHandler(handler)
            shutil.rmtree(self.out, ignore_errors=True)
            source.base.close()

    def mutation(self, rng: random.Random) -> Mutation:
        what, address, length = rng.choice(self.targets)
        text = b""
        while len(text) < length:
            text += rng.choice(PIECES)
        text = text[:length].replace(b"/", b"_").replace(b"\0", b"_")

        def apply() -> None:
            source = PatchedSource(sources.open_source(self.path))
            source.patch_virtual(inventory.open_kernel(source), address, text)
            self.source = source

        return Mutation(self.family, f"{what} -> {text!r}", False, apply)

    def after_case(self) -> None:
        self.source = None
