"""Run inside gdb (`gdb -batch -x`): stop a guest through QEMU's gdbstub at one instruction of
the guest kernel's __switch_to, on a hit where a workload thread is half switched, and run a
command there while the guest stays stopped. Its parameters come as JSON in
$OVM_SWITCH_STOP (tests/support/switching.py writes them); what it saw goes to their `out`.

The windows (kernel code between two stores that a dump must see together):
  fs-loaded: at the store of current_task; a workload thread is still current while the FS
             and GS bases of the task coming in are already loaded;
  fpu-flag:  at 6.1's set of TIF_NEED_FPU_LOAD on the task coming in, a workload thread with
             the flag clear, just made current while the CPU's FPU registers are another's.
"""

import json
import os
import subprocess

import gdb

P = json.loads(os.environ["OVM_SWITCH_STOP"])
WORKLOAD = set(P["threads"])
TIF_NEED_FPU_LOAD = 14
seen = {"hits": 0}


def read_u64(address):
    return int.from_bytes(bytes(gdb.selected_inferior().read_memory(address, 8)), "little")


def read_u32(address):
    return int.from_bytes(bytes(gdb.selected_inferior().read_memory(address, 4)), "little")


def register(name):
    return int(gdb.parse_and_eval(f"${name}")) & (1 << 64) - 1


def another_workload_thread_leaves(per_cpu, incoming):
    cpu = P["per_cpu_offsets"].index(per_cpu)
    return any(read_u32(t + P["on_cpu"]) and read_u32(t + P["task_cpu"]) == cpu for t in WORKLOAD - {incoming})


def another_workload_thread_switching(incoming):
    """A workload thread on its way on or off another CPU at this stop (on_cpu, yet not that
    CPU's current): the dump would name it first, for that window, not this one."""
    for t in WORKLOAD - {incoming}:
        cpu = read_u32(t + P["task_cpu"])
        if read_u32(t + P["on_cpu"]) and cpu < len(P["per_cpu_offsets"]):
            if read_u64(P["per_cpu_offsets"][cpu] + P["current_task"]) != t:
                return True
    return False


def in_window(per_cpu):
    current = read_u64(per_cpu + P["current_task"])
    incoming = register(P["incoming_register"])
    if P["window"] == "fs-loaded":
        return current in WORKLOAD and incoming not in WORKLOAD
    if incoming not in WORKLOAD or read_u64(incoming + P["thread_flags"]) >> TIF_NEED_FPU_LOAD & 1:
        return False
    owner = read_u64(per_cpu + P["fpu_owner"])
    # a workload thread leaving is refused by itself: the window is one a task outside it leaves
    if owner == incoming + P["fpu"] or another_workload_thread_leaves(per_cpu, incoming):
        return False
    return not another_workload_thread_switching(incoming)


class SwitchWindow(gdb.Breakpoint):
    def stop(self):
        seen["hits"] += 1
        return in_window(register("gs_base"))


gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute(f"target remote {P['gdbserver']}")
SwitchWindow(f"*0x{P['address']:x}")
gdb.execute("continue")
done = subprocess.run(P["command"], capture_output=True, text=True)
with open(P["out"], "w") as out:
    json.dump({"returncode": done.returncode, "stderr": done.stderr, "hits": seen["hits"]}, out)
gdb.execute("delete")
gdb.execute("detach")
