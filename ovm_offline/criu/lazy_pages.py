"""The serving side of post-copy (criu/page-xfer.c's page_server_serve after `criu dump
--lazy-pages`): `criu lazy-pages --page-server` on the destination connects, asks for the pages
its restored tree faults on and then for the rest (PS_IOV_GET: a process's pid, an address and a
number of pages), and ends with PS_IOV_CLOSE (PS_IOV_FORCE_CLOSE when it was given its socket).
Each answer is one pagemap entry's worth from the asked address, at most what was asked, as
criu's page_pipe_read clamps it; a request no lazy page answers ends the serving, as it does
criu's."""

from __future__ import annotations

import dataclasses
import socket
import struct
from collections.abc import Callable

from ..errors import OutputError
from .descriptors import PE_PRESENT
from .page_server import LAYOUTS, PS_CMD_BITS, PS_IOV_ADD_F, PS_IOV_CLOSE, PS_IOV_FORCE_CLOSE, PS_IOV_GET

__all__ = ["LazyPagesServer", "Served"]

#: what criu's daemon asks at most at a time (uffd.c's transfers are of at most 4 MiB), and what
#: a request beyond it is refused as
MAX_REQUEST_PAGES = 1024

#: read(pid, vaddr, nr_pages) -> (pages answered, their bytes), or None where no lazy page is
LazyRead = Callable[[int, int, int], tuple[int, bytes] | None]


@dataclasses.dataclass
class Served:
    pages: int = 0
    requests: int = 0


class LazyPagesServer:
    """A listening socket, bound before the dump (a port in use is refused before a live guest
    is paused), that serves one `criu lazy-pages` connection."""

    def __init__(self, address: str, port: int, layout: str) -> None:
        self.where = f"{address}:{port}"
        self.layout = LAYOUTS[layout]
        try:
            self.listener = socket.create_server((address, port), family=_family(address))
        except OSError as e:
            raise OutputError(f"lazy pages: cannot listen on {self.where}: {e.strerror or e}") from None

    def close(self) -> None:
        self.listener.close()

    def serve(self, read: LazyRead) -> Served:
        """Accept the daemon and answer it until it closes; OutputError naming what went wrong."""
        conn, _peer = self.listener.accept()
        self.listener.close()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each answer at once
            try:
                return self._answer(conn, read)
            except OSError as e:
                raise OutputError(f"lazy pages on {self.where}: the connection failed: {e.strerror or e}") from None

    def _answer(self, conn: socket.socket, read: LazyRead) -> Served:
        served = Served()
        while True:
            header = conn.recv(self.layout.size, socket.MSG_WAITALL)
            if len(header) < self.layout.size:
                raise OutputError(
                    f"lazy pages on {self.where}: the daemon went away without closing, after {served.pages} pages"
                )
            cmd, nr_pages, vaddr, pid = self.layout.unpack(header)
            if cmd in (PS_IOV_CLOSE, PS_IOV_FORCE_CLOSE):
                conn.sendall(struct.pack("<i", 0))
                return served
            if cmd != PS_IOV_GET:
                raise OutputError(f"lazy pages on {self.where}: the daemon sent command 0x{cmd:x}, not a request")
            if not 0 < nr_pages <= MAX_REQUEST_PAGES:
                raise OutputError(
                    f"lazy pages on {self.where}: a request for {nr_pages} pages (criu asks 1 to {MAX_REQUEST_PAGES})"
                )
            answer = read(pid, vaddr, nr_pages)
            if answer is None:
                raise OutputError(
                    f"lazy pages on {self.where}: asked for 0x{vaddr:x} of pid {pid}, which is no lazy page of the dump"
                )
            n, data = answer
            head = self.layout.pack(PS_IOV_ADD_F | PE_PRESENT << PS_CMD_BITS, n, vaddr, pid)
            conn.sendall(head + data)  # one write: the daemon reads the header, then waits for the pages
            served.pages += n
            served.requests += 1


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET
