"""The members the walkers read, by the kind of type each must have: the table
`member_kinds.py` checks an ISF against (its module doc says what a kind is, and how members of
untagged structs are named)."""

from __future__ import annotations

__all__ = ["MEMBERS_BY_KIND", "MEMBER_PATHS_BY_KIND"]

#: kind -> the members the walkers read as that kind (a member listed under two kinds may be
#: either: the kernels we read differ)
MEMBERS_BY_KIND: dict[str, str] = {
    "integer": (
        "atomic64_t.counter atomic_t.counter cpu_itimer.expires cpu_itimer.incr cred.securebits "
        "epoll_event.data epoll_event.events epoll_filefd.fd eventfd_ctx.count eventfd_ctx.flags fsnotify_group.q_len "
        "fdtable.max_fds file.f_flags file.f_mode file.f_pos fpstate.size fpstate.user_xfeatures fpu.last_cpu "
        "fpu_state_config.max_features fs_struct.umask group_info.ngroups hrtimer._softexpires fsnotify_mark.flags "
        "hrtimer.state hrtimer_clock_base.clockid task_struct.start_boottime idr.idr_base inode.i_ino inode.i_mode "
        "fsnotify_mark.mask fsnotify_mark_connector.type idr.idr_next inode.i_generation inotify_inode_mark.wd "
        "fsnotify_mark.ignore_mask fanotify_group_private_data.flags fanotify_group_private_data.f_flags "
        "inode.i_atime_sec inode.i_atime_nsec inode.i_mtime_sec inode.i_mtime_nsec inode.i_nlink net_device.ifindex "
        "cgroup.subtree_control cgroup.max_descendants cgroup.max_depth cgroup_freezer_state.freeze iov_iter.count "
        "iov_iter.data_source iov_iter.iov_offset iov_iter.iter_type inode.i_rdev inode.i_size ipc_ids.in_use "
        "ipc_ids.max_idx ipc_ids.next_id ipc_namespace.mq_msg_default ipc_namespace.mq_msg_max "
        "ipc_namespace.mq_msgsize_default ipc_namespace.mq_msgsize_max ipc_namespace.mq_queues_max "
        "ipc_namespace.msg_ctlmax ipc_namespace.msg_ctlmnb ipc_namespace.msg_ctlmni ipc_namespace.shm_ctlall "
        "ipc_namespace.shm_ctlmax ipc_namespace.shm_ctlmni ipc_namespace.shm_rmid_forced "
        "kern_ipc_perm.id kern_ipc_perm.key kern_ipc_perm.mode kernel_cap_t.val kernfs_node.mode "
        "kgid_t.val ktermios.c_cflag ktermios.c_iflag ktermios.c_ispeed ktermios.c_lflag "
        "ktermios.c_line ktermios.c_oflag ktermios.c_ospeed kuid_t.val maple_tree.ma_flags "
        "mm_struct.arg_end mm_struct.arg_start mm_struct.brk mm_struct.end_code mm_struct.end_data "
        "mm_struct.env_end mm_struct.env_start mm_struct.flags mm_struct.map_count "
        "mm_struct.start_brk mm_struct.start_code mm_struct.start_data mm_struct.start_stack "
        "mm_struct.task_size ns_common.inum page.flags page.index pid.level pid_namespace.level "
        "pipe_buffer.flags pipe_buffer.len pipe_buffer.offset pipe_inode_info.head "
        "pipe_inode_info.max_usage pipe_inode_info.ring_size pipe_inode_info.tail qstr.len "
        "rlimit.rlim_cur rlimit.rlim_max seccomp.mode shmem_inode_info.seals shmid_kernel.shm_segsz "
        "sigaction.sa_flags signal_struct.is_child_subreaper signal_struct.it_real_incr "
        "signal_struct.nr_threads signal_struct.oom_score_adj sk_buff.data_len sk_buff.end "
        "sk_buff.len sk_buff_head.qlen skb_frag_t.bv_len skb_frag_t.bv_offset skb_frag_t.len "
        "skb_frag_t.netmem skb_frag_t.offset skb_shared_info.nr_frags sock.sk_mark "
        "sock.sk_max_ack_backlog sock.sk_no_check_tx sock.sk_priority sock.sk_rcvbuf "
        "sock.sk_rcvlowat sock.sk_rcvtimeo sock.sk_shutdown sock.sk_sndbuf sock.sk_sndtimeo "
        "sock.sk_type sock.sk_userlocks sock_common.skc_bound_dev_if sock_common.skc_family "
        "sock_common.skc_flags sock_common.skc_reuse sock_common.skc_reuseport "
        "sock_common.skc_state socket.flags super_block.s_dev super_block.s_magic "
        "tty_struct.packet udp_sock.corkflag "
        "task_struct.__state task_struct.state task_struct.exit_state task_struct.flags task_struct.on_cpu "
        "task_struct.pdeath_signal task_struct.personality task_struct.pid task_struct.policy "
        "task_struct.restore_sigmask task_struct.rseq_len task_struct.rseq_sig "
        "task_struct.rt_priority task_struct.sas_ss_flags task_struct.sas_ss_size "
        "task_struct.sas_ss_sp task_struct.sched_reset_on_fork task_struct.static_prio task_struct.cpu "
        "task_struct.tgid thread_info.cpu thread_info.flags thread_struct.ds thread_struct.es thread_struct.fsbase "
        "thread_struct.fsindex thread_struct.gsbase thread_struct.gsindex thread_struct.pkru "
        "thread_struct.sp timekeeper.offs_boot timekeeper.offs_real timekeeper.xtime_sec "
        "timerfd_ctx.clockid timerfd_ctx.settime_flags timerfd_ctx.ticks timerfd_ctx.tintv "
        "timerqueue_node.expires timespec64.tv_nsec timespec64.tv_sec tk_read_base.base "
        "tk_read_base.shift tk_read_base.xtime_nsec seqcount_t.sequence tty_driver.subtype tty_driver.type "
        "tty_struct.flags tty_struct.index unix_address.len unix_skb_parms.consumed upid.nr scm_fp_list.count "
        "vdso_image.size vm_area_struct.vm_end vm_area_struct.vm_flags vm_area_struct.vm_pgoff "
        "vm_area_struct.vm_start vm_struct.flags vm_struct.size winsize.ws_col winsize.ws_row "
        "winsize.ws_xpixel winsize.ws_ypixel "
        "inet_connection_sock.icsk_backoff inet_sock.cmsg_flags inet_sock.freebind inet_sock.inet_flags "
        "inet_sock.inet_sport inet_sock.tos inet_sock.uc_ttl netns_ipv4.sysctl_ip_default_ttl "
        "netns_ipv4.sysctl_tcp_keepalive_intvl netns_ipv4.sysctl_tcp_keepalive_probes "
        "netns_ipv4.sysctl_tcp_keepalive_time sock.sk_ack_backlog sock.sk_protocol sock_common.skc_daddr "
        "sock_common.skc_dport sock_common.skc_ipv6only sock_common.skc_rcv_saddr tcp_sock.keepalive_intvl "
        "tcp_sock.keepalive_probes tcp_sock.keepalive_time udp_sock.forward_deficit udp_sock.udp_flags "
        "tcp_options_received.mss_clamp tcp_options_received.rcv_wscale tcp_options_received.sack_ok "
        "tcp_options_received.snd_wscale tcp_options_received.tstamp_ok tcp_options_received.wscale_ok "
        "tcp_skb_cb.seq tcp_sock.copied_seq tcp_sock.ecn_flags tcp_sock.max_window tcp_sock.nonagle "
        "tcp_sock.rcv_nxt tcp_sock.rcv_wnd tcp_sock.rcv_wup tcp_sock.repair tcp_sock.snd_nxt tcp_sock.snd_una "
        "tcp_sock.snd_wl1 tcp_sock.snd_wnd tcp_sock.syn_data_acked tcp_sock.tcp_clock_cache tcp_sock.tcp_usec_ts "
        "tcp_sock.tsoffset tcp_sock.urg_data tcp_sock.write_seq "
        "uid_gid_extent.count uid_gid_extent.first uid_gid_extent.lower_first uid_gid_map.nr_extents "
        "mnt_namespace.mounts mnt_namespace.nr_mounts mount.mnt_group_id mount.mnt_id super_block.s_flags "
        "vfsmount.mnt_flags"
        " cgroup_root.flags proc_fs_info.hide_pid proc_fs_info.pidonly pts_mount_opts.max pts_mount_opts.mode "
        "pts_mount_opts.ptmxmode pts_mount_opts.setgid pts_mount_opts.setuid ramfs_mount_opts.mode "
        "shmem_sb_info.full_inums shmem_sb_info.huge shmem_sb_info.max_blocks shmem_sb_info.max_inodes "
        "shmem_sb_info.mode shmem_sb_info.noswap"
        " file_lock.fl_end file_lock.fl_flags file_lock.fl_pid file_lock.fl_start file_lock.fl_type"
        " file_lock_core.flc_flags file_lock_core.flc_pid file_lock_core.flc_type fown_struct.pid_type"
        " fown_struct.signum k_itimer.it_active k_itimer.it_clock k_itimer.it_id k_itimer.it_interval"
        " k_itimer.it_overrun_last k_itimer.it_requeue_pending k_itimer.it_sigev_notify n_tty_data.read_head"
        " n_tty_data.read_tail n_tty_data.canon_head n_tty_data.commit_head n_tty_data.echo_head n_tty_data.echo_tail"
        " proc_ns_operations.type seccomp_filter.log sock_fprog_kern.len"
        " task_struct.exit_code tty_buffer.commit tty_buffer.read tty_buffer.size"
        # 7.x
        " memdesc_flags_t.f page.__folio_index page.compound_head page.compound_info rseq_data.len rseq_data.sig"
        " epoll_key.fd ns_common.ns_type task_exec_state.dumpable task_struct.jobctl task_struct.atomic_flags k_itimer.it_status sock.sk_scm_credentials sock.sk_scm_security hrtimer.is_queued timerqueue_linked_node.expires timerqueue_node.expires"
    ),
    "struct kuid_t": (
        "cred.euid cred.fsuid cred.suid cred.uid inode.i_uid kern_ipc_perm.cuid kern_ipc_perm.uid "
        "task_struct.loginuid unix_skb_parms.uid"
        " pts_mount_opts.uid shmem_sb_info.uid fown_struct.euid fown_struct.uid"
    ),
    "pointer to integer": (
        "fdtable.close_on_exec fdtable.open_fds kernfs_node.name qstr.name sk_buff.data "
        "sk_buff.head task_struct.clear_child_tid vm_special_mapping.name "
        "file_system_type.name mount.mnt_devname super_block.s_subtype inode.i_link"
        " proc_ns_operations.name cgroup_subsys.name"
    ),
    "struct kgid_t": (
        "cred.egid cred.fsgid cred.gid cred.sgid inode.i_gid kern_ipc_perm.cgid kern_ipc_perm.gid unix_skb_parms.gid"
        " proc_fs_info.pid_gid pts_mount_opts.gid shmem_sb_info.gid"
    ),
    "struct ns_common": (
        "cgroup_namespace.ns ipc_namespace.ns mnt_namespace.ns net.ns pid_namespace.ns "
        "time_namespace.ns user_namespace.ns uts_namespace.ns"
    ),
    "array of integer": (
        "cpuinfo_x86.x86_capability ipc_namespace.sem_ctls kernel_cap_t.cap ktermios.c_cc n_tty_data.read_buf "
        "n_tty_data.read_flags mm_struct.saved_auxv new_utsname.domainname new_utsname.nodename sigset_t.sig"
        " task_struct.comm net_device.name mm_flags_t.__mm_flags"
    ),
    "pointer to void": (
        "file.private_data iov_iter.ubuf maple_tree.ma_root task_struct.stack vdso_image.data "
        "vm_area_struct.vm_private_data vm_struct.addr xarray.xa_head"
        " super_block.s_fs_info"
        " file_lock.fl_owner file_lock_core.flc_owner inode.i_private tty_struct.disc_data fsnotify_mark_connector.obj"
    ),
    "struct sigset_t": (
        "sigaction.sa_mask signalfd_ctx.sigmask sigpending.signal task_struct.blocked "
        "task_struct.real_blocked task_struct.saved_sigmask"
    ),
    "pointer to struct file": (
        "epoll_filefd.file mm_struct.exe_file shmid_kernel.shm_file tty_file_private.file vm_area_struct.vm_file"
        " file_lock.fl_file file_lock_core.flc_file epoll_key.file"
    ),
    "pointer to struct dentry": "dentry.d_parent mount.mnt_mountpoint path.dentry super_block.s_root vfsmount.mnt_root",
    "struct kernel_cap_t": "cred.cap_ambient cred.cap_bset cred.cap_effective cred.cap_inheritable cred.cap_permitted",
    "struct path": "file.f_path fs_struct.pwd fs_struct.root unix_sock.path",
    "pointer to function": "dentry_operations.d_dname sigaction.sa_handler sigaction.sa_restorer",
    "pointer to struct kernfs_node": "cgroup.kn cgroup_file.kn kernfs_node.parent kernfs_node.__parent",
    "pointer to struct pid": (
        "fown_struct.pid task_struct.thread_pid unix_skb_parms.pid tty_struct.pgrp tty_struct.session"
    ),
    "pointer to struct sock": "sk_buff.sk socket.sk unix_sock.peer",
    "pointer to struct task_struct": (
        "hrtimer_sleeper.task rq.curr rq.idle rt_mutex_base.owner task_struct.group_leader task_struct.real_parent"
    ),
    "pointer to struct tty_struct": "signal_struct.tty tty_file_private.tty tty_struct.link",
    "pointer to pointer": "fdtable.fd hlist_bl_node.pprev fsnotify_mark_connector.obj",
    "pointer to struct cred": "task_struct.cred task_struct.real_cred",
    "pointer to struct inode": "dentry.d_inode file.f_inode",
    "pointer to struct mnt_namespace": "mount.mnt_ns nsproxy.mnt_ns",
    "pointer to struct net": "nsproxy.net_ns possible_net_t.net",
    "pointer to struct page": "pipe_buffer.page skb_frag_t.bv_page",
    "pointer to struct pid_namespace": "nsproxy.pid_ns_for_children proc_fs_info.pid_ns upid.ns",
    "pointer to struct sk_buff": "skb_shared_info.frag_list unix_sock.oob_skb",
    "pointer to struct super_block": "dentry.d_sb inode.i_sb vfsmount.mnt_sb",
    "pointer to struct time_namespace": "nsproxy.time_ns nsproxy.time_ns_for_children",
    "struct hrtimer": "hrtimer_sleeper.timer signal_struct.real_timer",
    "struct ktermios": "tty_struct.termios tty_struct.termios_locked",
    "struct list_head": (
        "cgroup_subsys_state.children dentry.d_child dentry.d_subdirs mount.mnt_child mount.mnt_mounts "
        "task_struct.children mnt_namespace.list mount.mnt_list net.dev_base_head net_device.dev_list"
        " fsnotify_group.marks_list fsnotify_group.notification_list fanotify_group_private_data.access_list"
    ),
    "struct hlist_head": "dentry.d_children file_system_type.fs_supers inode.i_dentry",
    "struct hlist_node": "dentry.d_sib super_block.s_instances",
    # before 6.1: the VMAs in a list beside their rb-tree, and the FPU state inside struct fpu
    "pointer to struct vm_area_struct": "mm_struct.mmap vm_area_struct.vm_next",
    "union fpregs_state": "fpu.state",
    "struct sigpending": "signal_struct.shared_pending task_struct.pending",
    "struct xarray": "address_space.i_pages idr.idr_rt",
    "array of pointer": "scm_fp_list.fp signal_struct.pids",
    "array of struct cpu_itimer": "signal_struct.it",
    "array of struct desc_struct": "thread_struct.tls_array",
    "array of struct hrtimer_clock_base": "hrtimer_cpu_base.clock_base",
    "array of struct ipc_ids": "ipc_namespace.ids",
    "array of struct k_sigaction": "sighand_struct.action",
    "array of struct rlimit": "signal_struct.rlim",
    "array of struct skb_frag_t": "skb_shared_info.frags",
    "array of struct upid": "pid.numbers",
    "pointer to struct address_space": "inode.i_mapping file.f_mapping",
    "pointer to struct anon_vma": "vm_area_struct.anon_vma",
    "pointer to struct cgroup": "css_set.dfl_cgrp cgroup.dom_cgrp",
    "struct cgroup_freezer_state": "cgroup.freezer",
    "struct kernfs_elem_dir": "kernfs_node.dir",
    "pointer to struct cgroup_namespace": "nsproxy.cgroup_ns",
    "pointer to struct css_set": "task_struct.cgroups cgroup_namespace.root_cset",
    "pointer to struct dentry_operations": "dentry.d_op",
    "pointer to struct fdtable": "files_struct.fdt",
    "pointer to struct file_operations": "file.f_op",
    "pointer to struct files_struct": "task_struct.files",
    "pointer to struct fown_struct": "file.f_owner",
    "pointer to struct fpstate": "fpu.fpstate",
    "pointer to struct fs_struct": "task_struct.fs",
    "pointer to struct fsnotify_mark_connector": "fsnotify_mark.connector",
    "pointer to struct export_operations": "super_block.s_export_op",
    "struct inotify_group_private_data": "fsnotify_group.inotify_data",
    "struct fanotify_group_private_data": "fsnotify_group.fanotify_data",
    "pointer to struct group_info": "cred.group_info",
    "pointer to struct hrtimer": "hrtimer_clock_base.running",
    "pointer to struct hrtimer_clock_base": "hrtimer.base",
    "pointer to struct ipc_namespace": "nsproxy.ipc_ns",
    "pointer to struct kernfs_iattrs": "kernfs_node.iattr",
    "pointer to struct mm_struct": "task_struct.mm",
    "pointer to struct mount": "mount.mnt_parent mount.mnt_master",
    "pointer to struct nsproxy": "task_struct.nsproxy",
    "pointer to struct file_system_type": "super_block.s_type",
    "pointer to struct super_operations": "super_block.s_op",
    "pointer to struct mempolicy": "shmem_sb_info.mpol",
    "struct shmem_quota_limits": "shmem_sb_info.qlimits",
    "struct pts_mount_opts": "pts_fs_info.mount_opts",
    "struct ramfs_mount_opts": "ramfs_fs_info.mount_opts",
    "struct rb_node": "mount.mnt_node kernfs_node.rb",
    "pointer to struct pgd_t": "mm_struct.pgd",
    "pointer to struct pipe_buffer": "pipe_inode_info.bufs",
    "pointer to struct pipe_inode_info": "inode.i_pipe",
    "pointer to struct rb_node": "rb_root.rb_node",
    "pointer to struct robust_list_head": "task_struct.robust_list futex_sched_data.robust_list",
    "pointer to struct rseq": "task_struct.rseq rseq_data.usrptr",
    # 7.x: what an integer or a pointer was before became a struct around it
    "struct mm_flags_t": "mm_struct.flags",
    "pointer to struct task_exec_state": "task_struct.exec_state",
    "struct memdesc_flags_t": "page.flags",
    "struct rseq_data": "task_struct.rseq",
    "struct epoll_key": "epitem.ffd",
    "struct timerqueue_linked_node": "hrtimer.node",
    "struct futex_sched_data": "task_struct.futex",
    "struct timekeeper": "tk_data.timekeeper",
    "pointer to struct scm_fp_list": "unix_skb_parms.fp",
    "pointer to struct sighand_struct": "task_struct.sighand",
    "pointer to struct signal_struct": "task_struct.signal",
    "pointer to struct sk_filter": "sock.sk_filter",
    "pointer to struct socket": "sock.sk_socket",
    "pointer to struct tty_driver": "tty_struct.driver",
    "pointer to struct request_sock": "tcp_sock.fastopen_rsk",
    "pointer to struct unix_address": "unix_sock.addr",
    "pointer to struct user_namespace": "cred.user_ns user_namespace.parent",
    "pointer to struct uts_namespace": "nsproxy.uts_ns",
    "struct new_utsname": "uts_namespace.name",
    "struct uid_gid_map": "user_namespace.gid_map user_namespace.uid_map",
    "array of struct uid_gid_extent": "uid_gid_map.extent",
    "pointer to struct uid_gid_extent": "uid_gid_map.forward",
    "pointer to struct vdso_image": "mm_context_t.vdso_image",
    "pointer to struct vfsmount": "path.mnt",
    "pointer to struct vm_operations_struct": "vm_area_struct.vm_ops",
    "pointer to struct vm_struct": "task_struct.stack_vm_area",
    "struct (unnamed)": "tty_struct.ctrl sock.sk_backlog",
    "struct atomic64_t": "rw_semaphore.count rw_semaphore.owner",
    "struct atomic_t": "refcount_t.refs rwbase_rt.readers signal_struct.live",
    "struct cgroup_file": "cgroup.procs_file",
    "struct cgroup_subsys_state": "cgroup.self",
    "struct epoll_event": "epitem.event",
    "struct epoll_filefd": "epitem.ffd",
    "struct fown_struct": "file.f_owner",
    "struct fpu": "thread_struct.fpu",
    "struct hlist_bl_node": "dentry.d_hash",
    "struct idr": "ipc_ids.ipcs_idr inotify_group_private_data.idr pid_namespace.idr",
    "struct inode": "socket_alloc.vfs_inode",
    "struct kernel_siginfo_t": "sigqueue.info",
    "struct maple_tree": "mm_struct.mm_mt",
    "struct mm_context_t": "mm_struct.context",
    "struct tcp_options_received": "tcp_sock.rx_opt",
    "struct netns_ipv4": "net.ipv4",
    "struct possible_net_t": "sock_common.skc_net",
    "struct qstr": "dentry.d_name",
    "struct rb_root": "rb_root_cached.rb_root tcp_sock.out_of_order_queue mnt_namespace.mounts kernfs_elem_dir.children",
    "struct rb_root_cached": "eventpoll.rbr cfs_rq.tasks_timeline dl_rq.root",
    "struct refcount_t": "sock.sk_wmem_alloc",
    "struct rw_semaphore": "mm_struct.mmap_lock",
    "struct rwbase_rt": "rw_semaphore.rwbase rwlock_t.rwbase",
    "struct rt_mutex_base": "rwbase_rt.rtmutex",
    "struct seccomp": "task_struct.seccomp",
    "struct sigaction": "k_sigaction.sa",
    "struct sk_buff_head": "sock.sk_receive_queue udp_sock.reader_queue",
    "struct sock": "unix_sock.sk",
    "struct sock_common": "sock.__sk_common",
    "struct thread_info": "task_struct.thread_info",
    "struct thread_struct": "task_struct.thread",
    "struct timerqueue_node": "hrtimer.node",
    "struct timespec64": "timekeeper.wall_to_monotonic inode.i_atime inode.__i_atime inode.i_mtime inode.__i_mtime",
    "struct tk_read_base": "timekeeper.tkr_mono",
    "struct seqcount_t": "seqcount_raw_spinlock_t.seqcount",
    "struct seqcount_raw_spinlock_t": "tk_data.seq",
    "struct vfsmount": "mount.mnt",
    "struct winsize": "tty_struct.winsize",
    "union (unnamed)": "timerfd_ctx.t k_itimer.it ipv6_pinfo.rxopt",
    "pointer to struct ipv6_pinfo": "inet_sock.pinet6",
    "pointer to struct bpf_prog": "seccomp_filter.prog",
    "pointer to struct file_lock_context": "inode.i_flctx",
    "pointer to struct notification": "seccomp_filter.notif",
    "pointer to struct proc_ns_operations": "ns_common.ops",
    "pointer to struct seccomp_filter": "seccomp.filter seccomp_filter.prev",
    "pointer to struct sigqueue": "k_itimer.sigq",
    "struct sigqueue": "k_itimer.sigq",
    "pointer to struct sock_filter": "sock_fprog_kern.filter",
    "pointer to struct sock_fprog_kern": "bpf_prog.orig_prog",
    "pointer to struct tty_buffer": "tty_buffer.next tty_bufhead.head",
    "pointer to struct tty_ldisc": "tty_struct.ldisc",
    "pointer to struct tty_ldisc_ops": "tty_ldisc.ops",
    "pointer to struct tty_port": "tty_struct.port",
    "struct file_lock_core": "file_lease.c file_lock.c",
    "struct tty_bufhead": "tty_port.buf",
    # the scheduler's and the pid idr's views of tasks (kernel/crossview)
    "pointer to struct sched_entity": "cfs_rq.curr",
    "pointer to struct cfs_rq": "sched_entity.my_q",
    "pointer to struct hlist_node": "hlist_head.first",
    "array of struct hlist_head": "pid.tasks",
    "array of struct list_head": "rt_prio_array.queue",
    "struct cfs_rq": "rq.cfs",
    "struct rt_rq": "rq.rt",
    "struct dl_rq": "rq.dl",
    "struct rt_prio_array": "rt_rq.active",
    "struct arch_rwlock_t": "rwlock_t.raw_lock",
}

#: kind -> the members of untagged structs and unions the walkers read as that kind, each
#: named by its path from a tagged struct or a symbol (see the module doc)
MEMBER_PATHS_BY_KIND: dict[str, str] = {
    "integer": "tty_struct.ctrl.packet ipv6_pinfo.rxopt.bits.rxinfo",
    "pointer to struct pid": "tty_struct.ctrl.pgrp tty_struct.ctrl.session",
    "struct atomic_t": "sock.sk_backlog.rmem_alloc",
    "struct alarm": "timerfd_ctx.t.alarm",
    "struct hrtimer": "timerfd_ctx.t.tmr k_itimer.it.real.timer",
    "struct timekeeper": "@tk_core.timekeeper",
    "struct seqcount_raw_spinlock_t": "@tk_core.seq",
    "struct (unnamed)": "k_itimer.it.real ipv6_pinfo.rxopt.bits",
}
