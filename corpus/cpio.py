"""A deterministic cpio "newc" writer: the initramfs format the kernel unpacks at boot."""

from __future__ import annotations

import io
import stat

TRAILER = "TRAILER!!!"


class NewcArchive:
    """Collects entries in memory and serialises them in insertion order."""

    def __init__(self) -> None:
        self._out = io.BytesIO()
        self._ino = 1
        self._names: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", nlink: int = 1) -> None:
        name = name.lstrip("/") or "."
        if name in self._names and name != TRAILER:
            return
        self._names.add(name)
        encoded = name.encode() + b"\0"
        fields = [self._ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._ino += 1
        self._out.write(header + encoded)
        self._pad()
        self._out.write(data)
        self._pad()

    def _pad(self) -> None:
        self._out.write(b"\0" * (-self._out.tell() % 4))

    def directory(self, name: str, mode: int = 0o755) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self._entry("/".join(parts[:i]), stat.S_IFDIR | mode, nlink=2)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        parent = name.strip("/").rpartition("/")[0]
        if parent:
            self.directory(parent)
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        parent = name.strip("/").rpartition("/")[0]
        if parent:
            self.directory(parent)
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def getvalue(self) -> bytes:
        self._entry(TRAILER, 0)
        self._out.write(b"\0" * (-self._out.tell() % 512))
        return self._out.getvalue()
