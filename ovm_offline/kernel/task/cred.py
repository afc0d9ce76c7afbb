"""Credentials (``struct cred``): ids, capabilities, securebits, supplementary groups,
and the user-namespace id mapping that decides what numbers a task sees.

``task->cred`` holds the *subjective* credentials a task acts with (what getresuid(),
capget() and getgroups() report from inside the task, as CRIU's parasite asks them);
``task->real_cred`` the objective ones others see (tasks.py uses those). Ids in a cred
are kernel ids (kuid_t/kgid_t, i.e. as seen from the initial user namespace); a task
sees them through its own ``cred->user_ns`` maps (kernel/user_namespace.c map_id_up).

Kernel differences handled: ``kernel_cap_t`` is ``u32 cap[2]`` before 6.3 (the pinned
6.1 kernel) and ``u64 val`` from 6.3 (6.12); ``struct uid_gid_map`` moved nr_extents
into its anonymous union in 6.x (both read through member names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ...state import Credentials
from ..core.objects import Pointer, Struct

__all__ = [
    "SECCOMP_MODE_FILTER",
    "cred_user_ns",
    "kernel_cap_value",
    "task_credentials",
    "task_loginuid",
    "task_no_new_privs",
    "task_seccomp_mode",
]

#: include/uapi/linux/seccomp.h: SECCOMP_MODE_DISABLED, _STRICT, _FILTER
SECCOMP_MODE_FILTER = 2


if TYPE_CHECKING:
    from ..core.memory import Program

#: include/uapi/linux/limits.h
NGROUPS_MAX = 65536
#: include/linux/uidgid.h: an id with no mapping reads as overflowuid/overflowgid
DEFAULT_OVERFLOW_ID = 65534
#: include/linux/user_namespace.h
UID_GID_MAP_MAX_BASE_EXTENTS = 5
UID_GID_MAP_MAX_EXTENTS = 340
#: include/uapi/linux/capability.h: CAP_CHECKPOINT_RESTORE, last in 5.9..6.12
DEFAULT_CAP_LAST_CAP = 40
U32 = 0xFFFF_FFFF


def kernel_cap_value(cap: Struct) -> int:
    """A ``kernel_cap_t`` as one integer (bit n = capability n)."""
    if cap.has_member_("val"):
        return cap.val & 0xFFFF_FFFF_FFFF_FFFF
    words = cap.cap
    return sum((words[i] & U32) << (32 * i) for i in range(len(words)))


def cap_last_cap(prog: Program) -> int:
    """The highest capability number the kernel knows (/proc/sys/kernel/cap_last_cap)."""
    if prog.has_symbol("cap_last_cap"):
        v = prog["cap_last_cap"]
        if isinstance(v, int) and 0 < v < 64:
            return v
    return DEFAULT_CAP_LAST_CAP


def uid_gid_map_extents(m: Struct) -> list[tuple[int, int, int]]:
    """(first, lower_first, count) of each extent of a ``struct uid_gid_map``: first is the
    id inside the namespace, lower_first the id in the parent namespace."""
    n = m.nr_extents
    if n > UID_GID_MAP_MAX_EXTENTS:
        raise GuestDataError(f"uid_gid_map at 0x{m.address_:x} has {n} extents (max {UID_GID_MAP_MAX_EXTENTS})")
    if n <= UID_GID_MAP_MAX_BASE_EXTENTS:
        extents = [m.extent[i] for i in range(n)]
    else:
        base = m.forward  # sorted copy; kmalloc'ed array of n extents
        extents = [base[i] for i in range(n)]
    return [(e.first, e.lower_first, e.count) for e in extents]


def map_id_up(m: Struct, kid: int) -> int | None:
    """The id inside a namespace of kernel id `kid` through ``struct uid_gid_map`` `m`
    (None if unmapped). The kernel stores every map's lower ids as kernel ids (map_write
    translates them through the parent's map), so one lookup suffices at any depth."""
    for first, lower, count in uid_gid_map_extents(m):
        if lower <= kid < lower + count:
            return first + kid - lower
    return None


def cred_user_ns(cred: Pointer | Struct) -> Pointer:
    """``cred->user_ns`` of a ``struct cred``: never NULL (invariants.NEVER_NULL), so a NULL
    is refused where it is read, never taken for the initial namespace."""
    ns: Pointer = cred.user_ns
    return ns


def is_init_user_ns(prog: Program, ns: Pointer | Struct) -> bool:
    addr = int(ns) if isinstance(ns, Pointer) else ns.address_
    return addr == prog.symbol_address("init_user_ns")


def from_kid_munged(ns: Pointer, kid: int, kind: str) -> int:
    """Kernel uid or gid `kid` as seen in ``struct user_namespace *`` `ns` (from_kuid_munged /
    from_kgid_munged): unmapped ids read as the overflow id. `kind` is "uid" or "gid"."""
    prog = ns.prog_
    kid &= U32
    if not ns or is_init_user_ns(prog, ns):  # init_user_ns maps 0..4294967294 to itself
        return kid
    v = map_id_up(ns.deref().member_(f"{kind}_map"), kid)
    if v is not None:
        return v
    sym = "overflowuid" if kind == "uid" else "overflowgid"
    return prog[sym] & U32 if prog.has_symbol(sym) else DEFAULT_OVERFLOW_ID


def cred_groups(cred: Pointer) -> list[int]:
    """The supplementary group kgids of a ``struct cred *`` (``group_info->gid``)."""
    gi = cred.group_info
    if not gi:
        return []
    n = gi.ngroups
    if not 0 <= n <= NGROUPS_MAX:
        raise GuestDataError(f"group_info at 0x{int(gi):x} has {n} groups (max {NGROUPS_MAX})")
    if not n:
        return []
    prog = cred.prog_
    base = int(gi) + prog.member_offset("group_info", "gid")
    raw = prog.read(base, 4 * n)
    return [int.from_bytes(raw[i : i + 4], "little") for i in range(0, 4 * n, 4)]


#: include/linux/sched.h: bit of task_struct.atomic_flags
PFA_NO_NEW_PRIVS = 0


def task_no_new_privs(task: Struct) -> bool:
    """prctl(PR_GET_NO_NEW_PRIVS) of a ``struct task_struct``."""
    return bool(task.atomic_flags >> PFA_NO_NEW_PRIVS & 1)


def task_credentials(task: Struct) -> Credentials:
    """The subjective credentials (``task->cred``) of a ``struct task_struct`` as the task
    itself sees them: ids and groups mapped into its ``cred->user_ns``, capability sets as
    capget() returns them, the bounding set as PR_CAPBSET_READ enumerates it (capabilities
    up to cap_last_cap only)."""
    ptr = task.cred
    if not ptr:
        raise GuestDataError(f"pid {task.pid}: task has no cred")
    cred = ptr.deref()
    ns = cred_user_ns(cred)

    def uid(name: str) -> int:
        return from_kid_munged(ns, cred.member_(name).val, "uid")

    def gid(name: str) -> int:
        return from_kid_munged(ns, cred.member_(name).val, "gid")

    bnd_mask = (1 << (cap_last_cap(task.prog_) + 1)) - 1
    return Credentials(
        uid=uid("uid"),
        gid=gid("gid"),
        euid=uid("euid"),
        egid=gid("egid"),
        suid=uid("suid"),
        sgid=gid("sgid"),
        fsuid=uid("fsuid"),
        fsgid=gid("fsgid"),
        cap_inh=kernel_cap_value(cred.cap_inheritable),
        cap_prm=kernel_cap_value(cred.cap_permitted),
        cap_eff=kernel_cap_value(cred.cap_effective),
        cap_bnd=kernel_cap_value(cred.cap_bset) & bnd_mask,
        secbits=cred.securebits & U32,
        groups=[from_kid_munged(ns, g, "gid") for g in cred_groups(ptr)],
        cap_amb=kernel_cap_value(cred.cap_ambient),
        no_new_privs=task_no_new_privs(task),
    )


def task_loginuid(task: Struct) -> int:
    """The audit login uid of a ``struct task_struct`` as a kernel uid (4294967295 = unset;
    /proc/PID/loginuid shows it mapped into the reader's namespace, the initial one for
    CRIU). Kernels without CONFIG_AUDIT have no such field: unset."""
    if not task.has_member_("loginuid"):
        return U32
    return task.loginuid.val & U32


def task_seccomp_mode(task: Struct) -> int:
    """``seccomp.mode`` of a ``struct task_struct``: 0 disabled, 1 strict, 2 filter;
    GuestDataError for any other value."""
    if not task.has_member_("seccomp"):
        return 0  # CONFIG_SECCOMP off
    mode = int(task.seccomp.mode)
    if not 0 <= mode <= SECCOMP_MODE_FILTER:
        raise GuestDataError(f"task {task.pid} has seccomp mode {mode}, which is none of 0, 1, 2")
    return mode
