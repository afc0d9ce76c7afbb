"""A previous dump's pages, as criu's --prev-images-dir uses them: each process's pagemap and
pages, and through the `parent` link of that directory its own parent's, so that a page a new
dump would write unchanged becomes a PE_PARENT entry, which `criu restore` reads back down the
chain (criu/page-read.c: try_open_parent, read_parent_page).

The images are read as untrusted (a directory given by a user may be anything): each pagemap
must run in ascending order without overlaps, its pages file must hold what it claims, and
the chain of parents is at most MAX_CHAIN long (a `parent` link to itself ends there).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import os
import struct
from pathlib import Path

from ..errors import ImageError
from .images import INVENTORY, PAGEMAP, PAGES, PSTREE, ImageDir, page_present, pagemap_run_pages

__all__ = ["DIGESTS_FILE", "MAX_CHAIN", "PARENT_LINK", "PageDigests", "ParentImages", "ParentPages", "page_digest"]

PAGE_SIZE = 4096
PARENT_LINK = "parent"  # criu's CR_PARENT_LINK
#: how many parents deep a chain of dumps is followed (criu follows any; a loop would not end)
MAX_CHAIN = 64

#: beside a dump whose pages went to a page server: a digest of each page it saved, by process
#: and address, so that a later dump of the same tree sends only what changed (PE_PARENT holes
#: for the rest, which the server checks against its own parent images) with no page kept here
DIGESTS_FILE = "ovm-offline-page-digests"
_DIGESTS_MAGIC = b"OVMPDIG1"
_DIGEST_RECORD = struct.Struct("<IQ16s")  # pid, vaddr, BLAKE2b-128 of the page
#: the most a digests file may hold: 16 GiB of records, the pages of over 2 TiB
MAX_DIGESTS_BYTES = 16 << 30


def page_digest(page: bytes | bytearray | memoryview) -> bytes:
    return hashlib.blake2b(page, digest_size=16).digest()


class PageDigests:
    """pid -> {vaddr: digest} of the pages a dump saved (the pages the server holds for it)."""

    def __init__(self) -> None:
        self.processes: dict[int, dict[int, bytes]] = {}

    def of(self, pid: int) -> dict[int, bytes]:
        return self.processes.setdefault(pid, {})

    def write(self, path: Path) -> None:
        with open(path, "wb") as out:
            out.write(_DIGESTS_MAGIC)
            for pid, pages in self.processes.items():
                out.write(b"".join(_DIGEST_RECORD.pack(pid, vaddr, d) for vaddr, d in sorted(pages.items())))

    @classmethod
    def read(cls, path: Path) -> PageDigests:
        """A digests file, refused by name where it is not one, is truncated or is absurd."""
        try:
            size = path.stat().st_size
            if size > MAX_DIGESTS_BYTES:
                raise ImageError(f"{path}: {size} bytes, more than any dump's page digests ({MAX_DIGESTS_BYTES})")
            data = path.read_bytes()
        except OSError as e:
            raise ImageError(f"{path}: cannot read: {e.strerror or e}") from None
        body = data[len(_DIGESTS_MAGIC) :]
        if not data.startswith(_DIGESTS_MAGIC) or len(body) % _DIGEST_RECORD.size:
            raise ImageError(f"{path}: not ovm-offline's page digests, or truncated")
        digests = cls()
        for pid, vaddr, digest in _DIGEST_RECORD.iter_unpack(body):
            if vaddr % PAGE_SIZE:
                raise ImageError(f"{path}: a page digest at unaligned address {vaddr:#x}")
            digests.of(pid)[vaddr] = digest
        return digests


class ParentImages:
    """An images directory a new dump builds on; its processes' pages by pid."""

    def __init__(self, directory: str | os.PathLike[str], depth: int = 0, seen: frozenset[str] = frozenset()) -> None:
        self.directory = Path(directory)
        real = os.path.realpath(self.directory)
        if real in seen:
            raise ImageError(f"{self.directory}: its chain of parent dumps loops back to {real}")
        if depth > MAX_CHAIN:
            raise ImageError(f"{self.directory}: a chain of more than {MAX_CHAIN} parent dumps")
        if not self.directory.is_dir():
            raise ImageError(f"{self.directory}: the previous images directory does not exist")
        self.images = ImageDir(self.directory)
        if not (self.directory / INVENTORY.filename()).is_file():
            raise ImageError(f"{self.directory}: not a CRIU images directory (it has no inventory.img)")
        self.depth = depth
        self._pages: dict[int, ParentPages | None] = {}
        link = Path(real) / PARENT_LINK
        # the whole chain is opened now: a loop or a missing link is refused before anything is written
        self._parent = ParentImages(link, depth + 1, seen | {real}) if os.path.lexists(link) else None

    @functools.cached_property
    def digests(self) -> PageDigests | None:
        """The page digests of a dump whose pages went to a page server, or None (read once)."""
        path = self.directory / DIGESTS_FILE
        return PageDigests.read(path) if path.exists() else None

    def root_pid(self) -> int | None:
        """The pid that leads the dumped tree, where the directory has a process tree (a
        pre-dump's holds only pages)."""
        pstree = self.images.get(PSTREE)
        return pstree.entries[0].pid if pstree is not None and pstree.entries else None

    def parent(self) -> ParentImages | None:
        return self._parent

    def pages(self, pid: int) -> ParentPages | None:
        """The pages this dump saved of process `pid`, or None if it has none of it."""
        if pid not in self._pages:
            found = (self.directory / PAGEMAP.filename(pid)).is_file()
            self._pages[pid] = ParentPages(self, pid) if found else None
        return self._pages[pid]


class ParentPages:
    """One process's pages in a parent dump: page(vaddr) gives a page's bytes, following
    PE_PARENT entries into that dump's own parent."""

    def __init__(self, images: ParentImages, pid: int) -> None:
        self.images, self.pid = images, pid
        pagemap = images.images.load(PAGEMAP.filename(pid))
        where = f"{images.directory / PAGEMAP.filename(pid)}"
        head, runs = pagemap.entries[0], pagemap.entries[1:]
        self._starts: list[int] = []
        self._runs: list[tuple[int, int, int | None]] = []  # vaddr, pages, offset in pages file (None: parent's)
        offset, end = 0, 0
        for run in runs:
            pages = pagemap_run_pages(run)
            if run.vaddr % PAGE_SIZE or run.vaddr < end or pages <= 0 or pages > (1 << 52) // PAGE_SIZE:
                raise ImageError(f"{where}: entry at {run.vaddr:#x} of {pages} pages is out of order or absurd")
            present = page_present(run)
            self._starts.append(run.vaddr)
            self._runs.append((run.vaddr, pages, offset if present else None))
            offset += pages * PAGE_SIZE if present else 0
            end = run.vaddr + pages * PAGE_SIZE
        self._pages_path = images.directory / PAGES.filename(head.pages_id)
        size = self._pages_path.stat().st_size if offset else 0
        if size < offset:
            raise ImageError(f"{self._pages_path}: {size} bytes, {where} needs {offset} (truncated?)")
        self._fd: int | None = None

    def page(self, vaddr: int) -> bytes | None:
        """The bytes of the page at user `vaddr` as this dump (or its parents) saved it."""
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        start, pages, offset = self._runs[i]
        if vaddr >= start + pages * PAGE_SIZE:
            return None
        if offset is None:
            parent = self.images.parent()
            older = parent.pages(self.pid) if parent is not None else None
            return older.page(vaddr) if older is not None else None
        if self._fd is None:
            self._fd = os.open(self._pages_path, os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(self._fd, PAGE_SIZE, offset + vaddr - start)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
