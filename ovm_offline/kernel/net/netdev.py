"""Network devices: the ``struct net_device``s of a network namespace (``net->dev_base_head``,
linked by ``dev_list``), looked up by ifindex as dev_get_by_index does."""

from __future__ import annotations

from ..core.objects import Pointer
from ..ds.list import list_for_each_entry

__all__ = ["net_device_name"]

#: more devices than one namespace holds in practice; a longer list is corrupt or looping
MAX_NET_DEVICES = 1 << 16


def net_device_name(net: Pointer, ifindex: int) -> str | None:
    """The name (IFNAMSIZ) of the device with index `ifindex` in ``struct net *`` `net`, as
    SO_BINDTODEVICE's getsockopt gives it, or None when the namespace has none."""
    prog = net.prog_
    head = net.deref().member_address_("dev_base_head")
    name = f"devices of net namespace 0x{int(net):x}"
    for dev in list_for_each_entry(prog, "net_device", head, "dev_list", name=name, limit=MAX_NET_DEVICES):
        if int(dev.ifindex) == ifindex:
            return str(dev.name.string_(16).decode("utf-8", "surrogateescape"))
    return None
