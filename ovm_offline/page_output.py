"""Where a dump's pages go: pages-N.img files in the images directory, over a parent dump's
pages when there is one, or each pagemap with its pages to a criu page server, which writes
both where it runs. The writers are what `criu.build` calls for each process and shmem file."""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from collections.abc import Callable
from pathlib import Path

from .criu.build import PagesWriter, ShmemPagesWriter
from .criu.page_server import PS_TYPE_PID, PS_TYPE_SHMEM, PageServer
from .criu.parent import PageDigests, ParentImages, page_digest
from .errors import OutputError, writing_output
from .extract.pages import (
    PAGE_SIZE,
    PagemapRun,
    PagesStats,
    pagemap_entries_with_pages,
    read_user_pages,
    split_over_parent,
    write_page_runs,
    write_pages,
    write_pages_over_parent,
)
from .sources.base import PhysicalSource
from .state import PageRun, ProcessState, SharedMemory, UserWrite

__all__ = ["LazyMemory", "file_page_writers", "lazy_page_writers", "page_writers", "server_page_writers"]

Progress = Callable[[int], None] | None


@dataclasses.dataclass
class _LazyProcess:
    runs: list[PageRun]
    user_writes: list[UserWrite]
    entries: list[tuple[int, int]]  # (vaddr, nr_pages) of its PE_LAZY entries, ascending


@dataclasses.dataclass
class LazyMemory:
    """The lazy pages of a lazy dump (`criu dump --lazy-pages`), by process: read from the source
    when the destination asks, which must stay open until then."""

    source: PhysicalSource
    processes: dict[int, _LazyProcess] = dataclasses.field(default_factory=dict)

    @property
    def pages(self) -> int:
        return sum(n for proc in self.processes.values() for _, n in proc.entries)

    def read(self, pid: int, vaddr: int, nr_pages: int) -> tuple[int, bytes] | None:
        """Up to `nr_pages` pages of `pid` from `vaddr`, not past the end of the lazy entry that
        holds it (criu's page_pipe_read clamps at its iovec); None where no lazy entry holds it."""
        proc = self.processes.get(pid)
        if proc is None or vaddr % PAGE_SIZE:
            return None
        at = bisect.bisect_right(proc.entries, vaddr, key=lambda e: e[0]) - 1
        if at < 0 or vaddr >= proc.entries[at][0] + proc.entries[at][1] * PAGE_SIZE:
            return None
        start, n = proc.entries[at]
        n = min(nr_pages, n - (vaddr - start) // PAGE_SIZE)
        return n, bytes(read_user_pages(self.source, proc.runs, vaddr, vaddr + n * PAGE_SIZE, proc.user_writes))


def page_writers(
    source: PhysicalSource,
    parent: ParentImages | None,
    destination: PageServer | LazyMemory | None,
    stats: PagesStats,
    progress: Progress,
    digests: PageDigests | None = None,
) -> tuple[PagesWriter, ShmemPagesWriter]:
    """The writers of a dump's pages: to a page server (the digests of the pages it holds in
    `digests`), to files with the lazy pages kept to be served, or to files."""
    if destination is None:
        return file_page_writers(source, parent, stats, progress)
    if isinstance(destination, LazyMemory):
        assert parent is None  # criu's lazy dump has no parent
        return lazy_page_writers(source, destination, stats, progress)
    assert digests is not None
    before = parent.digests if parent is not None else None
    assert parent is None or before is not None  # dump.parent_images refused it
    return server_page_writers(source, destination, stats, progress, before, digests)


def lazy_page_writers(
    source: PhysicalSource, lazy: LazyMemory, stats: PagesStats, progress: Progress
) -> tuple[PagesWriter, ShmemPagesWriter]:
    """A lazy dump's writers: a process's pages file without its lazy pages, which `lazy` keeps
    to serve; shared memory is written whole, as criu's lazy dump writes it."""

    def pages_writer(proc: ProcessState, path: Path) -> list[tuple[int, int, int]]:
        assert proc.mm is not None  # the writer writes no pages for a zombie
        entries, kept = [], []
        with writing_output(path), open(path, "wb") as out:
            for entry, data in pagemap_entries_with_pages(
                source, proc.mm.pages, proc.mm.user_writes, stats, lazy_dump=True
            ):
                entries.append((entry.vaddr, entry.nr_pages, entry.flags))
                if data is None:
                    kept.append((entry.vaddr, entry.nr_pages))
                else:
                    out.write(data)
        lazy.processes[proc.pid] = _LazyProcess(proc.mm.pages, proc.mm.user_writes, kept)
        if progress:
            progress(stats.bytes)
        return entries

    return pages_writer, file_page_writers(source, None, stats, progress)[1]


def file_page_writers(
    source: PhysicalSource, parent: ParentImages | None, stats: PagesStats, progress: Progress
) -> tuple[PagesWriter, ShmemPagesWriter]:
    """The writers of a process's pages file (over its parent dump's, if any) and of a shmem file's."""

    def pages_writer(proc: ProcessState, path: Path) -> list[tuple[int, int, int]]:
        assert proc.mm is not None  # the writer writes no pages for a zombie
        before = parent.pages(proc.pid) if parent is not None else None
        with writing_output(path), open(path, "wb") as out:
            if before is None:
                runs = write_pages(source, proc.mm, out, stats)
            else:
                runs = write_pages_over_parent(source, proc.mm, out, before.page, stats)
        if progress:
            progress(stats.bytes)
        return [(r.vaddr, r.nr_pages, r.flags) for r in runs]

    def shmem_pages_writer(shm: SharedMemory, path: Path) -> list[tuple[int, int, int]]:
        with writing_output(path), open(path, "wb") as out:
            runs = write_page_runs(source, shm.pages, out, stats)
        return [(r.vaddr, r.nr_pages, r.flags) for r in runs]

    return pages_writer, shmem_pages_writer


def server_page_writers(
    source: PhysicalSource,
    server: PageServer,
    stats: PagesStats,
    progress: Progress,
    parent: PageDigests | None,
    digests: PageDigests,
) -> tuple[PagesWriter, ShmemPagesWriter]:
    """Writers that send each pagemap, entry by entry with its pages, to a page server (the path
    they are given is not made: no page touches this side's disk). A process's pages whose
    digest equals the `parent` dump's at the same address go as PE_PARENT holes, which the server
    checks against its own parent images; `digests` gets the digest of every page it holds."""

    def send(kind: int, image_id: int, runs: list[PageRun], holes: list[PagemapRun], writes: list[UserWrite]):
        has_parent = server.open(kind, image_id)
        if holes and not has_parent:
            raise OutputError(
                f"page server {server.address}: has no parent images of pid {image_id}, which this dump builds on"
                " (start it with --prev-images-dir)"
            )
        entries = []
        sent = pagemap_entries_with_pages(source, runs, writes, stats)
        for entry, data in heapq.merge(sent, ((h, None) for h in holes), key=lambda e: e[0].vaddr):
            server.add(entry.vaddr, entry.nr_pages, entry.flags, data)
            entries.append((entry.vaddr, entry.nr_pages, entry.flags))
            if kind == PS_TYPE_PID and data is not None:
                mine = digests.of(image_id)
                view = memoryview(data)
                for i in range(entry.nr_pages):
                    mine[entry.vaddr + i * PAGE_SIZE] = page_digest(view[i * PAGE_SIZE : (i + 1) * PAGE_SIZE])
            if progress:
                progress(stats.bytes)
        return entries

    def pages_writer(proc: ProcessState, _path: Path) -> list[tuple[int, int, int]]:
        assert proc.mm is not None  # the writer writes no pages for a zombie
        before = parent.processes.get(proc.pid) if parent is not None else None
        if before is None:
            return send(PS_TYPE_PID, proc.pid, proc.mm.pages, [], proc.mm.user_writes)
        changed, holes = split_over_parent(source, proc.mm, lambda vaddr, page: before.get(vaddr) == page_digest(page))
        mine = digests.of(proc.pid)
        for hole in holes:
            for i in range(hole.nr_pages):
                mine[hole.vaddr + i * PAGE_SIZE] = before[hole.vaddr + i * PAGE_SIZE]
        stats.parent_pages += sum(h.nr_pages for h in holes)
        return send(PS_TYPE_PID, proc.pid, changed, holes, proc.mm.user_writes)

    def shmem_pages_writer(shm: SharedMemory, _path: Path) -> list[tuple[int, int, int]]:
        return send(PS_TYPE_SHMEM, shm.ino, shm.pages, [], [])  # shared memory goes whole, as files hold it

    return pages_writer, shmem_pages_writer
