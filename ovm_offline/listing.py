"""How `ovm-offline ps` shows processes on a terminal: a table or a tree, every guest-chosen
text made printable first."""

from __future__ import annotations

import dataclasses
import json

import click

from .errors import GuestDataError, MomentError
from .terminal import printable, say

__all__ = ["PS_CHECK_COLUMNS", "PS_COLUMNS", "print_table", "print_tree", "ps_row", "report_views", "show_listing"]

PS_COLUMNS = ("PID", "PPID", "THR", "S", "CPU", "NSPID", "CGROUP", "CONTAINER", "COMM")
PS_CHECK_COLUMNS = (*PS_COLUMNS[:-1], "VIEWS", "COMM")


def ps_row(p) -> tuple:
    comm = printable(f"[{p.comm}]" if p.kthread else p.comm)
    cgroup, container = printable(p.cgroup or "-"), printable(p.runtime_id or p.container or "-")
    return (p.pid, p.ppid, p.nthreads, p.state, p.cpus_text(), p.ns_pid, cgroup, container, comm)


def print_table(rows: list[tuple], header: tuple) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        say(
            "  ".join(
                str(v).ljust(w) if i == len(header) - 1 or isinstance(v, str) else str(v).rjust(w)
                for i, (v, w) in enumerate(zip(r, widths))
            ).rstrip()
        )


def print_tree(procs) -> None:
    by_pid = {p.pid: p for p in procs}
    children: dict[int, list] = {}
    for p in procs:
        parent = p.ppid if p.ppid in by_pid and p.ppid != p.pid else 0
        children.setdefault(parent, []).append(p)
    shown: set[int] = set()

    def show(root) -> None:
        # iterative: a hostile guest's chain of thousands of parents must not exhaust the stack
        stack = [(root, "", True, 0)]
        while stack:
            p, prefix, last, depth = stack.pop()
            shown.add(p.pid)
            branch = "" if depth == 0 else ("└─ " if last else "├─ ")
            extra = f" nspid={p.ns_pid}" if p.ns_pid != p.pid else ""
            extra += f" [{printable(p.runtime_id or p.container)}]" if p.container else ""
            say(f"{prefix}{branch}{p.pid} {printable(p.comm)} ({p.state}){extra}")
            kids = sorted((c for c in children.get(p.pid, []) if c.pid not in shown), key=lambda c: c.pid)
            inner = prefix + ("" if depth == 0 else ("   " if last else "│  "))
            stack.extend((c, inner, i == len(kids) - 1, depth + 1) for i, c in reversed(list(enumerate(kids))))

    for root in sorted(children.get(0, []), key=lambda c: c.pid):
        show(root)
    # processes whose parent chain loops are reached from no root: show them, and say so
    for p in sorted(procs, key=lambda p: p.pid):
        if p.pid not in shown:
            click.echo(f"ovm-offline: warning: the parent chain of PID {p.pid} loops; shown as a root", err=True)
            show(p)


def report_views(views) -> None:
    """What `ps --check` says after its listing: each disagreement between the kernel's views of
    its tasks on a line of its own, each view this kernel's ISF does not let it read, and an error
    (exit 4; exit 8 when the task lists were being changed at the pause) if any disagree."""
    for name, why in views.unavailable.items():
        click.echo(printable(f"ovm-offline: warning: the view {name} is not checked: {why}"), err=True)
    for d in views.disagreements:
        click.echo(printable(f"ovm-offline: check: {d}"), err=True)
    if not views.disagreements:
        return
    count = f"{len(views.disagreements)} disagreement(s) between the kernel's views of its tasks"
    if views.moment:
        raise MomentError(f"{count}, but {views.moment}: another moment of the guest may agree")
    raise GuestDataError(f"{count}: a damaged or altered guest (each is named above)")


def show_listing(listing, views, *, as_json: bool, tree: bool, no_kernel_threads: bool, container: str | None) -> None:
    """What `ps` prints of a `ProcessListing` (with `views`, a CrossView, for `ps --check`):
    warnings for what could not be read, the processes as asked, then the error that says the
    listing is incomplete or the views disagree."""
    from .inventory import matches_container

    procs = listing.processes
    for unread in listing.unread:
        click.echo(printable(f"ovm-offline: warning: {unread}"), err=True)
    for p in procs:
        for problem in dict.fromkeys(p.problems):  # the row is shown with what could be read
            click.echo(printable(f"ovm-offline: warning: PID {p.pid} ({p.comm}): {problem}"), err=True)
    if no_kernel_threads:
        procs = [p for p in procs if not p.kthread]
    if container:
        procs = [p for p in procs if matches_container(p, container)]
    if as_json:
        for p in procs:
            d = dataclasses.asdict(p)
            d["task_address"] = f"0x{p.task_address:x}"
            say(json.dumps(d, sort_keys=True))
    elif tree:
        print_tree(procs)
    elif views is not None:
        print_table([(*ps_row(p)[:-1], ",".join(p.views) or "-", ps_row(p)[-1]) for p in procs], PS_CHECK_COLUMNS)
    else:
        print_table([ps_row(p) for p in procs], PS_COLUMNS)
    if listing.cut is not None:  # what was read is shown; the exit code says the list is incomplete
        raise listing.cut
    if views is not None:
        report_views(views)
