"""Stop a running guest in the middle of a context switch with gdb (QEMU's gdbstub, a real
breakpoint in the guest kernel's __switch_to) and run a command at that moment; the gdb side
is gdb_switch_stop.py."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
from pathlib import Path

from ovm_offline import inventory
from ovm_offline.kernel.core.memory import Program
from ovm_offline.kernel.cpu.percpu import cpu_curr_address, per_cpu_address
from ovm_offline.kernel.task.tasks import find_task, thread_group
from ovm_offline.sources import open_live

GDB_SCRIPT = Path(__file__).with_name("gdb_switch_stop.py")
#: x86-64 register numbers in a ModRM byte's reg field (REX.R adds 8), as gdb names them
REGISTERS = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi") + tuple(f"r{n}" for n in range(8, 16))
#: 6.1's switch_fpu_finish(): `lock orb $0x40, 0x1(%rax)` sets TIF_NEED_FPU_LOAD (bit 14) on
#: current, in %rax, just loaded from current_task
SET_FPU_FLAG_6_1 = bytes.fromhex("f080480140")
SWITCH_TO_BYTES = 0x800
U64 = (1 << 64) - 1


def _per_cpu_offset(prog: Program, address_on_cpu0: int) -> int:
    return (address_on_cpu0 - int(prog["__per_cpu_offset"][0])) & U64


def store_of_current_task(code: bytes, start: int, offset: int) -> tuple[int, str]:
    """The address of `mov %reg, %gs:current_task(%rip)` in `code` (at `start`) and its
    register: the incoming task, made current."""
    for i in range(len(code) - 8):
        rex, opcode, modrm = code[i + 1], code[i + 2], code[i + 3]
        if code[i] == 0x65 and rex in (0x48, 0x4C) and opcode == 0x89 and modrm & 0xC7 == 0x05:
            displacement = int.from_bytes(code[i + 4 : i + 8], "little", signed=True)
            if (start + i + 8 + displacement) & U64 == offset:
                return start + i, REGISTERS[(modrm >> 3 & 7) + (8 if rex == 0x4C else 0)]
    raise AssertionError("__switch_to has no store of current_task this test knows")


@dataclasses.dataclass
class SwitchStop:
    """What the command run at the moment said, and how many breakpoint hits it took."""

    returncode: int
    stderr: str
    hits: int


def stop_in_switch(guest, root: int, window: str, command: list[str], work: Path, timeout: float = 300) -> SwitchStop:
    """Stop `guest` where a thread of process `root` is half switched (`window`: "fs-loaded"
    or "fpu-flag", see gdb_switch_stop.py), run `command` there, and let the guest run on."""
    with open_live(guest.qmp_tool_path, guest.memory_file) as source:
        prog = inventory.open_kernel(source)
        leader = find_task(prog, root)
        assert leader is not None, f"no process {root}"
        threads = [t.address_ for t in thread_group(leader)]
        start = prog.symbol_address("__switch_to")
        code = prog.read(start, SWITCH_TO_BYTES)
        current_task = _per_cpu_offset(prog, cpu_curr_address(prog, 0))
        if window == "fs-loaded":
            address, incoming = store_of_current_task(code, start, current_task)
        else:
            address, incoming = start + code.index(SET_FPU_FLAG_6_1), "rax"
        parameters = {
            "window": window,
            "threads": threads,
            "address": address,
            "incoming_register": incoming,
            "current_task": current_task,
            "fpu_owner": _per_cpu_offset(prog, per_cpu_address(prog, "fpu_fpregs_owner_ctx", 0)),
            "per_cpu_offsets": [int(o) for o in prog["__per_cpu_offset"]][: len(source.vcpus())],
            "fpu": prog.member_offset("task_struct", "thread.fpu"),
            "thread_flags": prog.member_offset("task_struct", "thread_info.flags"),
            "on_cpu": prog.member_offset("task_struct", "on_cpu"),
            "task_cpu": prog.member_offset("task_struct", "thread_info.cpu"),
        }
    with socket.socket() as probe:  # a free port for the gdbstub
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    guest.hmp(f"gdbserver tcp:127.0.0.1:{port}")
    out = work / "switch-stop.json"
    parameters.update(gdbserver=f"127.0.0.1:{port}", command=command, out=str(out))
    env = {**os.environ, "OVM_SWITCH_STOP": json.dumps(parameters)}
    try:
        gdb = subprocess.run(
            ["gdb", "-nx", "-batch", "-x", str(GDB_SCRIPT)], env=env, capture_output=True, text=True, timeout=timeout
        )
    finally:
        if guest.command("query-status")["status"] == "debug":
            guest.command("cont")
    assert out.exists(), f"gdb stopped nowhere (exit {gdb.returncode}): {gdb.stdout[-800:]} {gdb.stderr[-800:]}"
    return SwitchStop(**json.loads(out.read_text()))
