"""Reads in flight decide small-file speed: files/s = reads in flight / latency.

`ordered_map` runs a function over items on a thread pool, ahead of the
consumer, bounded by count and by bytes, and yields results in input order.
`retrying` retries transient I/O errors with exponential backoff and turns a
permanent one into a `FetchError` that names the file.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import deque
from queue import SimpleQueue
from typing import Callable, Iterable, Iterator, TypeVar

from .errors import FetchError

T = TypeVar("T")
R = TypeVar("R")

TRANSIENT = frozenset({
    errno.EIO, errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETIMEDOUT, errno.ECONNRESET,
    errno.ECONNABORTED, errno.ENETDOWN, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ESTALE,
})


def retrying(fn: Callable[[], R], what: str, *, attempts: int = 5, delay: float = 0.05) -> R:
    """Call `fn`, retrying transient OSErrors; raise `FetchError` naming `what` otherwise."""
    for attempt in range(attempts):
        try:
            return fn()
        except FetchError:
            raise
        except OSError as e:
            if e.errno not in TRANSIENT or attempt == attempts - 1:
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise FetchError(e.errno, f"cannot read {what}{tries}: {e.strerror or e}") from e
            time.sleep(delay * 2**attempt)
    raise AssertionError("unreachable")


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[tuple[T, int]],
    *,
    threads: int,
    max_ahead: int,
    max_bytes: int,
    quick: Callable[[T], R | None] | None = None,
) -> Iterator[R]:
    """Yield `fn(item)` for each `(item, nbytes)`, in order, computing ahead on `threads` threads.

    At most `max_ahead` items and `max_bytes` bytes are in flight or waiting
    (one item is always allowed, however large). The first exception is
    raised in order; work not yet started is dropped when the consumer stops.
    `quick(item)`, when given, runs first on the calling thread; a result other
    than None is used as is (a cache hit costs microseconds; a hand-off to a
    thread costs more than that).

    The threads take `(position, item)` jobs from one queue and leave results
    in one dict: no future, lock or condition per item, so a pass over a
    million files leaves the garbage collector little to do (a full collection
    in a process with torch or Ray loaded stalls it for a tenth of a second or
    more). They are daemon threads: an interpreter exiting mid-pass does not
    wait for reads it no longer needs, and a copy cut short there is never
    served (see `air_core.cache`).
    """
    source = iter(items)
    threads = max(1, threads)
    jobs: SimpleQueue = SimpleQueue()
    results: dict[int, tuple[bool, R | BaseException]] = {}
    arrived = threading.Condition()
    stop = threading.Event()
    workers = 0

    def work() -> None:
        while (job := jobs.get()) is not None and not stop.is_set():
            position, item = job
            try:
                out = (True, fn(item))
            except BaseException as e:  # raised on the consumer's thread, in order
                out = (False, e)
            with arrived:
                results[position] = out
                arrived.notify()
            del out  # an idle thread must not keep its last result (a file's bytes) alive

    weights: deque[int] = deque()  # bytes of each position from `head` to `end`
    head = end = inflight = 0
    try:
        exhausted = False
        while True:
            while not exhausted and end - head < max_ahead and (inflight < max_bytes or end == head):
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
                    if workers < threads:
                        threading.Thread(target=work, name="air-fetch", daemon=True).start()
                        workers += 1
                    jobs.put((end, item))
                weights.append(nbytes)
                inflight += nbytes
                end += 1
            if head == end:
                return
            if head not in results:  # a cache hit, or a read already done, needs no lock
                with arrived:
                    while head not in results:
                        arrived.wait()
            ok, out = results.pop(head)
            inflight -= weights.popleft()
            head += 1
            if not ok:
                raise out
            yield out
    finally:
        stop.set()
        for _ in range(workers):
            jobs.put(None)
