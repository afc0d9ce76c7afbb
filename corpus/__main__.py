"""`python -m corpus record|restore|list`: record guest dumps and golden images, restore images."""

from __future__ import annotations

import sys

import click

from . import kernels, matrix, workloads
from .errors import CorpusError


@click.group()
def main() -> None:
    """Record and restore corpus guests."""


@main.command("list")
def list_cmd() -> None:
    """The kernels and workloads the corpus knows."""
    for k in kernels.KERNELS.values():
        runs = len(matrix.workloads_on(k.name))
        scope = "every standard workload" if runs == len(workloads.STANDARD) else f"{runs} standard workloads"
        click.echo(f"kernel   {k.name:<10} {k.package}={k.version}  ({scope})")
    for w in workloads.WORKLOADS.values():
        standard = "standard" if w.name in workloads.STANDARD else "on demand"
        click.echo(f"workload {w.name:<16} {w.ram_mib:>5} MiB  {standard:<9} {w.moment:<7}  {w.description}")


@main.command()
@click.option("--kernel", "kernel_names", multiple=True, help="(default: every pinned kernel)")
@click.option(
    "--workload",
    "workload_names",
    multiple=True,
    help="(default: the standard workloads a run covers on each kernel; all of them with OVM_ALL_KERNELS=1)",
)
@click.option("--force", is_flag=True, help="Record again even if the cache has it.")
@click.option(
    "--jobs",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    help="Guests recording at once (most of a recording is the guest waiting, so 2 on 2 cores take half the time).",
)
def record(kernel_names: tuple[str, ...], workload_names: tuple[str, ...], force: bool, jobs: int) -> None:
    """Record dumps, a live RAM snapshot and golden criu images (cached by their inputs)."""
    from .recorder import record_many

    wanted = [
        (k, w, take)
        for k in kernel_names or kernels.KERNELS
        for w in workload_names or matrix.workloads_on(k)
        for take in range(workloads.get_workload(w).takes if workload_names else matrix.takes_on(k, w))
    ]
    for root in record_many(wanted, jobs, force=force, log=lambda m: click.echo(m, err=True)):
        click.echo(root)


@main.command()
@click.option("--kernel", "kernel_name", required=True)
@click.option("--workload", "workload_name", required=True)
@click.option(
    "--images", type=click.Path(exists=True, file_okay=False), help="Images to restore (default: the golden ones)."
)
@click.option("--take", default=0, show_default=True, help="Which recording of an as-is workload.")
def restore(kernel_name: str, workload_name: str, images: str | None, take: int) -> None:
    """Restore images in a fresh guest and judge the workload's run."""
    from pathlib import Path

    from .recorder import record as record_one
    from .restore import restore as restore_one

    rec = record_one(kernel_name, workload_name, log=lambda m: click.echo(m, err=True), take=take)
    result = restore_one(rec, Path(images) if images else rec.golden)
    click.echo(f"{'PASS' if result.ok else 'FAIL'} {workload_name} on {kernel_name}: {result.detail}")
    sys.exit(0 if result.ok else 1)


def run() -> None:
    try:
        main(standalone_mode=False)
    except CorpusError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)


if __name__ == "__main__":
    run()
