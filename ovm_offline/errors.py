"""Errors that reach the user as one line and a non-zero exit, never a traceback."""


class OvmError(Exception):
    """Base for every error the CLI reports as a one-line message."""

    exit_code = 1


class SourceError(OvmError):
    """The memory source (dump file or live guest) is unreadable, truncated or corrupt."""

    exit_code = 2


class SymbolError(OvmError):
    """No usable symbol table (ISF) for the guest kernel."""

    exit_code = 3


class GuestDataError(OvmError):
    """Guest kernel data is inconsistent: a looping list, an absurd length, a bad pointer."""

    exit_code = 4


class UnsupportedError(OvmError):
    """The guest uses something ovm-offline cannot save yet."""

    exit_code = 5
