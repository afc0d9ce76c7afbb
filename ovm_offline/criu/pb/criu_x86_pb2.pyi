from . import criu_display_pb2 as _criu_display_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class user_x86_regs_mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NATIVE: _ClassVar[user_x86_regs_mode]
    COMPAT: _ClassVar[user_x86_regs_mode]
NATIVE: user_x86_regs_mode
COMPAT: user_x86_regs_mode

class user_x86_regs_entry(_message.Message):
    __slots__ = ("r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss", "fs_base", "gs_base", "ds", "es", "fs", "gs", "mode")
    R15_FIELD_NUMBER: _ClassVar[int]
    R14_FIELD_NUMBER: _ClassVar[int]
    R13_FIELD_NUMBER: _ClassVar[int]
    R12_FIELD_NUMBER: _ClassVar[int]
    BP_FIELD_NUMBER: _ClassVar[int]
    BX_FIELD_NUMBER: _ClassVar[int]
    R11_FIELD_NUMBER: _ClassVar[int]
    R10_FIELD_NUMBER: _ClassVar[int]
    R9_FIELD_NUMBER: _ClassVar[int]
    R8_FIELD_NUMBER: _ClassVar[int]
    AX_FIELD_NUMBER: _ClassVar[int]
    CX_FIELD_NUMBER: _ClassVar[int]
    DX_FIELD_NUMBER: _ClassVar[int]
    SI_FIELD_NUMBER: _ClassVar[int]
    DI_FIELD_NUMBER: _ClassVar[int]
    ORIG_AX_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    CS_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    SP_FIELD_NUMBER: _ClassVar[int]
    SS_FIELD_NUMBER: _ClassVar[int]
    FS_BASE_FIELD_NUMBER: _ClassVar[int]
    GS_BASE_FIELD_NUMBER: _ClassVar[int]
    DS_FIELD_NUMBER: _ClassVar[int]
    ES_FIELD_NUMBER: _ClassVar[int]
    FS_FIELD_NUMBER: _ClassVar[int]
    GS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    r15: int
    r14: int
    r13: int
    r12: int
    bp: int
    bx: int
    r11: int
    r10: int
    r9: int
    r8: int
    ax: int
    cx: int
    dx: int
    si: int
    di: int
    orig_ax: int
    ip: int
    cs: int
    flags: int
    sp: int
    ss: int
    fs_base: int
    gs_base: int
    ds: int
    es: int
    fs: int
    gs: int
    mode: user_x86_regs_mode
    def __init__(self, r15: _Optional[int] = ..., r14: _Optional[int] = ..., r13: _Optional[int] = ..., r12: _Optional[int] = ..., bp: _Optional[int] = ..., bx: _Optional[int] = ..., r11: _Optional[int] = ..., r10: _Optional[int] = ..., r9: _Optional[int] = ..., r8: _Optional[int] = ..., ax: _Optional[int] = ..., cx: _Optional[int] = ..., dx: _Optional[int] = ..., si: _Optional[int] = ..., di: _Optional[int] = ..., orig_ax: _Optional[int] = ..., ip: _Optional[int] = ..., cs: _Optional[int] = ..., flags: _Optional[int] = ..., sp: _Optional[int] = ..., ss: _Optional[int] = ..., fs_base: _Optional[int] = ..., gs_base: _Optional[int] = ..., ds: _Optional[int] = ..., es: _Optional[int] = ..., fs: _Optional[int] = ..., gs: _Optional[int] = ..., mode: _Optional[_Union[user_x86_regs_mode, str]] = ...) -> None: ...

class user_x86_xsave_entry(_message.Message):
    __slots__ = ("xstate_bv", "ymmh_space", "bndreg_state", "bndcsr_state", "opmask_reg", "zmm_upper", "hi16_zmm", "pkru")
    XSTATE_BV_FIELD_NUMBER: _ClassVar[int]
    YMMH_SPACE_FIELD_NUMBER: _ClassVar[int]
    BNDREG_STATE_FIELD_NUMBER: _ClassVar[int]
    BNDCSR_STATE_FIELD_NUMBER: _ClassVar[int]
    OPMASK_REG_FIELD_NUMBER: _ClassVar[int]
    ZMM_UPPER_FIELD_NUMBER: _ClassVar[int]
    HI16_ZMM_FIELD_NUMBER: _ClassVar[int]
    PKRU_FIELD_NUMBER: _ClassVar[int]
    xstate_bv: int
    ymmh_space: _containers.RepeatedScalarFieldContainer[int]
    bndreg_state: _containers.RepeatedScalarFieldContainer[int]
    bndcsr_state: _containers.RepeatedScalarFieldContainer[int]
    opmask_reg: _containers.RepeatedScalarFieldContainer[int]
    zmm_upper: _containers.RepeatedScalarFieldContainer[int]
    hi16_zmm: _containers.RepeatedScalarFieldContainer[int]
    pkru: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, xstate_bv: _Optional[int] = ..., ymmh_space: _Optional[_Iterable[int]] = ..., bndreg_state: _Optional[_Iterable[int]] = ..., bndcsr_state: _Optional[_Iterable[int]] = ..., opmask_reg: _Optional[_Iterable[int]] = ..., zmm_upper: _Optional[_Iterable[int]] = ..., hi16_zmm: _Optional[_Iterable[int]] = ..., pkru: _Optional[_Iterable[int]] = ...) -> None: ...

class user_x86_fpregs_entry(_message.Message):
    __slots__ = ("cwd", "swd", "twd", "fop", "rip", "rdp", "mxcsr", "mxcsr_mask", "st_space", "xmm_space", "padding", "xsave")
    CWD_FIELD_NUMBER: _ClassVar[int]
    SWD_FIELD_NUMBER: _ClassVar[int]
    TWD_FIELD_NUMBER: _ClassVar[int]
    FOP_FIELD_NUMBER: _ClassVar[int]
    RIP_FIELD_NUMBER: _ClassVar[int]
    RDP_FIELD_NUMBER: _ClassVar[int]
    MXCSR_FIELD_NUMBER: _ClassVar[int]
    MXCSR_MASK_FIELD_NUMBER: _ClassVar[int]
    ST_SPACE_FIELD_NUMBER: _ClassVar[int]
    XMM_SPACE_FIELD_NUMBER: _ClassVar[int]
    PADDING_FIELD_NUMBER: _ClassVar[int]
    XSAVE_FIELD_NUMBER: _ClassVar[int]
    cwd: int
    swd: int
    twd: int
    fop: int
    rip: int
    rdp: int
    mxcsr: int
    mxcsr_mask: int
    st_space: _containers.RepeatedScalarFieldContainer[int]
    xmm_space: _containers.RepeatedScalarFieldContainer[int]
    padding: _containers.RepeatedScalarFieldContainer[int]
    xsave: user_x86_xsave_entry
    def __init__(self, cwd: _Optional[int] = ..., swd: _Optional[int] = ..., twd: _Optional[int] = ..., fop: _Optional[int] = ..., rip: _Optional[int] = ..., rdp: _Optional[int] = ..., mxcsr: _Optional[int] = ..., mxcsr_mask: _Optional[int] = ..., st_space: _Optional[_Iterable[int]] = ..., xmm_space: _Optional[_Iterable[int]] = ..., padding: _Optional[_Iterable[int]] = ..., xsave: _Optional[_Union[user_x86_xsave_entry, _Mapping]] = ...) -> None: ...

class user_desc_t(_message.Message):
    __slots__ = ("entry_number", "base_addr", "limit", "seg_32bit", "contents_h", "contents_l", "read_exec_only", "limit_in_pages", "seg_not_present", "usable")
    ENTRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BASE_ADDR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SEG_32BIT_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_H_FIELD_NUMBER: _ClassVar[int]
    CONTENTS_L_FIELD_NUMBER: _ClassVar[int]
    READ_EXEC_ONLY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_IN_PAGES_FIELD_NUMBER: _ClassVar[int]
    SEG_NOT_PRESENT_FIELD_NUMBER: _ClassVar[int]
    USABLE_FIELD_NUMBER: _ClassVar[int]
    entry_number: int
    base_addr: int
    limit: int
    seg_32bit: bool
    contents_h: bool
    contents_l: bool
    read_exec_only: bool
    limit_in_pages: bool
    seg_not_present: bool
    usable: bool
    def __init__(self, entry_number: _Optional[int] = ..., base_addr: _Optional[int] = ..., limit: _Optional[int] = ..., seg_32bit: _Optional[bool] = ..., contents_h: _Optional[bool] = ..., contents_l: _Optional[bool] = ..., read_exec_only: _Optional[bool] = ..., limit_in_pages: _Optional[bool] = ..., seg_not_present: _Optional[bool] = ..., usable: _Optional[bool] = ...) -> None: ...

class thread_info_x86(_message.Message):
    __slots__ = ("clear_tid_addr", "gpregs", "fpregs", "tls", "cet")
    CLEAR_TID_ADDR_FIELD_NUMBER: _ClassVar[int]
    GPREGS_FIELD_NUMBER: _ClassVar[int]
    FPREGS_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    CET_FIELD_NUMBER: _ClassVar[int]
    clear_tid_addr: int
    gpregs: user_x86_regs_entry
    fpregs: user_x86_fpregs_entry
    tls: _containers.RepeatedCompositeFieldContainer[user_desc_t]
    cet: user_x86_cet_entry
    def __init__(self, clear_tid_addr: _Optional[int] = ..., gpregs: _Optional[_Union[user_x86_regs_entry, _Mapping]] = ..., fpregs: _Optional[_Union[user_x86_fpregs_entry, _Mapping]] = ..., tls: _Optional[_Iterable[_Union[user_desc_t, _Mapping]]] = ..., cet: _Optional[_Union[user_x86_cet_entry, _Mapping]] = ...) -> None: ...

class user_x86_cet_entry(_message.Message):
    __slots__ = ("cet", "ssp")
    CET_FIELD_NUMBER: _ClassVar[int]
    SSP_FIELD_NUMBER: _ClassVar[int]
    cet: int
    ssp: int
    def __init__(self, cet: _Optional[int] = ..., ssp: _Optional[int] = ...) -> None: ...
