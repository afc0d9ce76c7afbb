"""Render CRIU images readably, like `crit show`, one section per image file.

    python -m ovm_offline.criu.show DIR [NAME ...]

Integers marked as addresses or masks in the .proto files print as hex, flag words as
``A | B`` (as crit does), raw data (pages-N.img, ip dumps) as size, page count and sha256.
`message_to_dict` is also the converter the tests use to compare with `crit decode`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import ipaddress
import json
import quopri
import socket
import sys
from collections.abc import Callable
from typing import Any, Literal

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ovm_offline.errors import OvmError
from ovm_offline.terminal import escaped_unprintable

from . import images
from .pb import criu_display_pb2

__all__ = ["show_dir"]


Style = Literal["plain", "crit", "pretty"]

# Bit tables for fields marked (ovm).flags; names as crit prints them.
FLAG_TABLES: dict[str, tuple[tuple[str, int], ...]] = {
    "mmap.prot": (("PROT_READ", 0x1), ("PROT_WRITE", 0x2), ("PROT_EXEC", 0x4)),
    "mmap.flags": (("MAP_SHARED", 0x1), ("MAP_PRIVATE", 0x2), ("MAP_ANON", 0x20), ("MAP_GROWSDOWN", 0x100)),
    "mmap.status": (
        ("VMA_AREA_REGULAR", 1 << 0), ("VMA_AREA_STACK", 1 << 1), ("VMA_AREA_VSYSCALL", 1 << 2),
        ("VMA_AREA_VDSO", 1 << 3), ("VMA_AREA_HEAP", 1 << 5), ("VMA_FILE_PRIVATE", 1 << 6),
        ("VMA_FILE_SHARED", 1 << 7), ("VMA_ANON_SHARED", 1 << 8), ("VMA_ANON_PRIVATE", 1 << 9),
        ("VMA_AREA_SYSVIPC", 1 << 10), ("VMA_AREA_SOCKET", 1 << 11), ("VMA_AREA_VVAR", 1 << 12),
        ("VMA_AREA_AIORING", 1 << 13), ("VMA_UNSUPP", 1 << 31),
    ),
    "rfile.flags": (
        ("O_WRONLY", 0o1), ("O_RDWR", 0o2), ("O_CREAT", 0o100), ("O_EXCL", 0o200), ("O_NOCTTY", 0o400),
        ("O_TRUNC", 0o1000), ("O_APPEND", 0o2000), ("O_NONBLOCK", 0o4000), ("O_DSYNC", 0o10000),
        ("FASYNC", 0o20000), ("O_DIRECT", 0o40000), ("O_LARGEFILE", 0o100000), ("O_DIRECTORY", 0o200000),
        ("O_NOFOLLOW", 0o400000), ("O_NOATIME", 0o1000000), ("O_CLOEXEC", 0o2000000),
    ),
    "pmap.flags": (("PE_PARENT", 1), ("PE_LAZY", 2), ("PE_PRESENT", 4)),
    "seals.flags": (
        ("F_SEAL_SEAL", 0x1), ("F_SEAL_SHRINK", 0x2), ("F_SEAL_GROW", 0x4), ("F_SEAL_WRITE", 0x8),
        ("F_SEAL_FUTURE_WRITE", 0x10),
    ),
}  # fmt: skip

# Value tables for fields marked (ovm).names. task_state follows CRIU's compel constants;
# crit 3.17 prints 3 as "Zombie" and 6 as "Stopped", which is backwards.
NAME_TABLES: dict[str, dict[int, str]] = {
    "task_state": {1: "Alive", 2: "Dead", 3: "Stopped", 4: "Helper", 5: "Thread", 6: "Zombie"},
    "sk.family": {1: "UNIX", 2: "INET", 10: "INET6", 16: "NETLINK", 17: "PACKET"},
    "sk.type": {1: "STREAM", 2: "DGRAM", 3: "RAW", 5: "SEQPACKET", 10: "PACKET"},
    "sk.state": {
        1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
        7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
    },
    "sk.proto": {0: "IP", 6: "TCP", 17: "UDP", 136: "UDPLITE"},
}  # fmt: skip

BYTES_INLINE = 256  # longer byte strings are summarised in the pretty style

# Called for each integer field in pretty/plain style; a non-None result replaces the value.
# diff uses it to swap arbitrary ids for structural keys.
Substitute = Callable[[Message, FieldDescriptor, int], Any]


def display(field: FieldDescriptor) -> criu_display_pb2.ovm_display:
    extension: Any = criu_display_pb2.ovm  # a generated extension: its stub type is looser than the runtime's
    result: criu_display_pb2.ovm_display = field.GetOptions().Extensions[extension]
    return result


def map_flags(value: int, table: tuple[tuple[str, int], ...]) -> str:
    names = [n for n, bit in table if value & bit]
    rest = value & ~sum(bit for _, bit in table)
    if rest:
        names.append(f"0x{rest:x}")
    return " | ".join(names) if names else "0"


def _dev(value: int, old: bool) -> str:
    if old:  # glibc's major()/minor() of a user-space dev_t
        major = ((value >> 8) & 0xFFF) | ((value >> 32) & ~0xFFF)
        minor = (value & 0xFF) | ((value >> 12) & ~0xFF)
    else:  # the kernel's internal MINORBITS = 20
        major, minor = value >> 20, value & ((1 << 20) - 1)
    return f"{major}:{minor}"


def _ipaddr(words: list[int]) -> str:
    if len(words) == 1:
        return str(ipaddress.IPv4Address(socket.ntohl(words[0])))
    v = 0
    for w in words[:4]:
        v = (v << 32) | socket.ntohl(w)
    return ipaddress.IPv6Address(v).compressed


def render_bytes(b: bytes) -> str:
    if len(b) <= BYTES_INLINE:
        return b.hex()
    return f"<{len(b)} bytes sha256:{hashlib.sha256(b).hexdigest()[:16]}>"


def _scalar(field: FieldDescriptor, value: Any, style: Style, hexed: bool) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        ev = field.enum_type.values_by_number.get(value)
        return ev.name if ev is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        if style in ("crit", "pretty") and display(field).unix_name:
            # crit shows UNIX socket names quoted-printable: readable paths, "=00" for a NUL
            return quopri.encodestring(value).decode()
        if style == "crit":
            return base64.encodebytes(value).decode()
        if style == "pretty":
            return render_bytes(value)
        return bytes(value)
    if field.type == FieldDescriptor.TYPE_STRING and isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")  # proto2 strings are not checked for UTF-8
    if style != "pretty" or isinstance(value, (bool, str, float)):
        return value
    opts = display(field)
    if hexed or opts.hex:
        return f"0x{value:x}"
    if opts.dev:
        return _dev(value, opts.old_dev)
    if opts.flags:
        return map_flags(value, FLAG_TABLES[opts.flags])
    if opts.names:
        return NAME_TABLES[opts.names].get(value, value)
    return value


def message_to_dict(
    msg: Message, style: Style = "plain", *, substitute: Substitute | None = None, _hexed: bool = False
) -> dict[str, Any]:
    """The set fields of msg, in field-number order.

    plain: Python values (ints, bools, str, bytes; enums by name).
    crit: exactly what `crit decode` (without --pretty) prints: bytes as base64 lines.
    pretty: for people: hex, flag names, dev_t as major:minor, IP addresses, short bytes in hex.
    """
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        hexed = _hexed or (style == "pretty" and display(field).hex)
        if field.is_repeated:
            if style == "pretty" and display(field).ipaddr and value:
                out[field.name] = [_ipaddr(list(value))]
            else:
                out[field.name] = [_convert(msg, field, v, style, substitute, hexed) for v in value]
        else:
            out[field.name] = _convert(msg, field, value, style, substitute, hexed)
    return out


def _convert(
    msg: Message, field: FieldDescriptor, v: Any, style: Style, substitute: Substitute | None, hexed: bool
) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_to_dict(v, style, substitute=substitute, _hexed=hexed)
    if substitute is not None and isinstance(v, int) and not isinstance(v, bool):
        s = substitute(msg, field, v)
        if s is not None:
            return s
    return _scalar(field, v, style, hexed)


def _render_payload(data: bytes, style: Style) -> Any:
    if style == "crit":
        return base64.encodebytes(data).decode()
    if style == "pretty":
        return render_bytes(data)
    return data


def raw_summary(kind: images.ImageKind, size: int, sha256: str) -> dict[str, Any]:
    """What `show` says of a raw image (pages-N.img): its size and digest, not its bytes."""
    summary: dict[str, Any] = {"size": size, "sha256": sha256}
    if kind is images.PAGES:
        summary["pages"] = size // images.PAGE_SIZE
    return {"kind": kind.name, "raw": summary}


def image_to_dict(img: images.Image, style: Style = "pretty") -> dict[str, Any]:
    """One image as a dict. crit style matches `crit decode` output (magic, entries, extra)."""
    kind = img.kind
    if kind.raw:
        data = img.payloads[0] if img.payloads else b""
        return raw_summary(kind, len(data), hashlib.sha256(data).hexdigest())
    entries = []
    for idx, (msg, payload) in enumerate(zip(img.entries, img.payloads)):
        d = message_to_dict(msg, style)
        if idx == 0 and kind.head is not None and kind.head_data_to_end(msg):  # a ghost file's contents
            d["extra"] = _render_payload(payload, style)
        elif kind.payload_fields and msg.DESCRIPTOR is kind.message.DESCRIPTOR:  # type: ignore[union-attr]
            if len(kind.payload_fields) == 1:
                d["extra"] = _render_payload(payload, style)
            else:  # as crit shows tcp-stream: {"inq": ..., "outq": ...}
                parts, at = {}, 0
                for name in kind.payload_fields:
                    size = getattr(msg, name)
                    parts[name.removesuffix("_len")] = _render_payload(payload[at : at + size], style)
                    at += size
                d["extra"] = parts
        entries.append(d)
    if style == "crit":
        return {"magic": kind.crit_name, "entries": entries}
    return {"kind": kind.name, "magic": kind.crit_name, "entries": entries}


# ---- text rendering --------------------------------------------------------------


def render(obj: Any, indent: int = 0, width: int = 100) -> str:
    """JSON-like text: containers that fit on a line stay on one line, lists of scalars wrap."""
    one = _dumps(obj)
    if len(one) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return one
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(obj, dict):
        items = [f"{inner}{_dumps(k)}: {render(v, indent + 2, width)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if all(not isinstance(v, (dict, list)) for v in obj):
        parts = [_dumps(v) for v in obj]
        lines, cur = [], ""
        for p in parts:
            if cur and len(inner) + len(cur) + len(p) + 2 > width:
                lines.append(cur + ",")
                cur = p
            else:
                cur = f"{cur}, {p}" if cur else p
        lines.append(cur)
        return "[\n" + "\n".join(inner + ln for ln in lines) + "\n" + pad + "]"
    return "[\n" + ",\n".join(inner + render(v, indent + 2, width) for v in obj) + "\n" + pad + "]"


def _dumps(value: Any) -> str:
    """JSON of a value that may hold guest text: readable non-ASCII, and nothing a terminal
    would act on or that reorders the line (C1 controls, bidi overrides) written raw."""
    return escaped_unprintable(json.dumps(value, ensure_ascii=False, default=str))


def show_dir(path: str, names: list[str] | None = None) -> str:
    """The text of `show` for a directory (or the named files in it)."""
    idir = images.ImageDir(path)
    sections = []
    for name in names or idir.names():
        kind = images.kind_for_filename(name)
        if kind is not None and kind.raw:
            shown = raw_summary(kind, *idir.raw_digest(name))
        else:
            shown = image_to_dict(idir.load(name), "pretty")
        sections.append(f"== {name}\n{render(shown)}")
    return "\n\n".join(sections) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ovm_offline.criu.show", description="Show CRIU images readably.")
    ap.add_argument("dir", help="image directory")
    ap.add_argument("names", nargs="*", help="only these image files")
    args = ap.parse_args(argv)
    try:
        sys.stdout.write(show_dir(args.dir, args.names))
    except OvmError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
