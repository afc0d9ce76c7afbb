"""Running a function over many independent pieces on all cores, results in order.

Used where the work per piece is mostly C code that lets go of the GIL (zlib decompressing a
kdump's pages): threads then run it on every core, with no copy of the results between
processes. At most `ahead` pieces are in flight, so memory does not grow with the input.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["cores", "ordered_map"]

A = TypeVar("A")
R = TypeVar("R")


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def ordered_map(fn: Callable[[A], R], pieces: Iterable[A], workers: int, ahead: int) -> Iterator[R]:
    """fn(piece) for every piece, in the pieces' order, computed by `workers` threads with at
    most `ahead` results waiting. An exception of fn is raised where its result would have
    come; the pieces after it are not started (those already running finish first; after an
    interruption, unwaited)."""
    # imported here: a dump whose page reads are all small never starts threads, and
    # concurrent.futures (with logging) took 2 ms of every kdump command's start
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ovm-decode")
    waiting: deque[Future[R]] = deque()
    try:
        for piece in pieces:
            if len(waiting) >= ahead:
                yield waiting.popleft().result()
            waiting.append(pool.submit(fn, piece))
        while waiting:
            yield waiting.popleft().result()
    except KeyboardInterrupt:
        # A signal's KeyboardInterrupt can land while this thread holds one of the pool's own
        # locks (inside Semaphore.acquire in submit, the `with` never released): a worker then
        # waits for it forever, and joining the workers would hang the interrupted run (the
        # signals family caught `convert` so). Leave them: the run is ending.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # an error: no decoding thread left behind
        raise
    pool.shutdown(wait=True)
