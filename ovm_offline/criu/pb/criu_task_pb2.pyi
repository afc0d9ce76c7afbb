from . import criu_display_pb2 as _criu_display_pb2
from . import criu_x86_pb2 as _criu_x86_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class seccomp_mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    disabled: _ClassVar[seccomp_mode]
    strict: _ClassVar[seccomp_mode]
    filter: _ClassVar[seccomp_mode]

class lsmtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NO_LSM: _ClassVar[lsmtype]
    SELINUX: _ClassVar[lsmtype]
    APPARMOR: _ClassVar[lsmtype]
disabled: seccomp_mode
strict: seccomp_mode
filter: seccomp_mode
NO_LSM: lsmtype
SELINUX: lsmtype
APPARMOR: lsmtype

class creds_entry(_message.Message):
    __slots__ = ("uid", "gid", "euid", "egid", "suid", "sgid", "fsuid", "fsgid", "cap_inh", "cap_prm", "cap_eff", "cap_bnd", "secbits", "groups", "lsm_profile", "lsm_sockcreate", "apparmor_data", "no_new_privs", "cap_amb")
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    EUID_FIELD_NUMBER: _ClassVar[int]
    EGID_FIELD_NUMBER: _ClassVar[int]
    SUID_FIELD_NUMBER: _ClassVar[int]
    SGID_FIELD_NUMBER: _ClassVar[int]
    FSUID_FIELD_NUMBER: _ClassVar[int]
    FSGID_FIELD_NUMBER: _ClassVar[int]
    CAP_INH_FIELD_NUMBER: _ClassVar[int]
    CAP_PRM_FIELD_NUMBER: _ClassVar[int]
    CAP_EFF_FIELD_NUMBER: _ClassVar[int]
    CAP_BND_FIELD_NUMBER: _ClassVar[int]
    SECBITS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    LSM_PROFILE_FIELD_NUMBER: _ClassVar[int]
    LSM_SOCKCREATE_FIELD_NUMBER: _ClassVar[int]
    APPARMOR_DATA_FIELD_NUMBER: _ClassVar[int]
    NO_NEW_PRIVS_FIELD_NUMBER: _ClassVar[int]
    CAP_AMB_FIELD_NUMBER: _ClassVar[int]
    uid: int
    gid: int
    euid: int
    egid: int
    suid: int
    sgid: int
    fsuid: int
    fsgid: int
    cap_inh: _containers.RepeatedScalarFieldContainer[int]
    cap_prm: _containers.RepeatedScalarFieldContainer[int]
    cap_eff: _containers.RepeatedScalarFieldContainer[int]
    cap_bnd: _containers.RepeatedScalarFieldContainer[int]
    secbits: int
    groups: _containers.RepeatedScalarFieldContainer[int]
    lsm_profile: str
    lsm_sockcreate: str
    apparmor_data: bytes
    no_new_privs: int
    cap_amb: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, uid: _Optional[int] = ..., gid: _Optional[int] = ..., euid: _Optional[int] = ..., egid: _Optional[int] = ..., suid: _Optional[int] = ..., sgid: _Optional[int] = ..., fsuid: _Optional[int] = ..., fsgid: _Optional[int] = ..., cap_inh: _Optional[_Iterable[int]] = ..., cap_prm: _Optional[_Iterable[int]] = ..., cap_eff: _Optional[_Iterable[int]] = ..., cap_bnd: _Optional[_Iterable[int]] = ..., secbits: _Optional[int] = ..., groups: _Optional[_Iterable[int]] = ..., lsm_profile: _Optional[str] = ..., lsm_sockcreate: _Optional[str] = ..., apparmor_data: _Optional[bytes] = ..., no_new_privs: _Optional[int] = ..., cap_amb: _Optional[_Iterable[int]] = ...) -> None: ...

class sa_entry(_message.Message):
    __slots__ = ("sigaction", "flags", "restorer", "mask", "compat_sigaction", "mask_extended")
    SIGACTION_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    RESTORER_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    COMPAT_SIGACTION_FIELD_NUMBER: _ClassVar[int]
    MASK_EXTENDED_FIELD_NUMBER: _ClassVar[int]
    sigaction: int
    flags: int
    restorer: int
    mask: int
    compat_sigaction: bool
    mask_extended: int
    def __init__(self, sigaction: _Optional[int] = ..., flags: _Optional[int] = ..., restorer: _Optional[int] = ..., mask: _Optional[int] = ..., compat_sigaction: _Optional[bool] = ..., mask_extended: _Optional[int] = ...) -> None: ...

class siginfo_entry(_message.Message):
    __slots__ = ("siginfo",)
    SIGINFO_FIELD_NUMBER: _ClassVar[int]
    siginfo: bytes
    def __init__(self, siginfo: _Optional[bytes] = ...) -> None: ...

class signal_queue_entry(_message.Message):
    __slots__ = ("signals",)
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    signals: _containers.RepeatedCompositeFieldContainer[siginfo_entry]
    def __init__(self, signals: _Optional[_Iterable[_Union[siginfo_entry, _Mapping]]] = ...) -> None: ...

class itimer_entry(_message.Message):
    __slots__ = ("isec", "iusec", "vsec", "vusec")
    ISEC_FIELD_NUMBER: _ClassVar[int]
    IUSEC_FIELD_NUMBER: _ClassVar[int]
    VSEC_FIELD_NUMBER: _ClassVar[int]
    VUSEC_FIELD_NUMBER: _ClassVar[int]
    isec: int
    iusec: int
    vsec: int
    vusec: int
    def __init__(self, isec: _Optional[int] = ..., iusec: _Optional[int] = ..., vsec: _Optional[int] = ..., vusec: _Optional[int] = ...) -> None: ...

class posix_timer_entry(_message.Message):
    __slots__ = ("it_id", "clock_id", "si_signo", "it_sigev_notify", "sival_ptr", "overrun", "isec", "insec", "vsec", "vnsec", "notify_thread_id")
    IT_ID_FIELD_NUMBER: _ClassVar[int]
    CLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    SI_SIGNO_FIELD_NUMBER: _ClassVar[int]
    IT_SIGEV_NOTIFY_FIELD_NUMBER: _ClassVar[int]
    SIVAL_PTR_FIELD_NUMBER: _ClassVar[int]
    OVERRUN_FIELD_NUMBER: _ClassVar[int]
    ISEC_FIELD_NUMBER: _ClassVar[int]
    INSEC_FIELD_NUMBER: _ClassVar[int]
    VSEC_FIELD_NUMBER: _ClassVar[int]
    VNSEC_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    it_id: int
    clock_id: int
    si_signo: int
    it_sigev_notify: int
    sival_ptr: int
    overrun: int
    isec: int
    insec: int
    vsec: int
    vnsec: int
    notify_thread_id: int
    def __init__(self, it_id: _Optional[int] = ..., clock_id: _Optional[int] = ..., si_signo: _Optional[int] = ..., it_sigev_notify: _Optional[int] = ..., sival_ptr: _Optional[int] = ..., overrun: _Optional[int] = ..., isec: _Optional[int] = ..., insec: _Optional[int] = ..., vsec: _Optional[int] = ..., vnsec: _Optional[int] = ..., notify_thread_id: _Optional[int] = ...) -> None: ...

class task_timers_entry(_message.Message):
    __slots__ = ("real", "virt", "prof", "posix")
    REAL_FIELD_NUMBER: _ClassVar[int]
    VIRT_FIELD_NUMBER: _ClassVar[int]
    PROF_FIELD_NUMBER: _ClassVar[int]
    POSIX_FIELD_NUMBER: _ClassVar[int]
    real: itimer_entry
    virt: itimer_entry
    prof: itimer_entry
    posix: _containers.RepeatedCompositeFieldContainer[posix_timer_entry]
    def __init__(self, real: _Optional[_Union[itimer_entry, _Mapping]] = ..., virt: _Optional[_Union[itimer_entry, _Mapping]] = ..., prof: _Optional[_Union[itimer_entry, _Mapping]] = ..., posix: _Optional[_Iterable[_Union[posix_timer_entry, _Mapping]]] = ...) -> None: ...

class rlimit_entry(_message.Message):
    __slots__ = ("cur", "max")
    CUR_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    cur: int
    max: int
    def __init__(self, cur: _Optional[int] = ..., max: _Optional[int] = ...) -> None: ...

class task_rlimits_entry(_message.Message):
    __slots__ = ("rlimits",)
    RLIMITS_FIELD_NUMBER: _ClassVar[int]
    rlimits: _containers.RepeatedCompositeFieldContainer[rlimit_entry]
    def __init__(self, rlimits: _Optional[_Iterable[_Union[rlimit_entry, _Mapping]]] = ...) -> None: ...

class rseq_entry(_message.Message):
    __slots__ = ("rseq_abi_pointer", "rseq_abi_size", "signature", "rseq_cs_pointer")
    RSEQ_ABI_POINTER_FIELD_NUMBER: _ClassVar[int]
    RSEQ_ABI_SIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    RSEQ_CS_POINTER_FIELD_NUMBER: _ClassVar[int]
    rseq_abi_pointer: int
    rseq_abi_size: int
    signature: int
    rseq_cs_pointer: int
    def __init__(self, rseq_abi_pointer: _Optional[int] = ..., rseq_abi_size: _Optional[int] = ..., signature: _Optional[int] = ..., rseq_cs_pointer: _Optional[int] = ...) -> None: ...

class task_core_entry(_message.Message):
    __slots__ = ("task_state", "exit_code", "personality", "flags", "blk_sigset", "comm", "timers", "rlimits", "cg_set", "signals_s", "old_seccomp_mode", "old_seccomp_filter", "loginuid", "oom_score_adj", "sigactions", "child_subreaper", "blk_sigset_extended", "stop_signo", "membarrier_registration_mask")
    TASK_STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PERSONALITY_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    BLK_SIGSET_FIELD_NUMBER: _ClassVar[int]
    COMM_FIELD_NUMBER: _ClassVar[int]
    TIMERS_FIELD_NUMBER: _ClassVar[int]
    RLIMITS_FIELD_NUMBER: _ClassVar[int]
    CG_SET_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_S_FIELD_NUMBER: _ClassVar[int]
    OLD_SECCOMP_MODE_FIELD_NUMBER: _ClassVar[int]
    OLD_SECCOMP_FILTER_FIELD_NUMBER: _ClassVar[int]
    LOGINUID_FIELD_NUMBER: _ClassVar[int]
    OOM_SCORE_ADJ_FIELD_NUMBER: _ClassVar[int]
    SIGACTIONS_FIELD_NUMBER: _ClassVar[int]
    CHILD_SUBREAPER_FIELD_NUMBER: _ClassVar[int]
    BLK_SIGSET_EXTENDED_FIELD_NUMBER: _ClassVar[int]
    STOP_SIGNO_FIELD_NUMBER: _ClassVar[int]
    MEMBARRIER_REGISTRATION_MASK_FIELD_NUMBER: _ClassVar[int]
    task_state: int
    exit_code: int
    personality: int
    flags: int
    blk_sigset: int
    comm: str
    timers: task_timers_entry
    rlimits: task_rlimits_entry
    cg_set: int
    signals_s: signal_queue_entry
    old_seccomp_mode: seccomp_mode
    old_seccomp_filter: int
    loginuid: int
    oom_score_adj: int
    sigactions: _containers.RepeatedCompositeFieldContainer[sa_entry]
    child_subreaper: bool
    blk_sigset_extended: int
    stop_signo: int
    membarrier_registration_mask: int
    def __init__(self, task_state: _Optional[int] = ..., exit_code: _Optional[int] = ..., personality: _Optional[int] = ..., flags: _Optional[int] = ..., blk_sigset: _Optional[int] = ..., comm: _Optional[str] = ..., timers: _Optional[_Union[task_timers_entry, _Mapping]] = ..., rlimits: _Optional[_Union[task_rlimits_entry, _Mapping]] = ..., cg_set: _Optional[int] = ..., signals_s: _Optional[_Union[signal_queue_entry, _Mapping]] = ..., old_seccomp_mode: _Optional[_Union[seccomp_mode, str]] = ..., old_seccomp_filter: _Optional[int] = ..., loginuid: _Optional[int] = ..., oom_score_adj: _Optional[int] = ..., sigactions: _Optional[_Iterable[_Union[sa_entry, _Mapping]]] = ..., child_subreaper: _Optional[bool] = ..., blk_sigset_extended: _Optional[int] = ..., stop_signo: _Optional[int] = ..., membarrier_registration_mask: _Optional[int] = ...) -> None: ...

class task_kobj_ids_entry(_message.Message):
    __slots__ = ("vm_id", "files_id", "fs_id", "sighand_id", "pid_ns_id", "net_ns_id", "ipc_ns_id", "uts_ns_id", "mnt_ns_id", "user_ns_id", "cgroup_ns_id", "time_ns_id")
    VM_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_ID_FIELD_NUMBER: _ClassVar[int]
    FS_ID_FIELD_NUMBER: _ClassVar[int]
    SIGHAND_ID_FIELD_NUMBER: _ClassVar[int]
    PID_NS_ID_FIELD_NUMBER: _ClassVar[int]
    NET_NS_ID_FIELD_NUMBER: _ClassVar[int]
    IPC_NS_ID_FIELD_NUMBER: _ClassVar[int]
    UTS_NS_ID_FIELD_NUMBER: _ClassVar[int]
    MNT_NS_ID_FIELD_NUMBER: _ClassVar[int]
    USER_NS_ID_FIELD_NUMBER: _ClassVar[int]
    CGROUP_NS_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_ID_FIELD_NUMBER: _ClassVar[int]
    vm_id: int
    files_id: int
    fs_id: int
    sighand_id: int
    pid_ns_id: int
    net_ns_id: int
    ipc_ns_id: int
    uts_ns_id: int
    mnt_ns_id: int
    user_ns_id: int
    cgroup_ns_id: int
    time_ns_id: int
    def __init__(self, vm_id: _Optional[int] = ..., files_id: _Optional[int] = ..., fs_id: _Optional[int] = ..., sighand_id: _Optional[int] = ..., pid_ns_id: _Optional[int] = ..., net_ns_id: _Optional[int] = ..., ipc_ns_id: _Optional[int] = ..., uts_ns_id: _Optional[int] = ..., mnt_ns_id: _Optional[int] = ..., user_ns_id: _Optional[int] = ..., cgroup_ns_id: _Optional[int] = ..., time_ns_id: _Optional[int] = ...) -> None: ...

class thread_sas_entry(_message.Message):
    __slots__ = ("ss_sp", "ss_size", "ss_flags")
    SS_SP_FIELD_NUMBER: _ClassVar[int]
    SS_SIZE_FIELD_NUMBER: _ClassVar[int]
    SS_FLAGS_FIELD_NUMBER: _ClassVar[int]
    ss_sp: int
    ss_size: int
    ss_flags: int
    def __init__(self, ss_sp: _Optional[int] = ..., ss_size: _Optional[int] = ..., ss_flags: _Optional[int] = ...) -> None: ...

class thread_core_entry(_message.Message):
    __slots__ = ("futex_rla", "futex_rla_len", "sched_nice", "sched_policy", "sched_prio", "blk_sigset", "sas", "pdeath_sig", "signals_p", "creds", "seccomp_mode", "seccomp_filter", "comm", "blk_sigset_extended", "rseq_entry", "cg_set")
    FUTEX_RLA_FIELD_NUMBER: _ClassVar[int]
    FUTEX_RLA_LEN_FIELD_NUMBER: _ClassVar[int]
    SCHED_NICE_FIELD_NUMBER: _ClassVar[int]
    SCHED_POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHED_PRIO_FIELD_NUMBER: _ClassVar[int]
    BLK_SIGSET_FIELD_NUMBER: _ClassVar[int]
    SAS_FIELD_NUMBER: _ClassVar[int]
    PDEATH_SIG_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_P_FIELD_NUMBER: _ClassVar[int]
    CREDS_FIELD_NUMBER: _ClassVar[int]
    SECCOMP_MODE_FIELD_NUMBER: _ClassVar[int]
    SECCOMP_FILTER_FIELD_NUMBER: _ClassVar[int]
    COMM_FIELD_NUMBER: _ClassVar[int]
    BLK_SIGSET_EXTENDED_FIELD_NUMBER: _ClassVar[int]
    RSEQ_ENTRY_FIELD_NUMBER: _ClassVar[int]
    CG_SET_FIELD_NUMBER: _ClassVar[int]
    futex_rla: int
    futex_rla_len: int
    sched_nice: int
    sched_policy: int
    sched_prio: int
    blk_sigset: int
    sas: thread_sas_entry
    pdeath_sig: int
    signals_p: signal_queue_entry
    creds: creds_entry
    seccomp_mode: seccomp_mode
    seccomp_filter: int
    comm: str
    blk_sigset_extended: int
    rseq_entry: rseq_entry
    cg_set: int
    def __init__(self, futex_rla: _Optional[int] = ..., futex_rla_len: _Optional[int] = ..., sched_nice: _Optional[int] = ..., sched_policy: _Optional[int] = ..., sched_prio: _Optional[int] = ..., blk_sigset: _Optional[int] = ..., sas: _Optional[_Union[thread_sas_entry, _Mapping]] = ..., pdeath_sig: _Optional[int] = ..., signals_p: _Optional[_Union[signal_queue_entry, _Mapping]] = ..., creds: _Optional[_Union[creds_entry, _Mapping]] = ..., seccomp_mode: _Optional[_Union[seccomp_mode, str]] = ..., seccomp_filter: _Optional[int] = ..., comm: _Optional[str] = ..., blk_sigset_extended: _Optional[int] = ..., rseq_entry: _Optional[_Union[rseq_entry, _Mapping]] = ..., cg_set: _Optional[int] = ...) -> None: ...

class core_entry(_message.Message):
    __slots__ = ("mtype", "thread_info", "tc", "ids", "thread_core")
    class march(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[core_entry.march]
        X86_64: _ClassVar[core_entry.march]
        ARM: _ClassVar[core_entry.march]
        AARCH64: _ClassVar[core_entry.march]
        PPC64: _ClassVar[core_entry.march]
        S390: _ClassVar[core_entry.march]
        MIPS: _ClassVar[core_entry.march]
    UNKNOWN: core_entry.march
    X86_64: core_entry.march
    ARM: core_entry.march
    AARCH64: core_entry.march
    PPC64: core_entry.march
    S390: core_entry.march
    MIPS: core_entry.march
    MTYPE_FIELD_NUMBER: _ClassVar[int]
    THREAD_INFO_FIELD_NUMBER: _ClassVar[int]
    TC_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    THREAD_CORE_FIELD_NUMBER: _ClassVar[int]
    mtype: core_entry.march
    thread_info: _criu_x86_pb2.thread_info_x86
    tc: task_core_entry
    ids: task_kobj_ids_entry
    thread_core: thread_core_entry
    def __init__(self, mtype: _Optional[_Union[core_entry.march, str]] = ..., thread_info: _Optional[_Union[_criu_x86_pb2.thread_info_x86, _Mapping]] = ..., tc: _Optional[_Union[task_core_entry, _Mapping]] = ..., ids: _Optional[_Union[task_kobj_ids_entry, _Mapping]] = ..., thread_core: _Optional[_Union[thread_core_entry, _Mapping]] = ...) -> None: ...

class pstree_entry(_message.Message):
    __slots__ = ("pid", "ppid", "pgid", "sid", "threads")
    PID_FIELD_NUMBER: _ClassVar[int]
    PPID_FIELD_NUMBER: _ClassVar[int]
    PGID_FIELD_NUMBER: _ClassVar[int]
    SID_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    ppid: int
    pgid: int
    sid: int
    threads: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pid: _Optional[int] = ..., ppid: _Optional[int] = ..., pgid: _Optional[int] = ..., sid: _Optional[int] = ..., threads: _Optional[_Iterable[int]] = ...) -> None: ...

class inventory_entry(_message.Message):
    __slots__ = ("img_version", "fdinfo_per_id", "root_ids", "ns_per_id", "root_cg_set", "lsmtype", "dump_uptime", "pre_dump_mode", "tcp_close", "network_lock_method", "plugins_entry", "dump_criu_run_id", "allow_uprobes")
    IMG_VERSION_FIELD_NUMBER: _ClassVar[int]
    FDINFO_PER_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_IDS_FIELD_NUMBER: _ClassVar[int]
    NS_PER_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_CG_SET_FIELD_NUMBER: _ClassVar[int]
    LSMTYPE_FIELD_NUMBER: _ClassVar[int]
    DUMP_UPTIME_FIELD_NUMBER: _ClassVar[int]
    PRE_DUMP_MODE_FIELD_NUMBER: _ClassVar[int]
    TCP_CLOSE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_LOCK_METHOD_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_ENTRY_FIELD_NUMBER: _ClassVar[int]
    DUMP_CRIU_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UPROBES_FIELD_NUMBER: _ClassVar[int]
    img_version: int
    fdinfo_per_id: bool
    root_ids: task_kobj_ids_entry
    ns_per_id: bool
    root_cg_set: int
    lsmtype: lsmtype
    dump_uptime: int
    pre_dump_mode: int
    tcp_close: bool
    network_lock_method: int
    plugins_entry: plugins_entry
    dump_criu_run_id: str
    allow_uprobes: bool
    def __init__(self, img_version: _Optional[int] = ..., fdinfo_per_id: _Optional[bool] = ..., root_ids: _Optional[_Union[task_kobj_ids_entry, _Mapping]] = ..., ns_per_id: _Optional[bool] = ..., root_cg_set: _Optional[int] = ..., lsmtype: _Optional[_Union[lsmtype, str]] = ..., dump_uptime: _Optional[int] = ..., pre_dump_mode: _Optional[int] = ..., tcp_close: _Optional[bool] = ..., network_lock_method: _Optional[int] = ..., plugins_entry: _Optional[_Union[plugins_entry, _Mapping]] = ..., dump_criu_run_id: _Optional[str] = ..., allow_uprobes: _Optional[bool] = ...) -> None: ...

class plugins_entry(_message.Message):
    __slots__ = ("plugins",)
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    plugins: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, plugins: _Optional[_Iterable[str]] = ...) -> None: ...

class seccomp_filter(_message.Message):
    __slots__ = ("filter", "prev", "flags")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PREV_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    filter: bytes
    prev: int
    flags: int
    def __init__(self, filter: _Optional[bytes] = ..., prev: _Optional[int] = ..., flags: _Optional[int] = ...) -> None: ...

class seccomp_entry(_message.Message):
    __slots__ = ("seccomp_filters",)
    SECCOMP_FILTERS_FIELD_NUMBER: _ClassVar[int]
    seccomp_filters: _containers.RepeatedCompositeFieldContainer[seccomp_filter]
    def __init__(self, seccomp_filters: _Optional[_Iterable[_Union[seccomp_filter, _Mapping]]] = ...) -> None: ...

class dump_stats_entry(_message.Message):
    __slots__ = ("freezing_time", "frozen_time", "memdump_time", "memwrite_time", "pages_scanned", "pages_skipped_parent", "pages_written", "irmap_resolve", "pages_lazy", "page_pipes", "page_pipe_bufs", "shpages_scanned", "shpages_skipped_parent", "shpages_written")
    FREEZING_TIME_FIELD_NUMBER: _ClassVar[int]
    FROZEN_TIME_FIELD_NUMBER: _ClassVar[int]
    MEMDUMP_TIME_FIELD_NUMBER: _ClassVar[int]
    MEMWRITE_TIME_FIELD_NUMBER: _ClassVar[int]
    PAGES_SCANNED_FIELD_NUMBER: _ClassVar[int]
    PAGES_SKIPPED_PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    IRMAP_RESOLVE_FIELD_NUMBER: _ClassVar[int]
    PAGES_LAZY_FIELD_NUMBER: _ClassVar[int]
    PAGE_PIPES_FIELD_NUMBER: _ClassVar[int]
    PAGE_PIPE_BUFS_FIELD_NUMBER: _ClassVar[int]
    SHPAGES_SCANNED_FIELD_NUMBER: _ClassVar[int]
    SHPAGES_SKIPPED_PARENT_FIELD_NUMBER: _ClassVar[int]
    SHPAGES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    freezing_time: int
    frozen_time: int
    memdump_time: int
    memwrite_time: int
    pages_scanned: int
    pages_skipped_parent: int
    pages_written: int
    irmap_resolve: int
    pages_lazy: int
    page_pipes: int
    page_pipe_bufs: int
    shpages_scanned: int
    shpages_skipped_parent: int
    shpages_written: int
    def __init__(self, freezing_time: _Optional[int] = ..., frozen_time: _Optional[int] = ..., memdump_time: _Optional[int] = ..., memwrite_time: _Optional[int] = ..., pages_scanned: _Optional[int] = ..., pages_skipped_parent: _Optional[int] = ..., pages_written: _Optional[int] = ..., irmap_resolve: _Optional[int] = ..., pages_lazy: _Optional[int] = ..., page_pipes: _Optional[int] = ..., page_pipe_bufs: _Optional[int] = ..., shpages_scanned: _Optional[int] = ..., shpages_skipped_parent: _Optional[int] = ..., shpages_written: _Optional[int] = ...) -> None: ...

class restore_stats_entry(_message.Message):
    __slots__ = ("pages_compared", "pages_skipped_cow", "forking_time", "restore_time", "pages_restored")
    PAGES_COMPARED_FIELD_NUMBER: _ClassVar[int]
    PAGES_SKIPPED_COW_FIELD_NUMBER: _ClassVar[int]
    FORKING_TIME_FIELD_NUMBER: _ClassVar[int]
    RESTORE_TIME_FIELD_NUMBER: _ClassVar[int]
    PAGES_RESTORED_FIELD_NUMBER: _ClassVar[int]
    pages_compared: int
    pages_skipped_cow: int
    forking_time: int
    restore_time: int
    pages_restored: int
    def __init__(self, pages_compared: _Optional[int] = ..., pages_skipped_cow: _Optional[int] = ..., forking_time: _Optional[int] = ..., restore_time: _Optional[int] = ..., pages_restored: _Optional[int] = ...) -> None: ...

class stats_entry(_message.Message):
    __slots__ = ("dump", "restore")
    DUMP_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    dump: dump_stats_entry
    restore: restore_stats_entry
    def __init__(self, dump: _Optional[_Union[dump_stats_entry, _Mapping]] = ..., restore: _Optional[_Union[restore_stats_entry, _Mapping]] = ...) -> None: ...
