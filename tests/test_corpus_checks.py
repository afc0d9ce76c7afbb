"""How the corpus judges a restored counter: from the log before the dump and after restore."""

from corpus.workloads import check_counter, check_counter_resumed, get_workload


def log(*counts: int, check: str = "") -> str:
    return "READY pid=10000 interval_ms=1000\n" + "".join(f"count {n}\n" for n in counts) + check


def test_a_stopped_counter_must_go_on_from_its_last_printed_count():
    assert check_counter(log(1, 2, 3), log(4, 5, check="CHECK OK count=5\n")).ok
    assert not check_counter(log(1, 2, 3), log(3, 4, check="CHECK OK count=4\n")).ok
    assert not check_counter(log(1, 2, 3), log(5, 6, check="CHECK OK count=6\n")).ok


def test_a_counter_caught_running_may_resume_before_the_logs_end_but_never_skip():
    # the log was copied after the memory: counts 4 and 5 were printed after the snapshot
    assert check_counter_resumed(log(1, 2, 3, 4, 5), log(4, 5, 6, check="CHECK OK count=6\n")).ok
    assert check_counter_resumed(log(), log(1, 2, check="CHECK OK count=2\n")).ok
    skipped = check_counter_resumed(log(1, 2, 3), log(5, 6, check="CHECK OK count=6\n"))
    assert not skipped.ok and "[5, 6]" in skipped.detail
    assert not check_counter_resumed(log(1, 2, 3), log(3, 5, check="CHECK OK count=5\n")).ok
    assert not check_counter_resumed(log(1, 2, 3), log(3, 4, check="CHECK FAIL itimer lost\n")).ok


def test_the_as_is_counter_is_judged_by_the_running_rule():
    assert get_workload("counter").check is check_counter
    assert get_workload("counter-asis").check is check_counter_resumed
