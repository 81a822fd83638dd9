"""Whole files through the node cache, fetched ahead of the consumer, in plan order: the engine every reader
that reads whole files (loose files, Parquet, WebDataset tars) fetches through, and what it yields.

`read_items` reads a listing's items; `read_rows` reads rows of several
listings (a mixture's). A file is a `CachedFile`, or under `on_error="skip"`
a `Skipped` that `without_skips` leaves out.
"""

from __future__ import annotations

import logging
import os
from itertools import chain, islice, repeat
from typing import Callable, Iterable, Iterator, Literal, NamedTuple, Sequence

import numpy as np

from .. import dist
from ..errors import FetchError
from ..manifest import Manifest
from . import transport, volume
from .cache import Cache, read_bytes, read_fd
from .fetch import ordered_map, retrying

log = logging.getLogger("air_core")

OnError = Literal["raise", "skip"]
ON_ERRORS = ("raise", "skip")
DEFAULT_FETCH_THREADS = 64
WORKER_FETCH_THREADS = 32
DEFAULT_PREFETCH = 256
DEFAULT_PREFETCH_BYTES = 512 << 20


def default_fetch_threads(num_workers: int | None = None) -> int:
    """Reads in flight per stream: 64 in a process of its own, 32 when several DataLoader workers share the cores.

    Beyond that, a worker's fetch threads contend with its consumer and with
    the other workers more than their reads overlap (2,000 files under the
    emulated volume, 2 cores: 2 workers read 4,735 files/s at 32 threads each
    and 3,430 at 64; 6 workers 4,746 and 2,417). `num_workers` defaults to the
    DataLoader worker count detected now.
    """
    if num_workers is None:
        num_workers = dist.detect_worker()[1]
    return WORKER_FETCH_THREADS if num_workers > 1 else DEFAULT_FETCH_THREADS


class CachedFile(NamedTuple):
    """One file of a stream (a named tuple: built once per file, so it must be cheap).

    Attributes:
        path: the volume path (`/Volumes/c/s/v/...`).
        local_path: a local path to read: the cached copy, or the volume file
            itself when the cache was full (then `cached` is False); empty
            where no local file holds it (a file read from a pack, or streamed
            past a full cache over the Files API): its bytes are in `data`.
        size: size in bytes.
        index: the file's index in the manifest.
        cached: whether `local_path` is a node-local cached copy.
        data: the bytes, when the file was streamed past a full cache or read from a pack.
    """

    path: str
    local_path: str
    size: int
    index: int
    cached: bool = True
    data: bytes | None = None

    def read_bytes(self) -> bytes:
        """The file's bytes (already in memory when it was streamed past a full cache)."""
        if self.data is not None:
            return self.data
        fd = os.open(self.local_path, os.O_RDONLY)
        try:
            return read_fd(fd, self.size)
        finally:
            os.close(fd)


class Skipped(NamedTuple):
    """A file left out under `on_error="skip"`: it stayed unreadable through every retry.

    Attributes:
        path: the volume path.
        index: the file's index in the manifest.
        error: what the last attempt met.
    """

    path: str
    index: int
    error: str


def without_skips(records: Iterable[CachedFile | Skipped], *, keep_count: bool) -> Iterator[CachedFile]:
    """The files of `records`, each `Skipped` one logged and left out.

    With `keep_count` (equal counts were asked for: a rank short of one file
    would hang DDP at the end of the epoch), a skipped file is stood in for
    by the file delivered before it, or by the next one when it comes first,
    as `equalize="pad"` repeats files.
    """
    last: CachedFile | None = None
    owed = 0
    for r in records:
        if isinstance(r, Skipped):
            log.warning("skipped %s, which stays unreadable: %s", r.path, r.error)
            if not keep_count:
                continue
            if last is None:
                owed += 1
                continue
            r = last
        last = r
        for _ in range(owed + 1):
            yield r
        owed = 0


def read_items(
    manifest: Manifest,
    items: Iterable[int],
    cache: Cache,
    *,
    fetch_threads: int = DEFAULT_FETCH_THREADS,
    prefetch: int = DEFAULT_PREFETCH,
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
    local_root: str | None = None,
    on_error: OnError = "raise",
) -> Iterator[CachedFile | Skipped]:
    """Fetch manifest items through the cache, ahead of the consumer, in order.

    `local_root` is where `manifest.root` lives on this machine (default: mapped
    by this process's `AIR_VOLUMES_ROOT`); a process reading what another one
    listed, such as a Ray task, passes the lister's. A file that stays
    unreadable raises `FetchError`, or with `on_error="skip"` is yielded as a
    `Skipped` in its place (see `without_skips`).
    """
    root = manifest.root

    def columns() -> Iterator[Columns]:
        for chunk in chunked(items):
            vpaths, sizes, mtimes = zip(*manifest.volume_rows(chunk))

            def rows(k: int, chunk: list[int] = chunk, vpaths: tuple[str, ...] = vpaths,
                     sizes: tuple[int, ...] = sizes, mtimes: tuple[int, ...] = mtimes) -> list[Row]:
                # Only a miss needs to know where the root lies here: a warm pass never maps it.
                here = local_root or volume.parse(root).local
                return [(i, v, here + v[len(root):], size, mtime)
                        for i, v, size, mtime in zip(chunk[k:], vpaths[k:], sizes[k:], mtimes[k:])]

            yield chunk, vpaths, sizes, mtimes, rows

    return read_columns(columns(), cache, fetch_threads=fetch_threads, prefetch=prefetch,
                        prefetch_bytes=prefetch_bytes, on_error=on_error)


def read_rows(
    chunks: Iterable[list[Row]],
    cache: Cache,
    *,
    fetch_threads: int = DEFAULT_FETCH_THREADS,
    prefetch: int = DEFAULT_PREFETCH,
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
    on_error: OnError = "raise",
) -> Iterator[CachedFile | Skipped]:
    """`read_items` of files given as chunks of rows (see `chunked`), which may come from several listings
    (a mixture's)."""

    def columns() -> Iterator[Columns]:
        for chunk in chunks:
            indices, vpaths, _, sizes, mtimes = zip(*chunk)
            yield indices, vpaths, sizes, mtimes, lambda k, chunk=chunk: chunk[k:]

    return read_columns(columns(), cache, fetch_threads=fetch_threads, prefetch=prefetch,
                        prefetch_bytes=prefetch_bytes, on_error=on_error)


def read_columns(
    chunks: Iterable[Columns],
    cache: Cache,
    *,
    fetch_threads: int = DEFAULT_FETCH_THREADS,
    prefetch: int = DEFAULT_PREFETCH,
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
    on_error: OnError = "raise",
) -> Iterator[CachedFile | Skipped]:
    """`read_items` of files given as chunks of columns (see `Columns`), which `read_items` and `read_rows`
    make too: runs of hits straight from the cache; from the first miss on, every file through the window
    of reads ahead."""
    # A warm epoch is runs of hits: those are yielded straight from one lookup per chunk, without the
    # window of reads ahead, which costs more than the hit itself (a warm item ~2.5 us instead of ~4.3).
    # Per hit, only the `stat` runs in a loop of Python's: the chunk comes as columns, its files are made
    # by `map` and `zip`, and its rows (with their local paths) only at a miss.
    it = iter(chunks)
    for indices, vpaths, sizes, mtimes, rows in it:
        found = cache.lookup_run(zip(vpaths, sizes, mtimes))
        yield from map(_new_tuple, repeat(CachedFile), zip(vpaths, found, sizes, indices, repeat(True), repeat(None)))
        if len(found) == len(vpaths):
            continue
        rest = chain(rows(len(found)), (row for later in it for row in later[4](0)))
        yield from _read_ahead(rest, cache, fetch_threads=fetch_threads, prefetch=prefetch,
                               prefetch_bytes=prefetch_bytes, on_error=on_error)
        return


def _read_ahead(rows: Iterable[Row], cache: Cache, *, fetch_threads: int, prefetch: int, prefetch_bytes: int,
                on_error: OnError) -> Iterator[CachedFile | Skipped]:
    """The files of `rows` through `ordered_map`'s window of reads ahead, its `quick` still taking hits inline."""

    def fetch(item: Row) -> CachedFile:
        i, vpath, src, size, mtime = item

        def once() -> CachedFile:
            entry = cache.fetch(src, vpath, size, mtime)  # `hit` has just looked it up
            if entry is not None:
                return CachedFile(vpath, entry, size, i)
            local = src if transport.remote(src) is None else ""  # over the Files API a file has no local path
            return CachedFile(vpath, local, size, i, cached=False, data=read_bytes(src, vpath, size, mtime))

        try:
            return retrying(once, vpath)
        except FetchError as e:
            if on_error == "raise":
                raise
            return Skipped(vpath, i, str(e))

    def hit(item: Row) -> CachedFile | None:
        i, vpath, _, size, mtime = item
        entry = cache.lookup(vpath, size, mtime)
        return None if entry is None else CachedFile(vpath, entry, size, i)

    return ordered_map(fetch, ((row, row[3]) for row in rows), threads=fetch_threads, max_ahead=prefetch,
                       max_bytes=prefetch_bytes, quick=hit)


Row = tuple[int, str, str, int, int]  # (index, volume path, local path, size, mtime_ns)
# A chunk as `read_columns` takes it: its indices, volume paths, sizes and mtimes, and its rows from a place on
# (`rows(k)`), made only when a file there is not cached: a warm pass makes no row and no local path.
Columns = tuple[Sequence[int], Sequence[str], Sequence[int], Sequence[int], Callable[[int], list[Row]]]
ROWS_AT_ONCE = 512
FIRST_ROWS = 32
_new_tuple = tuple.__new__  # a named tuple's own constructor is a Python function: too slow for a warm item


def chunked(items: Iterable[int]) -> Iterator[list[int]]:
    """`items` in chunks of up to `ROWS_AT_ONCE`, to decode their rows of a listing a chunk at a time.

    One decode and one conversion per chunk rather than per file: a warm
    pass costs a `stat` and little else per file. The first chunks are
    smaller, doubling from `FIRST_ROWS`, so that a pass's first file comes
    after a batch's worth of lookups, not hundreds (a DataLoader's first
    batch waits for it); not smaller still, because each chunk costs a few
    tens of µs of its own in a DataLoader worker, whose pass of a few hundred
    files would pay it many times over.
    """
    n = FIRST_ROWS
    if isinstance(items, np.ndarray):  # a long plan: Python ints made for one chunk at a time
        lo = 0
        while lo < len(items):
            yield items[lo:lo + n].tolist()
            lo, n = lo + n, min(2 * n, ROWS_AT_ONCE)
        return
    it = iter(items)
    while chunk := list(islice(it, n)):
        yield chunk
        n = min(2 * n, ROWS_AT_ONCE)
