"""What a command reads: a dump file or recorded live snapshot, a live guest paused while it is
read, or a snapshot of a running guest (pre-copy or background) beside the images directory;
each with its kernel found."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from . import sources

__all__ = ["open_guest_kernel", "opened_guest", "snapshot_guest", "snapshot_source"]


@contextlib.contextmanager
def opened_guest(source, live, qmp, mem, vcpu_state, symbol_dirs):
    """(source, kernel) to read: a dump file or recorded live directory, or with --live the
    running guest, paused while the with-block runs. A live guest's RAM and kernel are found
    before it is paused (they do not move while it runs): its stop is only the reading."""
    if live:
        if source or not qmp or vcpu_state:
            raise click.UsageError(
                "--live takes --qmp SOCKET (and --mem FILE, if you name its RAM) instead of SOURCE (and reads the vCPUs itself)"
            )
        src = sources.open_live(qmp, mem, pause=False, qemu_pid=click.get_current_context().meta.get("qemu_pid"))
        try:
            prog = open_guest_kernel(src, symbol_dirs) if src.vmcoreinfo() is not None else None
            src.pause()
            # without its note, the kernel is found from the vCPUs' registers: a stopped guest's
            yield src, prog or open_guest_kernel(src, symbol_dirs)
        finally:
            src.close()
            if src.we_paused:
                click.echo(f"guest was paused for {src.paused_seconds:.3f} s and is running again", err=True)
        return
    if not source:
        raise click.UsageError("give a dump file or recorded live directory as SOURCE, or --live --qmp")
    with sources.open_source(source, vcpu_state) as opened:
        yield opened, open_guest_kernel(opened, symbol_dirs)


@contextlib.contextmanager
def snapshot_source(mode: str, directory: str, qmp: str, mem: str | None, quiet: bool):
    """A snapshot (`mode`: "precopy" or "background") of the running guest behind `qmp`, beside
    the images directory while the dump reads it."""
    from .output import scratch_directory

    with scratch_directory(directory, mode) as snapshot:
        report = _take_snapshot(mode, qmp, snapshot, mem)
        if not quiet:
            click.echo(report.line(), err=True)
        with sources.open_source(snapshot) as opened:
            opened.guest_runs_on = report.was_running
            yield opened


def _take_snapshot(mode: str, qmp: str, snapshot: Path, mem: str | None):
    if mem is None:
        from .sources.live import single_ram_file

        mem = single_ram_file(qmp, {"precopy": "pre-copy"}.get(mode, mode))
    if mode == "precopy":
        from .sources.precopy import precopy_snapshot

        return precopy_snapshot(qmp, snapshot, mem)
    from .sources.background import background_snapshot

    return background_snapshot(qmp, snapshot, mem)


def open_guest_kernel(src, symbol_dirs):
    # from the kernel layer itself: importing inventory (and what names containers) would add
    # to every dump's start-up
    from .kernel.core.identify import open_kernel

    return open_kernel(src, symbol_dirs)


@contextlib.contextmanager
def snapshot_guest(snapshot, symbol_dirs):
    """(source, kernel) of a snapshot_source()."""
    with snapshot as src:
        yield src, open_guest_kernel(src, symbol_dirs)
