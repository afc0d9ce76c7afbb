"""A container seccomp profile shaped like Docker's default one (moby's profiles/seccomp), for the
runc-seccomp corpus container: every call a container commonly makes is allowed, everything else
fails with EPERM, the default action, as Docker, Podman and Kubernetes (RuntimeDefault) set it
up. Written here from the profile's documented shape, not copied: what the corpus needs of it is
a large real filter that runc installs and that forbids what the default profile forbids (the
keyring calls, mount, unshare, bpf, ...), which the container's check tries."""

from __future__ import annotations

from typing import Any

__all__ = ["default_like_profile"]

#: calls the default profile allows to every container (the x86-64 names; runc skips names its
#: libseccomp does not know)
ALLOWED = """
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown clock_getres
clock_gettime clock_nanosleep close close_range connect copy_file_range creat dup dup2 dup3
epoll_create epoll_create1 epoll_ctl epoll_pwait epoll_pwait2 epoll_wait eventfd eventfd2 execve
execveat exit exit_group faccessat faccessat2 fadvise64 fallocate fanotify_mark fchdir fchmod
fchmodat fchown fchownat fcntl fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr
fstat fstatfs fsync ftruncate futex futex_waitv futimesat getcpu getcwd getdents getdents64
getegid geteuid getgid getgroups getitimer getpeername getpgid getpgrp getpid getppid
getpriority getrandom getresgid getresuid getrlimit get_robust_list getrusage getsid getsockname
getsockopt get_thread_area gettid gettimeofday getuid getxattr inotify_add_watch inotify_init
inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents io_pgetevents ioprio_get
ioprio_set io_setup io_submit ipc kill landlock_add_rule landlock_create_ruleset
landlock_restrict_self lchown lgetxattr link linkat listen listxattr llistxattr lremovexattr
lseek lsetxattr lstat madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod
mknodat mlock mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive
mq_timedsend mq_unlink mremap msgctl msgget msgrcv msgsnd msync munlock munlockall munmap
name_to_handle_at nanosleep newfstatat open openat openat2 pause pidfd_open pidfd_send_signal
pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2 prlimit64
process_mrelease pselect6 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv
recvfrom recvmmsg recvmsg remap_file_pages removexattr rename renameat renameat2 restart_syscall
rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend
rt_sigtimedwait rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam
sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval
sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select
semctl semget semop semtimedop sendfile sendmmsg sendmsg sendto setfsgid setfsuid setgid
setgroups setitimer setpgid setpriority setregid setresgid setresuid setreuid setrlimit
set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setxattr shmat shmctl
shmdt shmget shutdown sigaltstack signalfd signalfd4 socket socketpair splice stat statfs statx
symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete
timer_getoverrun timer_gettime timer_settime timerfd_create timerfd_gettime timerfd_settime
times tkill truncate umask uname unlink unlinkat utime utimensat utimes vfork vmsplice wait4
waitid write writev arch_prctl modify_ldt clone clone3 personality
""".split()


def default_like_profile() -> dict[str, Any]:
    """The OCI `linux.seccomp` section: deny with EPERM by default, allow ALLOWED."""
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": sorted(set(ALLOWED)), "action": "SCMP_ACT_ALLOW"}],
    }
