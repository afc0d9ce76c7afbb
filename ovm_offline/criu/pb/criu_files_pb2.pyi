from . import criu_display_pb2 as _criu_display_pb2
from . import criu_common_pb2 as _criu_common_pb2
from . import criu_net_pb2 as _criu_net_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class fd_types(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UND: _ClassVar[fd_types]
    REG: _ClassVar[fd_types]
    PIPE: _ClassVar[fd_types]
    FIFO: _ClassVar[fd_types]
    INETSK: _ClassVar[fd_types]
    UNIXSK: _ClassVar[fd_types]
    EVENTFD: _ClassVar[fd_types]
    EVENTPOLL: _ClassVar[fd_types]
    INOTIFY: _ClassVar[fd_types]
    SIGNALFD: _ClassVar[fd_types]
    PACKETSK: _ClassVar[fd_types]
    TTY: _ClassVar[fd_types]
    FANOTIFY: _ClassVar[fd_types]
    NETLINKSK: _ClassVar[fd_types]
    NS: _ClassVar[fd_types]
    TUNF: _ClassVar[fd_types]
    EXT: _ClassVar[fd_types]
    TIMERFD: _ClassVar[fd_types]
    MEMFD: _ClassVar[fd_types]
    BPFMAP: _ClassVar[fd_types]
    CTL_TTY: _ClassVar[fd_types]
    AUTOFS_PIPE: _ClassVar[fd_types]

class TtyType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN: _ClassVar[TtyType]
    PTY: _ClassVar[TtyType]
    CONSOLE: _ClassVar[TtyType]
    VT: _ClassVar[TtyType]
    CTTY: _ClassVar[TtyType]
    EXT_TTY: _ClassVar[TtyType]
    SERIAL: _ClassVar[TtyType]

class mark_type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INODE: _ClassVar[mark_type]
    MOUNT: _ClassVar[mark_type]

class remap_type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LINKED: _ClassVar[remap_type]
    GHOST: _ClassVar[remap_type]
    PROCFS: _ClassVar[remap_type]
UND: fd_types
REG: fd_types
PIPE: fd_types
FIFO: fd_types
INETSK: fd_types
UNIXSK: fd_types
EVENTFD: fd_types
EVENTPOLL: fd_types
INOTIFY: fd_types
SIGNALFD: fd_types
PACKETSK: fd_types
TTY: fd_types
FANOTIFY: fd_types
NETLINKSK: fd_types
NS: fd_types
TUNF: fd_types
EXT: fd_types
TIMERFD: fd_types
MEMFD: fd_types
BPFMAP: fd_types
CTL_TTY: fd_types
AUTOFS_PIPE: fd_types
UNKNOWN: TtyType
PTY: TtyType
CONSOLE: TtyType
VT: TtyType
CTTY: TtyType
EXT_TTY: TtyType
SERIAL: TtyType
INODE: mark_type
MOUNT: mark_type
LINKED: remap_type
GHOST: remap_type
PROCFS: remap_type

class fdinfo_entry(_message.Message):
    __slots__ = ("id", "flags", "type", "fd", "xattr_security_selinux")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FD_FIELD_NUMBER: _ClassVar[int]
    XATTR_SECURITY_SELINUX_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    type: fd_types
    fd: int
    xattr_security_selinux: str
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., type: _Optional[_Union[fd_types, str]] = ..., fd: _Optional[int] = ..., xattr_security_selinux: _Optional[str] = ...) -> None: ...

class reg_file_entry(_message.Message):
    __slots__ = ("id", "flags", "pos", "fown", "name", "mnt_id", "size", "ext", "mode", "build_id", "checksum", "checksum_config", "checksum_parameter")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MNT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    EXT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_PARAMETER_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    pos: int
    fown: _criu_common_pb2.fown_entry
    name: str
    mnt_id: int
    size: int
    ext: bool
    mode: int
    build_id: _containers.RepeatedScalarFieldContainer[int]
    checksum: int
    checksum_config: int
    checksum_parameter: int
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., pos: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., name: _Optional[str] = ..., mnt_id: _Optional[int] = ..., size: _Optional[int] = ..., ext: _Optional[bool] = ..., mode: _Optional[int] = ..., build_id: _Optional[_Iterable[int]] = ..., checksum: _Optional[int] = ..., checksum_config: _Optional[int] = ..., checksum_parameter: _Optional[int] = ...) -> None: ...

class pipe_entry(_message.Message):
    __slots__ = ("id", "pipe_id", "flags", "fown")
    ID_FIELD_NUMBER: _ClassVar[int]
    PIPE_ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    id: int
    pipe_id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    def __init__(self, id: _Optional[int] = ..., pipe_id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ...) -> None: ...

class fifo_entry(_message.Message):
    __slots__ = ("id", "pipe_id", "regf_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    PIPE_ID_FIELD_NUMBER: _ClassVar[int]
    REGF_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    pipe_id: int
    regf_id: int
    def __init__(self, id: _Optional[int] = ..., pipe_id: _Optional[int] = ..., regf_id: _Optional[int] = ...) -> None: ...

class pipe_data_entry(_message.Message):
    __slots__ = ("pipe_id", "bytes", "size")
    PIPE_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    pipe_id: int
    bytes: int
    size: int
    def __init__(self, pipe_id: _Optional[int] = ..., bytes: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class winsize_entry(_message.Message):
    __slots__ = ("ws_row", "ws_col", "ws_xpixel", "ws_ypixel")
    WS_ROW_FIELD_NUMBER: _ClassVar[int]
    WS_COL_FIELD_NUMBER: _ClassVar[int]
    WS_XPIXEL_FIELD_NUMBER: _ClassVar[int]
    WS_YPIXEL_FIELD_NUMBER: _ClassVar[int]
    ws_row: int
    ws_col: int
    ws_xpixel: int
    ws_ypixel: int
    def __init__(self, ws_row: _Optional[int] = ..., ws_col: _Optional[int] = ..., ws_xpixel: _Optional[int] = ..., ws_ypixel: _Optional[int] = ...) -> None: ...

class termios_entry(_message.Message):
    __slots__ = ("c_iflag", "c_oflag", "c_cflag", "c_lflag", "c_line", "c_ispeed", "c_ospeed", "c_cc")
    C_IFLAG_FIELD_NUMBER: _ClassVar[int]
    C_OFLAG_FIELD_NUMBER: _ClassVar[int]
    C_CFLAG_FIELD_NUMBER: _ClassVar[int]
    C_LFLAG_FIELD_NUMBER: _ClassVar[int]
    C_LINE_FIELD_NUMBER: _ClassVar[int]
    C_ISPEED_FIELD_NUMBER: _ClassVar[int]
    C_OSPEED_FIELD_NUMBER: _ClassVar[int]
    C_CC_FIELD_NUMBER: _ClassVar[int]
    c_iflag: int
    c_oflag: int
    c_cflag: int
    c_lflag: int
    c_line: int
    c_ispeed: int
    c_ospeed: int
    c_cc: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, c_iflag: _Optional[int] = ..., c_oflag: _Optional[int] = ..., c_cflag: _Optional[int] = ..., c_lflag: _Optional[int] = ..., c_line: _Optional[int] = ..., c_ispeed: _Optional[int] = ..., c_ospeed: _Optional[int] = ..., c_cc: _Optional[_Iterable[int]] = ...) -> None: ...

class tty_pty_entry(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: int
    def __init__(self, index: _Optional[int] = ...) -> None: ...

class tty_data_entry(_message.Message):
    __slots__ = ("tty_id", "data")
    TTY_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    tty_id: int
    data: bytes
    def __init__(self, tty_id: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class tty_info_entry(_message.Message):
    __slots__ = ("id", "type", "locked", "exclusive", "packet_mode", "sid", "pgrp", "rdev", "termios", "termios_locked", "winsize", "pty", "dev", "uid", "gid")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    PACKET_MODE_FIELD_NUMBER: _ClassVar[int]
    SID_FIELD_NUMBER: _ClassVar[int]
    PGRP_FIELD_NUMBER: _ClassVar[int]
    RDEV_FIELD_NUMBER: _ClassVar[int]
    TERMIOS_FIELD_NUMBER: _ClassVar[int]
    TERMIOS_LOCKED_FIELD_NUMBER: _ClassVar[int]
    WINSIZE_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    DEV_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    id: int
    type: TtyType
    locked: bool
    exclusive: bool
    packet_mode: bool
    sid: int
    pgrp: int
    rdev: int
    termios: termios_entry
    termios_locked: termios_entry
    winsize: winsize_entry
    pty: tty_pty_entry
    dev: int
    uid: int
    gid: int
    def __init__(self, id: _Optional[int] = ..., type: _Optional[_Union[TtyType, str]] = ..., locked: _Optional[bool] = ..., exclusive: _Optional[bool] = ..., packet_mode: _Optional[bool] = ..., sid: _Optional[int] = ..., pgrp: _Optional[int] = ..., rdev: _Optional[int] = ..., termios: _Optional[_Union[termios_entry, _Mapping]] = ..., termios_locked: _Optional[_Union[termios_entry, _Mapping]] = ..., winsize: _Optional[_Union[winsize_entry, _Mapping]] = ..., pty: _Optional[_Union[tty_pty_entry, _Mapping]] = ..., dev: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ...) -> None: ...

class tty_file_entry(_message.Message):
    __slots__ = ("id", "tty_info_id", "flags", "fown", "regf_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    TTY_INFO_ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    REGF_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    tty_info_id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    regf_id: int
    def __init__(self, id: _Optional[int] = ..., tty_info_id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., regf_id: _Optional[int] = ...) -> None: ...

class eventfd_file_entry(_message.Message):
    __slots__ = ("id", "flags", "fown", "counter")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    counter: int
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., counter: _Optional[int] = ...) -> None: ...

class eventpoll_tfd_entry(_message.Message):
    __slots__ = ("id", "tfd", "events", "data", "dev", "inode", "pos")
    ID_FIELD_NUMBER: _ClassVar[int]
    TFD_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DEV_FIELD_NUMBER: _ClassVar[int]
    INODE_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    id: int
    tfd: int
    events: int
    data: int
    dev: int
    inode: int
    pos: int
    def __init__(self, id: _Optional[int] = ..., tfd: _Optional[int] = ..., events: _Optional[int] = ..., data: _Optional[int] = ..., dev: _Optional[int] = ..., inode: _Optional[int] = ..., pos: _Optional[int] = ...) -> None: ...

class eventpoll_file_entry(_message.Message):
    __slots__ = ("id", "flags", "fown", "tfd")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    TFD_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    tfd: _containers.RepeatedCompositeFieldContainer[eventpoll_tfd_entry]
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., tfd: _Optional[_Iterable[_Union[eventpoll_tfd_entry, _Mapping]]] = ...) -> None: ...

class signalfd_entry(_message.Message):
    __slots__ = ("id", "flags", "fown", "sigmask")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    SIGMASK_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    sigmask: int
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., sigmask: _Optional[int] = ...) -> None: ...

class timerfd_entry(_message.Message):
    __slots__ = ("id", "flags", "fown", "clockid", "ticks", "settime_flags", "vsec", "vnsec", "isec", "insec")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    CLOCKID_FIELD_NUMBER: _ClassVar[int]
    TICKS_FIELD_NUMBER: _ClassVar[int]
    SETTIME_FLAGS_FIELD_NUMBER: _ClassVar[int]
    VSEC_FIELD_NUMBER: _ClassVar[int]
    VNSEC_FIELD_NUMBER: _ClassVar[int]
    ISEC_FIELD_NUMBER: _ClassVar[int]
    INSEC_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    clockid: int
    ticks: int
    settime_flags: int
    vsec: int
    vnsec: int
    isec: int
    insec: int
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., clockid: _Optional[int] = ..., ticks: _Optional[int] = ..., settime_flags: _Optional[int] = ..., vsec: _Optional[int] = ..., vnsec: _Optional[int] = ..., isec: _Optional[int] = ..., insec: _Optional[int] = ...) -> None: ...

class fh_entry(_message.Message):
    __slots__ = ("bytes", "type", "handle", "path", "mnt_id")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MNT_ID_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    type: int
    handle: _containers.RepeatedScalarFieldContainer[int]
    path: str
    mnt_id: int
    def __init__(self, bytes: _Optional[int] = ..., type: _Optional[int] = ..., handle: _Optional[_Iterable[int]] = ..., path: _Optional[str] = ..., mnt_id: _Optional[int] = ...) -> None: ...

class irmap_cache_entry(_message.Message):
    __slots__ = ("dev", "inode", "path")
    DEV_FIELD_NUMBER: _ClassVar[int]
    INODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    dev: int
    inode: int
    path: str
    def __init__(self, dev: _Optional[int] = ..., inode: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class inotify_wd_entry(_message.Message):
    __slots__ = ("id", "i_ino", "mask", "ignored_mask", "s_dev", "wd", "f_handle")
    ID_FIELD_NUMBER: _ClassVar[int]
    I_INO_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    IGNORED_MASK_FIELD_NUMBER: _ClassVar[int]
    S_DEV_FIELD_NUMBER: _ClassVar[int]
    WD_FIELD_NUMBER: _ClassVar[int]
    F_HANDLE_FIELD_NUMBER: _ClassVar[int]
    id: int
    i_ino: int
    mask: int
    ignored_mask: int
    s_dev: int
    wd: int
    f_handle: fh_entry
    def __init__(self, id: _Optional[int] = ..., i_ino: _Optional[int] = ..., mask: _Optional[int] = ..., ignored_mask: _Optional[int] = ..., s_dev: _Optional[int] = ..., wd: _Optional[int] = ..., f_handle: _Optional[_Union[fh_entry, _Mapping]] = ...) -> None: ...

class inotify_file_entry(_message.Message):
    __slots__ = ("id", "flags", "fown", "wd")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    WD_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    wd: _containers.RepeatedCompositeFieldContainer[inotify_wd_entry]
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., wd: _Optional[_Iterable[_Union[inotify_wd_entry, _Mapping]]] = ...) -> None: ...

class fanotify_inode_mark_entry(_message.Message):
    __slots__ = ("i_ino", "f_handle")
    I_INO_FIELD_NUMBER: _ClassVar[int]
    F_HANDLE_FIELD_NUMBER: _ClassVar[int]
    i_ino: int
    f_handle: fh_entry
    def __init__(self, i_ino: _Optional[int] = ..., f_handle: _Optional[_Union[fh_entry, _Mapping]] = ...) -> None: ...

class fanotify_mount_mark_entry(_message.Message):
    __slots__ = ("mnt_id", "path")
    MNT_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    mnt_id: int
    path: str
    def __init__(self, mnt_id: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class fanotify_mark_entry(_message.Message):
    __slots__ = ("id", "type", "mflags", "mask", "ignored_mask", "s_dev", "ie", "me")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MFLAGS_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    IGNORED_MASK_FIELD_NUMBER: _ClassVar[int]
    S_DEV_FIELD_NUMBER: _ClassVar[int]
    IE_FIELD_NUMBER: _ClassVar[int]
    ME_FIELD_NUMBER: _ClassVar[int]
    id: int
    type: mark_type
    mflags: int
    mask: int
    ignored_mask: int
    s_dev: int
    ie: fanotify_inode_mark_entry
    me: fanotify_mount_mark_entry
    def __init__(self, id: _Optional[int] = ..., type: _Optional[_Union[mark_type, str]] = ..., mflags: _Optional[int] = ..., mask: _Optional[int] = ..., ignored_mask: _Optional[int] = ..., s_dev: _Optional[int] = ..., ie: _Optional[_Union[fanotify_inode_mark_entry, _Mapping]] = ..., me: _Optional[_Union[fanotify_mount_mark_entry, _Mapping]] = ...) -> None: ...

class fanotify_file_entry(_message.Message):
    __slots__ = ("id", "flags", "fown", "faflags", "evflags", "mark")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    FAFLAGS_FIELD_NUMBER: _ClassVar[int]
    EVFLAGS_FIELD_NUMBER: _ClassVar[int]
    MARK_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    fown: _criu_common_pb2.fown_entry
    faflags: int
    evflags: int
    mark: _containers.RepeatedCompositeFieldContainer[fanotify_mark_entry]
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., faflags: _Optional[int] = ..., evflags: _Optional[int] = ..., mark: _Optional[_Iterable[_Union[fanotify_mark_entry, _Mapping]]] = ...) -> None: ...

class ns_file_entry(_message.Message):
    __slots__ = ("id", "ns_id", "ns_cflag", "flags")
    ID_FIELD_NUMBER: _ClassVar[int]
    NS_ID_FIELD_NUMBER: _ClassVar[int]
    NS_CFLAG_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    id: int
    ns_id: int
    ns_cflag: int
    flags: int
    def __init__(self, id: _Optional[int] = ..., ns_id: _Optional[int] = ..., ns_cflag: _Optional[int] = ..., flags: _Optional[int] = ...) -> None: ...

class tunfile_entry(_message.Message):
    __slots__ = ("id", "netdev", "detached", "ns_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    NETDEV_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    NS_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    netdev: str
    detached: bool
    ns_id: int
    def __init__(self, id: _Optional[int] = ..., netdev: _Optional[str] = ..., detached: _Optional[bool] = ..., ns_id: _Optional[int] = ...) -> None: ...

class ext_file_entry(_message.Message):
    __slots__ = ("id", "fown")
    ID_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    id: int
    fown: _criu_common_pb2.fown_entry
    def __init__(self, id: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ...) -> None: ...

class memfd_file_entry(_message.Message):
    __slots__ = ("id", "flags", "pos", "fown", "inode_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    INODE_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    pos: int
    fown: _criu_common_pb2.fown_entry
    inode_id: int
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., pos: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., inode_id: _Optional[int] = ...) -> None: ...

class memfd_inode_entry(_message.Message):
    __slots__ = ("name", "uid", "gid", "size", "shmid", "seals", "inode_id", "hugetlb_flag", "mode")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHMID_FIELD_NUMBER: _ClassVar[int]
    SEALS_FIELD_NUMBER: _ClassVar[int]
    INODE_ID_FIELD_NUMBER: _ClassVar[int]
    HUGETLB_FLAG_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    uid: int
    gid: int
    size: int
    shmid: int
    seals: int
    inode_id: int
    hugetlb_flag: int
    mode: int
    def __init__(self, name: _Optional[str] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., size: _Optional[int] = ..., shmid: _Optional[int] = ..., seals: _Optional[int] = ..., inode_id: _Optional[int] = ..., hugetlb_flag: _Optional[int] = ..., mode: _Optional[int] = ...) -> None: ...

class bpfmap_file_entry(_message.Message):
    __slots__ = ("id", "flags", "pos", "fown", "map_type", "key_size", "value_size", "map_id", "max_entries", "map_flags", "memlock", "frozen", "map_name", "ifindex", "mnt_id", "map_extra")
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    POS_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    MAP_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_SIZE_FIELD_NUMBER: _ClassVar[int]
    VALUE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAP_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MAP_FLAGS_FIELD_NUMBER: _ClassVar[int]
    MEMLOCK_FIELD_NUMBER: _ClassVar[int]
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    MAP_NAME_FIELD_NUMBER: _ClassVar[int]
    IFINDEX_FIELD_NUMBER: _ClassVar[int]
    MNT_ID_FIELD_NUMBER: _ClassVar[int]
    MAP_EXTRA_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    pos: int
    fown: _criu_common_pb2.fown_entry
    map_type: int
    key_size: int
    value_size: int
    map_id: int
    max_entries: int
    map_flags: int
    memlock: int
    frozen: bool
    map_name: str
    ifindex: int
    mnt_id: int
    map_extra: int
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., pos: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., map_type: _Optional[int] = ..., key_size: _Optional[int] = ..., value_size: _Optional[int] = ..., map_id: _Optional[int] = ..., max_entries: _Optional[int] = ..., map_flags: _Optional[int] = ..., memlock: _Optional[int] = ..., frozen: _Optional[bool] = ..., map_name: _Optional[str] = ..., ifindex: _Optional[int] = ..., mnt_id: _Optional[int] = ..., map_extra: _Optional[int] = ...) -> None: ...

class file_entry(_message.Message):
    __slots__ = ("type", "id", "reg", "isk", "nsf", "psk", "nlsk", "efd", "epfd", "sgfd", "tunf", "tfd", "ify", "ffy", "ext", "usk", "fifo", "pipe", "tty", "memfd", "bpf")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REG_FIELD_NUMBER: _ClassVar[int]
    ISK_FIELD_NUMBER: _ClassVar[int]
    NSF_FIELD_NUMBER: _ClassVar[int]
    PSK_FIELD_NUMBER: _ClassVar[int]
    NLSK_FIELD_NUMBER: _ClassVar[int]
    EFD_FIELD_NUMBER: _ClassVar[int]
    EPFD_FIELD_NUMBER: _ClassVar[int]
    SGFD_FIELD_NUMBER: _ClassVar[int]
    TUNF_FIELD_NUMBER: _ClassVar[int]
    TFD_FIELD_NUMBER: _ClassVar[int]
    IFY_FIELD_NUMBER: _ClassVar[int]
    FFY_FIELD_NUMBER: _ClassVar[int]
    EXT_FIELD_NUMBER: _ClassVar[int]
    USK_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    PIPE_FIELD_NUMBER: _ClassVar[int]
    TTY_FIELD_NUMBER: _ClassVar[int]
    MEMFD_FIELD_NUMBER: _ClassVar[int]
    BPF_FIELD_NUMBER: _ClassVar[int]
    type: fd_types
    id: int
    reg: reg_file_entry
    isk: _criu_net_pb2.inet_sk_entry
    nsf: ns_file_entry
    psk: _criu_net_pb2.packet_sock_entry
    nlsk: _criu_net_pb2.netlink_sk_entry
    efd: eventfd_file_entry
    epfd: eventpoll_file_entry
    sgfd: signalfd_entry
    tunf: tunfile_entry
    tfd: timerfd_entry
    ify: inotify_file_entry
    ffy: fanotify_file_entry
    ext: ext_file_entry
    usk: _criu_net_pb2.unix_sk_entry
    fifo: fifo_entry
    pipe: pipe_entry
    tty: tty_file_entry
    memfd: memfd_file_entry
    bpf: bpfmap_file_entry
    def __init__(self, type: _Optional[_Union[fd_types, str]] = ..., id: _Optional[int] = ..., reg: _Optional[_Union[reg_file_entry, _Mapping]] = ..., isk: _Optional[_Union[_criu_net_pb2.inet_sk_entry, _Mapping]] = ..., nsf: _Optional[_Union[ns_file_entry, _Mapping]] = ..., psk: _Optional[_Union[_criu_net_pb2.packet_sock_entry, _Mapping]] = ..., nlsk: _Optional[_Union[_criu_net_pb2.netlink_sk_entry, _Mapping]] = ..., efd: _Optional[_Union[eventfd_file_entry, _Mapping]] = ..., epfd: _Optional[_Union[eventpoll_file_entry, _Mapping]] = ..., sgfd: _Optional[_Union[signalfd_entry, _Mapping]] = ..., tunf: _Optional[_Union[tunfile_entry, _Mapping]] = ..., tfd: _Optional[_Union[timerfd_entry, _Mapping]] = ..., ify: _Optional[_Union[inotify_file_entry, _Mapping]] = ..., ffy: _Optional[_Union[fanotify_file_entry, _Mapping]] = ..., ext: _Optional[_Union[ext_file_entry, _Mapping]] = ..., usk: _Optional[_Union[_criu_net_pb2.unix_sk_entry, _Mapping]] = ..., fifo: _Optional[_Union[fifo_entry, _Mapping]] = ..., pipe: _Optional[_Union[pipe_entry, _Mapping]] = ..., tty: _Optional[_Union[tty_file_entry, _Mapping]] = ..., memfd: _Optional[_Union[memfd_file_entry, _Mapping]] = ..., bpf: _Optional[_Union[bpfmap_file_entry, _Mapping]] = ...) -> None: ...

class fs_entry(_message.Message):
    __slots__ = ("cwd_id", "root_id", "umask")
    CWD_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    UMASK_FIELD_NUMBER: _ClassVar[int]
    cwd_id: int
    root_id: int
    umask: int
    def __init__(self, cwd_id: _Optional[int] = ..., root_id: _Optional[int] = ..., umask: _Optional[int] = ...) -> None: ...

class file_lock_entry(_message.Message):
    __slots__ = ("flag", "type", "pid", "fd", "start", "len")
    FLAG_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    FD_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    LEN_FIELD_NUMBER: _ClassVar[int]
    flag: int
    type: int
    pid: int
    fd: int
    start: int
    len: int
    def __init__(self, flag: _Optional[int] = ..., type: _Optional[int] = ..., pid: _Optional[int] = ..., fd: _Optional[int] = ..., start: _Optional[int] = ..., len: _Optional[int] = ...) -> None: ...

class remap_file_path_entry(_message.Message):
    __slots__ = ("orig_id", "remap_id", "remap_type")
    ORIG_ID_FIELD_NUMBER: _ClassVar[int]
    REMAP_ID_FIELD_NUMBER: _ClassVar[int]
    REMAP_TYPE_FIELD_NUMBER: _ClassVar[int]
    orig_id: int
    remap_id: int
    remap_type: remap_type
    def __init__(self, orig_id: _Optional[int] = ..., remap_id: _Optional[int] = ..., remap_type: _Optional[_Union[remap_type, str]] = ...) -> None: ...

class ghost_file_entry(_message.Message):
    __slots__ = ("uid", "gid", "mode", "dev", "ino", "rdev", "atim", "mtim", "chunks", "size", "symlnk_target")
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    DEV_FIELD_NUMBER: _ClassVar[int]
    INO_FIELD_NUMBER: _ClassVar[int]
    RDEV_FIELD_NUMBER: _ClassVar[int]
    ATIM_FIELD_NUMBER: _ClassVar[int]
    MTIM_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SYMLNK_TARGET_FIELD_NUMBER: _ClassVar[int]
    uid: int
    gid: int
    mode: int
    dev: int
    ino: int
    rdev: int
    atim: _criu_common_pb2.timeval
    mtim: _criu_common_pb2.timeval
    chunks: bool
    size: int
    symlnk_target: str
    def __init__(self, uid: _Optional[int] = ..., gid: _Optional[int] = ..., mode: _Optional[int] = ..., dev: _Optional[int] = ..., ino: _Optional[int] = ..., rdev: _Optional[int] = ..., atim: _Optional[_Union[_criu_common_pb2.timeval, _Mapping]] = ..., mtim: _Optional[_Union[_criu_common_pb2.timeval, _Mapping]] = ..., chunks: _Optional[bool] = ..., size: _Optional[int] = ..., symlnk_target: _Optional[str] = ...) -> None: ...

class ghost_chunk_entry(_message.Message):
    __slots__ = ("len", "off")
    LEN_FIELD_NUMBER: _ClassVar[int]
    OFF_FIELD_NUMBER: _ClassVar[int]
    len: int
    off: int
    def __init__(self, len: _Optional[int] = ..., off: _Optional[int] = ...) -> None: ...
