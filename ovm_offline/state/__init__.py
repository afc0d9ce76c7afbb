"""Plain dataclasses that carry extracted state from the kernel side to the CRIU side.

The kernel side (ovm_offline.extract, over ovm_offline.kernel) fills them from guest memory;
the CRIU side (ovm_offline.criu) turns them into image messages. Neither side imports the
other. Values are as the guest's kernel holds them unless a field says otherwise; PIDs are
as seen inside the dumped tree's PID namespace unless named `global_*`.
"""

from __future__ import annotations

from .cpu import REGISTER_NAMES, FpuState, Registers, TlsEntry
from .files import OFFSET_MAX, Fd, FileKindName, FileLock, FileLockKind, FileState, FsState, OpenFile, Owner
from .mm import FileIdentity, GhostFile, MmState, PageRun, SharedMemory, UserWrite, Vma, VmaKind
from .ns import (
    CgroupDir,
    CgroupNamespaceState,
    CgroupPerms,
    CgroupProperty,
    IpcNamespaceState,
    IpcShmSegment,
    MountInfo,
    MountNamespaceState,
    NamespaceIds,
    NetNamespaceState,
    TmpfsContents,
    TmpfsFile,
    TreeNamespaces,
    UserNamespaceState,
    UtsNamespaceState,
)
from .process import ProcessState, TaskStateName
from .task import Credentials, Itimer, PosixTimer, QueuedSignal, Rseq, SeccompFilter, SigAction, ThreadState

__all__ = [
    "OFFSET_MAX",
    "CgroupNamespaceState",
    "MountInfo",
    "MountNamespaceState",
    "NetNamespaceState",
    "TmpfsContents",
    "TmpfsFile",
    "UserNamespaceState",
    "UserWrite",
    "TaskStateName",
    "VmaKind",
    "CgroupDir",
    "CgroupPerms",
    "CgroupProperty",
    "Credentials",
    "Fd",
    "FileIdentity",
    "GhostFile",
    "FileKindName",
    "FileLock",
    "FileLockKind",
    "FileState",
    "FpuState",
    "FsState",
    "IpcNamespaceState",
    "IpcShmSegment",
    "Itimer",
    "MmState",
    "NamespaceIds",
    "TreeNamespaces",
    "UtsNamespaceState",
    "OpenFile",
    "Owner",
    "PageRun",
    "PosixTimer",
    "ProcessState",
    "QueuedSignal",
    "REGISTER_NAMES",
    "Registers",
    "Rseq",
    "SharedMemory",
    "SeccompFilter",
    "SigAction",
    "ThreadState",
    "TlsEntry",
    "Vma",
]
