"""Family `containers`: the dump file's own structure (ELF header, program headers and notes;
kdump header, sub-header, bitmaps and page descriptors; truncation). A private copy of the
recording's file is patched in place for the case and restored after it."""

from __future__ import annotations

import os
import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from ovm_offline.sources.elf import ElfSource
from ovm_offline.sources.kdump import KdumpSource

from .harness import Mutation
from .targets import dump_file_fingerprint


@dataclass
class Region:
    name: str
    start: int
    length: int
    structural: bool


def elf_regions(path: Path) -> list[Region]:
    with ElfSource(path) as elf:
        h = elf.header
        regions = [
            Region("ELF header", 0, 64, True),
            Region("program headers", h.e_phoff, h.e_phnum * h.e_phentsize, True),
        ]
        for ph in elf.program_headers:
            if ph.p_type == 4:  # PT_NOTE
                notes = Path(path).open("rb")
                notes.seek(ph.p_offset)
                raw = notes.read(ph.p_filesz)
                notes.close()
                at = raw.find(b"VMCOREINFO\0")
                if at >= 12:
                    namesz, descsz = struct.unpack_from("<II", raw, at - 12)
                    start = at - 12
                    length = 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
                    regions.append(Region("notes before VMCOREINFO", ph.p_offset, start, False))
                    regions.append(Region("VMCOREINFO note", ph.p_offset + start, length, True))
                    rest = ph.p_filesz - start - length
                    if rest > 0:
                        regions.append(Region("notes after VMCOREINFO", ph.p_offset + start + length, rest, False))
                else:
                    regions.append(Region("notes", ph.p_offset, ph.p_filesz, False))
    return [r for r in regions if r.length > 0]


def kdump_regions(path: Path) -> list[Region]:
    with KdumpSource(path) as kd:
        k = kd.image
        if k.layout.flattened:  # offsets inside are not file offsets: the head of the stream only
            return [Region("flattened stream head", 0, 1 << 16, True)]
        h = k.header
        descs = k.desc_offset
        return [
            Region("disk_dump_header", 0, 512, True),
            Region("kdump_sub_header", h.block_size, h.sub_hdr_size * h.block_size, True),
            Region("bitmaps", k.bitmap_offset, k.bitmap_bytes, True),
            Region("page descriptors", descs, 24 * 4096, True),
        ]


_SPECIAL = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\x01"]


class Containers:
    family = "containers"

    def __init__(self, rec, work: Path, kind: str) -> None:
        self.pid = rec.manifest["root_pid"]
        self.original = rec.elf if kind == "elf" else rec.kdumps["kdump-zlib"]
        self.path = work / self.original.name
        shutil.copyfile(self.original, self.path)
        self.size = self.path.stat().st_size
        self.regions = elf_regions(self.path) if kind == "elf" else kdump_regions(self.path)
        self.out = work / "images"
        self._restore: list[tuple[int, bytes]] = []
        self._truncated = False

    def operation(self) -> str:
        return dump_file_fingerprint(self.path, self.pid, self.out)

    def mutation(self, rng: random.Random) -> Mutation:
        if rng.random() < 0.05:
            cut = rng.choice([rng.randrange(0, 1 << 16), rng.randrange(0, self.size)])

            def truncate() -> None:
                os.truncate(self.path, cut)

            self._truncated = True
            return Mutation(self.family, f"truncated to {cut} bytes", True, truncate)
        region = rng.choice(self.regions)
        patches: list[tuple[int, bytes]] = []
        for _ in range(rng.choice([1, 1, 1, 2, 4])):
            at = region.start + rng.randrange(region.length)
            how = rng.random()
            if how < 0.4:
                data = bytes([rng.randrange(256)])
            elif how < 0.7:
                data = rng.choice(_SPECIAL) * rng.choice([1, 2, 4, 8])
            else:
                data = rng.randbytes(rng.choice([2, 4, 8, 16]))
            data = data[: max(0, self.size - at)]
            patches.append((at, data))
        with open(self.path, "rb") as f:
            self._restore = [(at, os.pread(f.fileno(), len(data), at)) for at, data in patches]

        def patch() -> None:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                for at, data in patches:
                    os.pwrite(fd, data, at)
            finally:
                os.close(fd)

        what = f"{region.name}: " + ", ".join(f"{at:#x}={data.hex()}" for at, data in patches)
        return Mutation(self.family, what, region.structural, patch)

    def after_case(self) -> None:
        """Put the file back as recorded."""
        if self._truncated:
            with open(self.original, "rb") as src, open(self.path, "r+b") as dst:
                size = os.fstat(dst.fileno()).st_size
                src.seek(size)
                dst.seek(size)
                shutil.copyfileobj(src, dst, 8 << 20)
            self._truncated = False
        fd = os.open(self.path, os.O_WRONLY)
        try:
            for at, data in self._restore:
                os.pwrite(fd, data, at)
        finally:
            os.close(fd)
        self._restore = []
