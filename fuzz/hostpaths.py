"""Family `paths`: what `-D` names on the host, made as a careless user or a hostile local
one leaves it (absent, empty, an images directory, another directory, a file, a FIFO, a
device, symlinks of every kind, a missing parent, an empty or over-long name, leftovers of
killed runs), with and without --force. The CLI runs in the child as a user runs it; the
parent checks that nothing outside the target changed and that the target is either as it
was or a whole images directory."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import stat
import sys
from pathlib import Path

from ovm_offline import cli

from .harness import Mutation, Result

KINDS = (
    "absent",
    "empty dir",
    "images dir",
    "other dir",
    "file",
    "fifo",
    "symlink to dir",
    "symlink to file",
    "dangling symlink",
    "symlink to device",
    "missing parent",
    "empty name",
    "long name",
    "newline name",
    "dead run's leftover",
    "live run's leftover",
)


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root` (not following symlinks) with its kind and content hash."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(path.relative_to(root))] = "file " + hashlib.sha256(path.read_bytes()).hexdigest()[:12]
            elif stat.S_ISLNK(st.st_mode):
                out[str(path.relative_to(root))] = "link " + os.readlink(path)
            else:
                out[str(path.relative_to(root))] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return out


class Paths:
    family = "paths"

    def __init__(self, rec, work: Path) -> None:
        self.pid = rec.manifest["root_pid"]
        self.dump = rec.elf
        self.sandbox = work / "sandbox"
        self.outside = work / "outside"  # what symlinks point at: must never change
        self.argv: list[str] = []
        self.target: Path | None = None
        self.kind = ""
        self.before: dict[str, str] = {}
        self.exit_code: int | None = None

    def _reset(self) -> None:
        for d in (self.sandbox, self.outside):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        (self.outside / "dir").mkdir()
        (self.outside / "dir" / "keep.txt").write_text("keep")
        (self.outside / "file.txt").write_text("keep")
        (self.sandbox / "neighbour.txt").write_text("neighbour")

    def operation(self) -> str:
        """The CLI's own main(), as `ovm-offline dump ...` runs it; the fingerprint is its exit."""
        sys.argv = ["ovm-offline", *self.argv]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            cli.main()
        except SystemExit as exc:
            return f"exit {exc.code}"
        return "exit 0"

    def mutation(self, rng: random.Random) -> Mutation:
        self._reset()
        kind = rng.choice(KINDS)
        force = rng.random() < 0.5
        target = self.sandbox / "images"
        if kind == "empty dir":
            target.mkdir()
        elif kind == "images dir":
            target.mkdir()
            (target / "core-1.img").write_bytes(b"old")
        elif kind == "other dir":
            target.mkdir()
            (target / "thesis.tex").write_text("precious")
        elif kind == "file":
            target.write_text("precious")
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "symlink to dir":
            target.symlink_to(self.outside / "dir")
        elif kind == "symlink to file":
            target.symlink_to(self.outside / "file.txt")
        elif kind == "dangling symlink":
            target.symlink_to(self.outside / "nothing")
        elif kind == "symlink to device":
            target.symlink_to("/dev/null")
        elif kind == "missing parent":
            target = self.sandbox / "no" / "such" / "images"
        elif kind == "long name":
            target = self.sandbox / ("x" * 300)
        elif kind == "newline name":
            target = self.sandbox / "ima\nges"
        elif kind == "dead run's leftover":
            (self.sandbox / ".images.partial-999999999-abc").mkdir()
            (self.sandbox / ".images.partial-999999999-abc" / "core-1.img").write_bytes(b"x")
        elif kind == "live run's leftover":
            (self.sandbox / f".images.partial-{os.getppid()}-abc").mkdir()
        self.target = target
        self.kind = kind
        name = "" if kind == "empty name" else str(target)
        self.argv = ["dump", str(self.dump), "--pid", str(self.pid), "-D", name, "-q"] + (["--force"] if force else [])
        self.before = snapshot(self.sandbox.parent)
        return Mutation(self.family, f"-D {kind}{' --force' if force else ''}", True, lambda: None)

    def classify(self, result: Result) -> Result:
        """The CLI's exit status: 0 ok, a code of the table refused, 70 or a crash internal."""
        if result.outcome != "ok":
            return result
        code = result.fingerprint.split()[-1]
        if code == "0":
            return result
        if code in ("70", "None") or not code.isdigit():
            return Result("internal error", f"exit {code}", result.fingerprint)
        return Result("refused", f"exit {code}", result.fingerprint)

    def check_host(self, fingerprint: str) -> str | None:
        """What the run did on the host that it must not have done, if anything."""
        after = snapshot(self.sandbox.parent)
        succeeded = fingerprint == "exit 0"
        rel = str(self.target.relative_to(self.sandbox.parent)) if self.target else ""
        may_succeed = ("absent", "empty dir", "newline name", "dead run's leftover", "live run's leftover")
        if succeeded and self.kind not in may_succeed and not (self.kind == "images dir" and "--force" in self.argv):
            return f"dump succeeded over {self.kind}"
        for path in sorted(set(self.before) | set(after)):
            inside = path == rel or path.startswith(rel + "/")
            if inside and succeeded:
                continue
            if ".partial-999999999-" in path and path not in after:
                continue  # a killed run's leftover: removed, as it should be
            if self.before.get(path) != after.get(path):
                if ".partial-" in path and path not in self.before:
                    return f"partial output left: {path}"
                return f"{path}: {self.before.get(path)} -> {after.get(path)}"
        if succeeded and not (self.target / f"core-{self.pid}.img").is_file():
            return "success without an images directory"
        return None

    def after_case(self) -> None:
        pass
