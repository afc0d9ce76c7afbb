"""The sending side of CRIU's page-server protocol (criu/page-xfer.c): a dump's pagemaps and
pages go to a `criu page-server` on the destination, which writes pagemap-*.img and
pages-*.img there as `criu dump --page-server` has it write them.

The protocol has no version handshake, and criu 4.2 widened `nr_pages` of its header from u32
to u64, which moved the header from 24 to 32 bytes. The user names the receiver's layout; it is
checked on connecting with PS_IOV_PARENT, a command that changes nothing on the server: a server
of the other layout closes the connection (3.17 reads a header whose type it does not know) or
waits for the rest of a header (4.2), and either is refused by name.
"""

from __future__ import annotations

import dataclasses
import socket
import struct

from ..errors import OutputError

__all__ = ["LAYOUTS", "PS_TYPE_PID", "PS_TYPE_SHMEM", "PageServer", "parse_address"]

# criu 3.17's page-xfer.c, by its names
PS_IOV_OPEN2 = 4
PS_IOV_PARENT = 5
PS_IOV_ADD_F = 6
PS_IOV_GET = 7  # lazy pages: the destination asks (criu/lazy_pages.py serves it)
PS_IOV_CLOSE = 0x1023
PS_IOV_FORCE_CLOSE = 0x1024  # a CLOSE from a peer that was given its socket
PS_CMD_BITS = 16
PS_TYPE_BITS = 8
PS_TYPE_PID = 1  # a process's pagemap-PID.img
PS_TYPE_SHMEM = 2  # a shmem file's pagemap-shmem-INO.img

#: struct page_server_iov {u32 cmd; nr_pages; u64 vaddr; u64 dst_id}, nr_pages u32 before 4.2
LAYOUTS = {"3": struct.Struct("<IIQQ"), "4.2": struct.Struct("<I4xQQQ")}

#: how long a check of the layout waits for the answer: a server of the other layout waits for
#: bytes that never come, so only silence tells it
CHECK_SECONDS = 10.0
#: how long any later answer, or a send the server does not take, may take
ANSWER_SECONDS = 120.0


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) as (host, port); ValueError naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return host, int(port)


@dataclasses.dataclass
class PageServer:
    """One connection to a criu page-server, speaking `layout` ("3" or "4.2")."""

    address: str  # HOST:PORT, as the user gave it
    layout: str
    sock: socket.socket
    dst_id: int = 0  # the pagemap open now

    @classmethod
    def connect(cls, address: str, layout: str) -> PageServer:
        """Connect and check that the server reads this layout; OutputError naming the address
        otherwise (nothing was written on the server then)."""
        host, port = parse_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=CHECK_SECONDS)
        except OSError as e:
            raise OutputError(f"page server {address}: cannot connect: {e.strerror or e}") from None
        server = cls(address, layout, sock)
        try:
            server._check_layout()
        except BaseException:
            sock.close()
            raise
        sock.settimeout(ANSWER_SECONDS)
        # each header goes out at once: the server answers some of them, and a delayed ACK
        # would meet Nagle's wait
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return server

    def describe(self) -> str:
        return f"{self.address} (criu {self.layout}'s layout)"

    def _check_layout(self) -> None:
        other = next(name for name in LAYOUTS if name != self.layout)
        self._send_header(PS_IOV_PARENT, 0, 0, _dst_id(PS_TYPE_PID, 1))
        try:
            answer = self._receive(4, "the check of its protocol layout")
        except TimeoutError:
            raise OutputError(
                f"page server {self.address}: no answer in {CHECK_SECONDS:g} s to a header of criu {self.layout}'s"
                f" layout ({LAYOUTS[self.layout].size} bytes): it may read criu {other}'s"
                f" (--page-server-protocol {other})"
            ) from None
        except OutputError as e:
            raise OutputError(
                f"{e}: it did not read a header of criu {self.layout}'s layout ({LAYOUTS[self.layout].size} bytes);"
                f" it may read criu {other}'s (--page-server-protocol {other})"
            ) from None
        if struct.unpack("<i", answer)[0] < 0:
            raise OutputError(f"page server {self.address}: refused the check of its parent images")

    def open(self, kind: int, image_id: int) -> bool:
        """Start the pagemap of a process (PS_TYPE_PID, its pid) or a shmem file
        (PS_TYPE_SHMEM, its inode); whether the server has it in a parent dump."""
        self._send_header(PS_IOV_OPEN2, 0, 0, _dst_id(kind, image_id))
        has_parent = self._receive(1, f"the opening of pagemap {image_id}") != b"\0"
        self.dst_id = _dst_id(kind, image_id)
        return has_parent

    def add(self, vaddr: int, nr_pages: int, flags: int, pages: bytes | bytearray | None) -> None:
        """One pagemap entry of the open pagemap, with its pages when flags has PE_PRESENT."""
        self._send_header(PS_IOV_ADD_F | flags << PS_CMD_BITS, nr_pages, vaddr, self.dst_id, pages)

    def finish(self) -> None:
        """PS_IOV_CLOSE and the server's final status: only then is the dump whole there."""
        self._send_header(PS_IOV_CLOSE, 0, 0, 0)
        status = struct.unpack("<i", self._receive(4, "the final status"))[0]
        if status != 0:
            raise OutputError(f"page server {self.address}: ended with status {status}")
        self.close()

    def close(self) -> None:
        self.sock.close()

    def _send_header(
        self, cmd: int, nr_pages: int, vaddr: int, dst_id: int, pages: bytes | bytearray | None = None
    ) -> None:
        header = LAYOUTS[self.layout].pack(cmd, nr_pages, vaddr, dst_id)
        views = [memoryview(header)] + ([memoryview(pages).cast("B")] if pages is not None else [])
        try:
            while views:  # header and pages in one write where they fit, without copying them together
                sent = self.sock.sendmsg(views)
                while views and sent >= len(views[0]):
                    sent -= len(views.pop(0))
                if views:
                    views[0] = views[0][sent:]
        except OSError as e:
            raise OutputError(f"page server {self.address}: the connection failed while sending: {_why(e)}") from None

    def _receive(self, size: int, what: str) -> bytes:
        data = b""
        try:
            while len(data) < size:
                chunk = self.sock.recv(size - len(data))
                if not chunk:
                    raise OutputError(f"page server {self.address}: closed the connection before {what}")
                data += chunk
        except TimeoutError:
            raise
        except OSError as e:
            raise OutputError(f"page server {self.address}: the connection failed at {what}: {_why(e)}") from None
        return data


def _dst_id(kind: int, image_id: int) -> int:
    return image_id << PS_TYPE_BITS | kind


def _why(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__
