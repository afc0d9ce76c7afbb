"""Where a dump's pages go: pages-N.img files in the images directory, over a parent dump's
pages when there is one, or each pagemap with its pages to a criu page server, which writes
both where it runs. The writers are what `criu.build` calls for each process and shmem file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .criu.build import PagesWriter, ShmemPagesWriter
from .criu.page_server import PS_TYPE_PID, PS_TYPE_SHMEM, PageServer
from .criu.parent import ParentImages
from .errors import writing_output
from .extract.pages import (
    PagesStats,
    pagemap_entries_with_pages,
    write_page_runs,
    write_pages,
    write_pages_over_parent,
)
from .sources.base import PhysicalSource
from .state import PageRun, ProcessState, SharedMemory, UserWrite

__all__ = ["file_page_writers", "page_writers", "server_page_writers"]

Progress = Callable[[int], None] | None


def page_writers(
    source: PhysicalSource,
    parent: ParentImages | None,
    server: PageServer | None,
    stats: PagesStats,
    progress: Progress,
) -> tuple[PagesWriter, ShmemPagesWriter]:
    """The writers of a dump's pages: to a page server if there is one, to files otherwise."""
    if server is None:
        return file_page_writers(source, parent, stats, progress)
    assert parent is None  # the server would need the parent dump, where it runs
    return server_page_writers(source, server, stats, progress)


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
    source: PhysicalSource, server: PageServer, stats: PagesStats, progress: Progress
) -> tuple[PagesWriter, ShmemPagesWriter]:
    """Writers that send each pagemap, entry by entry with its pages, to a page server (the path
    they are given is not made: no page touches this side's disk)."""

    def send(kind: int, image_id: int, runs: list[PageRun], user_writes: list[UserWrite]) -> list[tuple[int, int, int]]:
        server.open(kind, image_id)
        entries = []
        for entry, data in pagemap_entries_with_pages(source, runs, user_writes, stats):
            server.add(entry.vaddr, entry.nr_pages, entry.flags, data)
            entries.append((entry.vaddr, entry.nr_pages, entry.flags))
            if progress:
                progress(stats.bytes)
        return entries

    def pages_writer(proc: ProcessState, _path: Path) -> list[tuple[int, int, int]]:
        assert proc.mm is not None  # the writer writes no pages for a zombie
        return send(PS_TYPE_PID, proc.pid, proc.mm.pages, proc.mm.user_writes)

    def shmem_pages_writer(shm: SharedMemory, _path: Path) -> list[tuple[int, int, int]]:
        return send(PS_TYPE_SHMEM, shm.ino, shm.pages, [])

    return pages_writer, shmem_pages_writer
