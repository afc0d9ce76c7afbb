"""Disk images that carry a job into a guest (a tar on /dev/vda) and results out (/dev/vdb)."""

from __future__ import annotations

import io
import shlex
import tarfile
from pathlib import Path

GUEST_DIR = Path(__file__).resolve().parent / "guest"


def job_script(template: str, variables: dict[str, str | int | float]) -> bytes:
    header = "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in variables.items())
    return (header + (GUEST_DIR / template).read_text()).encode()


def write_input_disk(path: Path, members: dict[str, bytes | Path]) -> None:
    """A raw disk holding one tar stream that the guest's init unpacks from /dev/vda."""
    with open(path, "wb") as raw:
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name, content in members.items():
                if isinstance(content, Path):
                    tar.add(content, arcname=name)
                else:
                    info = tarfile.TarInfo(name)
                    info.size = len(content)
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(content))
        raw.write(b"\0" * (-raw.tell() % (1 << 20) + (1 << 20)))  # whole MiBs, a zeroed tail


def blank_output_disk(path: Path, size_mib: int) -> None:
    with open(path, "wb") as raw:
        raw.truncate(size_mib << 20)


def read_output_disk(path: Path, dest: Path) -> None:
    """Unpack the tar stream the guest wrote to /dev/vdb (the zeroed tail ends it)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode="r:") as tar:
        tar.extractall(dest, filter="tar")
