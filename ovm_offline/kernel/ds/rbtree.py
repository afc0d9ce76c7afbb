"""Red-black trees (``struct rb_root``, ``struct rb_node``), walked in order with bounds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError

__all__ = ["rb_inorder"]


if TYPE_CHECKING:
    from ..core.memory import Program


def rb_inorder(prog: Program, root: int, *, name: str, limit: int) -> Iterator[int]:
    """Addresses of the ``struct rb_node``s of the tree whose root node is at `root` (0 for
    an empty tree), in order (rb_first, rb_next, ...). At most `limit` nodes and a depth a
    red-black tree of that many nodes can have; a node met twice, an unreadable node or a
    deeper tree is one GuestDataError naming the tree."""
    node_type = prog.struct_type("rb_node")
    left_off = node_type.member("rb_left").offset
    right_off = node_type.member("rb_right").offset
    max_depth = 2 * (limit + 1).bit_length()  # a red-black tree of n nodes is at most 2*log2(n+1) deep
    seen: set[int] = set()
    stack: list[tuple[int, int]] = []  # (node, its right child) of the nodes whose left subtree is being walked

    def children(node: int) -> tuple[int, int]:
        try:
            raw = prog.read(node, node_type.size)
        except GuestDataError:
            raise GuestDataError(f"{name}: node 0x{node:x} is unreadable after {len(seen) - 1} nodes") from None
        return (
            int.from_bytes(raw[left_off : left_off + 8], "little"),
            int.from_bytes(raw[right_off : right_off + 8], "little"),
        )

    def descend_left(node: int) -> None:
        while node:
            if node in seen:
                raise GuestDataError(f"{name} loops: node 0x{node:x} met twice after {len(seen)} nodes")
            if len(seen) >= limit:
                raise GuestDataError(f"{name} has more than {limit} nodes: corrupt or looping")
            if len(stack) >= max_depth:
                raise GuestDataError(f"{name} is deeper than {max_depth} levels: not a red-black tree")
            seen.add(node)
            left, right = children(node)
            stack.append((node, right))
            node = left

    descend_left(root)
    while stack:
        node, right = stack.pop()
        yield node
        descend_left(right)
