"""stretchflow.io.parse_ahead.ordered_map: several threads, the input's order, bounded."""

from __future__ import annotations

import threading

import pytest

from stretchflow.io.parse_ahead import ordered_map

WAIT = 10.0  # a bound on a condition wait that should end at once (a hang fails the test)


def test_results_keep_the_input_order_when_later_items_finish_first():
    # item 0 finishes only once item 1 has: the pool runs them at once, the order holds
    done_1 = threading.Event()

    def fn(x: int) -> int:
        if x == 0:
            assert done_1.wait(WAIT), "item 1 never ran beside item 0"
        if x == 1:
            done_1.set()
        return x * 10

    assert list(ordered_map(fn, range(20), workers=2)) == [x * 10 for x in range(20)]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_an_error_of_fn_comes_after_the_results_before_it(workers):
    def fn(x: int) -> int:
        if x == 5:
            raise ValueError("bad item 5")
        return x

    got = []
    with pytest.raises(ValueError, match="bad item 5"):
        for r in ordered_map(fn, range(10), workers=workers):
            got.append(r)
    assert got == [0, 1, 2, 3, 4]


def test_an_error_of_the_items_comes_after_their_results():
    def items():
        yield from range(4)
        raise OSError("read failed")

    got = []
    with pytest.raises(OSError, match="read failed"):
        for r in ordered_map(lambda x: x + 1, items(), workers=2):
            got.append(r)
    assert got == [1, 2, 3, 4]


@pytest.mark.parametrize("workers", [2, 4])
def test_no_more_than_workers_plus_one_items_are_taken_ahead(workers):
    # the input is pulled only as results are taken: memory bounded by the pool's size
    pulled = 0

    def items():
        nonlocal pulled
        for x in range(100):
            pulled += 1
            yield x

    it = ordered_map(lambda x: x, items(), workers=workers)
    for taken in range(1, 30):
        next(it)
        assert pulled <= taken + workers, (pulled, taken)
    it.close()


def test_closing_cancels_what_has_not_started_and_the_threads_end():
    release = threading.Event()
    started = []
    lock = threading.Lock()

    def fn(x: int) -> int:
        with lock:
            started.append(x)
        if x == 0:
            return x
        assert release.wait(WAIT)
        return x

    it = ordered_map(fn, range(1000), workers=2, name="sf-test-pool")
    assert next(it) == 0
    it.close()  # items 1..2 are under way (blocked), the rest never start
    release.set()
    for t in threading.enumerate():
        if t.name.startswith("sf-test-pool"):
            t.join(WAIT)
            assert not t.is_alive()
    assert len(started) <= 4, started


def test_one_worker_runs_on_the_calling_thread():
    caller = threading.get_ident()
    seen = set()

    def fn(x: int) -> int:
        seen.add(threading.get_ident())
        return x

    assert list(ordered_map(fn, range(5), workers=1)) == list(range(5))
    assert seen == {caller}
