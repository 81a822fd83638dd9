"""Reads in flight decide small-file speed: files/s = reads in flight / latency.

`ordered_map` runs a function over items on a thread pool, ahead of the
consumer, bounded by count and by bytes, and yields results in input order.
`retrying` retries transient I/O errors with exponential backoff and turns a
permanent one into a `FetchError` that names the file.
"""

from __future__ import annotations

import errno
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
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
    raised in order; pending work is cancelled when the consumer stops.
    `quick(item)`, when given, runs first on the calling thread; a result other
    than None is used as is (a cache hit costs microseconds; a hand-off to the
    pool costs more than that).
    """
    source = iter(items)
    queue: deque[tuple[Future | None, R | None, int]] = deque()  # (pending work, or its result now)
    inflight = 0
    pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="air-fetch")
    try:
        exhausted = False
        while True:
            while not exhausted and len(queue) < max_ahead:
                try:
                    item, nbytes = next(source)
                except StopIteration:
                    exhausted = True
                    break
                done = quick(item) if quick is not None else None
                if done is not None:
                    queue.append((None, done, 0))
                    continue
                queue.append((pool.submit(fn, item), None, nbytes))
                inflight += nbytes
                if inflight >= max_bytes:
                    break
            if not queue:
                return
            fut, result, nbytes = queue.popleft()
            if fut is not None:
                result = fut.result()
            inflight -= nbytes
            yield result
    finally:
        for fut, _, _ in queue:
            if fut is not None:
                fut.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
