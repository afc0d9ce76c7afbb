"""Kernel linked lists (``struct list_head``, ``struct hlist_head``), walked with bounds.

A guest list can loop (corruption, a hostile guest, or a live guest changing it
under us); every walk stops with GuestDataError, one line naming the list, on a
repeated node, a NULL or unreadable pointer, or more than `limit` entries.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ..core.ktypes import Type
from ..core.objects import Object, Pointer, Struct

__all__ = [
    "DEFAULT_LIMIT",
    "hlist_for_each",
    "hlist_for_each_entry",
    "list_count",
    "list_empty",
    "list_for_each",
    "list_for_each_entry",
    "list_for_each_reverse",
    "pointer_chain",
]


if TYPE_CHECKING:
    from ..core.memory import Program

#: More entries than any real kernel list holds (PID_MAX_LIMIT is 4M tasks).
DEFAULT_LIMIT = 1 << 22


def _address(head: int | Object) -> int:
    if isinstance(head, Pointer):
        return int(head)
    if isinstance(head, Object):
        return head.address_
    return int(head)


def _link(prog: Program, node: int, name: str, count: int, offset: int = 0) -> int:
    """The ``next`` (at offset 0, in list_head and hlist_node alike) or ``prev`` (offset 8) of
    `node`."""
    try:
        return prog.read_u64(node + offset)
    except GuestDataError:
        way = " backwards" if offset else ""
        raise GuestDataError(f"list {name}: unreadable node 0x{node:x} after {count} entries{way}") from None


def _next(prog: Program, node: int, name: str, count: int) -> int:
    return _link(prog, node, name, count)


def _walk(prog: Program, head_addr: int, name: str, limit: int, offset: int) -> Generator[int, None, int]:
    """The nodes of the circular list at `head_addr` by the link at `offset` (0: next, 8: prev);
    returns the last node (the head for an empty list)."""
    way, link = (" backwards", "prev") if offset else ("", "next")
    seen: set[int] = set()
    node = _link(prog, head_addr, name, 0, offset)
    count, last = 0, head_addr
    while node != head_addr:
        if not node:
            raise GuestDataError(f"list {name} is broken: NULL {link} pointer after {count} entries")
        if node in seen:
            raise GuestDataError(f"list {name} loops{way}: node 0x{node:x} seen twice after {count} entries")
        if count >= limit:
            raise GuestDataError(f"list {name} has more than {limit} entries: corrupt or looping")
        seen.add(node)
        count += 1
        following = _link(prog, node, name, count, offset)
        yield node
        node, last = following, node
    return last


def list_for_each(
    prog: Program,
    head: int | Object,
    *,
    name: str | None = None,
    limit: int = DEFAULT_LIMIT,
    check_prev: bool = False,
) -> Iterator[int]:
    """Addresses of the ``struct list_head`` nodes of the list at `head` (head excluded).
    `check_prev`: once the walk is back at the head, the head's ``prev`` must be the last node
    (the head itself if the list is empty), so that a ``next`` cut short to the head is
    GuestDataError, not a shorter list; for lists with no other check of their length (a
    list changing under a running CPU of a live snapshot fails it too)."""
    head_addr = _address(head)
    name = name or f"at 0x{head_addr:x}"
    count = 0
    walk = _walk(prog, head_addr, name, limit, 0)
    while True:
        try:
            node = next(walk)
        except StopIteration as done:
            last = done.value
            break
        count += 1
        yield node
    if check_prev and (prev := prog.read_u64(head_addr + 8)) != last:
        raise GuestDataError(
            f"list {name} does not close: it ends after {count} entries at 0x{last:x},"
            f" but its head's prev is 0x{prev:x}"
        )


def list_for_each_reverse(
    prog: Program, head: int | Object, *, name: str | None = None, limit: int = DEFAULT_LIMIT
) -> Iterator[int]:
    """Addresses of the ``struct list_head`` nodes of the list at `head` by their ``prev``
    links, last first (the kernel's list_for_each_prev): the view of a list a hostile guest
    that rewrote only ``next`` links did not change. Bounded as list_for_each."""
    head_addr = _address(head)
    yield from _walk(prog, head_addr, name or f"at 0x{head_addr:x}", limit, 8)


def list_for_each_entry(
    prog: Program,
    type: str | Type,
    head: int | Object,
    member: str,
    *,
    name: str | None = None,
    limit: int = DEFAULT_LIMIT,
    check_prev: bool = False,
) -> Iterator[Struct]:
    """The `type` objects linked through their `member` list_head into the list at `head`
    (the kernel's list_for_each_entry; `check_prev` as for list_for_each)."""
    off = prog.member_offset(type, member)
    t = prog.struct_type(type)
    if name is None:
        name = f"{t.name}.{member} at 0x{_address(head):x}"
    for node in list_for_each(prog, head, name=name, limit=limit, check_prev=check_prev):
        yield Struct(prog, t, node - off)


def list_empty(prog: Program, head: int | Object) -> bool:
    """Is the list at `head` empty (head.next == head)?"""
    a = _address(head)
    return prog.read_u64(a) == a


def list_count(prog: Program, head: int | Object, *, name: str | None = None, limit: int = DEFAULT_LIMIT) -> int:
    return sum(1 for _ in list_for_each(prog, head, name=name, limit=limit))


def hlist_for_each(
    prog: Program, head: int | Object, *, name: str | None = None, limit: int = DEFAULT_LIMIT
) -> Iterator[int]:
    """Addresses of the ``struct hlist_node`` nodes of the hlist at `head` (NULL-terminated)."""
    head_addr = _address(head)
    name = name or f"hlist at 0x{head_addr:x}"
    seen: set[int] = set()
    node = _next(prog, head_addr, name, 0)  # hlist_head.first
    count = 0
    while node:
        if node in seen:
            raise GuestDataError(f"list {name} loops: node 0x{node:x} seen twice after {count} entries")
        if count >= limit:
            raise GuestDataError(f"list {name} has more than {limit} entries: corrupt or looping")
        seen.add(node)
        count += 1
        nxt = _next(prog, node, name, count)
        yield node
        node = nxt


def hlist_for_each_entry(
    prog: Program,
    type: str | Type,
    head: int | Object,
    member: str,
    *,
    name: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Iterator[Struct]:
    """The `type` objects linked through their `member` hlist_node into the hlist at `head`."""
    off = prog.member_offset(type, member)
    t = prog.struct_type(type)
    if name is None:
        name = f"{t.name}.{member} at 0x{_address(head):x}"
    for node in hlist_for_each(prog, head, name=name, limit=limit):
        yield Struct(prog, t, node - off)


def pointer_chain(first: Pointer, next_member: str, *, name: str, limit: int) -> Iterator[Struct]:
    """The structs of a NULL-terminated chain that each point to the next through their pointer
    member `next_member` (a seccomp filter's ``prev``, a tty buffer's ``next``), from `first`;
    GuestDataError naming the chain `name` when it loops or runs past `limit` links."""
    seen: set[int] = set()
    ptr = first
    while ptr:
        addr = int(ptr)
        if addr in seen:
            raise GuestDataError(f"{name} loops at 0x{addr:x} after {len(seen)} links")
        if len(seen) >= limit:
            raise GuestDataError(f"{name} has more than {limit} links: corrupt or looping")
        seen.add(addr)
        obj: Struct = ptr.deref()
        yield obj
        ptr = obj.member_(next_member)
