from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class fown_entry(_message.Message):
    __slots__ = ("uid", "euid", "signum", "pid_type", "pid")
    UID_FIELD_NUMBER: _ClassVar[int]
    EUID_FIELD_NUMBER: _ClassVar[int]
    SIGNUM_FIELD_NUMBER: _ClassVar[int]
    PID_TYPE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    uid: int
    euid: int
    signum: int
    pid_type: int
    pid: int
    def __init__(self, uid: _Optional[int] = ..., euid: _Optional[int] = ..., signum: _Optional[int] = ..., pid_type: _Optional[int] = ..., pid: _Optional[int] = ...) -> None: ...

class timeval(_message.Message):
    __slots__ = ("tv_sec", "tv_usec")
    TV_SEC_FIELD_NUMBER: _ClassVar[int]
    TV_USEC_FIELD_NUMBER: _ClassVar[int]
    tv_sec: int
    tv_usec: int
    def __init__(self, tv_sec: _Optional[int] = ..., tv_usec: _Optional[int] = ...) -> None: ...
