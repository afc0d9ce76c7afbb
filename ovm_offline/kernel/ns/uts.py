"""UTS namespaces (kernel/utsname.c): ``struct uts_namespace`` holds the ``struct new_utsname``
uname(2) reports; sethostname and setdomainname write its nodename and domainname."""

from __future__ import annotations

from ..core.objects import Pointer, Struct
from .nsproxy import task_nsproxy

__all__ = ["task_uts_ns", "uts_domainname", "uts_nodename"]


def task_uts_ns(task: Struct) -> Pointer | None:
    """The ``struct uts_namespace *`` of a ``struct task_struct`` (nsproxy->uts_ns), None for
    an exiting task without nsproxy."""
    nsp = task_nsproxy(task)
    ns = nsp.uts_ns if nsp is not None else None
    return ns if ns else None


def uts_nodename(ns: Pointer | Struct) -> bytes:
    """The host name of a ``struct uts_namespace`` (up to 64 bytes, as uname(2) gives it)."""
    return ns.name.nodename.string_()


def uts_domainname(ns: Pointer | Struct) -> bytes:
    """The NIS domain name of a ``struct uts_namespace`` (up to 64 bytes)."""
    return ns.name.domainname.string_()
