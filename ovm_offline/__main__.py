"""`ovm-offline` and `python -m ovm_offline`: Ctrl-C and SIGTERM are an interruption from the
first moment, before the CLI's imports (a tenth of a second) have run, to the last: once the
work is done (or undone), a late signal no longer turns the run into a crash."""

try:
    import os
    import signal
    import sys

    from .dataclass_code import install as install_dataclass_code
    from .errors import INTERRUPTING_SIGNALS

    # before the CLI defines its dataclasses: their methods' compiled code from the user cache
    install_dataclass_code()
except KeyboardInterrupt:
    # Ctrl-C while `signal` itself loads (its enums take milliseconds): nothing is open yet.
    # os._exit, not SystemExit: the interpreter remembers a KeyboardInterrupt raised during an
    # import and, on a normal exit, kills itself with SIGINT (exit -2 after our message).
    import os
    import sys

    sys.stderr.write("ovm-offline: interrupted\n")
    sys.stderr.flush()
    os._exit(130)

__all__ = ["main", "terminated"]


def terminated(signum: int, frame: object) -> None:
    """SIGTERM, SIGHUP and SIGQUIT unwind like Ctrl-C: partial output is removed and a paused
    live guest resumed."""
    raise KeyboardInterrupt


def _interruption_not_lost(unraisable: "sys.UnraisableHookArgs") -> None:
    """The interpreter cannot raise from some callbacks (a weakref callback of the import
    system's module locks): a signal's KeyboardInterrupt raised there would be printed with a
    traceback and dropped, and the run go on. Deliver it again, where it unwinds."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
        return
    sys.__unraisablehook__(unraisable)


def _ignore_signals() -> None:
    for signum in INTERRUPTING_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def main() -> None:
    try:
        sys.unraisablehook = _interruption_not_lost
        for signum in INTERRUPTING_SIGNALS[1:]:  # SIGINT raises KeyboardInterrupt already
            signal.signal(signum, terminated)
        try:
            from .cli import main as cli_main

            cli_main()
            code: int | str | None = 0
        except SystemExit as exc:
            code = exc.code
        _ignore_signals()
    except (KeyboardInterrupt, Exception) as exc:
        if not isinstance(exc, KeyboardInterrupt):
            from .errors import raised_by_an_interruption

            if not raised_by_an_interruption(exc):  # the CLI says what else went wrong itself
                raise
        _ignore_signals()
        sys.stderr.write("ovm-offline: interrupted\n")
        code = 130
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
        code = 1
    # A signal caught just before it was ignored may still be pending in the interpreter, to
    # be raised during its shutdown: end here, the output flushed, without one. (Skipping the
    # shutdown also saves freeing every object: 25 ms of a 0.2 s dump.) atexit is skipped too.
    from .dataclass_code import save as save_dataclass_code

    save_dataclass_code()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with that descriptor closed
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    main()
