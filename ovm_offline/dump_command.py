"""How the `dump` command runs, beside its Click definition in cli.py: the arguments it refuses
before anything is opened, the page server it connects to before a live guest is paused, and the
moments of a live guest it tries when one is refused only for what a thread was doing then."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import click

from .errors import MomentError
from .terminal import printable

__all__ = [
    "check_dump_arguments",
    "dump_attempts",
    "dump_opened",
    "page_destinations",
    "serve_lazy_pages",
    "snapshot_mode",
]


def page_destinations(options: dict, one_pause_live: bool):
    """The page server --page-server connects to and the listener --lazy-pages serves on (each
    None without its option), refused in one line where the options do not go together;
    connected, checked and bound before a live guest is paused."""
    address, layout = options.pop("page_server", None), options.pop("page_server_protocol", None)
    lazy, port, bind = options.pop("lazy_pages", False), options.pop("port", None), options.pop("address", None)
    if not lazy and (port is not None or bind is not None):
        raise click.UsageError("--port and --address take --lazy-pages")
    if layout is not None and address is None and not lazy:
        raise click.UsageError("--page-server-protocol takes --page-server or --lazy-pages")
    if lazy and ("prev_images_dir" in options or "pre_dump" in options):
        raise click.UsageError("--lazy-pages takes neither --prev-images-dir nor --pre-dump (as criu's)")
    if lazy:
        if address is not None:
            raise click.UsageError("give --page-server or --lazy-pages, not both")
        if port is None:
            raise click.UsageError("--lazy-pages takes --port: where `criu lazy-pages --page-server` connects")
        if one_pause_live:
            raise click.UsageError(
                "--lazy-pages would keep the guest paused until the destination has every page:"
                " take the dump with --background or --precopy"
            )
        from .criu.lazy_pages import LazyPagesServer

        return None, LazyPagesServer(bind or "0.0.0.0", port, layout or "3")
    if address is None:
        return None, None
    from .criu.page_server import PageServer, parse_address

    try:
        parse_address(address)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--page-server") from None
    options["page_server"] = PageServer.connect(address, layout or "3")
    return options["page_server"], None


def serve_lazy_pages(server, lazy, summary, quiet: bool) -> None:
    """After a lazy dump: its summary, then its lazy pages to `criu lazy-pages` until it closes."""
    if not quiet:
        for line in summary.lines():
            click.echo(printable(line), err=True)
        click.echo(f"serving {lazy.pages} lazy pages on {server.where} for `criu lazy-pages --page-server`", err=True)
    served = server.serve(lazy.read)
    if not quiet:
        click.echo(f"served {served.pages} of {lazy.pages} lazy pages in {served.requests} requests", err=True)


def dump_attempts(attempts: int, open_guest, dump_one, quiet: bool):
    """dump_one(src, prog) of the guest open_guest() opens, at up to `attempts` moments."""
    for attempt in range(1, attempts + 1):
        src = None
        try:
            with open_guest() as (src, prog):
                return dump_one(src, prog)
        except MomentError as refused:
            let_the_guest_run_on(refused, attempt, attempts, src, quiet)
    raise AssertionError("the last attempt returns or raises")


def let_the_guest_run_on(refused: MomentError, attempt: int, attempts: int, src, quiet: bool) -> None:
    """After a refused moment, let the guest run for another; raise the refusal when no other
    moment is to be tried: the last attempt, or a guest paused before we came (it stays at its
    moment)."""
    if attempt < attempts and src is not None and src.guest_runs_on:
        if not quiet:
            click.echo(printable(f"ovm-offline: moment {attempt} of {attempts} refused: {refused}"), err=True)
        time.sleep(random.uniform(*BETWEEN_ATTEMPTS_SECONDS))
        return
    if attempt == 1:
        raise refused
    raise MomentError(
        f"{refused} (the last of {attempt} moments tried; each was refused for what a thread was doing then)"
    ) from None


#: how long a live guest runs between two pauses when a moment was refused (random, so that a
#: thread in a periodic loop is not caught at the same point of it each time)
BETWEEN_ATTEMPTS_SECONDS = (0.05, 0.5)


def dump_opened(dumping, src, prog, pid, container, directory, quiet, lazy_server, **options):
    """The dump of an opened guest; with a lazy-pages server, its serving after (the source open)."""
    bar = None
    if not quiet and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(desc="pages", unit="B", unit_scale=True, leave=False)
    progress = (lambda done: bar.update(done - bar.n)) if bar else None
    lazy = dumping.LazyMemory(src) if lazy_server is not None else None
    try:
        if container is not None:
            pid = dumping.container_root(prog, container)
        summary = dumping.dump(src, prog, pid, directory, progress=progress, lazy=lazy, **options)
    finally:
        if bar:
            bar.close()
    if lazy is not None:
        serve_lazy_pages(lazy_server, lazy, summary, quiet)
    return summary


def snapshot_mode(precopy: bool, background: bool, live_guest: bool) -> str | None:
    """Which snapshot of a running guest the dump reads (None: it pauses the guest throughout)."""
    if precopy and background:
        raise click.UsageError("give --precopy or --background, not both")
    mode = "precopy" if precopy else "background" if background else None
    if mode and not live_guest:
        raise click.UsageError(f"--{mode} takes --live --qmp SOCKET (and no SOURCE)")
    return mode


def check_dump_arguments(pid, container, directory, force) -> None:
    """What dump refuses before it opens anything (a live guest is not paused for nothing)."""
    from .output import check_target

    if (pid is None) == (container is None):
        raise click.UsageError("give either --pid or --container")
    if not directory:
        raise click.BadParameter("the images directory name is empty", param_hint="-D")
    check_target(Path(directory).absolute(), force)  # before pausing a live guest
