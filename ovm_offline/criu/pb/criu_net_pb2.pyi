from . import criu_display_pb2 as _criu_display_pb2
from . import criu_common_pb2 as _criu_common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class sk_shutdown(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[sk_shutdown]
    READ: _ClassVar[sk_shutdown]
    WRITE: _ClassVar[sk_shutdown]
    BOTH: _ClassVar[sk_shutdown]

class SysctlType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CTL_STR: _ClassVar[SysctlType]
    CTL_32: _ClassVar[SysctlType]
NONE: sk_shutdown
READ: sk_shutdown
WRITE: sk_shutdown
BOTH: sk_shutdown
CTL_STR: SysctlType
CTL_32: SysctlType

class sk_opts_entry(_message.Message):
    __slots__ = ("so_sndbuf", "so_rcvbuf", "so_snd_tmo_sec", "so_snd_tmo_usec", "so_rcv_tmo_sec", "so_rcv_tmo_usec", "reuseaddr", "so_priority", "so_rcvlowat", "so_mark", "so_passcred", "so_passsec", "so_dontroute", "so_no_check", "so_bound_dev", "so_filter", "so_reuseport", "so_broadcast", "so_keepalive", "tcp_keepcnt", "tcp_keepidle", "tcp_keepintvl", "so_oobinline", "so_linger", "so_buf_lock")
    SO_SNDBUF_FIELD_NUMBER: _ClassVar[int]
    SO_RCVBUF_FIELD_NUMBER: _ClassVar[int]
    SO_SND_TMO_SEC_FIELD_NUMBER: _ClassVar[int]
    SO_SND_TMO_USEC_FIELD_NUMBER: _ClassVar[int]
    SO_RCV_TMO_SEC_FIELD_NUMBER: _ClassVar[int]
    SO_RCV_TMO_USEC_FIELD_NUMBER: _ClassVar[int]
    REUSEADDR_FIELD_NUMBER: _ClassVar[int]
    SO_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SO_RCVLOWAT_FIELD_NUMBER: _ClassVar[int]
    SO_MARK_FIELD_NUMBER: _ClassVar[int]
    SO_PASSCRED_FIELD_NUMBER: _ClassVar[int]
    SO_PASSSEC_FIELD_NUMBER: _ClassVar[int]
    SO_DONTROUTE_FIELD_NUMBER: _ClassVar[int]
    SO_NO_CHECK_FIELD_NUMBER: _ClassVar[int]
    SO_BOUND_DEV_FIELD_NUMBER: _ClassVar[int]
    SO_FILTER_FIELD_NUMBER: _ClassVar[int]
    SO_REUSEPORT_FIELD_NUMBER: _ClassVar[int]
    SO_BROADCAST_FIELD_NUMBER: _ClassVar[int]
    SO_KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    TCP_KEEPCNT_FIELD_NUMBER: _ClassVar[int]
    TCP_KEEPIDLE_FIELD_NUMBER: _ClassVar[int]
    TCP_KEEPINTVL_FIELD_NUMBER: _ClassVar[int]
    SO_OOBINLINE_FIELD_NUMBER: _ClassVar[int]
    SO_LINGER_FIELD_NUMBER: _ClassVar[int]
    SO_BUF_LOCK_FIELD_NUMBER: _ClassVar[int]
    so_sndbuf: int
    so_rcvbuf: int
    so_snd_tmo_sec: int
    so_snd_tmo_usec: int
    so_rcv_tmo_sec: int
    so_rcv_tmo_usec: int
    reuseaddr: bool
    so_priority: int
    so_rcvlowat: int
    so_mark: int
    so_passcred: bool
    so_passsec: bool
    so_dontroute: bool
    so_no_check: bool
    so_bound_dev: str
    so_filter: _containers.RepeatedScalarFieldContainer[int]
    so_reuseport: bool
    so_broadcast: bool
    so_keepalive: bool
    tcp_keepcnt: int
    tcp_keepidle: int
    tcp_keepintvl: int
    so_oobinline: int
    so_linger: int
    so_buf_lock: int
    def __init__(self, so_sndbuf: _Optional[int] = ..., so_rcvbuf: _Optional[int] = ..., so_snd_tmo_sec: _Optional[int] = ..., so_snd_tmo_usec: _Optional[int] = ..., so_rcv_tmo_sec: _Optional[int] = ..., so_rcv_tmo_usec: _Optional[int] = ..., reuseaddr: _Optional[bool] = ..., so_priority: _Optional[int] = ..., so_rcvlowat: _Optional[int] = ..., so_mark: _Optional[int] = ..., so_passcred: _Optional[bool] = ..., so_passsec: _Optional[bool] = ..., so_dontroute: _Optional[bool] = ..., so_no_check: _Optional[bool] = ..., so_bound_dev: _Optional[str] = ..., so_filter: _Optional[_Iterable[int]] = ..., so_reuseport: _Optional[bool] = ..., so_broadcast: _Optional[bool] = ..., so_keepalive: _Optional[bool] = ..., tcp_keepcnt: _Optional[int] = ..., tcp_keepidle: _Optional[int] = ..., tcp_keepintvl: _Optional[int] = ..., so_oobinline: _Optional[int] = ..., so_linger: _Optional[int] = ..., so_buf_lock: _Optional[int] = ...) -> None: ...

class file_perms_entry(_message.Message):
    __slots__ = ("mode", "uid", "gid")
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    mode: int
    uid: int
    gid: int
    def __init__(self, mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ...) -> None: ...

class unix_sk_entry(_message.Message):
    __slots__ = ("id", "ino", "type", "state", "flags", "uflags", "backlog", "peer", "fown", "opts", "name", "shutdown", "file_perms", "name_dir", "deleted", "ns_id", "mnt_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    INO_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    UFLAGS_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    FILE_PERMS_FIELD_NUMBER: _ClassVar[int]
    NAME_DIR_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    NS_ID_FIELD_NUMBER: _ClassVar[int]
    MNT_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    ino: int
    type: int
    state: int
    flags: int
    uflags: int
    backlog: int
    peer: int
    fown: _criu_common_pb2.fown_entry
    opts: sk_opts_entry
    name: bytes
    shutdown: sk_shutdown
    file_perms: file_perms_entry
    name_dir: str
    deleted: bool
    ns_id: int
    mnt_id: int
    def __init__(self, id: _Optional[int] = ..., ino: _Optional[int] = ..., type: _Optional[int] = ..., state: _Optional[int] = ..., flags: _Optional[int] = ..., uflags: _Optional[int] = ..., backlog: _Optional[int] = ..., peer: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., opts: _Optional[_Union[sk_opts_entry, _Mapping]] = ..., name: _Optional[bytes] = ..., shutdown: _Optional[_Union[sk_shutdown, str]] = ..., file_perms: _Optional[_Union[file_perms_entry, _Mapping]] = ..., name_dir: _Optional[str] = ..., deleted: _Optional[bool] = ..., ns_id: _Optional[int] = ..., mnt_id: _Optional[int] = ...) -> None: ...

class ip_opts_raw_entry(_message.Message):
    __slots__ = ("hdrincl", "nodefrag", "checksum", "icmpv_filter")
    HDRINCL_FIELD_NUMBER: _ClassVar[int]
    NODEFRAG_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    ICMPV_FILTER_FIELD_NUMBER: _ClassVar[int]
    hdrincl: bool
    nodefrag: bool
    checksum: bool
    icmpv_filter: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, hdrincl: _Optional[bool] = ..., nodefrag: _Optional[bool] = ..., checksum: _Optional[bool] = ..., icmpv_filter: _Optional[_Iterable[int]] = ...) -> None: ...

class ip_opts_entry(_message.Message):
    __slots__ = ("freebind", "raw", "pktinfo", "tos", "ttl")
    FREEBIND_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    PKTINFO_FIELD_NUMBER: _ClassVar[int]
    TOS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    freebind: bool
    raw: ip_opts_raw_entry
    pktinfo: bool
    tos: int
    ttl: int
    def __init__(self, freebind: _Optional[bool] = ..., raw: _Optional[_Union[ip_opts_raw_entry, _Mapping]] = ..., pktinfo: _Optional[bool] = ..., tos: _Optional[int] = ..., ttl: _Optional[int] = ...) -> None: ...

class inet_sk_entry(_message.Message):
    __slots__ = ("id", "ino", "family", "type", "proto", "state", "src_port", "dst_port", "flags", "backlog", "src_addr", "dst_addr", "fown", "opts", "v6only", "ip_opts", "ifname", "ns_id", "shutdown", "tcp_opts")
    ID_FIELD_NUMBER: _ClassVar[int]
    INO_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTO_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    SRC_ADDR_FIELD_NUMBER: _ClassVar[int]
    DST_ADDR_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    V6ONLY_FIELD_NUMBER: _ClassVar[int]
    IP_OPTS_FIELD_NUMBER: _ClassVar[int]
    IFNAME_FIELD_NUMBER: _ClassVar[int]
    NS_ID_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    TCP_OPTS_FIELD_NUMBER: _ClassVar[int]
    id: int
    ino: int
    family: int
    type: int
    proto: int
    state: int
    src_port: int
    dst_port: int
    flags: int
    backlog: int
    src_addr: _containers.RepeatedScalarFieldContainer[int]
    dst_addr: _containers.RepeatedScalarFieldContainer[int]
    fown: _criu_common_pb2.fown_entry
    opts: sk_opts_entry
    v6only: bool
    ip_opts: ip_opts_entry
    ifname: str
    ns_id: int
    shutdown: sk_shutdown
    tcp_opts: tcp_opts_entry
    def __init__(self, id: _Optional[int] = ..., ino: _Optional[int] = ..., family: _Optional[int] = ..., type: _Optional[int] = ..., proto: _Optional[int] = ..., state: _Optional[int] = ..., src_port: _Optional[int] = ..., dst_port: _Optional[int] = ..., flags: _Optional[int] = ..., backlog: _Optional[int] = ..., src_addr: _Optional[_Iterable[int]] = ..., dst_addr: _Optional[_Iterable[int]] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., opts: _Optional[_Union[sk_opts_entry, _Mapping]] = ..., v6only: _Optional[bool] = ..., ip_opts: _Optional[_Union[ip_opts_entry, _Mapping]] = ..., ifname: _Optional[str] = ..., ns_id: _Optional[int] = ..., shutdown: _Optional[_Union[sk_shutdown, str]] = ..., tcp_opts: _Optional[_Union[tcp_opts_entry, _Mapping]] = ...) -> None: ...

class packet_mclist(_message.Message):
    __slots__ = ("index", "type", "addr")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    index: int
    type: int
    addr: bytes
    def __init__(self, index: _Optional[int] = ..., type: _Optional[int] = ..., addr: _Optional[bytes] = ...) -> None: ...

class packet_ring(_message.Message):
    __slots__ = ("block_size", "block_nr", "frame_size", "frame_nr", "retire_tmo", "sizeof_priv", "features")
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_NR_FIELD_NUMBER: _ClassVar[int]
    FRAME_SIZE_FIELD_NUMBER: _ClassVar[int]
    FRAME_NR_FIELD_NUMBER: _ClassVar[int]
    RETIRE_TMO_FIELD_NUMBER: _ClassVar[int]
    SIZEOF_PRIV_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    block_size: int
    block_nr: int
    frame_size: int
    frame_nr: int
    retire_tmo: int
    sizeof_priv: int
    features: int
    def __init__(self, block_size: _Optional[int] = ..., block_nr: _Optional[int] = ..., frame_size: _Optional[int] = ..., frame_nr: _Optional[int] = ..., retire_tmo: _Optional[int] = ..., sizeof_priv: _Optional[int] = ..., features: _Optional[int] = ...) -> None: ...

class packet_sock_entry(_message.Message):
    __slots__ = ("id", "type", "protocol", "flags", "ifindex", "fown", "opts", "version", "reserve", "aux_data", "orig_dev", "vnet_hdr", "loss", "timestamp", "copy_thresh", "mclist", "fanout", "rx_ring", "tx_ring", "ns_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    IFINDEX_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FIELD_NUMBER: _ClassVar[int]
    AUX_DATA_FIELD_NUMBER: _ClassVar[int]
    ORIG_DEV_FIELD_NUMBER: _ClassVar[int]
    VNET_HDR_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COPY_THRESH_FIELD_NUMBER: _ClassVar[int]
    MCLIST_FIELD_NUMBER: _ClassVar[int]
    FANOUT_FIELD_NUMBER: _ClassVar[int]
    RX_RING_FIELD_NUMBER: _ClassVar[int]
    TX_RING_FIELD_NUMBER: _ClassVar[int]
    NS_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    type: int
    protocol: int
    flags: int
    ifindex: int
    fown: _criu_common_pb2.fown_entry
    opts: sk_opts_entry
    version: int
    reserve: int
    aux_data: bool
    orig_dev: bool
    vnet_hdr: bool
    loss: bool
    timestamp: int
    copy_thresh: int
    mclist: _containers.RepeatedCompositeFieldContainer[packet_mclist]
    fanout: int
    rx_ring: packet_ring
    tx_ring: packet_ring
    ns_id: int
    def __init__(self, id: _Optional[int] = ..., type: _Optional[int] = ..., protocol: _Optional[int] = ..., flags: _Optional[int] = ..., ifindex: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., opts: _Optional[_Union[sk_opts_entry, _Mapping]] = ..., version: _Optional[int] = ..., reserve: _Optional[int] = ..., aux_data: _Optional[bool] = ..., orig_dev: _Optional[bool] = ..., vnet_hdr: _Optional[bool] = ..., loss: _Optional[bool] = ..., timestamp: _Optional[int] = ..., copy_thresh: _Optional[int] = ..., mclist: _Optional[_Iterable[_Union[packet_mclist, _Mapping]]] = ..., fanout: _Optional[int] = ..., rx_ring: _Optional[_Union[packet_ring, _Mapping]] = ..., tx_ring: _Optional[_Union[packet_ring, _Mapping]] = ..., ns_id: _Optional[int] = ...) -> None: ...

class netlink_sk_entry(_message.Message):
    __slots__ = ("id", "ino", "protocol", "state", "flags", "portid", "groups", "dst_portid", "dst_group", "fown", "opts", "ns_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    INO_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    PORTID_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    DST_PORTID_FIELD_NUMBER: _ClassVar[int]
    DST_GROUP_FIELD_NUMBER: _ClassVar[int]
    FOWN_FIELD_NUMBER: _ClassVar[int]
    OPTS_FIELD_NUMBER: _ClassVar[int]
    NS_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    ino: int
    protocol: int
    state: int
    flags: int
    portid: int
    groups: _containers.RepeatedScalarFieldContainer[int]
    dst_portid: int
    dst_group: int
    fown: _criu_common_pb2.fown_entry
    opts: sk_opts_entry
    ns_id: int
    def __init__(self, id: _Optional[int] = ..., ino: _Optional[int] = ..., protocol: _Optional[int] = ..., state: _Optional[int] = ..., flags: _Optional[int] = ..., portid: _Optional[int] = ..., groups: _Optional[_Iterable[int]] = ..., dst_portid: _Optional[int] = ..., dst_group: _Optional[int] = ..., fown: _Optional[_Union[_criu_common_pb2.fown_entry, _Mapping]] = ..., opts: _Optional[_Union[sk_opts_entry, _Mapping]] = ..., ns_id: _Optional[int] = ...) -> None: ...

class scm_entry(_message.Message):
    __slots__ = ("type", "rights")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RIGHTS_FIELD_NUMBER: _ClassVar[int]
    type: int
    rights: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, type: _Optional[int] = ..., rights: _Optional[_Iterable[int]] = ...) -> None: ...

class sk_packet_entry(_message.Message):
    __slots__ = ("id_for", "length", "scm")
    ID_FOR_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SCM_FIELD_NUMBER: _ClassVar[int]
    id_for: int
    length: int
    scm: _containers.RepeatedCompositeFieldContainer[scm_entry]
    def __init__(self, id_for: _Optional[int] = ..., length: _Optional[int] = ..., scm: _Optional[_Iterable[_Union[scm_entry, _Mapping]]] = ...) -> None: ...

class tcp_opts_entry(_message.Message):
    __slots__ = ("cork", "nodelay", "keepcnt", "keepidle", "keepintvl")
    CORK_FIELD_NUMBER: _ClassVar[int]
    NODELAY_FIELD_NUMBER: _ClassVar[int]
    KEEPCNT_FIELD_NUMBER: _ClassVar[int]
    KEEPIDLE_FIELD_NUMBER: _ClassVar[int]
    KEEPINTVL_FIELD_NUMBER: _ClassVar[int]
    cork: bool
    nodelay: bool
    keepcnt: int
    keepidle: int
    keepintvl: int
    def __init__(self, cork: _Optional[bool] = ..., nodelay: _Optional[bool] = ..., keepcnt: _Optional[int] = ..., keepidle: _Optional[int] = ..., keepintvl: _Optional[int] = ...) -> None: ...

class tcp_stream_entry(_message.Message):
    __slots__ = ("inq_len", "inq_seq", "outq_len", "outq_seq", "opt_mask", "snd_wscale", "mss_clamp", "rcv_wscale", "timestamp", "cork", "nodelay", "unsq_len", "snd_wl1", "snd_wnd", "max_window", "rcv_wnd", "rcv_wup")
    INQ_LEN_FIELD_NUMBER: _ClassVar[int]
    INQ_SEQ_FIELD_NUMBER: _ClassVar[int]
    OUTQ_LEN_FIELD_NUMBER: _ClassVar[int]
    OUTQ_SEQ_FIELD_NUMBER: _ClassVar[int]
    OPT_MASK_FIELD_NUMBER: _ClassVar[int]
    SND_WSCALE_FIELD_NUMBER: _ClassVar[int]
    MSS_CLAMP_FIELD_NUMBER: _ClassVar[int]
    RCV_WSCALE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CORK_FIELD_NUMBER: _ClassVar[int]
    NODELAY_FIELD_NUMBER: _ClassVar[int]
    UNSQ_LEN_FIELD_NUMBER: _ClassVar[int]
    SND_WL1_FIELD_NUMBER: _ClassVar[int]
    SND_WND_FIELD_NUMBER: _ClassVar[int]
    MAX_WINDOW_FIELD_NUMBER: _ClassVar[int]
    RCV_WND_FIELD_NUMBER: _ClassVar[int]
    RCV_WUP_FIELD_NUMBER: _ClassVar[int]
    inq_len: int
    inq_seq: int
    outq_len: int
    outq_seq: int
    opt_mask: int
    snd_wscale: int
    mss_clamp: int
    rcv_wscale: int
    timestamp: int
    cork: bool
    nodelay: bool
    unsq_len: int
    snd_wl1: int
    snd_wnd: int
    max_window: int
    rcv_wnd: int
    rcv_wup: int
    def __init__(self, inq_len: _Optional[int] = ..., inq_seq: _Optional[int] = ..., outq_len: _Optional[int] = ..., outq_seq: _Optional[int] = ..., opt_mask: _Optional[int] = ..., snd_wscale: _Optional[int] = ..., mss_clamp: _Optional[int] = ..., rcv_wscale: _Optional[int] = ..., timestamp: _Optional[int] = ..., cork: _Optional[bool] = ..., nodelay: _Optional[bool] = ..., unsq_len: _Optional[int] = ..., snd_wl1: _Optional[int] = ..., snd_wnd: _Optional[int] = ..., max_window: _Optional[int] = ..., rcv_wnd: _Optional[int] = ..., rcv_wup: _Optional[int] = ...) -> None: ...

class sysctl_entry(_message.Message):
    __slots__ = ("type", "iarg", "sarg")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    IARG_FIELD_NUMBER: _ClassVar[int]
    SARG_FIELD_NUMBER: _ClassVar[int]
    type: SysctlType
    iarg: int
    sarg: str
    def __init__(self, type: _Optional[_Union[SysctlType, str]] = ..., iarg: _Optional[int] = ..., sarg: _Optional[str] = ...) -> None: ...

class netns_id(_message.Message):
    __slots__ = ("target_ns_id", "netnsid_value")
    TARGET_NS_ID_FIELD_NUMBER: _ClassVar[int]
    NETNSID_VALUE_FIELD_NUMBER: _ClassVar[int]
    target_ns_id: int
    netnsid_value: int
    def __init__(self, target_ns_id: _Optional[int] = ..., netnsid_value: _Optional[int] = ...) -> None: ...

class netns_entry(_message.Message):
    __slots__ = ("def_conf", "all_conf", "def_conf4", "all_conf4", "def_conf6", "all_conf6", "nsids", "ext_key", "unix_conf", "ipv4_sysctl")
    DEF_CONF_FIELD_NUMBER: _ClassVar[int]
    ALL_CONF_FIELD_NUMBER: _ClassVar[int]
    DEF_CONF4_FIELD_NUMBER: _ClassVar[int]
    ALL_CONF4_FIELD_NUMBER: _ClassVar[int]
    DEF_CONF6_FIELD_NUMBER: _ClassVar[int]
    ALL_CONF6_FIELD_NUMBER: _ClassVar[int]
    NSIDS_FIELD_NUMBER: _ClassVar[int]
    EXT_KEY_FIELD_NUMBER: _ClassVar[int]
    UNIX_CONF_FIELD_NUMBER: _ClassVar[int]
    IPV4_SYSCTL_FIELD_NUMBER: _ClassVar[int]
    def_conf: _containers.RepeatedScalarFieldContainer[int]
    all_conf: _containers.RepeatedScalarFieldContainer[int]
    def_conf4: _containers.RepeatedCompositeFieldContainer[sysctl_entry]
    all_conf4: _containers.RepeatedCompositeFieldContainer[sysctl_entry]
    def_conf6: _containers.RepeatedCompositeFieldContainer[sysctl_entry]
    all_conf6: _containers.RepeatedCompositeFieldContainer[sysctl_entry]
    nsids: _containers.RepeatedCompositeFieldContainer[netns_id]
    ext_key: str
    unix_conf: _containers.RepeatedCompositeFieldContainer[sysctl_entry]
    ipv4_sysctl: _containers.RepeatedCompositeFieldContainer[sysctl_entry]
    def __init__(self, def_conf: _Optional[_Iterable[int]] = ..., all_conf: _Optional[_Iterable[int]] = ..., def_conf4: _Optional[_Iterable[_Union[sysctl_entry, _Mapping]]] = ..., all_conf4: _Optional[_Iterable[_Union[sysctl_entry, _Mapping]]] = ..., def_conf6: _Optional[_Iterable[_Union[sysctl_entry, _Mapping]]] = ..., all_conf6: _Optional[_Iterable[_Union[sysctl_entry, _Mapping]]] = ..., nsids: _Optional[_Iterable[_Union[netns_id, _Mapping]]] = ..., ext_key: _Optional[str] = ..., unix_conf: _Optional[_Iterable[_Union[sysctl_entry, _Mapping]]] = ..., ipv4_sysctl: _Optional[_Iterable[_Union[sysctl_entry, _Mapping]]] = ...) -> None: ...
