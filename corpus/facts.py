"""Turns the /proc facts a record job collected in the guest into the recording's manifest."""

from __future__ import annotations

import hashlib
import re
import tarfile
from pathlib import Path

PF_KTHREAD = 0x00200000


def parse_stat(text: str) -> dict:
    """/proc/PID/stat: comm may hold spaces and parentheses, so split at the last ')'."""
    head, _, rest = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    f = rest.split()
    return {
        "pid": int(pid),
        "comm": comm,
        "state": f[0],
        "ppid": int(f[1]),
        "pgid": int(f[2]),
        "sid": int(f[3]),
        "flags": int(f[6]),
        "threads": int(f[17]),
    }


def parse_status(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def parse_maps(text: str) -> list[dict]:
    vmas = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        start, end = (int(x, 16) for x in parts[0].split("-"))
        vmas.append(
            {
                "start": start,
                "end": end,
                "perms": parts[1],
                "offset": int(parts[2], 16),
                "dev": parts[3],
                "inode": int(parts[4]),
                "path": parts[5] if len(parts) > 5 else "",
            }
        )
    return vmas


def parse_fdinfo(text: str) -> dict:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    out = {"pos": int(fields.get("pos", 0)), "flags": int(fields.get("flags", "0"), 8)}
    if "mnt_id" in fields:
        out["mnt_id"] = int(fields["mnt_id"])
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def parse_process(d: Path) -> dict | None:
    stat_text = _read(d / "stat")
    if not stat_text:
        return None  # exited while the facts were being read (a helper of the job itself)
    stat = parse_stat(stat_text)
    status = parse_status(_read(d / "status"))
    ns = {}
    for line in _read(d / "ns").splitlines():
        name, _, link = line.partition(" ")
        match = re.search(r"\[(\d+)\]", link)
        if match:
            ns[name] = int(match.group(1))
    cgroup = ""
    for line in _read(d / "cgroup").splitlines():
        if line.startswith("0::"):
            cgroup = line[3:]
    return {
        **stat,
        "kernel_thread": bool(stat["flags"] & PF_KTHREAD),
        "uid": int(status.get("Uid", "0").split()[0]),
        "nspid": [int(x) for x in status.get("NSpid", str(stat["pid"])).split()],
        "cgroup": cgroup,
        "ns": ns,
        "cmdline": _read(d / "cmdline").replace("\0", " ").strip(),
    }


def parse_member(d: Path) -> dict:
    fds = []
    for line in _read(d / "fds").splitlines():
        fd, _, target = line.partition(" ")
        fds.append({"fd": int(fd), "target": target, **parse_fdinfo(_read(d / "fdinfo" / fd))})
    tasks = []
    for t in sorted((d / "task").iterdir(), key=lambda p: int(p.name)) if (d / "task").exists() else []:
        if not _read(t / "stat").strip():
            continue  # a thread that ended while the guest collected its facts (churn-asis)
        status = parse_status(_read(t / "status"))
        tasks.append(
            {
                **parse_stat(_read(t / "stat")),
                "sig_blocked": status.get("SigBlk"),
                "sig_pending": status.get("SigPnd"),
            }
        )
    status = parse_status(_read(d / "status"))
    return {
        "maps": parse_maps(_read(d / "maps")),
        "fds": sorted(fds, key=lambda f: f["fd"]),
        "tasks": tasks,
        "exe": _read(d / "exe").strip(),
        "cwd": _read(d / "cwd").strip(),
        "root": _read(d / "root").strip(),
        "status": status,
        "personality": _read(d / "personality").strip(),
        "limits": _read(d / "limits"),
        "timers": _read(d / "timers"),
    }


def files_of(files_tar: Path) -> list[dict]:
    """Path, size, mode and digest of each file the restore harness recreates."""
    out = []
    with tarfile.open(files_tar) as tar:
        for member in tar.getmembers():
            entry = {
                "path": "/run/ovm/" + member.name,
                "mode": member.mode,
                "type": "dir" if member.isdir() else "file",
            }
            if member.isfile():
                data = tar.extractfile(member).read()
                entry.update(size=member.size, sha256=hashlib.sha256(data).hexdigest())
            out.append(entry)
    return out


def build_manifest(facts_dir: Path, files_tar: Path) -> dict:
    processes = [p for d in (facts_dir / "proc").iterdir() if (p := parse_process(d))]
    processes.sort(key=lambda p: p["pid"])
    # a member that ended while the guest collected its facts (churn-asis) has none
    members = [int(x) for x in _read(facts_dir / "members").split() if _read(facts_dir / "proc" / x / "stat").strip()]
    return {
        "uname": _read(facts_dir / "uname").strip(),
        "ready": _read(facts_dir / "ready").strip(),
        "root_pid": int(_read(facts_dir / "root")),
        "members": members,
        "processes": processes,
        "member_details": {str(pid): parse_member(facts_dir / "proc" / str(pid)) for pid in members},
        "files": files_of(files_tar),
        "criu": _read(facts_dir / "criu").strip(),
    }
