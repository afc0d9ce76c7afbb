"""Family `signals`: SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGKILL at a random moment of a dump
or a kdump's conversion to ELF (the CLI in a forked child). After any but SIGKILL the run must
end with 130 (or 0 if it was done) and leave no partial output; after SIGKILL the next run
must remove the leftover and say so."""

from __future__ import annotations

import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .harness import Case, Result, leftovers

#: a frame of our package in a traceback (not the editable install's finder in site-packages)
_OUR_FRAME = re.compile(r'File "[^"]*/ovm_offline/[^"]*"')


def interrupted_python_startup(code: int, stderr: str) -> bool:
    """Did SIGINT end the interpreter while it was still starting (site, runpy, the stdlib),
    before the first line of ovm_offline ran? Python's default handler is in place from its
    first instruction and prints its own KeyboardInterrupt traceback: no code of ours can
    run earlier than its package's first line (tens of ms on a loaded machine)."""
    text = stderr.strip()
    return code in (1, -signal.SIGINT) and text.endswith("KeyboardInterrupt") and not _OUR_FRAME.search(text)


def sigint_as_from_a_terminal() -> None:
    """A child's SIGINT as a shell in a terminal leaves it: default. A launcher started in the
    background by a non-interactive shell ignores SIGINT, its children inherit that across exec,
    and Python then installs no KeyboardInterrupt handler, so every SIGINT case would be a
    dump the signal never reached. (preexec_fn: runs in the forked child before exec.)"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Signals:
    family = "signals"

    def __init__(self, rec, work: Path) -> None:
        self.pid = rec.manifest["root_pid"]
        self.dump = rec.elf
        self.kdump = rec.kdumps.get("kdump-zlib")
        self.work = work / "signals"
        self.work.mkdir(parents=True, exist_ok=True)
        self._spans: dict[str, float] = {}  # how long each command runs undisturbed
        self.command = "dump"

    def _argv(self, target: Path) -> list[str]:
        if self.command == "convert":
            return [sys.executable, "-m", "ovm_offline", "convert", str(self.kdump), str(target)]
        dump = [sys.executable, "-m", "ovm_offline", "dump", str(self.dump), "--pid", str(self.pid)]
        return [*dump, "-D", str(target), "-q"]

    def _target(self) -> Path:
        return self.work / ("out.elf" if self.command == "convert" else "images")

    def _undisturbed_span(self) -> float:
        """Seconds the command takes on this recording, measured once: the signals land within
        it (a fixed window let a small guest's dump end before every signal)."""
        if self.command not in self._spans:
            started = time.monotonic()
            subprocess.run(self._argv(self.work / "measured"), capture_output=True, timeout=120)
            self._spans[self.command] = time.monotonic() - started
            subprocess.run(["rm", "-rf", str(self.work / "measured")], check=True)
        return self._spans[self.command]

    def run_case(self, index: int, rng: random.Random) -> Case:
        self.command = rng.choice(["dump", "convert"] if self.kdump is not None else ["dump"])
        span = self._undisturbed_span()
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir()
        target = self._target()
        sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGKILL])
        # from the interpreter's start to a third past the dump's end: runs of one recording take
        # about the same time, and a window that ended with the measured run left almost no
        # case finishing before its signal (all 20 refused on 6.12 and 7.2 in a CI run)
        delay = rng.uniform(0.05, max(0.1, span * 4 / 3))
        started = time.monotonic()
        child = subprocess.Popen(
            self._argv(target),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_as_from_a_terminal,
        )
        time.sleep(delay)
        child.send_signal(sig)
        try:
            _, stderr = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            what = f"{self.command}: {sig.name} after {delay:.3f} s"
            return Case(index, what, True, "hang", "no end within 60 s", 60.0, 0.0)
        seconds = time.monotonic() - started
        what = f"{self.command}: {sig.name} after {delay:.3f} s"
        result = self._judge(sig, child.returncode, stderr, target)
        return Case(index, what, True, result.outcome, result.detail, seconds, 0.0)

    def _judge(self, sig: signal.Signals, code: int, stderr: str, target: Path) -> Result:
        if self.command == "convert":
            whole = target.is_file() and target.stat().st_size > 0
        else:
            whole = target.is_dir() and (target / f"core-{self.pid}.img").is_file()
        if sig == signal.SIGKILL:
            if code not in (0, -signal.SIGKILL):
                return Result("internal error", f"exit {code}: {stderr.strip()[-200:]}")
            left = leftovers(self.work)
            if left:  # the next run must clean up and say so
                again = subprocess.run(self._argv(target), capture_output=True, text=True, timeout=60)
                if leftovers(self.work) or "left by a run that was killed" not in again.stderr:
                    return Result(
                        "partial output",
                        f"after SIGKILL {left}, the next run left {leftovers(self.work)}: {again.stderr.strip()[-200:]}",
                    )
            return Result("ok" if code == 0 else "refused", f"exit {code}")
        if code in (0, 130) and whole and not leftovers(self.work):
            # 130 with whole images: the signal came after they were in place (the rename
            # is atomic), which the run reports as interrupted; nothing is half-written
            return Result(
                "ok", "finished before the signal" if code == 0 else "interrupted after the images were whole"
            )
        nothing_written = not leftovers(self.work) and not target.exists()
        if code == -sig and not stderr.strip() and nothing_written:
            return Result("refused", "ended by the signal before Python ran a line of ours: nothing written")
        if sig == signal.SIGINT and interrupted_python_startup(code, stderr) and nothing_written:
            return Result("refused", "SIGINT in the interpreter's own start-up: its traceback, nothing written")
        if code != 130 or "interrupted" not in stderr:
            return Result("internal error", f"exit {code}: {stderr.strip()[-200:]}")
        if not nothing_written:
            return Result("partial output", f"{leftovers(self.work)} target exists: {target.exists()}")
        return Result("refused", "interrupted, nothing left")


__all__ = ["Signals", "interrupted_python_startup", "sigint_as_from_a_terminal"]
