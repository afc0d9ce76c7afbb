from . import criu_display_pb2 as _criu_display_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class fstype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNSUPPORTED: _ClassVar[fstype]
    PROC: _ClassVar[fstype]
    SYSFS: _ClassVar[fstype]
    DEVTMPFS: _ClassVar[fstype]
    BINFMT_MISC: _ClassVar[fstype]
    TMPFS: _ClassVar[fstype]
    DEVPTS: _ClassVar[fstype]
    SIMFS: _ClassVar[fstype]
    PSTORE: _ClassVar[fstype]
    SECURITYFS: _ClassVar[fstype]
    FUSECTL: _ClassVar[fstype]
    DEBUGFS: _ClassVar[fstype]
    CGROUP: _ClassVar[fstype]
    AUFS: _ClassVar[fstype]
    MQUEUE: _ClassVar[fstype]
    FUSE: _ClassVar[fstype]
    AUTO: _ClassVar[fstype]
    OVERLAYFS: _ClassVar[fstype]
    AUTOFS: _ClassVar[fstype]
    TRACEFS: _ClassVar[fstype]
    CGROUP2: _ClassVar[fstype]
UNSUPPORTED: fstype
PROC: fstype
SYSFS: fstype
DEVTMPFS: fstype
BINFMT_MISC: fstype
TMPFS: fstype
DEVPTS: fstype
SIMFS: fstype
PSTORE: fstype
SECURITYFS: fstype
FUSECTL: fstype
DEBUGFS: fstype
CGROUP: fstype
AUFS: fstype
MQUEUE: fstype
FUSE: fstype
AUTO: fstype
OVERLAYFS: fstype
AUTOFS: fstype
TRACEFS: fstype
CGROUP2: fstype

class timespec(_message.Message):
    __slots__ = ("tv_sec", "tv_nsec")
    TV_SEC_FIELD_NUMBER: _ClassVar[int]
    TV_NSEC_FIELD_NUMBER: _ClassVar[int]
    tv_sec: int
    tv_nsec: int
    def __init__(self, tv_sec: _Optional[int] = ..., tv_nsec: _Optional[int] = ...) -> None: ...

class timens_entry(_message.Message):
    __slots__ = ("monotonic", "boottime")
    MONOTONIC_FIELD_NUMBER: _ClassVar[int]
    BOOTTIME_FIELD_NUMBER: _ClassVar[int]
    monotonic: timespec
    boottime: timespec
    def __init__(self, monotonic: _Optional[_Union[timespec, _Mapping]] = ..., boottime: _Optional[_Union[timespec, _Mapping]] = ...) -> None: ...

class utsns_entry(_message.Message):
    __slots__ = ("nodename", "domainname")
    NODENAME_FIELD_NUMBER: _ClassVar[int]
    DOMAINNAME_FIELD_NUMBER: _ClassVar[int]
    nodename: str
    domainname: str
    def __init__(self, nodename: _Optional[str] = ..., domainname: _Optional[str] = ...) -> None: ...

class ipc_var_entry(_message.Message):
    __slots__ = ("sem_ctls", "msg_ctlmax", "msg_ctlmnb", "msg_ctlmni", "auto_msgmni", "shm_ctlmax", "shm_ctlall", "shm_ctlmni", "shm_rmid_forced", "mq_queues_max", "mq_msg_max", "mq_msgsize_max", "mq_msg_default", "mq_msgsize_default", "msg_next_id", "sem_next_id", "shm_next_id")
    SEM_CTLS_FIELD_NUMBER: _ClassVar[int]
    MSG_CTLMAX_FIELD_NUMBER: _ClassVar[int]
    MSG_CTLMNB_FIELD_NUMBER: _ClassVar[int]
    MSG_CTLMNI_FIELD_NUMBER: _ClassVar[int]
    AUTO_MSGMNI_FIELD_NUMBER: _ClassVar[int]
    SHM_CTLMAX_FIELD_NUMBER: _ClassVar[int]
    SHM_CTLALL_FIELD_NUMBER: _ClassVar[int]
    SHM_CTLMNI_FIELD_NUMBER: _ClassVar[int]
    SHM_RMID_FORCED_FIELD_NUMBER: _ClassVar[int]
    MQ_QUEUES_MAX_FIELD_NUMBER: _ClassVar[int]
    MQ_MSG_MAX_FIELD_NUMBER: _ClassVar[int]
    MQ_MSGSIZE_MAX_FIELD_NUMBER: _ClassVar[int]
    MQ_MSG_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    MQ_MSGSIZE_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    MSG_NEXT_ID_FIELD_NUMBER: _ClassVar[int]
    SEM_NEXT_ID_FIELD_NUMBER: _ClassVar[int]
    SHM_NEXT_ID_FIELD_NUMBER: _ClassVar[int]
    sem_ctls: _containers.RepeatedScalarFieldContainer[int]
    msg_ctlmax: int
    msg_ctlmnb: int
    msg_ctlmni: int
    auto_msgmni: int
    shm_ctlmax: int
    shm_ctlall: int
    shm_ctlmni: int
    shm_rmid_forced: int
    mq_queues_max: int
    mq_msg_max: int
    mq_msgsize_max: int
    mq_msg_default: int
    mq_msgsize_default: int
    msg_next_id: int
    sem_next_id: int
    shm_next_id: int
    def __init__(self, sem_ctls: _Optional[_Iterable[int]] = ..., msg_ctlmax: _Optional[int] = ..., msg_ctlmnb: _Optional[int] = ..., msg_ctlmni: _Optional[int] = ..., auto_msgmni: _Optional[int] = ..., shm_ctlmax: _Optional[int] = ..., shm_ctlall: _Optional[int] = ..., shm_ctlmni: _Optional[int] = ..., shm_rmid_forced: _Optional[int] = ..., mq_queues_max: _Optional[int] = ..., mq_msg_max: _Optional[int] = ..., mq_msgsize_max: _Optional[int] = ..., mq_msg_default: _Optional[int] = ..., mq_msgsize_default: _Optional[int] = ..., msg_next_id: _Optional[int] = ..., sem_next_id: _Optional[int] = ..., shm_next_id: _Optional[int] = ...) -> None: ...

class ipc_desc_entry(_message.Message):
    __slots__ = ("key", "uid", "gid", "cuid", "cgid", "mode", "id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    CUID_FIELD_NUMBER: _ClassVar[int]
    CGID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    key: int
    uid: int
    gid: int
    cuid: int
    cgid: int
    mode: int
    id: int
    def __init__(self, key: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., cuid: _Optional[int] = ..., cgid: _Optional[int] = ..., mode: _Optional[int] = ..., id: _Optional[int] = ...) -> None: ...

class ipc_shm_entry(_message.Message):
    __slots__ = ("desc", "size", "in_pagemaps", "hugetlb_flag")
    DESC_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    IN_PAGEMAPS_FIELD_NUMBER: _ClassVar[int]
    HUGETLB_FLAG_FIELD_NUMBER: _ClassVar[int]
    desc: ipc_desc_entry
    size: int
    in_pagemaps: bool
    hugetlb_flag: int
    def __init__(self, desc: _Optional[_Union[ipc_desc_entry, _Mapping]] = ..., size: _Optional[int] = ..., in_pagemaps: _Optional[bool] = ..., hugetlb_flag: _Optional[int] = ...) -> None: ...

class mnt_entry(_message.Message):
    __slots__ = ("fstype", "mnt_id", "root_dev", "parent_mnt_id", "flags", "root", "mountpoint", "source", "options", "shared_id", "master_id", "with_plugin", "ext_mount", "fsname", "internal_sharing", "deleted", "sb_flags", "ext_key")
    FSTYPE_FIELD_NUMBER: _ClassVar[int]
    MNT_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_DEV_FIELD_NUMBER: _ClassVar[int]
    PARENT_MNT_ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    MOUNTPOINT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SHARED_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    WITH_PLUGIN_FIELD_NUMBER: _ClassVar[int]
    EXT_MOUNT_FIELD_NUMBER: _ClassVar[int]
    FSNAME_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_SHARING_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    SB_FLAGS_FIELD_NUMBER: _ClassVar[int]
    EXT_KEY_FIELD_NUMBER: _ClassVar[int]
    fstype: int
    mnt_id: int
    root_dev: int
    parent_mnt_id: int
    flags: int
    root: str
    mountpoint: str
    source: str
    options: str
    shared_id: int
    master_id: int
    with_plugin: bool
    ext_mount: bool
    fsname: str
    internal_sharing: bool
    deleted: bool
    sb_flags: int
    ext_key: str
    def __init__(self, fstype: _Optional[int] = ..., mnt_id: _Optional[int] = ..., root_dev: _Optional[int] = ..., parent_mnt_id: _Optional[int] = ..., flags: _Optional[int] = ..., root: _Optional[str] = ..., mountpoint: _Optional[str] = ..., source: _Optional[str] = ..., options: _Optional[str] = ..., shared_id: _Optional[int] = ..., master_id: _Optional[int] = ..., with_plugin: _Optional[bool] = ..., ext_mount: _Optional[bool] = ..., fsname: _Optional[str] = ..., internal_sharing: _Optional[bool] = ..., deleted: _Optional[bool] = ..., sb_flags: _Optional[int] = ..., ext_key: _Optional[str] = ...) -> None: ...

class cgroup_perms(_message.Message):
    __slots__ = ("mode", "uid", "gid")
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    mode: int
    uid: int
    gid: int
    def __init__(self, mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ...) -> None: ...

class cgroup_prop_entry(_message.Message):
    __slots__ = ("name", "value", "perms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    PERMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    perms: cgroup_perms
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., perms: _Optional[_Union[cgroup_perms, _Mapping]] = ...) -> None: ...

class cgroup_dir_entry(_message.Message):
    __slots__ = ("dir_name", "children", "properties", "dir_perms")
    DIR_NAME_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    DIR_PERMS_FIELD_NUMBER: _ClassVar[int]
    dir_name: str
    children: _containers.RepeatedCompositeFieldContainer[cgroup_dir_entry]
    properties: _containers.RepeatedCompositeFieldContainer[cgroup_prop_entry]
    dir_perms: cgroup_perms
    def __init__(self, dir_name: _Optional[str] = ..., children: _Optional[_Iterable[_Union[cgroup_dir_entry, _Mapping]]] = ..., properties: _Optional[_Iterable[_Union[cgroup_prop_entry, _Mapping]]] = ..., dir_perms: _Optional[_Union[cgroup_perms, _Mapping]] = ...) -> None: ...

class cg_controller_entry(_message.Message):
    __slots__ = ("cnames", "dirs", "is_threaded")
    CNAMES_FIELD_NUMBER: _ClassVar[int]
    DIRS_FIELD_NUMBER: _ClassVar[int]
    IS_THREADED_FIELD_NUMBER: _ClassVar[int]
    cnames: _containers.RepeatedScalarFieldContainer[str]
    dirs: _containers.RepeatedCompositeFieldContainer[cgroup_dir_entry]
    is_threaded: bool
    def __init__(self, cnames: _Optional[_Iterable[str]] = ..., dirs: _Optional[_Iterable[_Union[cgroup_dir_entry, _Mapping]]] = ..., is_threaded: _Optional[bool] = ...) -> None: ...

class cg_member_entry(_message.Message):
    __slots__ = ("name", "path", "cgns_prefix")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CGNS_PREFIX_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    cgns_prefix: int
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., cgns_prefix: _Optional[int] = ...) -> None: ...

class cg_set_entry(_message.Message):
    __slots__ = ("id", "ctls")
    ID_FIELD_NUMBER: _ClassVar[int]
    CTLS_FIELD_NUMBER: _ClassVar[int]
    id: int
    ctls: _containers.RepeatedCompositeFieldContainer[cg_member_entry]
    def __init__(self, id: _Optional[int] = ..., ctls: _Optional[_Iterable[_Union[cg_member_entry, _Mapping]]] = ...) -> None: ...

class cgroup_entry(_message.Message):
    __slots__ = ("sets", "controllers")
    SETS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    sets: _containers.RepeatedCompositeFieldContainer[cg_set_entry]
    controllers: _containers.RepeatedCompositeFieldContainer[cg_controller_entry]
    def __init__(self, sets: _Optional[_Iterable[_Union[cg_set_entry, _Mapping]]] = ..., controllers: _Optional[_Iterable[_Union[cg_controller_entry, _Mapping]]] = ...) -> None: ...

class uid_gid_extent(_message.Message):
    __slots__ = ("first", "lower_first", "count")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first: int
    lower_first: int
    count: int
    def __init__(self, first: _Optional[int] = ..., lower_first: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class userns_entry(_message.Message):
    __slots__ = ("uid_map", "gid_map")
    UID_MAP_FIELD_NUMBER: _ClassVar[int]
    GID_MAP_FIELD_NUMBER: _ClassVar[int]
    uid_map: _containers.RepeatedCompositeFieldContainer[uid_gid_extent]
    gid_map: _containers.RepeatedCompositeFieldContainer[uid_gid_extent]
    def __init__(self, uid_map: _Optional[_Iterable[_Union[uid_gid_extent, _Mapping]]] = ..., gid_map: _Optional[_Iterable[_Union[uid_gid_extent, _Mapping]]] = ...) -> None: ...

class pidns_entry(_message.Message):
    __slots__ = ("ext_key",)
    EXT_KEY_FIELD_NUMBER: _ClassVar[int]
    ext_key: str
    def __init__(self, ext_key: _Optional[str] = ...) -> None: ...
