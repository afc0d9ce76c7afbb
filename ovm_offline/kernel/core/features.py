"""What the dumped kernel can do that criu asks its own kernel about (criu's kdat probes), as
the ISF shows it. criu writes an image field only where its kernel has the feature, and
`criu restore` sets every field it finds: a field the kernel lacks fails the restore
("Can't set 1:72: Protocol not available" for SO_BUF_LOCK on 5.10). One row per feature,
each with what in the ISF shows it: a type or member that came with the feature, or, where
the feature added none, one that came in the same release (said so in the row)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .symbols import SymbolTable

__all__ = ["FEATURES", "kernel_has"]


@dataclasses.dataclass(frozen=True)
class KernelFeature:
    kdat: str  # criu's kerndat field
    evidence: str
    present: Callable[[SymbolTable], bool]


def _has_member(struct: str, member: str) -> Callable[[SymbolTable], bool]:
    def present(symbols: SymbolTable) -> bool:
        return symbols.has_type(struct) and symbols.struct_type(struct).has_member(member)

    return present


FEATURES = {
    f.kdat: f
    for f in (
        KernelFeature(
            "has_ptrace_get_rseq_conf",
            "struct ptrace_rseq_configuration, the reply of PTRACE_GET_RSEQ_CONFIGURATION (5.13)",
            lambda symbols: symbols.has_type("ptrace_rseq_configuration"),
        ),
        KernelFeature(
            "has_sockopt_buf_lock",
            "sock.sk_bind_phc: SO_BUF_LOCK (5.14) added no type or member; SOF_TIMESTAMPING_BIND_PHC's came in the same release",
            _has_member("sock", "sk_bind_phc"),
        ),
    )
}


def kernel_has(symbols: SymbolTable, kdat: str) -> bool:
    return FEATURES[kdat].present(symbols)
