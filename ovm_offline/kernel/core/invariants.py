"""The kernel's own invariants that ovm-offline checks, each named once with the kernel source
that states it (issues 33 and 34).

A guest that breaks one is damaged or lies; reading on would give a value no kernel holds,
so the reader refuses by the invariant's name (`broken`).

* `NEVER_NULL`: pointer members no live kernel object holds NULL. `Struct.member_` checks
  them where every member is read, so no walker can take such a NULL for "absent".
  Members that are NULL in a legal state are not here: a zombie's or an exiting task's
  ``mm``, ``files``, ``fs``, ``nsproxy`` and ``stack``; a negative dentry's ``d_inode``.
* `INVARIANTS`: the other checked rules (limits, agreement between objects); the walker
  that reads the value checks it and calls `broken` with the rule's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import GuestDataError

__all__ = ["INVARIANTS", "NEVER_NULL", "Invariant", "broken", "null_member"]


@dataclass(frozen=True)
class Invariant:
    name: str  # "struct.member" or a short rule name
    rule: str  # what every kernel guarantees
    source: str  # where the kernel states or enforces it


_TASK_LISTED = "kernel/exit.c: __exit_signal() clears it where __unhash_process() takes the task off the task list"

#: (struct, member) -> where the kernel sets the member and why it is never NULL afterwards
NEVER_NULL: dict[tuple[str, str], str] = {
    (
        "task_struct",
        "cred",
    ): "kernel/cred.c: copy_creds() sets it before the task is listed; __put_task_struct() puts it",
    ("task_struct", "real_cred"): "kernel/cred.c: copy_creds() sets it before the task is listed",
    ("task_struct", "signal"): "kernel/fork.c: copy_signal(); freed by put_signal_struct() in __put_task_struct()",
    ("task_struct", "sighand"): f"kernel/fork.c: copy_sighand(); {_TASK_LISTED}",
    ("task_struct", "thread_pid"): f"kernel/fork.c: init_task_pid() in copy_process(); {_TASK_LISTED}",
    (
        "task_struct",
        "real_parent",
    ): "kernel/fork.c: copy_process() sets it, kernel/exit.c reparents it; init_task's is itself",
    ("task_struct", "group_leader"): "kernel/fork.c: copy_process() sets it; de_thread() moves it, never to NULL",
    (
        "task_struct",
        "cgroups",
    ): "kernel/cgroup/cgroup.c: cgroup_fork() sets &init_css_set, cgroup_post_fork() the parent's",
    ("cred", "user_ns"): "kernel/cred.c: init_cred's is &init_user_ns; prepare_creds() copies a reference",
    ("cred", "group_info"): "kernel/cred.c: init_cred's is &init_groups; prepare_creds() copies a reference",
    **{
        ("nsproxy", member): "kernel/nsproxy.c: init_nsproxy and create_new_namespaces() set every member "
        "(the initial namespace without its CONFIG_*_NS)"
        for member in ("uts_ns", "ipc_ns", "mnt_ns", "pid_ns_for_children", "net_ns", "cgroup_ns", "time_ns")
    },
    ("file", "f_inode"): "fs/open.c: do_dentry_open() sets it before the file is installed",
    ("file", "f_op"): "fs/open.c: do_dentry_open() fails an open without file operations",
    ("path", "dentry"): "fs/file_table.c: alloc_file() and fs/fs_struct.c: set_fs_root()/set_fs_pwd() set it",
    ("path", "mnt"): "fs/file_table.c: alloc_file() and fs/fs_struct.c: set_fs_root()/set_fs_pwd() set it",
    ("dentry", "d_sb"): "fs/dcache.c: __d_alloc() sets it",
    ("dentry", "d_parent"): "fs/dcache.c: __d_alloc() sets it (a root's is itself)",
    ("inode", "i_sb"): "fs/inode.c: inode_init_always() sets it",
    ("mm_struct", "pgd"): "kernel/fork.c: mm_init() -> mm_alloc_pgd(); freed only by __mmdrop()",
    ("files_struct", "fdt"): "fs/file.c: dup_fd() sets it; init_files' is &init_files.fdtab",
    ("fdtable", "fd"): "fs/file.c: alloc_fdtable() fails without it",
    ("fdtable", "open_fds"): "fs/file.c: alloc_fdtable() fails without it",
    ("fdtable", "close_on_exec"): "fs/file.c: alloc_fdtable() fails without it",
    ("upid", "ns"): "kernel/pid.c: alloc_pid() sets numbers[i].ns for every level up to pid->level",
    ("vfsmount", "mnt_root"): "fs/namespace.c: vfs_create_mount() and clone_mnt() set it",
    ("vfsmount", "mnt_sb"): "fs/namespace.c: vfs_create_mount() and clone_mnt() set it",
    ("mount", "mnt_parent"): "fs/namespace.c: vfs_create_mount() and clone_mnt() set it (itself until attached)",
    ("tty_struct", "driver"): "drivers/tty/tty_io.c: alloc_tty_struct() sets it",
}

#: Checked rules that are not NULLs, by name; the walker that reads the value checks it.
INVARIANTS: dict[str, Invariant] = {
    i.name: i
    for i in (
        Invariant(
            "pid.level",
            "at most MAX_PID_NS_LEVEL (32)",
            "kernel/pid_namespace.c: create_pid_namespace() refuses to nest deeper",
        ),
        Invariant(
            "pid_namespace.level",
            "at most MAX_PID_NS_LEVEL (32)",
            "kernel/pid_namespace.c: create_pid_namespace() refuses to nest deeper",
        ),
        Invariant(
            "task_struct.pid",
            "positive for every task on the task list or a thread list",
            "kernel/fork.c: copy_process() lists only tasks with a pid (idle tasks, pid 0, are on no list);"
            " kernel/pid.c: alloc_pid() gives 1..pid_max",
        ),
        Invariant(
            "task_struct.tgid",
            "the leader's pid, for the leader and each of its threads",
            "kernel/fork.c: copy_process() sets a thread's tgid to its leader's and a process's to its"
            " pid; fs/exec.c: de_thread() swaps leader and pid under tasklist_lock",
        ),
        Invariant(
            "task_struct.pid unique",
            "no two tasks on the task list or in one tree have the same pid",
            "kernel/pid.c: alloc_pid() takes a free number from the namespace's idr; it is freed only"
            " after release_task() took the task off every list",
        ),
        Invariant(
            "init_task.tasks",
            "every thread-group leader not yet released is on it, each node's prev the node whose next it is",
            "kernel/fork.c: copy_process() list_add_tail_rcu(&p->tasks, &init_task.tasks);"
            " kernel/exit.c: __unhash_process() list_del_rcu(&p->tasks), both under tasklist_lock",
        ),
        Invariant(
            "task_struct.pid of its struct pid",
            "a task's pid is the number its struct pid has in init_pid_ns",
            "kernel/fork.c: copy_process() sets p->pid = pid_nr(pid) from the struct pid it attaches",
        ),
        Invariant(
            "task_struct.children",
            "a leader not yet released is on its real_parent's children list, and on no other",
            "kernel/fork.c: copy_process() list_add_tail(&p->sibling, &p->real_parent->children);"
            " kernel/exit.c: reparenting moves it with real_parent, under tasklist_lock",
        ),
        Invariant(
            "pid idr",
            "every task not yet released is found by its pid in the idr of each pid namespace it has a number in",
            "kernel/pid.c: alloc_pid() idr_replace()s every level before copy_process() attaches the task;"
            " free_pid() removes them only after __unhash_process() detached it",
        ),
        Invariant(
            "signal_struct.thread_head",
            "every thread not yet released is on its leader's thread list",
            "kernel/fork.c: copy_process() list_add_tail_rcu(&p->thread_node, &p->signal->thread_head);"
            " kernel/exit.c: __unhash_process() list_del_rcu(&p->thread_node), under tasklist_lock",
        ),
        Invariant(
            "task_struct.real_parent",
            "the chain of real parents of every task ends at init_task",
            "kernel/fork.c: copy_process() takes an existing parent; kernel/exit.c: forget_original_parent()"
            " reparents to a living reaper",
        ),
        Invariant(
            "task views",
            "the lists of tasks the scheduler and open files keep can be walked to their end",
            "kernel/sched: run queues and current tasks; fs: a pidfd's and an owner's struct pid",
        ),
        Invariant(
            "fdtable.open_fds",
            "a slot of fd[] holds a file only while its open_fds bit is set",
            "fs/file.c: alloc_fd() sets the bit before fd_install() fills the slot; file_close_fd_locked()"
            " empties the slot before __put_unused_fd() clears it (do_dup2() alone fills first, under file_lock)",
        ),
        Invariant(
            "vm_area_struct.anon_vma",
            "set in every VMA that maps an anonymous page",
            "mm/memory.c: do_anonymous_page(), do_cow_fault() and wp_page_copy() call"
            " anon_vma_prepare() before they map one; kernel/events/uprobes.c likewise",
        ),
        Invariant(
            "tk_read_base.shift",
            "at most 32",
            "kernel/time/clocksource.c: clocks_calc_mult_shift() picks 1..32; fixed shifts (jiffies) are smaller",
        ),
        Invariant(
            "tk_read_base.xtime_nsec",
            "below NSEC_PER_SEC << shift once an update is complete",
            "kernel/time/timekeeping.c: tk_normalize_xtime() carries whole seconds into xtime_sec",
        ),
        Invariant(
            "dentry.d_sb of a mount",
            "a dentry reached below a mount belongs to the mount's super block",
            "fs/namespace.c: a vfsmount's mnt_root is a dentry of mnt_sb, and d_alloc() gives a child "
            "its parent's d_sb",
        ),
        Invariant(
            "dentry.d_name",
            "a component below a root is not empty and holds no '/'",
            "fs/namei.c: lookups split paths at '/' and refuse empty names; d_alloc_pseudo() names "
            "are the exception, and are not below a root",
        ),
    )
}


def broken(name: str, where: str, found: str) -> GuestDataError:
    """The error for a guest that breaks invariant `name`: `where` names the object
    ("struct pid at 0x..."), `found` what it holds."""
    inv = INVARIANTS[name]
    return GuestDataError(
        f"{where}: {found}, which breaks the kernel's invariant {inv.name}: {inv.rule} ({inv.source})"
    )


def null_member(struct: str, member: str, address: int) -> GuestDataError:
    """The error for a NULL `member` of the `struct` at `address` that `NEVER_NULL` lists."""
    return GuestDataError(
        f"struct {struct} at 0x{address:x} has a NULL {member}, which no kernel's has ({NEVER_NULL[(struct, member)]})"
    )
