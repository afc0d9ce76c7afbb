"""Sequence counters (include/linux/seqlock.h): a writer makes the count odd while it
writes, so a reader that finds it odd would read a half-written object. A snapshot cannot
retry the read as the kernel's readers do; it can only say so."""

from __future__ import annotations

from ..core.objects import Struct

__all__ = ["seqcount_sequence", "seqcount_write_in_progress"]


def seqcount_sequence(seq: Struct) -> int:
    """The count of a ``seqcount_t`` or of a ``seqcount_LOCKNAME_t`` wrapping one (5.9+: its
    ``seqcount`` member, beside a ``lock`` pointer on lockdep and PREEMPT_RT builds)."""
    while seq.has_member_("seqcount"):
        seq = seq.seqcount
    count: int = seq.sequence
    return count


def seqcount_write_in_progress(seq: Struct) -> bool:
    """Is a writer inside its write section of this sequence counter (the count is odd)?"""
    return bool(seqcount_sequence(seq) & 1)
