"""Family `evidence`: the dump file itself damaged or altered where the dump needs it (issue
34). Either a page descriptor of the kdump, for a page that `ps` and `dump` of the root read
(its offset, its size or its flags), or a PT_LOAD of the ELF moved or grown over other RAM.
Each case writes its change into a working copy of the file; the parent puts the bytes back
after it. Every change is structural: the result must be a refusal that names the page or the
segment, or the same images, never other images without a word."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

from ovm_offline import sources
from ovm_offline.sources.elf import PHDR, PT_LOAD, ElfSource
from ovm_offline.sources.kdump import KdumpImage
from ovm_offline.sources.kdump_format import PAGE_DESC, PAGE_SIZE

from .harness import Mutation
from .targets import dump_file_fingerprint

#: flags a page descriptor may be given: none, each compression, zstd (which QEMU never
#: writes), two at once, and bits the format does not define
FLAGS = (0, 1, 2, 4, 0x20, 3, 5, 0x40, 0x81, 0xFFFFFFFF)


def pages_read(path: Path, pid: int, out: Path) -> set[int]:
    """The pfns that `ps` and `dump` of `pid` read from the kdump at `path`."""
    seen: set[int] = set()
    page, batch = KdumpImage.page, KdumpImage.batch

    def page_seen(self, pfn):
        seen.add(pfn)
        return page(self, pfn)

    def batch_seen(self, pfn, n, raw_as_stored=False):
        seen.update(range(pfn, pfn + n))
        return batch(self, pfn, n, raw_as_stored)

    KdumpImage.page, KdumpImage.batch = page_seen, batch_seen  # type: ignore[method-assign]
    try:
        dump_file_fingerprint(path, pid, out)
    finally:
        KdumpImage.page, KdumpImage.batch = page, batch  # type: ignore[method-assign]
    return seen


class Evidence:
    family = "evidence"

    def __init__(self, rec, work: Path) -> None:
        self.pid = rec.manifest["root_pid"]
        self.out = work / "images"
        self.kdump, self.elf = work / "evidence.kdump", work / "evidence.elf"
        shutil.copyfile(rec.kdumps["kdump-zlib"], self.kdump)
        shutil.copyfile(rec.elf, self.elf)
        needed = pages_read(self.kdump, self.pid, self.out)
        with sources.open_source(self.kdump) as source:
            image = source.image
            self.file_size = image.layout.size
            # (pfn, file offset of its descriptor, the descriptor's 24 bytes)
            self.descriptors = []
            for pfn in sorted(needed):
                if image.present.test(pfn) and image.dumped.test(pfn):
                    logical = image.desc_offset + image.dumped.rank(pfn) * PAGE_DESC.size
                    pieces = image.layout.container_pieces(logical, PAGE_DESC.size)
                    if pieces is not None and len(pieces) == 1:
                        self.descriptors.append((pfn, pieces[0][0], image.layout.pread(logical, PAGE_DESC.size)))
            self.data_offsets = [d[0] for d in PAGE_DESC.iter_unpack(b"".join(raw for *_, raw in self.descriptors))]
        with ElfSource(self.elf) as elf:
            header = elf.header
            # (index, file offset of its header, the header's bytes, p_paddr, p_memsz)
            self.loads = [
                (
                    i,
                    header.e_phoff + i * header.e_phentsize,
                    PHDR.pack(*dataclasses.astuple(ph)),
                    ph.p_paddr,
                    ph.p_memsz,
                )
                for i, ph in enumerate(elf.program_headers)
                if ph.p_type == PT_LOAD and ph.p_memsz
            ]
        self.path = self.kdump
        self.pending: tuple[Path, int, bytes] | None = None  # what after_case puts back

    def operation(self) -> str:
        return dump_file_fingerprint(self.path, self.pid, self.out)

    def mutation(self, rng: random.Random) -> Mutation:
        if rng.random() < 0.8 or len(self.loads) < 2:
            return self._descriptor(rng)
        return self._load(rng)

    def _descriptor(self, rng: random.Random) -> Mutation:
        pfn, at, raw = rng.choice(self.descriptors)
        offset, size, flags, page_flags = PAGE_DESC.unpack(raw)
        field = rng.choice(("offset", "size", "flags"))
        if field == "offset":
            offset = rng.choice(
                [
                    self.file_size,
                    self.file_size + rng.randrange(1, 1 << 40),
                    0,
                    rng.randrange(self.file_size),
                    rng.choice(self.data_offsets),  # another needed page's data
                    offset + rng.choice((-1, 1, PAGE_SIZE)),
                ]
            )
        elif field == "size":
            size = rng.choice([0, PAGE_SIZE + 1, 0xFFFFFFFF, rng.randrange(1, PAGE_SIZE + 1), max(size - 1, 0)])
        else:
            flags = rng.choice([f for f in FLAGS if f != flags])
        new = PAGE_DESC.pack(offset, size, flags, page_flags)
        what = f"kdump descriptor of pfn {pfn:#x}: {field} -> {dict(offset=offset, size=size, flags=flags)[field]:#x}"
        self.pending = (self.kdump, at, raw)
        return Mutation(self.family, what, True, lambda: self._write(self.kdump, at, new))

    def _load(self, rng: random.Random) -> Mutation:
        (index, at, raw, paddr, _), other = rng.sample(self.loads, 2)
        fields = list(PHDR.unpack(raw))
        how = rng.choice(("moved over", "grown over"))
        if how == "moved over":  # p_paddr inside the other segment
            fields[4] = other[3] + rng.randrange(0, other[4], PAGE_SIZE)
        elif other[3] > paddr:  # p_memsz (and p_filesz, where the file holds it) reaching into it
            fields[6] = other[3] - paddr + rng.randrange(1, other[4] + 1, PAGE_SIZE)
        else:
            fields[4] = max(other[3] + other[4] - PAGE_SIZE, 0)
        new = PHDR.pack(*fields)
        what = f"PT_LOAD #{index} {how} #{other[0]}"
        self.pending = (self.elf, at, raw)
        return Mutation(self.family, what, True, lambda: self._write(self.elf, at, new))

    def _write(self, path: Path, at: int, new: bytes) -> None:
        """In the case's child: the change written into the working copy it then reads."""
        self.path = path
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(new)

    def after_case(self) -> None:
        """In the parent: the bytes the child changed put back, whatever became of it."""
        if self.pending is not None:
            path, at, old = self.pending
            with open(path, "r+b") as f:
                f.seek(at)
                f.write(old)
        self.pending = None
