"""The `ovm-offline` command. Each subcommand is a thin layer over the library; errors in the
input reach the user as one line and a non-zero exit status."""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from pathlib import Path

import click

from . import dump_command, sources
from .__main__ import terminated
from .criu.page_server import LAYOUTS as PAGE_SERVER_LAYOUTS
from .errors import INTERRUPTING_SIGNALS, ExitCode, OvmError, raised_by_an_interruption
from .listing import show_listing
from .opening import opened_guest, snapshot_guest, snapshot_source
from .terminal import ReaderGone, printable, printable_lines, say

__all__ = ["cli", "main"]  # the `ovm-offline` command (pyproject [project.scripts])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ovm-offline")
def cli() -> None:
    """Extract Linux processes from recorded or paused VM memory into CRIU images."""


class ByteSize(click.ParamType):
    """A size as criu's options take one: a number of bytes, or of KiB, MiB or GiB with K, M or G."""

    name = "SIZE"
    _UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper()
        unit = text[-1:] if text[-1:] in ("K", "M", "G") else ""
        number = text[: len(text) - len(unit)]
        if not number.isdigit() or len(number) > 15:
            self.fail(f"{value!r} is not a size (bytes, or a number with K, M or G)", param, ctx)
        return int(number) * self._UNITS[unit]


# --- sources ---------------------------------------------------------------------------------


def source_options(f):
    """SOURCE (a dump file or recorded live snapshot directory), or --live --qmp [--mem]."""
    f = click.option(
        "--mem",
        "mem",
        type=click.Path(),
        help="With --live: one of the guest's memory backends' files (found through --qmp if not given).",
    )(f)
    f = click.option(
        "--qemu-pid",
        type=click.IntRange(1),
        expose_value=False,
        callback=lambda ctx, _param, value: ctx.meta.__setitem__("qemu_pid", value),
        help="With --live: QEMU's process id, where the QMP socket's peer is not visible here (QEMU in another"
        " pid namespace); its /proc/PID/fd holds a memfd's guest RAM.",
    )(f)
    f = click.option("--qmp", "qmp", type=click.Path(), help="With --live: the guest's QMP socket.")(f)
    f = click.option("--live", is_flag=True, help="Read a running QEMU guest, paused while it is read.")(f)
    f = click.option(
        "--vcpu-state",
        "vcpu_state",
        type=click.Path(),
        help="With a dump file: HMP `info registers -a` output captured at the dump (FPU/SSE/AVX of running threads).",
    )(f)
    f = click.option(
        "--symbols",
        "symbol_dirs",
        multiple=True,
        type=click.Path(file_okay=False),
        help="Another directory of ISF files (searched before the bundled ones).",
    )(f)
    return click.argument("source", required=False, type=click.Path())(f)


# --- ps --------------------------------------------------------------------------------------


@cli.command()
@source_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per process, for scripts.")
@click.option("--tree", is_flag=True, help="Show the process tree.")
@click.option("--no-kernel-threads", is_flag=True, help="Leave out kernel threads.")
@click.option(
    "--container",
    help="Only processes of this container: as the CONTAINER column shows it, or a runtime's id"
    " (docker, podman, containerd, CRI-O, runc: whole or its first 12 characters).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Compare every view the kernel keeps of its tasks (task list both ways, pid idrs, children"
    " and thread lists, CPUs and run queues, pids held by files): list every process any view"
    " holds, with the views that hold it, and name each disagreement (exit 4).",
)
def ps(source, live, qmp, mem, vcpu_state, symbol_dirs, as_json, tree, no_kernel_threads, container, check) -> None:
    """List the guest's processes: PID, PPID, threads, state, the CPUs (vCPUs) its threads were
    on, PID inside its namespace, cgroup, container, command.

    \b
    ovm-offline ps guest.elf
    ovm-offline ps guest.kdump-zlib --tree
    ovm-offline ps guest.elf --check
    ovm-offline ps --live --qmp /run/vm/qmp.sock --json
    """
    from . import inventory

    views = None
    with opened_guest(source, live, qmp, mem, vcpu_state, symbol_dirs) as (src, prog):
        if check:
            checked = inventory.read_checked_process_list(prog)
            listing, views = checked.listing, checked.views
        else:
            listing = inventory.read_process_list(prog)
    show_listing(listing, views, as_json=as_json, tree=tree, no_kernel_threads=no_kernel_threads, container=container)


# --- dump ------------------------------------------------------------------------------------


@cli.command()
@source_options
@click.option("--pid", "-t", "pid", type=int, help="Global PID of the process to save (with its descendants).")
@click.option(
    "--container",
    help="Save this container's process tree: as the CONTAINER column of `ps` shows it, or a runtime's id"
    " (whole or its first 12 characters).",
)
@click.option(
    "--skip-unsupported", is_flag=True, help="Leave out open files ovm-offline cannot save yet instead of failing."
)
@click.option(
    "--images-dir",
    "-D",
    "directory",
    type=click.Path(),  # what it may be is check_target's to say, in one line
    required=True,
    help="Where to write the images; must not exist or be empty.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace a non-empty images directory (one holding only *.img files and criu's logs; never a file,"
    " a device or a symbolic link).",
)
@click.option(
    "--network-lock",
    type=click.Choice(["iptables", "nftables"]),
    default="iptables",
    show_default=True,
    help="What `criu restore` blocks TCP connections with while it restores them (criu's --network-lock;"
    " the restoring system needs that tool).",
)
@click.option(
    "--file-locks",
    is_flag=True,
    help="Save the file locks and leases the tree holds (criu's --file-locks: restore them with"
    " `criu restore --file-locks`); without it a tree holding one is refused, as criu dump refuses it.",
)
@click.option(
    "--ghost-limit",
    type=ByteSize(),
    default=None,
    show_default="1M, as criu's",
    help="The most a file unlinked while open may hold to be saved as a ghost file (criu's --ghost-limit;"
    " a number of bytes, or with K, M or G).",
)
@click.option(
    "--precopy",
    is_flag=True,
    help="With --live --qmp: stream guest RAM while the guest runs (QEMU's pre-copy migration, to a"
    " snapshot beside -D), stop it only for the last pages and a check of the snapshot against guest RAM"
    " (one memory backend).",
)
@click.option(
    "--background",
    is_flag=True,
    help="With --live --qmp, guest RAM on tmpfs or hugetlbfs: stop the guest only to read its registers and"
    " write-protect its RAM (QEMU's background snapshot), then stream guest RAM as it was then while it runs.",
)
@click.option(
    "--attempts",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="With --live: how many moments to pause the guest at when one is refused only for what a thread"
    " was doing then (exit status 8); the guest runs on for a moment between them.",
)
@click.option(
    "--accept-inconsistent-views",
    is_flag=True,
    help="Dump a tree the kernel's views of its tasks disagree about (see `ps --check`; refused otherwise):"
    " the images directory then names each disagreement in ovm-offline-inconsistent-views.txt.",
)
@click.option(
    "--prev-images-dir",
    metavar="DIR",
    help="An earlier dump of the same tree (a path relative to -D, as criu's): pages unchanged since"
    " are named in it (PE_PARENT, a `parent` link to DIR), not written; `criu restore` follows the chain.",
)
@click.option(
    "--pre-dump",
    is_flag=True,
    help="Write the tree's memory only, as `criu pre-dump` does: a parent for later dumps (--prev-images-dir).",
)
@click.option(
    "--page-server",
    metavar="HOST:PORT",
    help="Send the pagemaps and pages to a `criu page-server` listening there, which writes them where it"
    " runs (criu's --page-server); the other images go to -D, and no page is written on this side.",
)
@click.option(
    "--lazy-pages",
    is_flag=True,
    help="Post-copy, with --background or --precopy or a dump file: write the images without the lazy pages"
    " (as `criu dump --lazy-pages`), then serve those to `criu lazy-pages --page-server` on --port until it"
    " closes (every page sent, or the restored tree gone).",
)
@click.option("--port", type=click.IntRange(1, 65535), help="With --lazy-pages: the port to serve on.")
@click.option("--address", help="With --lazy-pages: the address to serve on (default: every IPv4 address).")
@click.option(
    "--page-server-protocol",
    type=click.Choice(sorted(PAGE_SERVER_LAYOUTS)),
    help="The destination criu's page-server header layout: criu 3.x's (24 bytes; the default) or criu"
    " 4.2's and later's (32 bytes). A page server's is checked on connecting, before a live guest is"
    " paused; the other is refused.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress and no summary.")
def dump(source, live, qmp, mem, vcpu_state, symbol_dirs, pid, container, directory, force, **choices) -> None:
    """Save a process (and the processes below it) as CRIU images that `criu restore` continues.

    \b
    ovm-offline dump guest.elf --pid 10000 -D images/
    ovm-offline dump guest.kdump-zlib -t 10000 -D images/ --force
    ovm-offline dump --live --qmp /run/vm/qmp-tool.sock -t 10000 -D images/
    ovm-offline dump --live --precopy --qmp /run/vm/qmp-tool.sock -t 10000 -D images/
    ovm-offline dump --live --background --qmp /run/vm/qmp-tool.sock --mem /dev/shm/vm-ram -t 10000 -D images/
    ovm-offline dump --live --qmp /run/vm/qmp-tool.sock -t 10000 -D images/ --attempts 10
    ovm-offline dump guest.elf --container "pidns:4026532172 cgroup:/ovmbox" -D images/
    ovm-offline dump guest.elf --pid 10000 --network-lock nftables -D images/
    ovm-offline dump guest.elf --pid 10000 --file-locks -D images/
    ovm-offline dump guest.elf --pid 10000 --ghost-limit 64M -D images/
    ovm-offline dump guest.elf --pid 10000 --accept-inconsistent-views -D images/
    ovm-offline dump --live --background --qmp /run/vm/qmp-tool.sock -t 10000 -D images/1 --pre-dump
    ovm-offline dump --live --qmp /run/vm/qmp-tool.sock -t 10000 -D images/2 --prev-images-dir ../1
    ovm-offline dump --live --qmp /run/vm/qmp-tool.sock -t 10000 -D images/ --page-server 10.0.0.2:27000
    ovm-offline dump guest.elf -t 10000 -D images/ --page-server 10.0.0.2:27000 --page-server-protocol 4.2
    ovm-offline dump --live --background --qmp /run/vm/qmp-tool.sock -t 10000 -D images/ --lazy-pages --port 27002
    """
    from . import dump as dumping

    quiet, attempts = choices.pop("quiet"), choices.pop("attempts")
    snapshot = dump_command.snapshot_mode(
        choices.pop("precopy"), choices.pop("background"), live and qmp and not source and not vcpu_state
    )
    dump_command.check_dump_arguments(pid, container, directory, force)
    if not live:
        if click.get_current_context().get_parameter_source("attempts") == click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("--attempts takes --live: a dump file holds one moment")
        attempts = 1
    # the library's own defaults where an option was not given
    options = {"force": force} | {k: v for k, v in choices.items() if v is not None and v is not False}
    if "prev_images_dir" in options:  # before a live guest is paused
        dumping.parent_images(directory, options["prev_images_dir"], pid, "page_server" in options)
    server, lazy_server = dump_command.page_destinations(options, bool(live and not snapshot))

    def open_guest():
        opened = snapshot_source(snapshot, directory, qmp, mem, quiet) if snapshot else None
        if opened:
            return snapshot_guest(opened, symbol_dirs)
        return opened_guest(source, live, qmp, mem, vcpu_state, symbol_dirs)

    def dump_one(src, prog):
        return dump_command.dump_opened(dumping, src, prog, pid, container, directory, quiet, lazy_server, **options)

    try:
        summary = dump_command.dump_attempts(attempts, open_guest, dump_one, quiet)
    finally:
        for connection in (server, lazy_server):
            if connection is not None:
                connection.close()
    if not quiet and lazy_server is None:  # a lazy dump said it before serving
        for line in summary.lines():
            click.echo(printable(line), err=True)


# --- convert, show, diff ---------------------------------------------------------------------


@cli.command()
@click.argument("kdump", type=click.Path())
@click.argument("elf_out", type=click.Path())
@click.option("--force", is_flag=True, help="Replace ELF_OUT if it exists.")
def convert(kdump, elf_out, force) -> None:
    """Convert a kdump-compressed dump (as QEMU writes it) to an ELF core that Volatility, drgn
    and crash can open.

    \b
    ovm-offline convert guest.kdump-zlib guest.elf
    """
    from .output import check_file_target
    from .sources.convert import kdump_to_elf

    check_file_target(Path(elf_out).absolute(), force)  # refused before the dump is read
    with sources.open_source(kdump) as src:
        if not isinstance(src, sources.KdumpSource):
            raise OvmError(f"{kdump} is a {src.format_name} file, not a kdump-compressed dump")
        out = kdump_to_elf(src, elf_out, force)
    click.echo(f"wrote {out} ({os.path.getsize(out) / 2**20:.1f} MiB)", err=True)


@cli.command()
@click.argument("directory", type=click.Path(exists=True))
@click.argument("names", nargs=-1)
def show(directory, names) -> None:
    """Print CRIU images readably (like `crit show`): every image of DIRECTORY, just NAMES
    of it, or one image file.

    \b
    ovm-offline show images/
    ovm-offline show images/ core-10000.img mm-10000.img
    ovm-offline show images/sk-queues.img
    """
    from .criu.show import show_dir

    if os.path.isfile(directory):
        if names:
            raise OvmError(f"{directory} is an image file; NAMES go with a directory")
        directory, names = os.path.dirname(directory) or ".", (os.path.basename(directory),)
    say(show_dir(directory, list(names) or None))


@cli.command()
@click.argument("ours", type=click.Path(exists=True, file_okay=False))
@click.argument("theirs", type=click.Path(exists=True, file_okay=False))
@click.option("--show-ignored", is_flag=True, help="Also list differences in fields that cannot match.")
def diff(ours, theirs, show_ignored) -> None:
    """Compare two CRIU image directories entry by entry, field by field, pages by content.
    Exits 1 if they differ beyond the documented fields that cannot match.

    \b
    ovm-offline diff ours/ golden/
    """
    from .criu.diff import diff_dirs

    result = diff_dirs(ours, theirs)
    if show_ignored:
        for difference, rule in result.ignored:
            say(printable(f"ignored: {difference}  ({rule.reason})"))
    say(printable_lines(result.report()), nl=False)
    sys.exit(result.exit_status)


class _PrintableFormatter(logging.Formatter):
    """Warnings quote guest names: each line made printable."""

    def format(self, record: logging.LogRecord) -> str:
        return printable_lines(super().format(record))


# --- service ---------------------------------------------------------------------------------


@cli.command()
@click.argument("socket_path", metavar="SOCKET", type=click.Path())
def service(socket_path) -> None:
    """Stay resident, and run each `ovm-offline` command started with OVM_OFFLINE_SERVICE=SOCKET
    without its start-up (about 0.1 s of imports). Only your own uid's commands are taken;
    SIGTERM or Ctrl-C stops it."""
    from .service import serve

    serve(socket_path)


def _say_warnings() -> None:
    """The library's warnings (logger "ovm_offline") as one stderr line each."""
    handler = logging.StreamHandler()
    handler.setFormatter(_PrintableFormatter("ovm-offline: warning: %(message)s"))
    logger = logging.getLogger("ovm_offline")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False


def main() -> None:
    for signum in INTERRUPTING_SIGNALS[1:]:  # SIGINT raises KeyboardInterrupt already
        signal.signal(signum, terminated)
    _say_warnings()
    try:
        cli(standalone_mode=False)
    except OvmError as e:
        click.echo(f"ovm-offline: {printable(str(e))}", err=True)  # messages quote guest names
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("ovm-offline: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("ovm-offline: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except (BrokenPipeError, ReaderGone):
        # `ovm-offline ps dump | head`: the reader went away; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as e:  # a bug of ours, not bad input: say so, and where to look
        if raised_by_an_interruption(e):
            click.echo("ovm-offline: interrupted", err=True)
            sys.exit(ExitCode.INTERRUPTED)
        if os.environ.get("OVM_DEBUG"):
            traceback.print_exc()
        click.echo(f"ovm-offline: internal error: {type(e).__name__}: {e} (set OVM_DEBUG=1 for a traceback)", err=True)
        sys.exit(ExitCode.INTERNAL)


if __name__ == "__main__":
    main()
