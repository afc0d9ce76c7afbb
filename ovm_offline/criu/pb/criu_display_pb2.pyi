from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor
OVM_FIELD_NUMBER: _ClassVar[int]
ovm: _descriptor.FieldDescriptor

class ovm_display(_message.Message):
    __slots__ = ("hex", "flags", "names", "dev", "old_dev", "ipaddr", "unix_name")
    HEX_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    DEV_FIELD_NUMBER: _ClassVar[int]
    OLD_DEV_FIELD_NUMBER: _ClassVar[int]
    IPADDR_FIELD_NUMBER: _ClassVar[int]
    UNIX_NAME_FIELD_NUMBER: _ClassVar[int]
    hex: bool
    flags: str
    names: str
    dev: bool
    old_dev: bool
    ipaddr: bool
    unix_name: bool
    def __init__(self, hex: _Optional[bool] = ..., flags: _Optional[str] = ..., names: _Optional[str] = ..., dev: _Optional[bool] = ..., old_dev: _Optional[bool] = ..., ipaddr: _Optional[bool] = ..., unix_name: _Optional[bool] = ...) -> None: ...
