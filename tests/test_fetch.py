"""air_core.io.fetch: the ordered, bounded thread pool every read goes through."""

from __future__ import annotations

import gc
import random
import threading
import time
import weakref

import pytest
from conftest import wait_for

from air_core.io.fetch import ordered_map


class Probe:
    """A slow function that records how much work is running or waiting at once."""

    def __init__(self, fail_at: int | None = None, delay: float = 0.004) -> None:
        self.lock = threading.Lock()
        self.started: list[int] = []
        self.fail_at = fail_at
        self.delay = delay

    def __call__(self, item: int) -> int:
        with self.lock:
            self.started.append(item)
        time.sleep(random.uniform(0, self.delay))
        if item == self.fail_at:
            raise ValueError(f"item {item}")
        return item * 10


def test_results_come_in_input_order():
    probe = Probe()
    items = [(i, 1) for i in range(300)]
    assert list(ordered_map(probe, items, threads=16, max_ahead=64, max_bytes=1 << 30)) == [i * 10 for i in range(300)]
    assert sorted(probe.started) == list(range(300))


@pytest.mark.parametrize(("max_ahead", "max_bytes"), [(8, 1 << 30), (1000, 250), (1000, 1)])
def test_work_ahead_is_bounded_by_count_and_bytes(max_ahead, max_bytes):
    probe = Probe()
    items = [(i, 100) for i in range(200)]
    consumed = 0
    for out in ordered_map(probe, items, threads=32, max_ahead=max_ahead, max_bytes=max_bytes):
        ahead = len(probe.started) - consumed  # started but not yet handed over, this one included
        assert ahead <= max_ahead
        assert ahead <= max(1, -(-max_bytes // 100))  # one item always goes, however large
        assert out == consumed * 10
        consumed += 1
    assert consumed == 200


def test_the_first_error_is_raised_in_order():
    probe = Probe(fail_at=37)
    got = []
    with pytest.raises(ValueError, match="item 37"):
        for out in ordered_map(probe, [(i, 1) for i in range(100)], threads=8, max_ahead=32, max_bytes=1 << 30):
            got.append(out)
    assert got == [i * 10 for i in range(37)]


def test_quick_results_skip_the_threads_and_keep_their_place():
    probe = Probe()
    quick = lambda i: -i if i % 3 == 0 else None  # noqa: E731
    out = list(ordered_map(probe, [(i, 1) for i in range(60)], threads=4, max_ahead=16, max_bytes=1 << 30, quick=quick))
    assert out == [-i if i % 3 == 0 else i * 10 for i in range(60)]
    assert sorted(probe.started) == [i for i in range(60) if i % 3]


def test_stopping_early_drops_queued_work_and_ends_the_threads():
    gate = threading.Event()
    started: list[int] = []

    def fn(item: int) -> int:
        started.append(item)
        if item >= 5:  # the threads then hold one item each until the consumer has stopped
            gate.wait(60)
        return item * 10

    before = set(threading.enumerate())
    results = ordered_map(fn, [(i, 1) for i in range(10_000)], threads=4, max_ahead=64, max_bytes=1 << 30,
                          hedge_floor=3600)  # no hedge: it would add a thread and a call
    assert [next(results) for _ in range(5)] == [0, 10, 20, 30, 40]
    ours = [t for t in set(threading.enumerate()) - before if t.name == "air-fetch"]
    assert len(ours) == 4
    wait_for(lambda: len(started) == 5 + 4, 60, "each thread to hold an item")
    results.close()
    gate.set()
    for t in ours:
        t.join(timeout=60)
        assert not t.is_alive()
    # 64 jobs were queued; the 4 threads finish what they hold and drop the rest
    assert sorted(started) == list(range(5 + 4))


def test_a_result_the_consumer_dropped_is_freed_while_the_pass_goes_on():
    # An idle thread holding its last result would keep a whole file in memory for the pass.
    class Blob:
        pass

    made: list[weakref.ref] = []

    def make(item: int) -> Blob:
        blob = Blob()
        made.append(weakref.ref(blob))
        return blob

    def alive() -> int:
        gc.collect()
        return sum(ref() is not None for ref in made)

    results = ordered_map(make, ((i, 1) for i in range(40)), threads=8, max_ahead=4, max_bytes=1 << 30)
    for _ in range(20):
        next(results)
    # The window holds items 20-22 now: once the threads made them, only those and the last one handed over
    # (the consumer's) may be alive.
    wait_for(lambda: len(made) == 23 and alive() <= 4, 60, "the threads to finish the work ahead and drop it")
    results.close()


def test_the_deadline_is_a_multiple_of_the_recent_p95_with_a_floor():
    from air_core.io.fetch import Deadline

    d = Deadline(factor=4, floor=0.25)
    assert d.limit() is None  # no peer yet: nothing is slow
    for _ in range(100):
        d.observe(0.01)
    assert d.limit() == 0.25
    for k in range(600):
        d.observe(0.1 + k % 10 / 100)  # 0.10 .. 0.19 s, and the window forgets the 0.01 s reads
    assert d.limit() == pytest.approx(4 * 0.19)


def test_of_few_reads_the_slowest_sets_the_deadline():
    from air_core.io.fetch import Deadline

    d = Deadline(factor=4, floor=0.15)
    d.observe(0.001)  # a read that was quick
    d.observe(0.14)  # and one as long as most
    assert d.limit() == pytest.approx(4 * 0.14)  # not 4 x 0.001, under the floor: every read would be hedged


def test_a_large_read_among_small_ones_gets_a_deadline_for_its_size():
    from air_core.io.fetch import Deadline

    d = Deadline(factor=4, floor=0.15)
    for _ in range(40):
        d.observe(0.03, 150_000)  # small files, 30 ms each
    small, large = d.limit(150_000), d.limit(16 << 20)
    assert small == 0.15  # 4 x 30 ms is under the floor
    assert large > 4 * 0.03 * 7  # not hedged at a small file's deadline: a 16 MiB read moves 100x the bytes
    d.observe(0.25, 16 << 20)  # one large read, as fast per byte as the small ones
    assert d.limit(16 << 20) == pytest.approx(large, rel=0.01)


def test_a_stuck_call_is_hedged_on_a_new_thread_and_the_pool_keeps_its_size():
    release = threading.Event()
    calls: list[int] = []
    lock = threading.Lock()

    def fn(item: int) -> int:
        with lock:
            calls.append(item)
            first = calls.count(item) == 1
        if item == 150 and first:
            release.wait(60)
        time.sleep(0.002)
        return item * 10

    before = set(threading.enumerate())
    # A floor of 1 s: a read must be stuck that long to be hedged, which load alone does not do to a 2 ms one.
    out = list(ordered_map(fn, [(i, 1) for i in range(300)], threads=8, max_ahead=32, max_bytes=1 << 30,
                           hedge_floor=1.0))
    assert out == [i * 10 for i in range(300)]
    assert calls.count(150) == 2 and len(calls) == 301  # one extra call, for the stuck item alone
    ours = [th for th in set(threading.enumerate()) - before if th.name == "air-fetch"]
    release.set()
    for th in ours:
        th.join(timeout=60)
        assert not th.is_alive()


def test_a_failed_hedge_waits_for_the_first_attempt():
    release = threading.Event()
    seen: list[int] = []

    def fn(item: int) -> int:
        seen.append(item)
        if item == 40:
            if seen.count(40) == 1:
                release.wait(2)  # slow, then succeeds
                return 400
            raise OSError("the hedge failed")
        return item * 10

    out = list(ordered_map(fn, [(i, 1) for i in range(80)], threads=4, max_ahead=16, max_bytes=1 << 30))
    assert out == [i * 10 for i in range(80)] and seen.count(40) == 2
