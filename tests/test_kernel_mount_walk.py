"""Which mount a walk of a path ends on (kernel follow_mount at every step): the check by which a
watched inode's name is refused when a mount over it hides it, as criu's dump finds no path
for it then."""

from __future__ import annotations

from ovm_offline.kernel.fs.mounts import walk_mount_points

ROOT, RUN, OVER_RUN, SUB, OVER_SUB = 1, 2, 3, 4, 5


def test_a_walk_ends_on_the_deepest_mount_on_its_way():
    over = {(ROOT, "/run"): RUN, (RUN, "/run/sub"): SUB}
    assert walk_mount_points("/etc/passwd", ROOT, over) == ROOT
    assert walk_mount_points("/run", ROOT, over) == RUN
    assert walk_mount_points("/run/x/y", ROOT, over) == RUN
    assert walk_mount_points("/run/sub/f", ROOT, over) == SUB
    assert walk_mount_points("/runner", ROOT, over) == ROOT  # a prefix of the name, not of the path


def test_a_mount_over_another_hides_it_and_what_was_mounted_below():
    """/run mounted twice: the second is on the first's root, and /run/sub, on the first,
    is hidden with it."""
    over = {(ROOT, "/run"): RUN, (RUN, "/run/sub"): SUB, (RUN, "/run"): OVER_RUN}
    assert walk_mount_points("/run/f", ROOT, over) == OVER_RUN
    assert walk_mount_points("/run/sub/f", ROOT, over) == OVER_RUN
    over[(OVER_RUN, "/run/sub")] = OVER_SUB
    assert walk_mount_points("/run/sub/f", ROOT, over) == OVER_SUB


def test_the_root_itself_may_be_mounted_over():
    assert walk_mount_points("/f", ROOT, {(ROOT, "/"): RUN}) == RUN


def test_a_guests_loop_of_mounts_over_each_other_ends():
    over = {(RUN, "/run"): OVER_RUN, (OVER_RUN, "/run"): RUN, (ROOT, "/run"): RUN}
    assert walk_mount_points("/run/f", ROOT, over) in (RUN, OVER_RUN)
    assert walk_mount_points("/f", ROOT, {(ROOT, "/"): ROOT}) == ROOT
