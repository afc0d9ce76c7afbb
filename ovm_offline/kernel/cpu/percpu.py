"""Per-CPU data and which task each CPU runs (drgn's percpu and sched helpers: per_cpu_ptr,
cpu_curr, task_cpu). Kept apart from vcpu.py, which needs the register state, so that
listing processes reads which task is current where without loading it."""

from __future__ import annotations

from ...errors import GuestDataError
from ..core.memory import START_KERNEL_MAP, Program
from ..core.objects import Struct

__all__ = [
    "cpu_curr",
    "cpu_curr_address",
    "cpu_curr_tasks",
    "nr_cpu_ids",
    "per_cpu_address",
    "rq_curr",
    "task_cpu",
]

U64 = (1 << 64) - 1


def task_cpu(task: Struct) -> int:
    """The CPU a ``struct task_struct`` runs or last ran on."""
    return int(task.cpu if task.has_member_("cpu") else task.thread_info.cpu)


def per_cpu_address(prog: Program, symbol: str, cpu: int) -> int:
    """The address of per-CPU variable `symbol` on `cpu`: its address plus the CPU's
    __per_cpu_offset. Where the ISF gives per-CPU symbols as offsets into every CPU's area
    (x86-64's zero-based per-CPU section, before 6.15), they are not moved by KASLR; where it
    gives them as kernel image addresses, they are, like any other symbol."""
    offsets = prog["__per_cpu_offset"]
    if not 0 <= cpu < len(offsets):
        raise GuestDataError(f"cpu {cpu} is beyond __per_cpu_offset ({len(offsets)} entries)")
    link = prog.symbols.symbol_address(symbol)
    base = prog.symbol_address(symbol) if link >= START_KERNEL_MAP else link
    return (base + int(offsets[cpu])) & U64


def cpu_curr_address(prog: Program, cpu: int) -> int:
    """Where `cpu`'s current ``struct task_struct *`` is kept (per-CPU current_task, in
    ``pcpu_hot`` since 6.2)."""
    if prog.has_symbol("pcpu_hot"):
        return per_cpu_address(prog, "pcpu_hot", cpu) + prog.member_offset("pcpu_hot", "current_task")
    return per_cpu_address(prog, "current_task", cpu)


def cpu_curr(prog: Program, cpu: int) -> int:
    """The address of the ``struct task_struct`` current on `cpu`."""
    return prog.read_u64(cpu_curr_address(prog, cpu))


def rq_curr(prog: Program, cpu: int) -> int:
    """The address of the ``struct task_struct`` `cpu`'s runqueue runs (``rq->curr``).
    __schedule sets it before the switch begins, while current_task changes only late in
    __switch_to: while the two differ, the CPU is between the two tasks."""
    return int(prog.struct("rq", per_cpu_address(prog, "runqueues", cpu)).curr)


def nr_cpu_ids(prog: Program) -> int:
    """How many CPUs the kernel may bring up (kernel/smp.c nr_cpu_ids), bounded by its
    per-CPU offset table."""
    limit = len(prog["__per_cpu_offset"])
    count = int(prog["nr_cpu_ids"])
    if not 0 < count <= limit:
        raise GuestDataError(f"nr_cpu_ids is {count}, beyond the {limit} per-CPU areas")
    return count


def cpu_curr_tasks(prog: Program) -> dict[int, int]:
    """The ``struct task_struct`` address current on each possible CPU, mapped to that CPU
    (an idle CPU's is its idle task)."""
    return {cpu_curr(prog, cpu): cpu for cpu in range(nr_cpu_ids(prog))}
