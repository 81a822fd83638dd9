"""A volume's files opened for their listed version, and a few held open between reads of their byte ranges.

Opening a file on a volume costs a round trip (over FUSE, a metadata request
to the object store). A read of some columns of a table fetches a few small
ranges of one file at a time, and one stream reads on in several calls (HF
iterates a stream's shards one after another, each a read of its own): held
open, the file is opened once for all of them, as pyarrow's own reader opens
it once. At most `HELD` idle files are kept open per process; a file in use
is never closed under its user.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator

from ..errors import FetchError

HELD = 8

_lock = threading.Lock()
_held: OrderedDict[tuple[str, int, int], list[int]] = OrderedDict()  # (path, size, mtime) -> [fd, users]


def open_version(source: str, volume_path: str, size: int, mtime_ns: int) -> int:
    """A descriptor of `source`, checked to be the listed version of `volume_path` (`size`, `mtime_ns`).

    Raises `FetchError` where the file changed after it was listed."""
    src = os.open(source, os.O_RDONLY)
    try:
        check_version(os.fstat(src), volume_path, size, mtime_ns)
    except BaseException:
        os.close(src)
        raise
    return src


def check_version(st: os.stat_result, volume_path: str, size: int, mtime_ns: int) -> None:
    if st.st_size != size or st.st_mtime_ns != mtime_ns:
        raise FetchError(
            0, f"{volume_path} changed after it was listed (size {size} -> {st.st_size}); "
            "list again (make a new stream) to read the new version"
        )


@contextmanager
def held_open(source: str, volume_path: str, size: int, mtime_ns: int) -> Iterator[int]:
    """`open_version`'s descriptor, shared with this process's other reads of the same version and kept open
    after them (the least recently used idle ones closed past `HELD`). Read it positionally only."""
    key = (source, size, mtime_ns)
    with _lock:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
            _held.move_to_end(key)
    if entry is None:
        fd = open_version(source, volume_path, size, mtime_ns)  # the round trip, outside the lock
        with _lock:
            entry = _held.get(key)
            if entry is None:
                entry = _held[key] = [fd, 1]
            else:  # another thread opened it meanwhile
                entry[1] += 1
                os.close(fd)
    try:
        yield entry[0]
    finally:
        with _lock:
            entry[1] -= 1
            _close_idle(keep=HELD)


def close_idle() -> None:
    """Close the files held open that no read is using (a process done reading gives its descriptors back)."""
    with _lock:
        _close_idle(keep=0)


def _close_idle(*, keep: int) -> None:
    """Close the least recently used idle files until at most `keep` files are held (those in use stay open).
    The caller holds `_lock`."""
    idle = [k for k, (_, users) in _held.items() if not users]
    for k in idle[:max(0, len(_held) - keep)]:
        os.close(_held.pop(k)[0])


def _forked() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_forked)


__all__ = ["HELD", "check_version", "close_idle", "held_open", "open_version"]
