"""python -m fuzz: run the mutation fuzzer over corpus recordings and write its report.

    python -m fuzz --family structures --kernel 6.1 --cases 10000 --seed 1 --report fuzz-report.json

Each case is classified (see fuzz/harness.py); the exit status is 1 if any case hung, died,
changed a result silently, left partial output or touched the host."""

from __future__ import annotations

import functools
import json
import os
import pickle
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from corpus import recorder

from .containers import Containers
from .evidence import Evidence
from .harness import BAD, MAX_RSS_MIB, Case, Mutation, Report, classify, fresh_process_mib, leftovers, run_in_child
from .hostpaths import Paths
from .inputs import Inputs
from .isf import Isf
from .mountns import MountNamespaces
from .nulls import Nulls
from .runtimes import Runtimes
from .signals import Signals
from .structures import Structures
from .terminal import Terminal
from .views import Views

FAMILIES = {
    "containers-elf": lambda rec, work: Containers(rec, work, "elf"),
    "containers-kdump": lambda rec, work: Containers(rec, work, "kdump"),
    "structures": Structures,
    "evidence": Evidence,
    "nulls": Nulls,
    "terminal": Terminal,
    "isf": Isf,
    "paths": Paths,
    "inputs": Inputs,
    "signals": Signals,
    "runtimes": Runtimes,
    "mountns": MountNamespaces,
    "views": Views,
}


def run_family(
    name: str,
    kernel: str,
    workload: str,
    cases: int,
    seed: int,
    work: Path,
    progress,
    max_rss_mib: float | None = MAX_RSS_MIB,
) -> Report:
    """`cases` cases of family `name` on the recording of `workload` on `kernel`. Memory is
    judged (`max_rss_mib`) only where this process is a fresh one: inside a test runner the
    children inherit the runner's memory and their growth is not ovm-offline's alone."""
    rec = recorder.record(kernel, workload, log=lambda m: None)
    family = FAMILIES[name](rec, work)
    report = Report(name, kernel, seed)
    rng = random.Random(f"{name}/{kernel}/{seed}")
    if isinstance(family, (Signals, Inputs)):  # each case a fresh interpreter, judged by the family
        for i in range(cases):
            report.add(family.run_case(i, rng))
            progress(report)
        return report
    baseline, _, _ = run_in_child(family.operation, Mutation(name, "none", False))
    # a child shares this parent's memory (the parsed ISF, say): count how far it grew, on
    # top of what a fresh ovm-offline process holds before it reads anything
    fresh_rss = fresh_process_mib()
    if not getattr(family, "judges_memory", True):
        max_rss_mib = None
    if baseline.outcome != "ok":
        raise click.ClickException(f"{name} on {kernel}: the unmutated run failed: {baseline.detail}")
    for i in range(cases):
        mutation = family.mutation(rng)
        try:
            result, seconds, rss = run_in_child(family.operation, mutation)
            if isinstance(family, Paths):  # the result is the CLI's exit status
                result = family.classify(result)
            else:
                result = classify(result, mutation, baseline.fingerprint, rss + fresh_rss, max_rss_mib)
            damage = family.check_host(result.fingerprint) if isinstance(family, Paths) else None
            left = leftovers(work)
            if damage:
                result.outcome, result.detail = ("partial output" if "partial" in damage else "host damage"), damage
            elif left:
                result.outcome, result.detail = "partial output", ", ".join(left)
        finally:
            family.after_case()
        report.add(
            Case(
                i,
                mutation.what,
                mutation.structural,
                result.outcome,
                result.detail[:300],
                round(seconds, 3),
                round(rss + fresh_rss, 1),
            )
        )
        progress(report)
    return report


def _in_own_process(run: Callable[[], Report]) -> Report:
    """`run()` in a forked process of its own: a family's cases fork from a parent that holds
    only that family's setup (one that parsed an ISF before would lend every later case its
    memory)."""
    with tempfile.NamedTemporaryFile(prefix="ovm-fuzz-report-") as out:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                out.write(pickle.dumps(run()))
                out.flush()
                code = 0
            except BaseException:  # noqa: BLE001 - said below, by the parent
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise click.ClickException("a family's run failed (its traceback is above)")
        return pickle.loads(Path(out.name).read_bytes())


@click.command()
@click.option("--family", "families", multiple=True, type=click.Choice(sorted(FAMILIES)), help="Default: all.")
@click.option("--kernel", "kernels", multiple=True, default=("6.1", "6.12"), show_default=True)
@click.option("--workload", default="counter", show_default=True, help="The corpus recording to mutate.")
@click.option("--cases", default=1000, show_default=True, help="Cases per family and kernel.")
@click.option("--seed", default=1, show_default=True)
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the JSON report here.")
def main(families, kernels, workload, cases, seed, report_path) -> None:
    """Mutate corpus recordings and classify what ovm-offline does with each case."""
    summaries = []
    bad = 0
    for kernel in kernels:
        for name in families or sorted(FAMILIES):
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="ovm-fuzz-") as tmp:

                def progress(report: Report) -> None:
                    n = len(report.cases)
                    last = report.cases[-1]
                    if last.outcome in BAD:  # now, not only in the report at the end of a long run
                        click.echo(f"  case {last.index}: {last.outcome}: {last.mutation}: {last.detail}", err=True)
                    if n % 100 == 0 or n == cases:
                        click.echo(f"  {report.family} {report.kernel}: {n}/{cases} {report.counts()}", err=True)

                run = functools.partial(run_family, name, kernel, workload, cases, seed, Path(tmp), progress)
                report = _in_own_process(run)
            summary = report.summary()
            summary["seconds"] = round(time.monotonic() - started, 1)
            summaries.append(summary)
            bad += sum(summary["outcomes"][o] for o in BAD)
            counts = {k: v for k, v in summary["outcomes"].items() if v}
            click.echo(
                f"{name:17} {kernel:5} {len(report.cases):6} cases {summary['seconds']:7.1f} s  max RSS {summary['max_rss_mib']} MiB  {counts}"
            )
            for failure in report.failures()[:5]:
                click.echo(f"    {failure.outcome}: #{failure.index} {failure.mutation}: {failure.detail}")
    if report_path:
        Path(report_path).write_text(
            json.dumps({"seed": seed, "workload": workload, "families": summaries}, indent=1) + "\n"
        )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
