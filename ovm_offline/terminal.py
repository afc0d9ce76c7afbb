"""What reaches the user's terminal or standard output: guest-chosen text made printable, and
standard output's own write errors (a full disk, a closed descriptor) said in one line."""

from __future__ import annotations

import errno
import sys

import click

from .errors import OutputError

__all__ = ["ReaderGone", "escaped_unprintable", "printable", "printable_lines", "say"]


def printable(text: str) -> str:
    """Guest-chosen text (a comm, a cgroup name) for a terminal: every character that is not
    printable shown as '?', as procps does. Python's "not printable" is Unicode's Other and
    Separator classes but the space: C0 and C1 controls, and the format characters (Cf: the
    bidi overrides U+202E and U+2066-2069 that make a listing read other than it is)."""
    return text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)


def printable_lines(text: str) -> str:
    """printable() of each line of `text`, its line breaks kept."""
    return "\n".join(map(printable, text.split("\n")))


def escaped_unprintable(json_text: str) -> str:
    """JSON text with every character that is not printable written as its \\uXXXX escape
    (json.dumps with ensure_ascii=False escapes only C0): still the same JSON value."""
    if json_text.isprintable():
        return json_text
    return "".join(c if c.isprintable() else _json_escape(c) for c in json_text)


def _json_escape(c: str) -> str:
    code = ord(c)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a surrogate pair, as JSON writes a character beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class ReaderGone(Exception):
    """Standard output's reader went away (`ovm-offline ps | head`): the CLI ends quietly, 0."""


def say(text: str, nl: bool = True) -> None:
    """Write `text` to standard output; a write that fails (ENOSPC on /dev/full, EIO, EBADF)
    is an OutputError naming standard output. A reader that went away (EPIPE) is ReaderGone,
    on which the CLI ends quietly, as `ps | head` expects."""
    if sys.stdout is None:  # started with descriptor 1 closed (`ovm-offline ps >&-`)
        raise OutputError("cannot write standard output: it is closed")
    try:
        click.echo(text, nl=nl)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            # not an OSError any more: click's own handler would end the run with exit 1
            raise ReaderGone from None
        raise OutputError(f"cannot write standard output: {exc.strerror or exc}") from None
