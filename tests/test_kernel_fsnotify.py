"""An inotify instance's watches and a fanotify instance's marks (kernel/fs/fsnotify.py), on fake memory laid out by each pinned
ISF: the inode a mark watches (its connector's ``obj`` points at ``inode->i_fsnotify_marks``
before 6.11, at the inode after), the flags a user gave (bits of ``mask`` before 5.19, of
``flags`` since), events queued, file handles by file system, and hostile lists; and the
refusals of filekinds/inotify.py and fanotify.py that follow from them."""

from __future__ import annotations

import logging
import struct

import pytest

from ovm_offline.errors import GuestDataError, UnsupportedError
from ovm_offline.filekinds import inotify
from ovm_offline.filekinds.base import ExtractContext
from ovm_offline.filekinds.fanotify import extract_fanotify
from ovm_offline.filekinds.inotify import InotifyWatch, _watch, extract_inotify
from ovm_offline.filekinds.watched import WatchedInode, fh_words
from ovm_offline.kernel.core.ktypes import PointerType, VoidType
from ovm_offline.kernel.fs.fsnotify import (
    FAN_MARK_EVICTABLE,
    FAN_MARK_IGNORE,
    FAN_MARK_IGNORED_SURV_MODIFY,
    FSNOTIFY_MARK_FLAG_HAS_IGNORE_FLAGS,
    FSNOTIFY_MARK_FLAG_IGNORED_SURV_MODIFY,
    FSNOTIFY_MARK_FLAG_IN_ONESHOT,
    FSNOTIFY_MARK_FLAG_NO_IREF,
    IN_EXCL_UNLINK,
    IN_ONESHOT,
    exportfs_encode_fh,
    fanotify_group_flags,
    fanotify_mark_user_flags,
    fanotify_permission_events,
    fsnotify_group_marks,
    fsnotify_group_queued,
    fsnotify_mark_inode,
    fsnotify_mark_mount,
    fsnotify_mark_object_type,
    inode_alias,
    inotify_group_next_wd,
    inotify_mark_user_mask,
    inotify_mark_wd,
)
from ovm_offline.state import FileIdentity, OpenFile
from tests.support.memory import FakeKernelMemory
from tests.support.paths import ISF

IN_MODIFY, IN_CREATE = 0x2, 0x100
INODE_OBJ_TYPE = 0  # FSNOTIFY_OBJ_TYPE_INODE in every pinned ISF


def _alias_member(fake: FakeKernelMemory) -> str:
    return "d_alias" if fake.prog.struct_type("dentry").has_member("d_alias") else "d_u.d_alias"


def _inode(fake: FakeKernelMemory, ino: int, *, gen: int = 0, export_op: str | None = None, named=True) -> int:
    sb = fake.alloc("super_block")
    if export_op:
        fake.set(sb, "super_block", "s_export_op", fake.prog.symbol_address(export_op))
    inode = fake.alloc("inode")
    fake.set(inode, "inode", "i_sb", sb)
    fake.set(inode, "inode", "i_ino", ino)
    fake.set(inode, "inode", "i_generation", gen)
    dentry = fake.alloc("dentry")
    fake.set(dentry, "dentry", "d_inode", inode)
    fake.set(dentry, "dentry", "d_parent", fake.alloc("dentry"))  # not a root
    if named:
        fake.set(dentry, "dentry", "d_hash.pprev", dentry)  # in the dcache
    alias = dentry + fake.prog.member_offset("dentry", _alias_member(fake))
    fake.set(inode, "inode", "i_dentry.first", alias)
    fake.set(alias, "hlist_node", "pprev", inode + fake.prog.member_offset("inode", "i_dentry"))
    return inode


def _mark(fake: FakeKernelMemory, inode: int, wd: int, mask: int, flags: int = 0) -> int:
    """An inotify_inode_mark on `inode`, its connector laid out as the ISF says."""
    conn = fake.alloc("fsnotify_mark_connector")
    fake.set(conn, "fsnotify_mark_connector", "type", INODE_OBJ_TYPE)
    obj_type = fake.prog.struct_type("fsnotify_mark_connector").member("obj").type
    assert isinstance(obj_type, PointerType)
    target = (
        inode if isinstance(obj_type.target, VoidType) else inode + fake.prog.member_offset("inode", "i_fsnotify_marks")
    )
    fake.set(conn, "fsnotify_mark_connector", "obj", target)
    mark = fake.alloc("inotify_inode_mark")
    fake.set(mark, "inotify_inode_mark", "wd", wd)
    fake.set(mark, "inotify_inode_mark", "fsn_mark.mask", mask)
    fake.set(mark, "inotify_inode_mark", "fsn_mark.flags", flags)
    fake.set(mark, "inotify_inode_mark", "fsn_mark.connector", conn)
    return mark + fake.prog.member_offset("inotify_inode_mark", "fsn_mark")


def _link(fake: FakeKernelMemory, head: int, nodes: list[int]) -> None:
    """A circular list_head list: head, then nodes in order."""
    ring = [head, *nodes]
    for i, node in enumerate(ring):
        fake.write_u64(node, ring[(i + 1) % len(ring)])
        fake.write_u64(node + 8, ring[i - 1])


def _group(fake: FakeKernelMemory, marks: list[int], *, queued: int = 0, next_wd: int = 0) -> int:
    group = fake.alloc("fsnotify_group")
    g_list = fake.prog.member_offset("fsnotify_mark", "g_list")
    _link(fake, group + fake.prog.member_offset("fsnotify_group", "marks_list"), [m + g_list for m in marks])
    _link(fake, group + fake.prog.member_offset("fsnotify_group", "notification_list"), [])
    fake.set(group, "fsnotify_group", "q_len", queued)
    fake.set(group, "fsnotify_group", "inotify_data.idr.idr_next", next_wd)
    return group


def _file(fake: FakeKernelMemory, group: int) -> int:
    file = fake.alloc("file")
    fake.set(file, "file", "private_data", group)
    return file


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_a_group_lists_its_watches_and_the_inodes_they_watch_in_either_layout(kernel):
    fake = FakeKernelMemory(kernel)
    first, second = _inode(fake, 8), _inode(fake, 11)
    marks = [_mark(fake, second, 4, IN_MODIFY), _mark(fake, first, 1, IN_CREATE | 0x08000000)]
    group = fake.prog.pointer("fsnotify_group", _group(fake, marks, next_wd=5))
    found = fsnotify_group_marks(group)
    assert [m.address_ for m in found] == marks
    assert [inotify_mark_wd(m) for m in found] == [4, 1]
    assert [int(fsnotify_mark_inode(m)) for m in found] == [second, first]
    assert [inotify_mark_user_mask(m) for m in found] == [IN_MODIFY, IN_CREATE]  # no FS_EVENT_ON_CHILD
    assert inode_alias(fake.prog.pointer("inode", first)) is not None
    assert inotify_group_next_wd(group) == 5
    assert fsnotify_group_queued(group) == 0


def test_each_pinned_isf_says_what_a_connector_points_at():
    void = set()
    for kernel in ISF:
        obj = FakeKernelMemory(kernel).prog.struct_type("fsnotify_mark_connector").member("obj").type
        if isinstance(obj, PointerType) and isinstance(obj.target, VoidType):
            void.add(kernel)
    assert void == {"6.12", "7.2"}


@pytest.mark.parametrize("where", ["mask", "flags"])
def test_a_oneshot_watch_is_seen_where_either_kernel_keeps_the_flag_and_refused(where):
    """Before 5.19 IN_ONESHOT was a bit of the mark's mask; since, a flag of the mark."""
    fake = FakeKernelMemory("6.1")
    mask, flags = (IN_MODIFY | IN_ONESHOT, 0) if where == "mask" else (IN_MODIFY, FSNOTIFY_MARK_FLAG_IN_ONESHOT)
    mark = fake.prog.struct("fsnotify_mark", _mark(fake, _inode(fake, 8), 3, mask, flags))
    assert inotify_mark_user_mask(mark) == IN_MODIFY | IN_ONESHOT
    with pytest.raises(UnsupportedError, match=r"inotify watch \(wd 3\) with IN_ONESHOT, which criu 3.17 restores"):
        _watch(mark, [])


def test_an_excl_unlink_watch_is_refused():
    fake = FakeKernelMemory("5.10")
    mark = fake.prog.struct("fsnotify_mark", _mark(fake, _inode(fake, 8), 2, IN_MODIFY | IN_EXCL_UNLINK))
    with pytest.raises(UnsupportedError, match=r"\(wd 2\) with IN_EXCL_UNLINK"):
        _watch(mark, [])


def test_a_watch_on_an_inode_with_no_name_left_is_refused():
    fake = FakeKernelMemory("6.12")
    mark = fake.prog.struct("fsnotify_mark", _mark(fake, _inode(fake, 8, named=False), 7, IN_MODIFY))
    with pytest.raises(UnsupportedError, match=r"\(wd 7\) on an inode with no name left"):
        _watch(mark, [])


def _extract(fake: FakeKernelMemory, group: int):
    file = fake.prog.pointer("file", _file(fake, group))
    ctx = ExtractContext(
        prog=fake.prog,
        task=fake.prog.struct("task_struct", fake.alloc("task_struct")),
        pid_ns=0,
        pid=42,
        comm="x",
        shared={},
    )  # type: ignore[arg-type]
    f = OpenFile(
        key=int(file),
        kind="inotify",
        identity=FileIdentity(path="anon_inode:inotify", dev=0, ino=0, size=0, mode=0),
        flags=0,
        pos=0,
    )
    return extract_inotify(ctx, f, file)


@pytest.mark.parametrize("kernel", ["5.10", "7.2"])
def test_events_not_read_yet_are_refused_by_count(kernel):
    fake = FakeKernelMemory(kernel)
    with pytest.raises(UnsupportedError, match=r"inotify instance with 3 event\(s\) its reader has not read"):
        _extract(fake, _group(fake, [], queued=3))
    group = _group(fake, [])
    event = fake.alloc(64)
    _link(fake, group + fake.prog.member_offset("fsnotify_group", "notification_list"), [event])
    assert fsnotify_group_queued(fake.prog.pointer("fsnotify_group", group)) == 1


@pytest.mark.parametrize(("next_wd", "warned"), [(5, False), (7, True)])
def test_a_next_watch_descriptor_criu_cannot_give_back_is_a_warning(monkeypatch, caplog, next_wd, warned):
    """criu's restore adds the watches in ascending order, which leaves the cursor after the
    highest (5 here); a program that removed its newest watches has it further on, and criu's
    image has no field for it: the dump goes on, saying so."""
    fake = FakeKernelMemory("6.1")
    marks = [_mark(fake, _inode(fake, 8), 4, IN_MODIFY), _mark(fake, _inode(fake, 9), 2, IN_CREATE)]
    watched = WatchedInode(ino=0, dev=0, handle_type=0, handle=b"", path="/x", mnt_id=1)
    # the watch's inode and path are read in the tests above; here only its wd matters
    monkeypatch.setattr(inotify, "_watch", lambda mark, mounts: InotifyWatch(inotify_mark_wd(mark), 0, watched))
    with caplog.at_level(logging.WARNING, logger="ovm_offline"):
        state = _extract(fake, _group(fake, marks, next_wd=next_wd))
    assert [w.wd for w in state.watches] == [4, 2]
    said = "an inotify instance of 42 (x) gives its next watch descriptor 7; after criu's restore, 5"
    assert (said in caplog.text) == warned
    assert ("next watch descriptor" in caplog.text) == warned


def test_an_instance_with_no_watches_is_saved_empty():
    fake = FakeKernelMemory("6.1")
    assert _extract(fake, _group(fake, [])).watches == []


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_a_looping_list_of_marks_is_guest_data_error(kernel):
    fake = FakeKernelMemory(kernel)
    inode = _inode(fake, 8)
    a, b = _mark(fake, inode, 1, IN_MODIFY), _mark(fake, inode, 2, IN_MODIFY)
    group = _group(fake, [a, b])
    g_list = fake.prog.member_offset("fsnotify_mark", "g_list")
    fake.write_u64(b + g_list, a + g_list)  # b -> a: never back to the head
    with pytest.raises(GuestDataError, match="loops"):
        fsnotify_group_marks(fake.prog.pointer("fsnotify_group", group))


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_file_handles_are_encoded_as_each_file_system_encodes_them(kernel):
    """tmpfs: generation, then the 64-bit inode number in halves; no export operations (ramfs):
    FILEID_INO32_GEN's inode and generation; another file system's: not known here."""
    fake = FakeKernelMemory(kernel)
    tmpfs = fake.prog.pointer("inode", _inode(fake, 0x1_0000_000B, gen=0x5A6B9E85, export_op="shmem_export_ops"))
    assert exportfs_encode_fh(tmpfs) == (1, struct.pack("<III", 0x5A6B9E85, 0xB, 1))
    ramfs = fake.prog.pointer("inode", _inode(fake, 0x21, gen=7))
    assert exportfs_encode_fh(ramfs) == (1, struct.pack("<II", 0x21, 7))
    other = fake.prog.pointer(
        "inode",
        _inode(
            fake,
            9,
            export_op="pidfs_export_operations" if fake.prog.has_symbol("pidfs_export_operations") else "init_task",
        ),
    )
    assert exportfs_encode_fh(other) is None


def test_a_handle_is_written_as_criu_parses_fdinfo_into_sixteen_words():
    """criu's fh_entry holds 16 little-endian words, zero-padded (as criu 3.17's golden images)."""
    words = fh_words(struct.pack("<III", 0x6B9E85, 0xB, 0))
    assert len(words) == 16 and words[0] == 0x0000000B_006B9E85 and words[1:] == [0] * 15


# ---------------------------------------------------------------------------------- fanotify


def _fanotify_extract(fake: FakeKernelMemory, group: int):
    file = fake.prog.pointer("file", _file(fake, group))
    ctx = ExtractContext(
        prog=fake.prog,
        task=fake.prog.struct("task_struct", fake.alloc("task_struct")),
        pid_ns=0,  # type: ignore[arg-type]
        pid=42,
        comm="x",
        shared={},
    )
    identity = FileIdentity(path="anon_inode:[fanotify]", dev=0, ino=0, size=0, mode=0)
    return extract_fanotify(ctx, OpenFile(key=int(file), kind="fanotify", identity=identity, flags=0, pos=0), file)


def _fanotify_group(fake: FakeKernelMemory, marks: list[int], *, flags: int = 0, f_flags: int = 0) -> int:
    group = _group(fake, marks)
    _link(fake, group + fake.prog.member_offset("fsnotify_group", "fanotify_data.access_list"), [])
    fake.set(group, "fsnotify_group", "fanotify_data.flags", flags)
    fake.set(group, "fsnotify_group", "fanotify_data.f_flags", f_flags)
    return group


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_a_fanotify_group_keeps_its_init_flags_without_the_internal_ones(kernel):
    fake = FakeKernelMemory(kernel)
    group = fake.prog.pointer("fsnotify_group", _fanotify_group(fake, [], flags=0x80000013, f_flags=0o100000))
    assert fanotify_group_flags(group) == (0x13, 0o100000)
    state = _fanotify_extract(fake, int(group))
    assert (state.faflags, state.evflags, state.marks) == (0x13, 0o100000, [])


@pytest.mark.parametrize("kernel", ["5.10", "7.2"])
def test_fanotify_events_unread_or_unanswered_are_refused(kernel):
    fake = FakeKernelMemory(kernel)
    group = _fanotify_group(fake, [])
    fake.set(group, "fsnotify_group", "q_len", 2)
    with pytest.raises(UnsupportedError, match=r"fanotify instance with 2 event\(s\) its reader has not read"):
        _fanotify_extract(fake, group)
    group = _fanotify_group(fake, [])
    _link(fake, group + fake.prog.member_offset("fsnotify_group", "fanotify_data.access_list"), [fake.alloc(64)])
    assert fanotify_permission_events(fake.prog.pointer("fsnotify_group", group))
    with pytest.raises(UnsupportedError, match="permission events read and not answered yet"):
        _fanotify_extract(fake, group)


@pytest.mark.parametrize("kernel", sorted(ISF))
def test_a_fanotify_mark_on_a_mount_finds_its_mount_in_either_layout(kernel):
    """The connector's obj points at the mount's fsnotify_connp_t before 6.11, and at its
    struct vfsmount (mount.mnt) after; a mount outside the process's namespace is refused."""
    fake = FakeKernelMemory(kernel)
    mark = _mark(fake, _inode(fake, 8), 0, IN_MODIFY)
    conn = int(fake.prog.struct("fsnotify_mark", mark).connector)
    fake.set(conn, "fsnotify_mark_connector", "type", fake.prog.symbols.enumerator("FSNOTIFY_OBJ_TYPE_VFSMOUNT"))
    mount = fake.alloc("mount")
    obj_type = fake.prog.struct_type("fsnotify_mark_connector").member("obj").type
    assert isinstance(obj_type, PointerType)
    member = "mnt" if isinstance(obj_type.target, VoidType) else "mnt_fsnotify_marks"
    fake.set(conn, "fsnotify_mark_connector", "obj", mount + fake.prog.member_offset("mount", member))
    found = fake.prog.struct("fsnotify_mark", mark)
    assert fsnotify_mark_object_type(found) == "VFSMOUNT"
    assert fsnotify_mark_mount(found).address_ == mount
    assert fsnotify_mark_inode(found) is None
    with pytest.raises(UnsupportedError, match=r"fanotify mark \(#1\) on a mount that is not of the process's mount"):
        _fanotify_extract(fake, _fanotify_group(fake, [mark]))


@pytest.mark.parametrize(
    ("flags", "mflags", "refused"),
    [
        (FSNOTIFY_MARK_FLAG_IGNORED_SURV_MODIFY | 0x3, FAN_MARK_IGNORED_SURV_MODIFY, None),
        (FSNOTIFY_MARK_FLAG_NO_IREF | 0x3, FAN_MARK_EVICTABLE, "FAN_MARK_EVICTABLE"),
        (FSNOTIFY_MARK_FLAG_HAS_IGNORE_FLAGS | 0x3, FAN_MARK_IGNORE, "FAN_MARK_IGNORE"),
    ],
)
def test_fanotify_mark_flags_are_read_from_the_mark_and_those_criu_lacks_refused(flags, mflags, refused):
    fake = FakeKernelMemory("6.1")
    mark = fake.prog.struct("fsnotify_mark", _mark(fake, _inode(fake, 8), 0, IN_MODIFY, flags))
    assert fanotify_mark_user_flags(mark) == mflags
    if refused:
        with pytest.raises(UnsupportedError, match=rf"fanotify mark \(#1\) made with {refused}, which criu 3.17"):
            _fanotify_extract(fake, _fanotify_group(fake, [mark.address_]))
