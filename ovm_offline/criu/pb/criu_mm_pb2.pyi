from . import criu_display_pb2 as _criu_display_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class vma_entry(_message.Message):
    __slots__ = ("start", "end", "pgoff", "shmid", "prot", "flags", "status", "fd", "madv", "fdflags")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PGOFF_FIELD_NUMBER: _ClassVar[int]
    SHMID_FIELD_NUMBER: _ClassVar[int]
    PROT_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FD_FIELD_NUMBER: _ClassVar[int]
    MADV_FIELD_NUMBER: _ClassVar[int]
    FDFLAGS_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    pgoff: int
    shmid: int
    prot: int
    flags: int
    status: int
    fd: int
    madv: int
    fdflags: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ..., pgoff: _Optional[int] = ..., shmid: _Optional[int] = ..., prot: _Optional[int] = ..., flags: _Optional[int] = ..., status: _Optional[int] = ..., fd: _Optional[int] = ..., madv: _Optional[int] = ..., fdflags: _Optional[int] = ...) -> None: ...

class aio_ring_entry(_message.Message):
    __slots__ = ("id", "nr_req", "ring_len")
    ID_FIELD_NUMBER: _ClassVar[int]
    NR_REQ_FIELD_NUMBER: _ClassVar[int]
    RING_LEN_FIELD_NUMBER: _ClassVar[int]
    id: int
    nr_req: int
    ring_len: int
    def __init__(self, id: _Optional[int] = ..., nr_req: _Optional[int] = ..., ring_len: _Optional[int] = ...) -> None: ...

class mm_entry(_message.Message):
    __slots__ = ("mm_start_code", "mm_end_code", "mm_start_data", "mm_end_data", "mm_start_stack", "mm_start_brk", "mm_brk", "mm_arg_start", "mm_arg_end", "mm_env_start", "mm_env_end", "exe_file_id", "mm_saved_auxv", "vmas", "dumpable", "aios", "thp_disabled")
    MM_START_CODE_FIELD_NUMBER: _ClassVar[int]
    MM_END_CODE_FIELD_NUMBER: _ClassVar[int]
    MM_START_DATA_FIELD_NUMBER: _ClassVar[int]
    MM_END_DATA_FIELD_NUMBER: _ClassVar[int]
    MM_START_STACK_FIELD_NUMBER: _ClassVar[int]
    MM_START_BRK_FIELD_NUMBER: _ClassVar[int]
    MM_BRK_FIELD_NUMBER: _ClassVar[int]
    MM_ARG_START_FIELD_NUMBER: _ClassVar[int]
    MM_ARG_END_FIELD_NUMBER: _ClassVar[int]
    MM_ENV_START_FIELD_NUMBER: _ClassVar[int]
    MM_ENV_END_FIELD_NUMBER: _ClassVar[int]
    EXE_FILE_ID_FIELD_NUMBER: _ClassVar[int]
    MM_SAVED_AUXV_FIELD_NUMBER: _ClassVar[int]
    VMAS_FIELD_NUMBER: _ClassVar[int]
    DUMPABLE_FIELD_NUMBER: _ClassVar[int]
    AIOS_FIELD_NUMBER: _ClassVar[int]
    THP_DISABLED_FIELD_NUMBER: _ClassVar[int]
    mm_start_code: int
    mm_end_code: int
    mm_start_data: int
    mm_end_data: int
    mm_start_stack: int
    mm_start_brk: int
    mm_brk: int
    mm_arg_start: int
    mm_arg_end: int
    mm_env_start: int
    mm_env_end: int
    exe_file_id: int
    mm_saved_auxv: _containers.RepeatedScalarFieldContainer[int]
    vmas: _containers.RepeatedCompositeFieldContainer[vma_entry]
    dumpable: int
    aios: _containers.RepeatedCompositeFieldContainer[aio_ring_entry]
    thp_disabled: bool
    def __init__(self, mm_start_code: _Optional[int] = ..., mm_end_code: _Optional[int] = ..., mm_start_data: _Optional[int] = ..., mm_end_data: _Optional[int] = ..., mm_start_stack: _Optional[int] = ..., mm_start_brk: _Optional[int] = ..., mm_brk: _Optional[int] = ..., mm_arg_start: _Optional[int] = ..., mm_arg_end: _Optional[int] = ..., mm_env_start: _Optional[int] = ..., mm_env_end: _Optional[int] = ..., exe_file_id: _Optional[int] = ..., mm_saved_auxv: _Optional[_Iterable[int]] = ..., vmas: _Optional[_Iterable[_Union[vma_entry, _Mapping]]] = ..., dumpable: _Optional[int] = ..., aios: _Optional[_Iterable[_Union[aio_ring_entry, _Mapping]]] = ..., thp_disabled: _Optional[bool] = ...) -> None: ...

class pagemap_head(_message.Message):
    __slots__ = ("pages_id",)
    PAGES_ID_FIELD_NUMBER: _ClassVar[int]
    pages_id: int
    def __init__(self, pages_id: _Optional[int] = ...) -> None: ...

class pagemap_entry(_message.Message):
    __slots__ = ("vaddr", "nr_pages", "in_parent", "flags", "nr_pages_64")
    VADDR_FIELD_NUMBER: _ClassVar[int]
    NR_PAGES_FIELD_NUMBER: _ClassVar[int]
    IN_PARENT_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    NR_PAGES_64_FIELD_NUMBER: _ClassVar[int]
    vaddr: int
    nr_pages: int
    in_parent: bool
    flags: int
    nr_pages_64: int
    def __init__(self, vaddr: _Optional[int] = ..., nr_pages: _Optional[int] = ..., in_parent: _Optional[bool] = ..., flags: _Optional[int] = ..., nr_pages_64: _Optional[int] = ...) -> None: ...
