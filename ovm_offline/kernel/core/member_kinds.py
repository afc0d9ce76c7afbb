"""The struct members the walkers read, and the kind of type each must have.

The walkers trust an ISF's layout: an ISF that makes ``task_struct.mm`` an int, or
``file.f_pos`` a 1 TiB char array, would fail deep inside a walker, or read garbage as
something else. `check_member_kinds` refuses such an ISF when it is loaded (once: the symbol
cache keeps the verdict), naming the member, what the ISF says and what the walkers read. It
also checks that each of these members lies inside its struct, so a struct shrunk below its
members (``k_sigaction`` of 1 byte) is refused rather than read with the wrong stride.

A kind is coarse on purpose, so that kernels that widen an integer or rename a struct's tag
keep passing: "integer" (any int, char, bool, enum or bit-field), "pointer to struct NAME",
"array of integer", "struct NAME"... ; members whose kind differs between the kernels we
read list every kind seen (``|``). Members an ISF lacks are not checked here: the walkers
test for them (``has_member_``) or refuse by name.

tests/test_member_kinds.py keeps `MEMBER_KINDS` complete: it runs ``ps`` and ``dump`` over
the corpus of both kernels and fails, printing the rows to add, when a walker reads a member
that is not listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import SymbolError

__all__ = ["MEMBER_KINDS", "check_member_kinds", "raw_kind", "raw_member"]

# nested anonymous structs/unions are searched this deep, as ktypes does
_MAX_ANON_DEPTH = 8


def _shallow_kind(isf: dict[str, Any], ref: Any) -> str:
    if not isinstance(ref, dict):
        return "invalid"
    kind = ref.get("kind")
    if kind in ("base", "enum", "bitfield"):
        if kind == "base":
            base = (isf.get("base_types") or {}).get(ref.get("name"))
            base_kind = base.get("kind") if isinstance(base, dict) else None
            if base_kind == "void":
                return "void"
            if base_kind == "float":
                return "float"
            if base_kind not in ("int", "char", "bool"):
                return f"missing base type {ref.get('name')!r}"
        return "integer"
    if kind in ("struct", "union", "class"):
        name = ref.get("name")
        if name not in isf["user_types"]:
            return f"missing {kind} {name}"
        return f"{kind} (unnamed)" if str(name).startswith("unnamed_") else f"{kind} {name}"
    if kind in ("pointer", "array", "function"):
        return str(kind)
    return f"unknown kind {kind!r}"


def raw_kind(isf: dict[str, Any], ref: Any) -> str:
    """The coarse kind of a raw ISF type reference: "integer", "pointer to struct file",
    "array of integer", "struct list_head", "function"... (see the module doc)."""
    if isinstance(ref, dict) and ref.get("kind") == "pointer":
        return f"pointer to {_shallow_kind(isf, ref.get('subtype'))}"
    if isinstance(ref, dict) and ref.get("kind") == "array":
        return f"array of {_shallow_kind(isf, ref.get('subtype'))}"
    return _shallow_kind(isf, ref)


def raw_member(isf: dict[str, Any], struct: str, member: str, depth: int = 0) -> tuple[int, Any, int] | None:
    """(offset, raw type reference, size of the outermost struct) of `member` of `struct` in a
    parsed ISF, looked up through anonymous structs and unions as C does; None if absent."""
    user = isf["user_types"].get(struct)
    if not isinstance(user, dict):
        return None
    fields = user.get("fields") or {}
    field = fields.get(member)
    if isinstance(field, dict):
        return int(field.get("offset", 0)), field.get("type"), int(user.get("size", 0))
    if depth >= _MAX_ANON_DEPTH:
        return None
    for f in fields.values():
        ref = f.get("type") if isinstance(f, dict) else None
        if not (isinstance(f, dict) and f.get("anonymous") and isinstance(ref, dict)):
            continue
        if ref.get("kind") not in ("struct", "union", "class"):
            continue
        inner = raw_member(isf, str(ref.get("name")), member, depth + 1)
        if inner is not None:
            return int(f.get("offset", 0)) + inner[0], inner[1], int(user.get("size", 0))
    return None


def _raw_size(isf: dict[str, Any], ref: Any, depth: int = 0) -> int | None:
    """Bytes a raw type reference takes (a bit-field: the bytes its bits reach), None if
    it cannot be told (a missing type; the kind check names those)."""
    if not isinstance(ref, dict) or depth > 16:
        return None
    kind = ref.get("kind")
    table = {
        "base": "base_types",
        "enum": "enums",
        "struct": "user_types",
        "union": "user_types",
        "class": "user_types",
    }
    if kind in table:
        entry = (isf.get(table[kind]) or {}).get(ref.get("name"))
        size = entry.get("size") if isinstance(entry, dict) else None
        return size if isinstance(size, int) else None
    if kind == "pointer":
        return 8
    if kind == "array":
        element = _raw_size(isf, ref.get("subtype"), depth + 1)
        count = ref.get("count")
        return element * count if element is not None and isinstance(count, int) else None
    if kind == "bitfield":
        position, length = ref.get("bit_position"), ref.get("bit_length")
        if isinstance(position, int) and isinstance(length, int):
            return (position + length + 7) // 8
    return None


def check_member_kinds(isf: dict[str, Any], path: Path) -> None:
    """Refuse a parsed ISF in which a member the walkers read has another kind of type than
    `MEMBER_KINDS` says, or does not fit inside its struct."""
    for name, expected in MEMBER_KINDS.items():
        struct, member = name.split(".")
        found = raw_member(isf, struct, member)
        if found is None:
            continue
        offset, ref, struct_size = found
        kind = raw_kind(isf, ref)
        if kind not in expected.split(" | "):
            raise SymbolError(f"ISF {path}: {name} is {kind}, where the walkers read {expected}")
        size = _raw_size(isf, ref)
        if size is not None and offset + size > struct_size:
            raise SymbolError(
                f"ISF {path}: {name} takes bytes {offset}..{offset + size} of a {struct_size}-byte struct {struct}"
            )


#: "struct.member" -> the kind the walkers read (alternatives joined by " | ")
MEMBER_KINDS: dict[str, str] = {
    "address_space.i_pages": "struct xarray",
    "atomic64_t.counter": "integer",
    "atomic_t.counter": "integer",
    "cgroup.kn": "pointer to struct kernfs_node",
    "cgroup.procs_file": "struct cgroup_file",
    "cgroup.self": "struct cgroup_subsys_state",
    "cgroup_file.kn": "pointer to struct kernfs_node",
    "cgroup_namespace.ns": "struct ns_common",
    "cgroup_subsys_state.children": "struct list_head",
    "cpu_itimer.expires": "integer",
    "cpu_itimer.incr": "integer",
    "cpuinfo_x86.x86_capability": "array of integer",
    "cred.cap_bset": "struct kernel_cap_t",
    "cred.cap_effective": "struct kernel_cap_t",
    "cred.cap_inheritable": "struct kernel_cap_t",
    "cred.cap_permitted": "struct kernel_cap_t",
    "cred.egid": "struct kgid_t",
    "cred.euid": "struct kuid_t",
    "cred.fsgid": "struct kgid_t",
    "cred.fsuid": "struct kuid_t",
    "cred.gid": "struct kgid_t",
    "cred.group_info": "pointer to struct group_info",
    "cred.securebits": "integer",
    "cred.sgid": "struct kgid_t",
    "cred.suid": "struct kuid_t",
    "cred.uid": "struct kuid_t",
    "cred.user_ns": "pointer to struct user_namespace",
    "css_set.dfl_cgrp": "pointer to struct cgroup",
    "dentry.d_hash": "struct hlist_bl_node",
    "dentry.d_inode": "pointer to struct inode",
    "dentry.d_name": "struct qstr",
    "dentry.d_op": "pointer to struct dentry_operations",
    "dentry.d_parent": "pointer to struct dentry",
    "dentry_operations.d_dname": "pointer to function",
    "epitem.event": "struct epoll_event",
    "epitem.ffd": "struct epoll_filefd",
    "epoll_event.data": "integer",
    "epoll_event.events": "integer",
    "epoll_filefd.fd": "integer",
    "epoll_filefd.file": "pointer to struct file",
    "eventfd_ctx.count": "integer",
    "eventfd_ctx.flags": "integer",
    "eventpoll.rbr": "struct rb_root_cached",
    "fdtable.close_on_exec": "pointer to integer",
    "fdtable.fd": "pointer to pointer",
    "fdtable.max_fds": "integer",
    "fdtable.open_fds": "pointer to integer",
    "file.f_flags": "integer",
    "file.f_inode": "pointer to struct inode",
    "file.f_mode": "integer",
    "file.f_op": "pointer to struct file_operations",
    "file.f_owner": "struct fown_struct | pointer to struct fown_struct",
    "file.f_path": "struct path",
    "file.f_pos": "integer",
    "file.private_data": "pointer to void",
    "files_struct.fdt": "pointer to struct fdtable",
    "fown_struct.pid": "pointer to struct pid",
    "fpstate.size": "integer",
    "fpstate.user_xfeatures": "integer",
    "fpu.fpstate": "pointer to struct fpstate",
    "fpu_state_config.max_features": "integer",
    "fs_struct.pwd": "struct path",
    "fs_struct.root": "struct path",
    "fs_struct.umask": "integer",
    "group_info.ngroups": "integer",
    "hlist_bl_node.pprev": "pointer to pointer",
    "hrtimer._softexpires": "integer",
    "hrtimer.base": "pointer to struct hrtimer_clock_base",
    "hrtimer.node": "struct timerqueue_node",
    "hrtimer.state": "integer",
    "hrtimer_clock_base.clockid": "integer",
    "hrtimer_clock_base.running": "pointer to struct hrtimer",
    "hrtimer_sleeper.task": "pointer to struct task_struct",
    "hrtimer_sleeper.timer": "struct hrtimer",
    "idr.idr_base": "integer",
    "idr.idr_rt": "struct xarray",
    "inode.i_gid": "struct kgid_t",
    "inode.i_ino": "integer",
    "inode.i_mapping": "pointer to struct address_space",
    "inode.i_mode": "integer",
    "inode.i_pipe": "pointer to struct pipe_inode_info",
    "inode.i_rdev": "integer",
    "inode.i_sb": "pointer to struct super_block",
    "inode.i_size": "integer",
    "inode.i_uid": "struct kuid_t",
    "ipc_ids.in_use": "integer",
    "ipc_ids.ipcs_idr": "struct idr",
    "ipc_ids.max_idx": "integer",
    "ipc_ids.next_id": "integer",
    "ipc_namespace.ids": "array of struct ipc_ids",
    "ipc_namespace.mq_msg_default": "integer",
    "ipc_namespace.mq_msg_max": "integer",
    "ipc_namespace.mq_msgsize_default": "integer",
    "ipc_namespace.mq_msgsize_max": "integer",
    "ipc_namespace.mq_queues_max": "integer",
    "ipc_namespace.msg_ctlmax": "integer",
    "ipc_namespace.msg_ctlmnb": "integer",
    "ipc_namespace.msg_ctlmni": "integer",
    "ipc_namespace.ns": "struct ns_common",
    "ipc_namespace.sem_ctls": "array of integer",
    "ipc_namespace.shm_ctlall": "integer",
    "ipc_namespace.shm_ctlmax": "integer",
    "ipc_namespace.shm_ctlmni": "integer",
    "ipc_namespace.shm_rmid_forced": "integer",
    "k_sigaction.sa": "struct sigaction",
    "kern_ipc_perm.cgid": "struct kgid_t",
    "kern_ipc_perm.cuid": "struct kuid_t",
    "kern_ipc_perm.gid": "struct kgid_t",
    "kern_ipc_perm.id": "integer",
    "kern_ipc_perm.key": "integer",
    "kern_ipc_perm.mode": "integer",
    "kern_ipc_perm.uid": "struct kuid_t",
    "kernel_cap_t.cap": "array of integer",
    "kernel_cap_t.val": "integer",
    "kernfs_node.iattr": "pointer to struct kernfs_iattrs",
    "kernfs_node.mode": "integer",
    "kernfs_node.name": "pointer to integer",
    "kernfs_node.parent": "pointer to struct kernfs_node",
    "kgid_t.val": "integer",
    "ktermios.c_cc": "array of integer",
    "ktermios.c_cflag": "integer",
    "ktermios.c_iflag": "integer",
    "ktermios.c_ispeed": "integer",
    "ktermios.c_lflag": "integer",
    "ktermios.c_line": "integer",
    "ktermios.c_oflag": "integer",
    "ktermios.c_ospeed": "integer",
    "kuid_t.val": "integer",
    "maple_tree.ma_flags": "integer",
    "maple_tree.ma_root": "pointer to void",
    "mm_context_t.vdso_image": "pointer to struct vdso_image",
    "mm_struct.arg_end": "integer",
    "mm_struct.arg_start": "integer",
    "mm_struct.brk": "integer",
    "mm_struct.context": "struct mm_context_t",
    "mm_struct.end_code": "integer",
    "mm_struct.end_data": "integer",
    "mm_struct.env_end": "integer",
    "mm_struct.env_start": "integer",
    "mm_struct.exe_file": "pointer to struct file",
    "mm_struct.flags": "integer",
    "mm_struct.map_count": "integer",
    "mm_struct.mm_mt": "struct maple_tree",
    "mm_struct.mmap_lock": "struct rw_semaphore",
    "mm_struct.pgd": "pointer to struct pgd_t",
    "mm_struct.saved_auxv": "array of integer",
    "mm_struct.start_brk": "integer",
    "mm_struct.start_code": "integer",
    "mm_struct.start_data": "integer",
    "mm_struct.start_stack": "integer",
    "mm_struct.task_size": "integer",
    "mnt_namespace.ns": "struct ns_common",
    "mount.mnt": "struct vfsmount",
    "mount.mnt_mountpoint": "pointer to struct dentry",
    "mount.mnt_ns": "pointer to struct mnt_namespace",
    "mount.mnt_parent": "pointer to struct mount",
    "net.ns": "struct ns_common",
    "ns_common.inum": "integer",
    "nsproxy.cgroup_ns": "pointer to struct cgroup_namespace",
    "nsproxy.ipc_ns": "pointer to struct ipc_namespace",
    "nsproxy.mnt_ns": "pointer to struct mnt_namespace",
    "nsproxy.net_ns": "pointer to struct net",
    "nsproxy.pid_ns_for_children": "pointer to struct pid_namespace",
    "nsproxy.time_ns": "pointer to struct time_namespace",
    "nsproxy.time_ns_for_children": "pointer to struct time_namespace",
    "nsproxy.uts_ns": "pointer to struct uts_namespace",
    "page.flags": "integer",
    "page.index": "integer",
    "path.dentry": "pointer to struct dentry",
    "path.mnt": "pointer to struct vfsmount",
    "pid.level": "integer",
    "pid.numbers": "array of struct upid",
    "pid_namespace.level": "integer",
    "pid_namespace.ns": "struct ns_common",
    "pipe_buffer.flags": "integer",
    "pipe_buffer.len": "integer",
    "pipe_buffer.offset": "integer",
    "pipe_buffer.page": "pointer to struct page",
    "pipe_inode_info.bufs": "pointer to struct pipe_buffer",
    "pipe_inode_info.head": "integer",
    "pipe_inode_info.max_usage": "integer",
    "pipe_inode_info.ring_size": "integer",
    "pipe_inode_info.tail": "integer",
    "possible_net_t.net": "pointer to struct net",
    "qstr.len": "integer",
    "qstr.name": "pointer to integer",
    "rb_root.rb_node": "pointer to struct rb_node",
    "rb_root_cached.rb_root": "struct rb_root",
    "refcount_t.refs": "struct atomic_t",
    "rlimit.rlim_cur": "integer",
    "rlimit.rlim_max": "integer",
    "rw_semaphore.count": "struct atomic64_t",
    "seccomp.mode": "integer",
    "shmem_inode_info.seals": "integer",
    "shmid_kernel.shm_file": "pointer to struct file",
    "shmid_kernel.shm_segsz": "integer",
    "sigaction.sa_flags": "integer",
    "sigaction.sa_handler": "pointer to function",
    "sigaction.sa_mask": "struct sigset_t",
    "sigaction.sa_restorer": "pointer to function",
    "sighand_struct.action": "array of struct k_sigaction",
    "signal_struct.is_child_subreaper": "integer",
    "signal_struct.it": "array of struct cpu_itimer",
    "signal_struct.it_real_incr": "integer",
    "signal_struct.nr_threads": "integer",
    "signal_struct.oom_score_adj": "integer",
    "signal_struct.pids": "array of pointer",
    "signal_struct.real_timer": "struct hrtimer",
    "signal_struct.rlim": "array of struct rlimit",
    "signal_struct.shared_pending": "struct sigpending",
    "signal_struct.tty": "pointer to struct tty_struct",
    "signalfd_ctx.sigmask": "struct sigset_t",
    "sigpending.signal": "struct sigset_t",
    "sigqueue.info": "struct kernel_siginfo_t",
    "sigset_t.sig": "array of integer",
    "sk_buff.data": "pointer to integer",
    "sk_buff.data_len": "integer",
    "sk_buff.end": "integer",
    "sk_buff.head": "pointer to integer",
    "sk_buff.len": "integer",
    "sk_buff.sk": "pointer to struct sock",
    "sk_buff_head.qlen": "integer",
    "skb_frag_t.bv_len": "integer",
    "skb_frag_t.bv_offset": "integer",
    "skb_frag_t.bv_page": "pointer to struct page",
    "skb_frag_t.len": "integer",
    "skb_frag_t.netmem": "integer",
    "skb_frag_t.offset": "integer",
    "skb_shared_info.frag_list": "pointer to struct sk_buff",
    "skb_shared_info.frags": "array of struct skb_frag_t",
    "skb_shared_info.nr_frags": "integer",
    "sock.__sk_common": "struct sock_common",
    "sock.sk_filter": "pointer to struct sk_filter",
    "sock.sk_mark": "integer",
    "sock.sk_max_ack_backlog": "integer",
    "sock.sk_no_check_tx": "integer",
    "sock.sk_priority": "integer",
    "sock.sk_rcvbuf": "integer",
    "sock.sk_rcvlowat": "integer",
    "sock.sk_rcvtimeo": "integer",
    "sock.sk_receive_queue": "struct sk_buff_head",
    "sock.sk_shutdown": "integer",
    "sock.sk_sndbuf": "integer",
    "sock.sk_sndtimeo": "integer",
    "sock.sk_socket": "pointer to struct socket",
    "sock.sk_type": "integer",
    "sock.sk_userlocks": "integer",
    "sock.sk_wmem_alloc": "struct refcount_t",
    "sock_common.skc_bound_dev_if": "integer",
    "sock_common.skc_family": "integer",
    "sock_common.skc_flags": "integer",
    "sock_common.skc_net": "struct possible_net_t",
    "sock_common.skc_reuse": "integer",
    "sock_common.skc_reuseport": "integer",
    "sock_common.skc_state": "integer",
    "socket.flags": "integer",
    "socket.sk": "pointer to struct sock",
    "socket_alloc.vfs_inode": "struct inode",
    "super_block.s_dev": "integer",
    "super_block.s_magic": "integer",
    "task_struct.__state": "integer",
    "task_struct.blocked": "struct sigset_t",
    "task_struct.cgroups": "pointer to struct css_set",
    "task_struct.children": "struct list_head",
    "task_struct.clear_child_tid": "pointer to integer",
    "task_struct.comm": "array of integer",
    "task_struct.cred": "pointer to struct cred",
    "task_struct.exit_state": "integer",
    "task_struct.files": "pointer to struct files_struct",
    "task_struct.flags": "integer",
    "task_struct.fs": "pointer to struct fs_struct",
    "task_struct.group_leader": "pointer to struct task_struct",
    "task_struct.loginuid": "struct kuid_t",
    "task_struct.mm": "pointer to struct mm_struct",
    "task_struct.nsproxy": "pointer to struct nsproxy",
    "task_struct.on_cpu": "integer",
    "task_struct.pdeath_signal": "integer",
    "task_struct.pending": "struct sigpending",
    "task_struct.personality": "integer",
    "task_struct.pid": "integer",
    "task_struct.policy": "integer",
    "task_struct.real_blocked": "struct sigset_t",
    "task_struct.real_cred": "pointer to struct cred",
    "task_struct.real_parent": "pointer to struct task_struct",
    "task_struct.restore_sigmask": "integer",
    "task_struct.robust_list": "pointer to struct robust_list_head",
    "task_struct.rseq": "pointer to struct rseq",
    "task_struct.rseq_len": "integer",
    "task_struct.rseq_sig": "integer",
    "task_struct.rt_priority": "integer",
    "task_struct.sas_ss_flags": "integer",
    "task_struct.sas_ss_size": "integer",
    "task_struct.sas_ss_sp": "integer",
    "task_struct.saved_sigmask": "struct sigset_t",
    "task_struct.sched_reset_on_fork": "integer",
    "task_struct.seccomp": "struct seccomp",
    "task_struct.sighand": "pointer to struct sighand_struct",
    "task_struct.signal": "pointer to struct signal_struct",
    "task_struct.stack": "pointer to void",
    "task_struct.stack_vm_area": "pointer to struct vm_struct",
    "task_struct.static_prio": "integer",
    "task_struct.tgid": "integer",
    "task_struct.thread": "struct thread_struct",
    "task_struct.thread_info": "struct thread_info",
    "task_struct.thread_pid": "pointer to struct pid",
    "thread_info.cpu": "integer",
    "thread_struct.ds": "integer",
    "thread_struct.es": "integer",
    "thread_struct.fpu": "struct fpu",
    "thread_struct.fsbase": "integer",
    "thread_struct.fsindex": "integer",
    "thread_struct.gsbase": "integer",
    "thread_struct.gsindex": "integer",
    "thread_struct.pkru": "integer",
    "thread_struct.sp": "integer",
    "thread_struct.tls_array": "array of struct desc_struct",
    "time_namespace.ns": "struct ns_common",
    "timekeeper.offs_boot": "integer",
    "timekeeper.offs_real": "integer",
    "timekeeper.tkr_mono": "struct tk_read_base",
    "timekeeper.wall_to_monotonic": "struct timespec64",
    "timekeeper.xtime_sec": "integer",
    "timerfd_ctx.clockid": "integer",
    "timerfd_ctx.settime_flags": "integer",
    "timerfd_ctx.t": "union (unnamed)",
    "timerfd_ctx.ticks": "integer",
    "timerfd_ctx.tintv": "integer",
    "timerqueue_node.expires": "integer",
    "timespec64.tv_nsec": "integer",
    "timespec64.tv_sec": "integer",
    "tk_read_base.base": "integer",
    "tk_read_base.shift": "integer",
    "tk_read_base.xtime_nsec": "integer",
    "tty_driver.subtype": "integer",
    "tty_driver.type": "integer",
    "tty_file_private.file": "pointer to struct file",
    "tty_file_private.tty": "pointer to struct tty_struct",
    "tty_struct.ctrl": "struct (unnamed)",
    "tty_struct.driver": "pointer to struct tty_driver",
    "tty_struct.flags": "integer",
    "tty_struct.index": "integer",
    "tty_struct.link": "pointer to struct tty_struct",
    "tty_struct.termios": "struct ktermios",
    "tty_struct.termios_locked": "struct ktermios",
    "tty_struct.winsize": "struct winsize",
    "unix_address.len": "integer",
    "unix_skb_parms.consumed": "integer",
    "unix_skb_parms.fp": "pointer to struct scm_fp_list",
    "unix_skb_parms.gid": "struct kgid_t",
    "unix_skb_parms.pid": "pointer to struct pid",
    "unix_skb_parms.uid": "struct kuid_t",
    "unix_sock.addr": "pointer to struct unix_address",
    "unix_sock.oob_skb": "pointer to struct sk_buff",
    "unix_sock.path": "struct path",
    "unix_sock.peer": "pointer to struct sock",
    "unix_sock.sk": "struct sock",
    "upid.nr": "integer",
    "upid.ns": "pointer to struct pid_namespace",
    "user_namespace.ns": "struct ns_common",
    "uts_namespace.ns": "struct ns_common",
    "vdso_image.data": "pointer to void",
    "vdso_image.size": "integer",
    "vfsmount.mnt_root": "pointer to struct dentry",
    "vfsmount.mnt_sb": "pointer to struct super_block",
    "vm_area_struct.anon_vma": "pointer to struct anon_vma",
    "vm_area_struct.vm_end": "integer",
    "vm_area_struct.vm_file": "pointer to struct file",
    "vm_area_struct.vm_flags": "integer",
    "vm_area_struct.vm_ops": "pointer to struct vm_operations_struct",
    "vm_area_struct.vm_pgoff": "integer",
    "vm_area_struct.vm_private_data": "pointer to void",
    "vm_area_struct.vm_start": "integer",
    "vm_special_mapping.name": "pointer to integer",
    "vm_struct.addr": "pointer to void",
    "vm_struct.flags": "integer",
    "vm_struct.size": "integer",
    "winsize.ws_col": "integer",
    "winsize.ws_row": "integer",
    "winsize.ws_xpixel": "integer",
    "winsize.ws_ypixel": "integer",
    "xarray.xa_head": "pointer to void",
}
