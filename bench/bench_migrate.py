"""Migration's downtime (issue 32): a running writer moved from guest A to guest B the seeds'
way, by ovm-offline from outside A and by CRIU inside it, side by side in one run.

    python bench/bench_migrate.py [--kernel 6.1] [--mib 1024] [--permille 10] [--rounds 3]
                                  [--pre-dumps live|background]

A runs memhog of --mib MiB rewriting --permille per mille of its pages a second (RAM on
/dev/shm, as --background needs). Both sides migrate it to a fresh B in --rounds rounds, each to
a `criu page-server` in B with the round before as its parent: pre-dumps while it runs, then a
final dump, the other images as a tar, and `criu restore` in B; the restored memhog then checks
every page. B reaches nothing but what the host forwards; A reaches B's page server and tar port
through the host (QEMU user networking both ways).
- ovm-offline: `dump --live --pre-dump --page-server` rounds (one pause each, or with
  --pre-dumps background from a background snapshot), then a one-pause `dump --live
  --page-server --prev-images-dir` (pages whose digest changed go, holes for the rest), its images
  sent by the host; A's memhog runs on (ovm-offline does not end it);
- CRIU in A: `criu pre-dump --track-mem --page-server` rounds, then `criu dump` to the page
  server (which ends the tree in A), its other images handed to the host on A's output disk and
  sent on by it, as ovm-offline's are.

Reported: the downtime, from the start of the final dump (the command given) to B's report that
the restored tree runs, by the host's clock; the total, from the first round's start; and CRIU's
downtime over ours. The issue's goal: ours at most 1/5 of CRIU's.
"""

from __future__ import annotations

import argparse
import compileall
import io
import os
import shlex
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import initramfs, jobs, kernels  # noqa: E402
from corpus.guest import Guest  # noqa: E402
from corpus.recorder import BOOT_TIMEOUT  # noqa: E402
from corpus.restore import free_port, network_members  # noqa: E402
from corpus.workloads import get_workload  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: ovm-offline runs as a user's would: from compiled bytecode (compiled at the start of the run)
USER_ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
#: how ovm-offline's pre-dumps read the running guest: from a background snapshot (the guest
#: paused for QEMU's downtime; the whole of guest RAM streams), or in one pause of the guest
PRE_DUMP_MODES = {"background": ["--background"], "live": []}
#: the guests' ports, as the jobs use them
GUEST_PAGE_SERVER_PORT, GUEST_TAR_PORT = 27000, 27001


def _job(script: str, variables: dict) -> bytes:
    header = "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in variables.items())
    return (header + (HERE / script).read_text()).encode()


def _guest(kernel, work: Path, script: str, variables: dict, ram_mib: int, **network) -> Guest:
    work.mkdir(parents=True)
    members = {
        "job.sh": _job(script, variables),
        "common.sh": (jobs.GUEST_DIR / "common.sh").read_bytes(),
        **network_members(kernel),
    }
    jobs.write_input_disk(work / "in.img", members)
    jobs.blank_output_disk(work / "out.img", 64)
    image = initramfs.build(kernel)
    disks = [work / "in.img", work / "out.img"]
    return Guest(work, kernel.vmlinuz, image, ram_mib, disks, cmdline_extra=kernel.kernel.cmdline, **network)


def _destination(kernel, work: Path, ports: tuple[int, int], rounds: int, log_bytes: int, mib: int) -> Guest:
    variables = {"ROUNDS": rounds, "LOG_BYTES": log_bytes, "CRIU_RESTORE_OPTS": get_workload("memhog-64").criu_options}
    forwards = {ports[0]: GUEST_PAGE_SERVER_PORT, ports[1]: GUEST_TAR_PORT}
    # the first round's pages, the later rounds', and the restored tree
    return _guest(kernel, work, "migrate-dest-job.sh", variables, 640 + 3 * mib, forwards=forwards)


def _restored(destination: Guest) -> tuple[float, str]:
    """When B said its tree runs (host clock), and the restored memhog's own check."""
    line = destination.expect("RESTORED", 600, "restoring in the destination")
    at = time.monotonic()
    if line != "RESTORED rc=0":
        raise SystemExit(f"the destination's restore failed: {line}")
    check = destination.expect("CHECK", 600, "the restored memhog's check")
    return at, check


def _ovm(argv: list[str]) -> str:
    result = subprocess.run([sys.executable, "-m", "ovm_offline", *argv], capture_output=True, text=True, cwd=REPO,
                            env=USER_ENVIRONMENT)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"ovm-offline {' '.join(argv)} failed: {result.stderr[-800:]}")
    return result.stderr


def _send_tar(directory: Path, port: int) -> None:
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        archive.add(directory, arcname=".")
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(tar.getvalue())


def _migrate_ours(source: Guest, root: int, destination: Guest, ports, rounds: int, images: Path, pre_dumps: str):
    qmp = ["dump", "--live", "--qmp", str(source.qmp_tool_path), "--pid", str(root)]
    started = time.monotonic()
    for n in range(1, rounds + 1):
        destination.expect("NETWORK-READY", 120, f"page server {n}")
        final = n == rounds
        how = [] if final else [*PRE_DUMP_MODES[pre_dumps], "--pre-dump"]
        parent = ["--prev-images-dir", f"../{n - 1}"] if n > 1 else []
        if final:
            stop = time.monotonic()
        said = _ovm([*qmp, *how, *parent, "-D", str(images / str(n)), "--page-server", f"127.0.0.1:{ports[0]}"])
        print(f"  ovm-offline round {n}: " + " / ".join(said.strip().splitlines()), file=sys.stderr)
    _send_tar(images / str(rounds), ports[1])
    at, check = _restored(destination)
    return at - stop, at - started, check


def _migrate_criu(source: Guest, destination: Guest, ports, rounds: int, work: Path):
    started = time.monotonic()
    for n in range(1, rounds + 1):
        destination.expect("NETWORK-READY", 120, f"page server {n}")
        final = n == rounds
        if final:
            stop = time.monotonic()
        command = "FINAL" if final else "ROUND"
        source.send(f"{command} {n}")
        line = source.expect(command, 1800, f"criu {command.lower()} {n} in the source")
        if line != f"{command} rc=0":
            raise SystemExit(f"criu in the source failed: {line}")
    jobs.read_output_disk(source.workdir / "out.img", work / "criu-images")
    _send_tar(work / "criu-images", ports[1])
    at, check = _restored(destination)
    return at - stop, at - started, check


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--permille", type=int, default=10, help="per mille of the pages rewritten a second")
    ap.add_argument("--rounds", type=int, default=3, help="pre-dumps and the final dump")
    ap.add_argument(
        "--pre-dumps", choices=list(PRE_DUMP_MODES), default="live", help="how ovm-offline's pre-dumps read the guest"
    )
    args = ap.parse_args()
    kernel = kernels.unpack(kernels.get_kernel(args.kernel))
    ports = (free_port(), free_port())
    with (
        tempfile.TemporaryDirectory(prefix="ovm-bench-migrate-", dir=REPO / "corpus" / "cache") as scratch,
        tempfile.TemporaryDirectory(prefix="ovm-bench-migrate-ram-", dir="/dev/shm") as ram_dir,
        tempfile.TemporaryDirectory(prefix="ovm-bench-migrate-images-", dir="/dev/shm") as images,
    ):
        compileall.compile_dir(REPO / "ovm_offline", quiet=1)
        work = Path(scratch)
        variables = {
            "MIB": args.mib,
            "PERMILLE": args.permille,
            "CRIU_DUMP_OPTS": get_workload("memhog-64").criu_options,
        }
        guest_forwards = {GUEST_PAGE_SERVER_PORT: ports[0], GUEST_TAR_PORT: ports[1]}
        source = _guest(kernel, work / "source", "migrate-source-job.sh", variables, 640 + 2 * args.mib + args.mib // 4,
                        guest_forwards=guest_forwards, memory_dir=Path(ram_dir))  # fmt: skip
        with source:
            source.wait_for_job(BOOT_TIMEOUT, "booting the source")
            ready = source.expect("MIGRATE-READY", 1800, f"starting memhog {args.mib}")
            fields = dict(word.split("=", 1) for word in ready.split()[1:])
            root, log_bytes = int(fields["root"]), int(fields["log_bytes"])
            results = {}
            for side in ("ovm-offline", "criu"):
                with _destination(kernel, work / f"dest-{side}", ports, args.rounds, log_bytes, args.mib) as dest:
                    dest.wait_for_job(BOOT_TIMEOUT, "booting the destination")
                    if side == "ovm-offline":
                        results[side] = _migrate_ours(
                            source, root, dest, ports, args.rounds, Path(images), args.pre_dumps
                        )
                    else:
                        results[side] = _migrate_criu(source, dest, ports, args.rounds, work)
                    dest.wait_exit(120)
            source.send("QUIT")
            source.wait_exit(120)
    print(f"{'side':>12} {'downtime s':>11} {'total s':>8}  restored tree's check", flush=True)
    for side, (downtime, total, check) in results.items():
        print(f"{side:>12} {downtime:>11.2f} {total:>8.2f}  {check}")
    ours, theirs = results["ovm-offline"][0], results["criu"][0]
    print(f"CRIU's downtime / ours: {theirs / ours:.1f}x (goal: at least 5x); {args.mib} MiB, {args.rounds} rounds,"
          f" {args.permille} per mille a second, ovm-offline's pre-dumps {args.pre_dumps}, kernel {args.kernel}")  # fmt: skip


if __name__ == "__main__":
    main()
