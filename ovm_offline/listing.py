"""How `ovm-offline ps` shows processes on a terminal: a table or a tree, every guest-chosen
text made printable first."""

from __future__ import annotations

import click

from .terminal import printable, say

__all__ = ["print_table", "print_tree", "ps_row"]


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
