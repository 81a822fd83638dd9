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
import random
import threading
import time
from collections import deque
from queue import SimpleQueue
from typing import Callable, Iterable, Iterator, TypeVar

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
    """How long a read may run before it is hedged: `factor` x the p95 of recent reads, at least `floor`.

    Relative to peers, so it follows the volume (tens of ms for a small file
    here, seconds for a large one); the floor keeps a burst of CPU contention,
    which slows every read alike, from passing for a stuck one. A hedge costs
    one read, a stall waited for costs the consumer the deadline: 0.15 s is
    ten times the p95 of small reads on a loaded 2-core box (~14 ms) and a
    fraction of a 2,000-file epoch (0.5-1 s). `seconds` is None until a read
    has completed: with no peer, no read is slow.
    """

    def __init__(self, factor: float = HEDGE_FACTOR, floor: float = HEDGE_FLOOR_S, window: int = 512) -> None:
        self.factor, self.floor = factor, floor
        self.seconds: float | None = None
        self._recent: deque[float] = deque(maxlen=window)
        self._new = 0

    def observe(self, seconds: float) -> None:
        """Record how long a completed read took."""
        self._recent.append(seconds)
        self._new += 1
        if len(self._recent) <= 32 or self._new >= 32:  # sort a window once per 32 reads, not per read
            ranked = sorted(self._recent)
            self.seconds = max(self.floor, self.factor * ranked[int(0.95 * (len(ranked) - 1))])
            self._new = 0


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
    threads = max(1, threads)
    jobs: SimpleQueue = SimpleQueue()
    results: dict[int, tuple[bool, R | BaseException]] = {}
    # position -> [start of its latest attempt, attempts not returned, settled]; kept until the last returns
    running: dict[int, list] = {}
    deadline = Deadline(floor=hedge_floor)
    arrived = threading.Condition()
    stop = threading.Event()
    workers = slow = hedges = 0  # slow: threads in an attempt that a later one overtook

    def attempt(position: int, item: T, begun: float) -> bool:
        """Run `fn(item)` and settle `position` unless another attempt has; True: leave the pool."""
        nonlocal workers, slow
        try:
            out = (True, fn(item))
        except BaseException as e:  # raised on the consumer's thread, in order
            out = (False, e)
        with arrived:
            run = running[position]
            run[1] -= 1
            if not run[2] and (out[0] or not run[1]):  # a failure leaves the other attempts to finish
                run[2] = True
                results[position] = out
                if out[0]:
                    deadline.observe(time.monotonic() - begun)
                arrived.notify()
            if begun != run[0]:
                slow -= 1
            if not run[1]:
                del running[position]
            if workers - slow > threads:
                workers -= 1
                return True
        return False  # and `out` goes: an idle thread must not keep its last result (a file's bytes) alive

    def work(hedge: tuple | None = None) -> None:
        if hedge is not None and attempt(*hedge):
            return
        while (job := jobs.get()) is not None and not stop.is_set():
            position, item = job
            begun = time.monotonic()
            running[position] = [begun, 1, False]  # the consumer only looks one up, never iterates: no lock
            if attempt(position, item, begun):
                return

    def wait_or_hedge(position: int, item: T) -> float | None:
        """Hedge `position` if its latest attempt is overdue; else how long until it is (None: no limit)."""
        nonlocal workers, slow, hedges
        run, limit = running.get(position), deadline.seconds
        if limit is None or hedges >= HEDGE_ALLOWANCE + HEDGE_SHARE * end:
            return None
        if run is None:  # still queued behind busy threads: look again later
            return limit
        now = time.monotonic()
        if now - run[0] < limit:
            return run[0] + limit - now
        run[0], run[1] = now, run[1] + 1
        workers, slow, hedges = workers + 1, slow + 1, hedges + 1
        threading.Thread(target=work, args=((position, item, now),), name="air-fetch", daemon=True).start()
        return None

    waiting: deque[tuple[T, int]] = deque()  # (item, bytes) of each position from `head` to `end`
    head = end = inflight = 0
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
                    if workers < threads:  # once full, the pool never shrinks below `threads`
                        with arrived:
                            workers += 1
                        threading.Thread(target=work, name="air-fetch", daemon=True).start()
                    jobs.put((end, item))
                waiting.append((item, nbytes))
                inflight += nbytes
                end += 1
            if head == end:
                return
            if head not in results:  # a cache hit, or a read already done, needs no lock
                with arrived:
                    while head not in results:
                        arrived.wait(wait_or_hedge(head, waiting[0][0]))
            ok, out = results.pop(head)
            inflight -= waiting.popleft()[1]
            head += 1
            if not ok:
                raise out
            yield out
    finally:
        stop.set()
        for _ in range(workers):
            jobs.put(None)
