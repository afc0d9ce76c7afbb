"""Our .proto files against CRIU's own (as compiled into Debian's pycriu), the magic table
against the facts file, and the committed generated modules against a fresh generation."""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from ovm_offline.criu import images, pb

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")
PYCRIU = Path("/usr/lib/python3/dist-packages/pycriu/images")
FACTS = Path("/work/shared/facts/criu-images.md")


def describe(files) -> dict:
    """What of each field decides its wire format and crit's JSON (names) or restore's
    reading of a missing field (default); runs here and, by source, under pycriu."""
    from google.protobuf import descriptor_pb2

    msgs, enums = {}, {}

    def walk_enum(prefix, e):
        enums[prefix + e.name] = {v.name: v.number for v in e.value}

    def walk(prefix, m):
        full = prefix + m.name
        msgs[full] = {
            f.name: [
                f.number, f.label, f.type, f.type_name.lstrip("."),
                f.options.packed if f.options.HasField("packed") else None,
                f.default_value if f.HasField("default_value") else None,
            ]
            for f in m.field
        }  # fmt: skip
        for e in m.enum_type:
            walk_enum(full + ".", e)
        for n in m.nested_type:
            walk(full + ".", n)

    for fd in files:
        p = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(p)
        for e in p.enum_type:
            walk_enum("", e)
        for m in p.message_type:
            walk("", m)
    return {"messages": msgs, "enums": enums}


def _describe_ours() -> dict:
    return describe([getattr(pb, n).DESCRIPTOR for n in pb.__all__])


def _describe_pycriu() -> dict:
    script = "\n".join([
        "import glob, importlib, json, os, sys",
        inspect.getsource(describe),
        f"sys.path.insert(0, {str(PYCRIU)!r})",
        f"mods = [importlib.import_module(os.path.basename(f)[:-3]) for f in sorted(glob.glob({str(PYCRIU)!r} + '/*_pb2.py'))]",
        "print(json.dumps(describe([m.DESCRIPTOR for m in mods])))",
    ])  # fmt: skip
    out = subprocess.run([str(SYSTEM_PYTHON), "-c", script], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


needs_pycriu = pytest.mark.skipif(
    not (SYSTEM_PYTHON.exists() and PYCRIU.is_dir()), reason="Debian's criu (pycriu) is not installed"
)


#: fields of CRIU 4.x images that Debian 12's pycriu (3.17) lacks: message -> field -> number.
#: Our images carry them so that CRIU 4.x restores them as its own (3.17 skips unknown fields).
#: CRIU 4.2 calls field 5 of pagemap_entry nr_pages (and field 2 compat_nr_pages); we keep
#: 3.17's name for field 2.
CRIU4_ADDITIONS = {
    "task_core_entry": {"stop_signo": 21, "membarrier_registration_mask": 22},
    "thread_core_entry": {"cg_set": 16},
    "inventory_entry": {"plugins_entry": 12, "dump_criu_run_id": 13, "allow_uprobes": 14},
    "pagemap_entry": {"nr_pages_64": 5},
    "plugins_entry": {"plugins": 12},
    "creds_entry": {"no_new_privs": 18, "cap_amb": 19},
    "cg_controller_entry": {"is_threaded": 3},
    "memfd_inode_entry": {"mode": 9},
    "ip_opts_entry": {"pktinfo": 5, "tos": 6, "ttl": 7},
    "inet_sk_entry": {"tcp_opts": 20},
    "netns_entry": {"ipv4_sysctl": 10},
    "thread_info_x86": {"cet": 9},
    "tcp_opts_entry": {"cork": 1, "nodelay": 2, "keepcnt": 3, "keepidle": 4, "keepintvl": 5},
    "user_x86_cet_entry": {"cet": 1, "ssp": 2},
}
#: messages CRIU 4.x added
CRIU4_MESSAGES = {"plugins_entry", "tcp_opts_entry", "user_x86_cet_entry"}


def _without_criu4_additions(ours: dict) -> dict:
    messages = {}
    for name, fields in ours["messages"].items():
        added = CRIU4_ADDITIONS.get(name, {})
        for fname, number in added.items():
            assert fields[fname][0] == number, f"{name}.{fname} is field {fields[fname][0]}, CRIU 4.x's is {number}"
        if name in CRIU4_MESSAGES:
            continue
        messages[name] = {f: d for f, d in fields.items() if f not in added}
    return {**ours, "messages": messages}


@needs_pycriu
def test_every_message_matches_criu_field_for_field():
    ours, theirs = _without_criu4_additions(_describe_ours()), _describe_pycriu()
    # Messages we deliberately leave out: other architectures, images we never meet.
    ours_only = {m for m in ours["messages"] if m not in theirs["messages"] and m != "ovm_display"}
    assert not ours_only, f"messages unknown to CRIU: {sorted(ours_only)}"
    problems = []
    for name, fields in ours["messages"].items():
        if name == "ovm_display":
            continue
        ref = theirs["messages"][name]
        for fname, desc in fields.items():
            if ref.get(fname) != desc:
                problems.append(f"{name}.{fname}: ours {desc}, criu {ref.get(fname)}")
        for fname, desc in ref.items():
            if fname not in fields and not (name == "core_entry" and fname.startswith("ti_")):
                problems.append(f"{name}.{fname}: missing (criu {desc})")
    for name, values in ours["enums"].items():
        if theirs["enums"].get(name) != values:
            problems.append(f"enum {name}: ours {values}, criu {theirs['enums'].get(name)}")
    assert not problems, "\n".join(problems)


@needs_pycriu
def test_messages_cover_the_image_kinds_of_the_facts_file():
    ours = _describe_ours()["messages"]
    required = """inventory_entry pstree_entry core_entry thread_info_x86 user_x86_regs_entry
        user_x86_fpregs_entry user_x86_xsave_entry task_core_entry thread_core_entry creds_entry
        thread_sas_entry rseq_entry sa_entry task_timers_entry itimer_entry posix_timer_entry
        task_rlimits_entry rlimit_entry siginfo_entry signal_queue_entry task_kobj_ids_entry mm_entry
        vma_entry pagemap_head pagemap_entry fdinfo_entry file_entry reg_file_entry tty_file_entry
        pipe_entry fifo_entry unix_sk_entry inet_sk_entry eventfd_file_entry eventpoll_file_entry
        signalfd_entry timerfd_entry ns_file_entry tty_info_entry fs_entry timens_entry cgroup_entry
        seccomp_entry utsns_entry ipc_var_entry mnt_entry netns_entry pipe_data_entry sk_packet_entry
        stats_entry dump_stats_entry restore_stats_entry tcp_stream_entry""".split()
    assert not [m for m in required if m not in ours]


def test_magics_match_the_facts_table_and_pycriu():
    if FACTS.exists():
        table = dict(re.findall(r"^\| ([a-z-]+(?:-[A-Z]+)?) \| (0x[0-9a-f]{8}) \|$", FACTS.read_text(), re.MULTILINE))
        assert len(table) >= 20
        for fact_name, magic in table.items():
            kind = images.KINDS_BY_NAME[re.sub(r"-(PID|ID)$", "", fact_name)]
            assert kind.magic == int(magic, 16), fact_name
    if SYSTEM_PYTHON.exists() and PYCRIU.is_dir():
        out = subprocess.run(
            [str(SYSTEM_PYTHON), "-c", (f"import sys, json; sys.path.insert(0, {str(PYCRIU)!r}); "
                                        "import magic; print(json.dumps(magic.by_name))")],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        ref = json.loads(out.stdout)
        assert ref["IMG_COMMON"] == images.COMMON_MAGIC and ref["IMG_SERVICE"] == images.SERVICE_MAGIC
        for kind in images.KINDS:
            if not kind.raw:
                assert ref[kind.crit_name] & 0xFFFFFFFF == kind.magic, kind.name


def _protoc_version() -> str | None:
    if importlib.util.find_spec("grpc_tools") is None:
        return None
    out = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "--version"], check=False, capture_output=True, text=True
    )
    m = re.search(r"(\d+\.\d+)", out.stdout)
    return m.group(1) if m else None


def test_generated_modules_are_up_to_date():
    have = _protoc_version()
    if have is None:
        pytest.skip("grpcio-tools is not installed (pip install grpcio-tools==1.85.1)")
    committed = re.search(
        r"Protobuf Python Version: \d+\.(\d+\.\d+)", (ROOT / "ovm_offline/criu/pb/criu_task_pb2.py").read_text()
    )
    assert committed
    if committed.group(1) != have:
        pytest.skip(f"grpcio-tools bundles protoc {have}, the modules were made with {committed.group(1)}")
    res = subprocess.run(
        [sys.executable, str(ROOT / "proto/generate.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr


def test_generated_modules_import_with_the_installed_runtime():
    # The (ovm) option must be readable through the descriptors show.py uses.
    f = pb.criu_mm_pb2.vma_entry.DESCRIPTOR.fields_by_name["start"]
    assert f.GetOptions().Extensions[pb.criu_display_pb2.ovm].hex
    p = descriptor_pb2.FileDescriptorProto()
    pb.criu_task_pb2.DESCRIPTOR.CopyToProto(p)
    assert p.syntax in ("", "proto2") and not p.package
