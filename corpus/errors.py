"""Errors of the corpus tooling, reported as one line by `python -m corpus`."""


class CorpusError(Exception):
    """A corpus step failed; the message says which and why."""


class GuestError(CorpusError):
    """The guest failed to boot, timed out, or its job failed. Carries the serial log tail."""

    def __init__(self, message: str, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(message + (f"\n--- guest serial log (tail) ---\n{log_tail}" if log_tail else ""))


class GuestLost(GuestError):
    """The guest failed by itself, before or beside its job (never a failure of the workload
    or of criu): the harness tries such a guest once more."""


class GuestStuck(GuestLost):
    """The guest did not start its job within the boot timeout: its kernel or init hung before
    the job ran (seen once under TCG with -cpu max, with nothing on the console)."""


class GuestDied(GuestLost):
    """QEMU exited by itself: the guest rebooted or its kernel panicked (under TCG a 6.12 guest
    has been seen to panic in the network stack while criu ran), not a failure of the job."""


class GuestBroken(GuestLost):
    """The guest kernel said it failed by itself while QEMU ran on: an oops, or a CPU stuck in
    the kernel for minutes (under TCG both vCPUs of a 6.1 guest were seen stuck in runc and
    criu for ten minutes, a 5.10 guest's in runc in reports of 22 s each, and a 6.12 guest took
    an int3 oops in patched kernel text). A soft lockup of seconds is only a loaded host
    starving a vCPU, and passes."""
