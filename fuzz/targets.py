"""What the fuzzer runs in a case, and the recordings it mutates: the dump of the workload's
root as `ovm-offline ps` and `dump` do it, fingerprinted."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path

from ovm_offline import dump as dumping
from ovm_offline import inventory, sources
from ovm_offline.sources.base import PhysicalSource
from tests.support.mutate import PatchedSource

from .harness import digest_tree

log = logging.getLogger("ovm_offline")


def ps_and_dump(source: PhysicalSource, pid: int, out: Path, prog=None) -> str:
    """`ps` then `dump` of `pid` into `out` (removed after): a fingerprint of both results."""
    prog = prog if prog is not None else inventory.open_kernel(source)
    processes = inventory.list_processes(prog)
    for p in processes:
        for problem in dict.fromkeys(p.problems):  # as `ps` prints them: a warning each
            log.warning("PID %d (%s): %s", p.pid, p.comm, problem)
    table = json.dumps([dataclasses.asdict(p) for p in processes], sort_keys=True, default=str)
    try:
        dumping.dump(source, prog, pid, out)
        images = digest_tree(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return hashlib.sha256(table.encode() + images.encode()).hexdigest()[:16]


def dump_file_fingerprint(path: Path, pid: int, out: Path) -> str:
    with sources.open_source(path) as source:
        return ps_and_dump(source, pid, out)


class PatchedMemoryFamily:
    """A family whose case rewrites the recording's guest memory (`self.source`, a
    PatchedSource its mutation sets) and runs `ps` and the dump of the root over it."""

    def __init__(self, rec, work: Path) -> None:
        self.pid = rec.manifest["root_pid"]
        self.path = rec.elf
        self.out = work / "images"
        self.source: PatchedSource | None = None

    def operation(self) -> str:
        source = self.source or PatchedSource(sources.open_source(self.path))
        try:
            return ps_and_dump(source, self.pid, self.out)
        finally:
            source.base.close()

    def after_case(self) -> None:
        self.source = None
