"""Reads in flight decide small-file speed: files/s = reads in flight / latency.

`ordered_map` runs a function over items on a thread pool, ahead of the
consumer, bounded by count and by bytes, and yields results in input order.
A read that takes far longer than its peers (a stuck request: object storage
has a long latency tail) is hedged: the function runs again for that item on
a new thread and the first result wins. `Deadline` says when a read is that
slow. `retrying` retries transient I/O errors with jittered exponential
backoff and turns a permanent one into a `FetchError` that names the file.
"""

from __future__ import annotations

import errno
import math
import random
import threading
import time
from collections import deque
from queue import SimpleQueue
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Iterator, TypeVar

from ..errors import FetchError

T = TypeVar("T")
R = TypeVar("R")

TRANSIENT = frozenset({
    errno.EIO, errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETIMEDOUT, errno.ECONNRESET,
    errno.ECONNABORTED, errno.ENETDOWN, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ESTALE,
})

HEDGE_FACTOR = 4.0
HEDGE_FLOOR_S = 0.15
HEDGE_SHARE = 0.01
HEDGE_ALLOWANCE = 4
# Cache hits taken in per item handed over while the head is ready: over hits the window of items
# ahead grows by one a step, so a warm pass yields its first item after two lookups rather than
# `max_ahead` (a DataLoader worker's first batch of a warm epoch came ~4 ms after the reference's).
# A round that meets a miss fills the whole window: reads in flight are what small files need.
_RAMP = 2


def retrying(fn: Callable[[], R], what: str, *, attempts: int = 10, delay: float = 0.05,
             max_delay: float = 1.0) -> R:
    """Call `fn`, retrying transient OSErrors; raise `FetchError` naming `what` otherwise.

    The n-th wait is drawn uniformly from [0, min(max_delay, delay * 2**n)]
    ("full jitter"): files that failed together, in one hiccup of the volume,
    do not all come back together. Ten attempts, about 3 s of waiting in all,
    carry a pass through a volume failing one open or read in five.
    """
    for attempt in range(attempts):
        try:
            return fn()
        except FetchError:
            raise
        except OSError as e:
            if e.errno not in TRANSIENT or attempt == attempts - 1:
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise FetchError(e.errno, f"cannot read {what}{tries}: {e.strerror or e}") from e
            time.sleep(random.uniform(0, min(max_delay, delay * 2**attempt)))
    raise AssertionError("unreachable")


class Deadline:
    """How long a read may run before it is hedged: `factor` x the p95 of recent reads scaled to its size, at
    least `floor`.

    Relative to peers, so it follows the volume (tens of ms for a small file
    here, seconds for a large one); the floor keeps a burst of CPU contention,
    which slows every read alike, from passing for a stuck one. A hedge costs
    one read, a stall waited for costs the consumer the deadline: 0.15 s is
    ten times the p95 of small reads on a loaded 2-core box (~14 ms) and a
    fraction of a 2,000-file epoch (0.5-1 s). Reads are compared per byte,
    each counted with `FIXED_BYTES` more for its fixed cost, so that a 16 MiB
    read among small files is not taken for a stuck one of theirs (a hedge
    would read it twice). `limit()` is None until a read has completed: with
    no peer, no read is slow.
    """

    # A read's fixed cost (its open, its first byte), as the bytes a stream moves meanwhile: 10 ms at 200 MB/s.
    FIXED_BYTES = 2 << 20

    def __init__(self, factor: float = HEDGE_FACTOR, floor: float = HEDGE_FLOOR_S, window: int = 512) -> None:
        self.factor, self.floor = factor, floor
        self._per_byte: float | None = None  # the p95 of recent reads' seconds per (size + FIXED_BYTES)
        self._recent: deque[float] = deque(maxlen=window)
        self._new = 0

    def observe(self, seconds: float, nbytes: int = 0) -> None:
        """Record how long a completed read of `nbytes` bytes (0: unknown or small) took."""
        self._recent.append(seconds / (nbytes + self.FIXED_BYTES))
        self._new += 1
        if len(self._recent) <= 32 or self._new >= 32:  # sort a window once per 32 reads, not per read
            ranked = sorted(self._recent)
            # The nearest rank: of few reads, the p95 is the slowest (rounding down made it the fastest of two).
            self._per_byte = ranked[math.ceil(0.95 * len(ranked)) - 1]
            self._new = 0

    def limit(self, nbytes: int = 0) -> float | None:
        """Seconds a read of `nbytes` bytes may run before it is hedged; None before any read completed."""
        if self._per_byte is None:
            return None
        return max(self.floor, self.factor * self._per_byte * (nbytes + self.FIXED_BYTES))


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[tuple[T, int]],
    *,
    threads: int,
    max_ahead: int,
    max_bytes: int,
    quick: Callable[[T], R | None] | None = None,
    hedge_floor: float = HEDGE_FLOOR_S,
) -> Iterator[R]:
    """Yield `fn(item)` for each `(item, nbytes)`, in order, computing ahead on `threads` threads.

    At most `max_ahead` items and `max_bytes` bytes are in flight or waiting
    (one item is always allowed, however large). The first exception is
    raised in order; work not yet started is dropped when the consumer stops.
    `quick(item)`, when given, runs first on the calling thread; a result other
    than None is used as is (a cache hit costs microseconds; a hand-off to a
    thread costs more than that). While quick results are ready at the head,
    the window grows by one item per item yielded (see `_RAMP`), so a pass of
    cache hits starts flowing at once.

    Hedging: when the consumer waits for an item whose read has run longer
    than `Deadline` says, `fn(item)` runs again on a new thread, and the first
    success wins (a failure waits for the other attempts). So `fn` must allow
    concurrent calls for one item. Only the item the consumer waits for is
    hedged (a stuck read further ahead is hedged when its turn comes), again
    if the hedge stalls too, and `HEDGE_ALLOWANCE` + `HEDGE_SHARE` of the
    items bound the hedges: spare reads stay rare even when every read slows
    down at once. The new thread joins the pool and the overtaken one leaves
    it when it returns, so stuck reads do not shrink the pool. `hedge_floor`
    is the least deadline (seconds).

    The threads take `(position, item)` jobs from one queue and leave results
    in one dict: no future, lock or condition per item, so a pass over a
    million files leaves the garbage collector little to do (a full collection
    in a process with torch or Ray loaded stalls it for a tenth of a second or
    more). They are daemon threads: an interpreter exiting mid-pass does not
    wait for reads it no longer needs, and a copy cut short there is never
    served (see `air_core.io.cache`).
    """
    source = iter(items)
    pool: _Pool[T, R] = _Pool(fn, max(1, threads), Deadline(floor=hedge_floor))
    waiting: deque[tuple[T, int]] = deque()  # (item, bytes) of each position from `head` to `end`
    head = end = inflight = 0
    results = pool.results
    try:
        exhausted = False
        while True:
            taken, reading = 0, False
            while not exhausted and end - head < max_ahead and (inflight < max_bytes or end == head):
                if taken == _RAMP and not reading and head in results:
                    break  # hits are flowing: hand the head over now, and take two more next time
                taken += 1
                try:
                    item, nbytes = next(source)
                except StopIteration:
                    exhausted = True
                    break
                done = quick(item) if quick is not None else None
                if done is not None:
                    results[end] = (True, done)
                    nbytes = 0
                else:
                    reading = True  # a read to start: fill the window, for as many reads in flight as it allows
                    pool.submit(end, item, nbytes)
                waiting.append((item, nbytes))
                inflight += nbytes
                end += 1
            if head == end:
                return
            if head not in results:  # a cache hit, or a read already done, needs no lock
                pool.wait_for(head, waiting[0][0], hedges_allowed=HEDGE_ALLOWANCE + HEDGE_SHARE * end)
            ok, out = results.pop(head)
            inflight -= waiting.popleft()[1]
            head += 1
            if not ok:
                raise out
            yield out
    finally:
        pool.close()


@dataclass(slots=True)
class _Attempts:
    """The attempts at one position of an `ordered_map`: when its latest began, how many have not returned, and
    whether one has settled it."""

    latest: float
    nbytes: int
    pending: int = 1
    settled: bool = False


class _Pool(Generic[T, R]):
    """The threads of one `ordered_map`: they take `(position, item)` jobs from one queue and leave each result in
    one dict, and a read the consumer waits for past its deadline is hedged on a new thread.

    `threads`: the pool's size, which it never shrinks below once full. A
    hedging thread joins the pool; `slow` counts the threads in an attempt
    that a later one overtook, which leave the pool when they return.
    """

    def __init__(self, fn: Callable[[T], R], threads: int, deadline: Deadline) -> None:
        self.fn, self.threads, self.deadline = fn, threads, deadline
        self.jobs: SimpleQueue = SimpleQueue()
        self.results: dict[int, tuple[bool, R | BaseException]] = {}
        self.running: dict[int, _Attempts] = {}  # kept until a position's last attempt returns
        self.arrived = threading.Condition()
        self.stop = threading.Event()
        self.workers = self.slow = self.hedges = 0

    def submit(self, position: int, item: T, nbytes: int) -> None:
        """Queue a read of `nbytes` bytes, adding a thread while the pool is below its size."""
        if self.workers < self.threads:
            with self.arrived:
                self.workers += 1
            threading.Thread(target=self._work, name="air-fetch", daemon=True).start()
        self.jobs.put((position, item, nbytes))

    def wait_for(self, position: int, item: T, *, hedges_allowed: float) -> None:
        """Block until `position` has a result, hedging its read whenever it is overdue (up to `hedges_allowed`)."""
        with self.arrived:
            while position not in self.results:
                self.arrived.wait(self._wait_or_hedge(position, item, hedges_allowed))

    def close(self) -> None:
        """Drop the work not started; every idle thread leaves."""
        self.stop.set()
        for _ in range(self.workers):
            self.jobs.put(None)

    def _attempt(self, position: int, item: T, begun: float) -> bool:
        """Run `fn(item)` and settle `position` unless another attempt has; True: leave the pool."""
        try:
            out = (True, self.fn(item))
        except BaseException as e:  # raised on the consumer's thread, in order
            out = (False, e)
        with self.arrived:
            run = self.running[position]
            run.pending -= 1
            if not run.settled and (out[0] or not run.pending):  # a failure leaves the other attempts to finish
                run.settled = True
                self.results[position] = out
                if out[0]:
                    self.deadline.observe(time.monotonic() - begun, run.nbytes)
                self.arrived.notify()
            if begun != run.latest:
                self.slow -= 1
            if not run.pending:
                del self.running[position]
            if self.workers - self.slow > self.threads:
                self.workers -= 1
                return True
        return False  # and `out` goes: an idle thread must not keep its last result (a file's bytes) alive

    def _work(self, hedge: tuple | None = None) -> None:
        if hedge is not None and self._attempt(*hedge):
            return
        while (job := self.jobs.get()) is not None and not self.stop.is_set():
            position, item, nbytes = job
            begun = time.monotonic()
            self.running[position] = _Attempts(begun, nbytes)  # the consumer only looks one up, never iterates: no lock
            if self._attempt(position, item, begun):
                return

    def _wait_or_hedge(self, position: int, item: T, hedges_allowed: float) -> float | None:
        """Hedge `position` if its latest attempt is overdue; else how long until it is (None: no limit).
        The caller holds `arrived`."""
        run = self.running.get(position)
        limit = self.deadline.limit(0 if run is None else run.nbytes)
        if limit is None or self.hedges >= hedges_allowed:
            return None
        if run is None:  # still queued behind busy threads: look again later
            return limit
        now = time.monotonic()
        if now - run.latest < limit:
            return run.latest + limit - now
        run.latest, run.pending = now, run.pending + 1
        self.workers, self.slow, self.hedges = self.workers + 1, self.slow + 1, self.hedges + 1
        threading.Thread(target=self._work, args=((position, item, now),), name="air-fetch", daemon=True).start()
        return None
