"""ordered_map: pieces run on several threads, results come back in order, at most `ahead`
pieces are waiting, and an error or an early stop leaves no thread behind."""

from __future__ import annotations

import random
import threading
import time

import pytest

from ovm_offline.sources.ordered import cores, ordered_map


def test_results_come_in_the_order_of_the_pieces_whatever_order_they_finish_in():
    delays = [random.Random(7).uniform(0, 0.004) for _ in range(60)]

    def slow_square(i: int) -> int:
        time.sleep(delays[i])
        return i * i

    assert list(ordered_map(slow_square, range(60), workers=4, ahead=5)) == [i * i for i in range(60)]


def test_no_more_than_ahead_pieces_are_started_before_their_results_are_taken():
    started: list[int] = []
    lock = threading.Lock()

    def note(i: int) -> int:
        with lock:
            started.append(i)
        return i

    results = ordered_map(note, range(100), workers=3, ahead=4)
    for taken, value in enumerate(results):
        assert value == taken
        with lock:
            assert max(started) <= taken + 4


def test_an_error_is_raised_at_its_piece_and_the_pieces_after_it_are_not_all_run():
    ran: list[int] = []

    def fail_at_5(i: int) -> int:
        ran.append(i)
        if i == 5:
            raise ValueError("piece 5")
        return i

    threads = threading.active_count()
    got = []
    with pytest.raises(ValueError, match="piece 5"):
        for value in ordered_map(fail_at_5, range(1000), workers=2, ahead=3):
            got.append(value)
    assert got == [0, 1, 2, 3, 4]
    assert max(ran) <= 5 + 3
    assert threading.active_count() == threads


def test_stopping_early_leaves_no_thread_running():
    threads = threading.active_count()
    results = ordered_map(lambda i: i, range(1000), workers=3, ahead=4)
    assert next(results) == 0
    results.close()
    assert threading.active_count() == threads


def test_there_is_at_least_one_core():
    assert cores() >= 1
