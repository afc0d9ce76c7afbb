"""Open files of a task (``struct files_struct``, ``struct fdtable``, ``struct file``).

``task->files->fdt`` is the current ``struct fdtable``: ``fd[0..max_fds)`` are the
``struct file *`` slots, ``open_fds`` and ``close_on_exec`` are bitmaps of ``max_fds``
bits. A small table is embedded in the files_struct (``fdtab``, 64 slots in
``fd_array``); bigger ones are allocated with ``max_fds`` a multiple of BITS_PER_LONG
and at most ``sysctl_nr_open`` rounded up to one (fs/file.c alloc_fdtable).

What marks a file's kind: its ``f_op`` (the kernel's own file_operations tables, compared
by symbol address: `file_fops_name`), its inode's type bits, pipefs, its socket's family
and the internal mount it is on; ovm_offline.filekinds composes them.

Every walk is bounded by `max_fds_limit`; a table that is too big, misaligned or
unreadable is a GuestDataError (one line).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...errors import GuestDataError
from ..core.invariants import broken
from ..core.objects import Pointer, Struct

__all__ = [
    "O_CLOEXEC",
    "O_DIRECT",
    "PIPEFS_MAGIC",
    "S_IFCHR",
    "S_IFIFO",
    "S_IFMT",
    "S_IFREG",
    "cloexec_fds",
    "fd_is_cloexec",
    "task_fd_file",
    "file_flags",
    "file_fops_name",
    "file_inode_ptr",
    "file_on_internal_mount",
    "file_owner",
    "file_pos",
    "files_fdtable",
    "for_each_file",
    "inode_is_on_pipefs",
    "max_fds_limit",
    "socket_family",
    "task_files",
]


if TYPE_CHECKING:
    from ..core.memory import Program

BITS_PER_LONG = 64
#: include/uapi/linux/fs.h: NR_OPEN, the default fs.nr_open (1024 * 1024).
NR_OPEN_DEFAULT = 1 << 20
#: An absolute bound whatever sysctl_nr_open says (its own maximum is ~2^31): more slots
#: than any real process has; the bitmap scan reads max_fds / 8 bytes.
MAX_FDS_HARD = 1 << 27
#: How many ``struct file *`` slots one bulk read takes.
_FD_CHUNK = 4096

# include/uapi/asm-generic/fcntl.h
O_ACCMODE = 0o3
O_RDONLY = 0o0
O_WRONLY = 0o1
O_RDWR = 0o2
O_APPEND = 0o2000
O_NONBLOCK = 0o4000
O_DIRECT = 0o40000
O_CLOEXEC = 0o2000000

# include/uapi/linux/stat.h
S_IFMT = 0o170000
S_IFSOCK = 0o140000
S_IFLNK = 0o120000
S_IFREG = 0o100000
S_IFBLK = 0o060000
S_IFDIR = 0o040000
S_IFCHR = 0o020000
S_IFIFO = 0o010000

#: include/uapi/linux/magic.h
PIPEFS_MAGIC = 0x50495045


def task_files(task: Struct) -> Pointer | None:
    """``task->files`` (``struct files_struct *``) of a ``struct task_struct``; None for a
    task that has none (kernel threads after exit_files, zombies)."""
    files = task.files
    return files if files else None


def files_fdtable(files: Pointer | Struct) -> Struct:
    """The current ``struct fdtable`` of a ``struct files_struct`` (``files->fdt``)."""
    fdt = files.fdt
    if not fdt:
        addr = int(files) if isinstance(files, Pointer) else files.address_
        raise GuestDataError(f"files_struct at 0x{addr:x} has no fdtable")
    return fdt.deref()


def max_fds_limit(prog: Program) -> int:
    """The largest ``fdtable->max_fds`` this kernel can have: ``sysctl_nr_open`` rounded up
    to BITS_PER_LONG (fs/file.c alloc_fdtable), capped at MAX_FDS_HARD."""
    nr_open = NR_OPEN_DEFAULT
    if prog.has_symbol("sysctl_nr_open"):
        try:
            nr_open = prog.read_u32(prog.symbol_address("sysctl_nr_open"))
        except GuestDataError:
            pass
    nr_open = max(nr_open, BITS_PER_LONG)
    return min(((nr_open - 1) | (BITS_PER_LONG - 1)) + 1, MAX_FDS_HARD)


def fdtable_max_fds(fdt: Struct) -> int:
    """``fdt->max_fds`` of a ``struct fdtable``, checked: a positive multiple of
    BITS_PER_LONG no larger than `max_fds_limit`."""
    n = fdt.max_fds
    limit = max_fds_limit(fdt.prog_)
    if n <= 0 or n % BITS_PER_LONG or n > limit:
        raise GuestDataError(
            f"fdtable at 0x{fdt.address_:x} has impossible max_fds {n}"
            f" (a multiple of {BITS_PER_LONG} up to {limit} expected)"
        )
    return n


def _bitmap_address(fdt: Struct, member: str) -> int:
    """Where ``struct fdtable`` member `member` (an ``unsigned long *`` bitmap) points: never
    NULL (invariants.NEVER_NULL), and aligned as the longs it holds are."""
    ptr = int(fdt.member_(member))
    if ptr % 8:
        raise GuestDataError(f"fdtable at 0x{fdt.address_:x}: {member} bitmap at 0x{ptr:x} is misaligned")
    return ptr


def _read_bitmap(fdt: Struct, member: str, nbits: int) -> bytes:
    """The bitmap of `nbits` bits that ``struct fdtable`` member `member` points to (bit n
    of the little-endian longs = fd n: byte n // 8, bit n % 8)."""
    ptr = _bitmap_address(fdt, member)
    try:
        return fdt.prog_.read(ptr, nbits // 8)
    except GuestDataError:
        raise GuestDataError(
            f"fdtable at 0x{fdt.address_:x}: {member} bitmap at 0x{ptr:x} ({nbits} bits) is unreadable"
        ) from None


def _set_bits(bitmap: bytes, chunk: int = 512) -> Iterator[int]:
    """The numbers of the set bits of a bitmap, ascending; all-zero stretches are skipped
    at C speed (a table of a million slots usually has a handful of fds open)."""
    for base in range(0, len(bitmap), chunk):
        part = bitmap[base : base + chunk]
        if not part.strip(b"\0"):
            continue
        v = int.from_bytes(part, "little")
        while v:
            low = v & -v
            yield base * 8 + low.bit_length() - 1
            v ^= low


def for_each_file(files: Pointer | Struct) -> Iterator[tuple[int, Pointer]]:
    """(fd, ``struct file *``) for each open fd of a ``struct files_struct``, ascending.

    The ``fd[]`` array is the truth (as /proc/PID/fd reads it); the open_fds bitmap tells which
    stretches of _FD_CHUNK slots can be skipped unread, so a huge table costs one bitmap read
    and little more. A set bit with no file is an fd an open in progress reserved (alloc_fd()
    before fd_install(): an open of a FIFO sleeps there) and is not open yet; a file whose bit is
    clear breaks the invariant ``fdtable.open_fds`` (only do_dup2() holds that, for a few
    instructions under file_lock, on a CPU: a thread a dump refuses for the moment anyway)."""
    prog = files.prog_
    fdt = files_fdtable(files)
    max_fds = fdtable_max_fds(fdt)
    array = int(fdt.fd)  # never NULL: invariants.NEVER_NULL
    open_fds = _read_bitmap(fdt, "open_fds", max_fds)
    file_type = prog.type("file")
    for start in range(0, max_fds, _FD_CHUNK):
        count = min(_FD_CHUNK, max_fds - start)
        if not open_fds[start // 8 : (start + count) // 8].strip(b"\0"):
            continue
        try:
            raw = prog.read(array + start * 8, count * 8)
        except GuestDataError:
            raise GuestDataError(
                f"fdtable at 0x{fdt.address_:x}: fd array at 0x{array:x} ({max_fds} slots) is unreadable"
            ) from None
        for i in range(count):
            f = int.from_bytes(raw[i * 8 : i * 8 + 8], "little")
            if not f:
                continue  # a bit without a file is an fd reserved by an open (or a close) in progress
            fd = start + i
            if not open_fds[fd // 8] >> (fd % 8) & 1:
                raise broken(
                    "fdtable.open_fds",
                    f"fdtable at 0x{fdt.address_:x}",
                    f"holds a file in fd {fd}, whose open_fds bit is clear",
                )
            yield fd, prog.pointer(file_type, f)


def task_fd_file(task: Struct, fd: int) -> Pointer | None:
    """The ``struct file *`` a ``struct task_struct`` has open as `fd`, or None (fcheck_files)."""
    files = task_files(task)
    if files is None or fd < 0:
        return None
    fdt = files_fdtable(files)
    if fd >= fdtable_max_fds(fdt):
        return None
    prog = task.prog_
    f = prog.read_u64(int(fdt.fd) + 8 * fd)
    return prog.pointer(prog.type("file"), f) if f else None


def fd_is_cloexec(fdt: Struct, fd: int) -> bool:
    """Is close-on-exec set for `fd` in a ``struct fdtable`` (its close_on_exec bitmap)?"""
    if not 0 <= fd < fdtable_max_fds(fdt):
        return False
    ptr = _bitmap_address(fdt, "close_on_exec")
    try:
        word = fdt.prog_.read_u64(ptr + (fd // BITS_PER_LONG) * 8)
    except GuestDataError:
        raise GuestDataError(
            f"fdtable at 0x{fdt.address_:x}: close_on_exec bitmap at 0x{ptr:x} is unreadable"
        ) from None
    return bool(word >> (fd % BITS_PER_LONG) & 1)


def cloexec_fds(fdt: Struct) -> set[int]:
    """The fds whose close-on-exec bit is set in a ``struct fdtable`` (one read of the
    whole close_on_exec bitmap)."""
    return set(_set_bits(_read_bitmap(fdt, "close_on_exec", fdtable_max_fds(fdt))))


# --------------------------------------------------------------------------- struct file


def _file(file: Pointer | Struct) -> Struct:
    if isinstance(file, Pointer):
        if not file:
            raise GuestDataError("NULL struct file")
        return file.deref()
    return file


def file_flags(file: Pointer | Struct) -> int:
    """``f_flags`` (O_* open flags) of a ``struct file``."""
    return _file(file).f_flags


def file_pos(file: Pointer | Struct) -> int:
    """``f_pos`` of a ``struct file`` (the offset lseek(fd, 0, SEEK_CUR) gives)."""
    return _file(file).f_pos


def file_inode_ptr(file: Pointer | Struct) -> Pointer:
    """``f_inode`` (``struct inode *``) of a ``struct file``, never NULL (invariants.NEVER_NULL)."""
    inode: Pointer = _file(file).f_inode
    return inode


def _fops_by_address(prog: Program, names: frozenset[str]) -> dict[int, str]:
    """Run-time address -> name of the file_operations tables `names` that this kernel has
    (computed once per Program and set of names)."""
    per_prog = _FOPS_CACHE.setdefault(prog, {})
    table = per_prog.get(names)
    if table is None:
        table = per_prog[names] = {prog.symbol_address(n): n for n in names if prog.has_symbol(n)}
    return table


_FOPS_CACHE: weakref.WeakKeyDictionary[Program, dict[frozenset[str], dict[int, str]]] = weakref.WeakKeyDictionary()


def file_fops_name(file: Pointer | Struct, names: frozenset[str]) -> str | None:
    """Which of the file_operations tables `names` (e.g. "tty_fops") a ``struct file``'s
    ``f_op`` is, or None. Tables only some kernels have are simply absent from the others'
    ISFs (pidfd_fops became pidfs_file_operations in 6.9)."""
    f = _file(file)
    fops = int(f.f_op)
    return _fops_by_address(f.prog_, names).get(fops) if fops else None


def inode_is_on_pipefs(inode: Pointer | Struct) -> bool:
    """Does a ``struct inode`` belong to pipefs (an anonymous pipe, not a FIFO)?"""
    sb = inode.i_sb
    return bool(sb) and sb.s_magic == PIPEFS_MAGIC


def socket_family(file: Pointer | Struct) -> int | None:
    """The address family (AF_*) of a socket ``struct file`` (private_data is its
    ``struct socket``), or None when it has no sock."""
    f = _file(file)
    prog = f.prog_
    sock_addr = int(f.private_data)
    if not sock_addr:
        return None
    sk = prog.struct("socket", sock_addr).sk
    if not sk:
        return None
    return sk.deref().member_("__sk_common").skc_family


def file_on_internal_mount(file: Pointer | Struct, symbol: str) -> bool:
    """Is a ``struct file`` on the internal mount kernel variable `symbol` (a ``struct
    vfsmount *``, e.g. anon_inode_mnt) points to?"""
    f = _file(file)
    prog = f.prog_
    if not prog.has_symbol(symbol):
        return False
    try:
        mnt = prog.read_u64(prog.symbol_address(symbol))
    except GuestDataError:
        return False
    return bool(mnt) and int(f.f_path.mnt) == mnt


# --------------------------------------------------------------------------- f_owner


def file_owner(file: Pointer | Struct) -> Struct | None:
    """The ``struct fown_struct`` of a ``struct file`` (F_SETOWN state): embedded
    ``f_owner`` before 6.12, a pointer allocated on first F_SETOWN since (None while
    unset)."""
    f = _file(file)
    owner = f.f_owner
    if isinstance(owner, Pointer):
        return owner.deref() if owner else None
    return owner
