"""Family `inputs`: what the host hands ovm-offline besides guest memory, made as a careless
user or a hostile local one leaves it (issue 34). Standard output on a full device, closed,
or a pipe whose reader left; `-D` where no directory can be made; a file in `--symbols` that
is a FIFO, a device, a sparse file of gigabytes or JSON nested beyond any parser; a recorded
live directory whose text files are FIFOs, devices or sparse giants; a flattened kdump whose
header is followed by gigabytes of holes; `convert` onto a FIFO, a link, a device or a
directory. Each case runs the CLI in a fresh interpreter. It must end within the time limit,
with 0 or one line from the exit-code table, and leave no partial output. A special file it
was pointed at must still be what it was."""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ovm_offline.errors import ExitCode
from ovm_offline.sources.kdump_format import FLAT_HEADER, FLAT_HEADER_SIZE, FLAT_TYPE, FLAT_VERSION

from .harness import CASE_TIMEOUT, Case, Result, leftovers

SPECIAL = ("fifo", "device", "sparse giant", "empty", "garbage")


def _special(path: Path, kind: str, rng: random.Random) -> None:
    """Make `path` a file of `kind` (one of SPECIAL)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to(rng.choice(["/dev/zero", "/dev/urandom", "/dev/null"]))
    elif kind == "sparse giant":
        with open(path, "wb") as f:
            f.truncate(rng.choice([17 << 20, 600 << 20, 64 << 30]))
    elif kind == "empty":
        path.touch()
    else:
        path.write_bytes(rng.randbytes(rng.randrange(1, 4096)))


class Inputs:
    family = "inputs"

    def __init__(self, rec, work: Path) -> None:
        self.rec = rec
        self.pid = rec.manifest["root_pid"]
        self.work = work / "inputs"
        self.kinds: dict[str, Callable[[random.Random], tuple[list[str], dict]]] = {
            "stdout": self._stdout,
            "-D": self._images_dir,
            "--symbols": self._symbols,
            "live directory": self._live_dir,
            "sparse kdump": self._sparse_kdump,
            "convert target": self._convert_target,
        }

    # -- the cases ---------------------------------------------------------------------------
    def _stdout(self, rng: random.Random) -> tuple[list[str], dict]:
        command = rng.choice([["ps"], ["ps", "--json"], ["ps", "--tree"], ["show"]])
        args = [*command, str(self.rec.golden if command == ["show"] else self.rec.elf)]
        return args, {"stdout": rng.choice(["/dev/full", "closed", "early-closed pipe"])}

    def _images_dir(self, rng: random.Random) -> tuple[list[str], dict]:
        file = self.work / "a-file"
        file.write_bytes(b"x")
        target = rng.choice(["/proc/ovm-images", "/proc/self/ovm-images", "/sys/ovm-images", f"{file}/images"])
        return ["dump", str(self.rec.elf), "--pid", str(self.pid), "-D", target, "-q"], {}

    def _symbols(self, rng: random.Random) -> tuple[list[str], dict]:
        directory = self.work / "symbols"
        directory.mkdir()
        name = directory / rng.choice(["a.json", "b.json.xz", "c.json.gz"])
        if rng.random() < 0.3:
            depth = rng.choice([2_000, 200_000])
            name.with_suffix(".json").write_text("[" * depth + "]" * depth)
        else:
            _special(name, rng.choice(SPECIAL), rng)
        return ["ps", str(self.rec.elf), "--symbols", str(directory)], {"special": name}

    def _live_dir(self, rng: random.Random) -> tuple[list[str], dict]:
        directory = self.work / "live"
        directory.mkdir()
        for entry in self.rec.live_dir.iterdir():
            if entry.name == "guest-ram":  # gigabytes: linked, not copied
                (directory / entry.name).symlink_to(entry)
            else:
                shutil.copy(entry, directory)
        name = directory / rng.choice(["mtree.txt", "registers.txt"])
        name.unlink()
        _special(name, rng.choice(SPECIAL), rng)
        return ["ps", str(directory)], {"special": name}

    def _sparse_kdump(self, rng: random.Random) -> tuple[list[str], dict]:
        path = self.work / "zeros.kdump"
        with open(path, "wb") as f:
            f.write(FLAT_HEADER.pack(b"makedumpfile", FLAT_TYPE, FLAT_VERSION).ljust(FLAT_HEADER_SIZE, b"\0"))
            f.write(rng.randbytes(rng.choice([0, 16, 4096])))
            f.truncate(rng.choice([1 << 30, 64 << 30]))
        if rng.random() < 0.5:
            return ["ps", str(path)], {}
        return ["convert", str(path), str(self.work / "out.elf")], {}

    def _convert_target(self, rng: random.Random) -> tuple[list[str], dict]:
        target = self.work / "out.elf"
        kind = rng.choice(["fifo", "device", "directory", "dangling link", "file"])
        if kind == "directory":
            target.mkdir()
        elif kind == "dangling link":
            target.symlink_to(self.work / "elsewhere")
        elif kind == "file":
            target.write_bytes(b"old")
        else:
            _special(target, kind, rng)
        kdump = self.rec.kdumps["kdump-zlib"]
        return ["convert", str(kdump), str(target), *(["--force"] if rng.random() < 0.7 else [])], {"special": target}

    # -- running one -------------------------------------------------------------------------
    def run_case(self, index: int, rng: random.Random) -> Case:
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        kind = rng.choice(sorted(self.kinds))
        args, how = self.kinds[kind](rng)
        special = how.get("special")
        before = os.lstat(special).st_mode if special is not None and os.path.lexists(special) else None
        started = time.monotonic()
        result = self._run(args, how.get("stdout"))
        seconds = time.monotonic() - started
        if result.outcome in ("ok", "refused"):
            after = os.lstat(special).st_mode if special is not None and os.path.lexists(special) else None
            if before is not None and not stat.S_ISREG(before) and after != before:
                result = Result(
                    "host damage", f"{special} was {stat.filemode(before)}, is now {after and stat.filemode(after)}"
                )
            elif leftovers(self.work):
                result = Result("partial output", ", ".join(leftovers(self.work)))
        what = f"{kind}: {' '.join(args)}" + (f" > {how['stdout']}" if how.get("stdout") else "")
        return Case(index, what.replace(str(self.work), "W"), True, result.outcome, result.detail, seconds, 0.0)

    def _run(self, args: list[str], stdout: str | None) -> Result:
        argv = [sys.executable, "-m", "ovm_offline", *args]
        out: int | object = subprocess.DEVNULL
        if stdout == "/dev/full":
            out = os.open("/dev/full", os.O_WRONLY)
        elif stdout == "early-closed pipe":
            pipe_reader, out = os.pipe()
            os.close(pipe_reader)  # the reader went away before a byte was written
        try:
            child = subprocess.Popen(
                argv,
                stdout=out if stdout != "closed" else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=(lambda: os.close(1)) if stdout == "closed" else None,
            )
        finally:
            if isinstance(out, int) and out > 2:
                os.close(out)
        try:
            _, stderr = child.communicate(timeout=CASE_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return Result("hang", f"no end within {CASE_TIMEOUT:.0f} s")
        lines = [line for line in stderr.splitlines() if not line.startswith("ovm-offline: warning:")]
        code = child.returncode
        if code == 0 and "Traceback" not in stderr:  # a status line ("wrote ...") may be there
            return Result("ok", "exit 0")
        if code in {int(c) for c in ExitCode} - {ExitCode.INTERNAL, ExitCode.INTERRUPTED, 0} and len(lines) == 1:
            return Result("refused", f"exit {code}: {lines[0][:200]}")
        return Result("internal error", f"exit {code}: {stderr.strip()[-300:]}")


__all__ = ["Inputs"]
