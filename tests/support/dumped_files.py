"""The open files of one dumped process, read back from an image directory, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ovm_offline.criu import images


def process_files(directory: Path, pid: int = 10000) -> tuple[dict[int, Any], dict[int, Any]]:
    """(files.img entries by file id, the process's fdinfo entries by fd)."""
    files = {e.id: e for e in images.read_image(directory / images.FILES.filename()).entries}
    ids = images.read_image(directory / images.IDS.filename(pid)).entries[0]
    fdinfo = {e.fd: e for e in images.read_image(directory / images.FDINFO.filename(ids.files_id)).entries}
    return files, fdinfo
