"""Reading a pack as the files it holds: its listing, its row groups, and their rows through the node cache.

A generation's shards are fetched whole into the node cache, as any large
file is: in concurrent 16 MiB ranges, each its own open (bandwidth is per
open file), a couple of shards ahead of the consumer. A stream then decodes
only its own row groups from the local copy. Fetching only a stream's byte
ranges would save the rest of each shard on nodes that read a part of it;
the cache keys whole files, and a rank's share is a contiguous run of row
groups, so a node fetches its own shards plus at most the two it shares
with its neighbours.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from typing import Iterator, Sequence, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import volume
from .cache import Cache
from .errors import VolumePathError
from .manifest import Manifest, list_folder
from .pack_store import INDEX, OFFSETS, Generation
from .plan import _epoch_order
from .row_plan import RowGroup, RowSlice, unit_of
from .stream import CachedFile, read_items
from .tabular import read_units

SHARDS_AHEAD = 2  # the shard being decoded and the next one, fetched meanwhile
SHARD_THREADS = 2
TABLES_AHEAD = 2
T = TypeVar("T")


def index(generation: Generation, cache_dir: str | None) -> Manifest:
    """The packed files' listing (root: the packed folder), under a fingerprint of the pack's own.

    Read through the node cache: every process of the node maps one local copy.
    """
    m = Manifest.load(_cached(generation, INDEX, cache_dir))
    # The same files as the loose folder, but planned by row group: a state saved over one must not resume the other.
    fingerprint = hashlib.sha256(f"pack\n{generation.path}\n{m.fingerprint}".encode()).hexdigest()[:32]
    return Manifest(m.root, m._blob, m._offsets, m.sizes, m.mtimes, fingerprint)


def _cached(generation: Generation, name: str, cache_dir: str | None) -> str:
    """A local copy of the generation's file `name`, through the node cache."""
    vpath, local = f"{generation.path}/{name}", f"{volume.parse(generation.path).local}/{name}"
    try:
        st = os.stat(local)
    except FileNotFoundError:
        raise VolumePathError(f"{vpath} is missing: the pack is incomplete or was changed by hand; "
                              "pack the source again") from None
    return Cache(cache_dir).get(local, vpath, st.st_size, st.st_mtime_ns) or local


def units(generation: Generation) -> list[RowGroup]:
    """Every row group of the pack, in order; `num_rows` are files, `file` indexes the shards."""
    return [RowGroup(k, g, rows, nbytes) for k, s in enumerate(generation.shards)
            for g, (rows, nbytes) in enumerate(zip(s.row_groups, s.row_group_bytes))]


def shards(generation: Generation) -> Manifest:
    """The shard files, listed (their mtimes key the node cache) and checked against the marker."""
    listed = list_folder(generation.path)
    found = dict(zip(listed.paths.tolist(), listed.sizes.tolist()))
    for s in generation.shards:
        if found.get(s.name) != s.size:
            raise VolumePathError(f"{generation.path}/{s.name} is missing or not the shard the pack's marker "
                                  "lists (changed by hand?): pack the source again")
    if len(found) != len(generation.shards):
        raise VolumePathError(f"{generation.path} holds files its marker does not list: a pack's folder "
                              "holds only its shards; pack the source again")
    return listed


def read_pieces(shard_files: Manifest, pieces: Sequence[RowGroup | RowSlice], cache: Cache, *,
                columns: Sequence[str], local_root: str | None = None) -> Iterator[pa.Table]:
    """One table per piece of the pack (a row group, or rows of one), its shards fetched ahead.

    Pieces are decoded on a thread of their own, `TABLES_AHEAD` ahead of the
    consumer: Parquet decoding releases the GIL, so it overlaps the
    consumer's work on the previous piece (a third of a warm pass's time).
    """
    return _ahead(read_units(shard_files, pieces, cache, columns=columns, fetch_threads=SHARD_THREADS,
                             prefetch=SHARDS_AHEAD, prefetch_bytes=1 << 62, local_root=local_root), TABLES_AHEAD)


def _ahead(source: Iterator[T], depth: int) -> Iterator[T]:
    """`source`'s items, produced on a daemon thread up to `depth` ahead of the consumer; errors raised in order."""
    ready: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def produce() -> None:
        try:
            for item in source:
                while not stop.is_set():
                    try:
                        ready.put((True, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put((True, end))
        except BaseException as e:  # raised on the consumer's thread
            ready.put((False, e))

    threading.Thread(target=produce, name="air-pack-decode", daemon=True).start()
    try:
        while True:
            ok, item = ready.get()
            if not ok:
                raise item
            if item is end:
                return
            yield item
    finally:
        stop.set()


def offsets(generation: Generation, cache_dir: str | None) -> np.ndarray:
    """Where each packed file's bytes start in its shard, in listing order (read through the node cache).

    Mapped, so a node's processes share its pages.
    """
    return np.memmap(_cached(generation, OFFSETS, cache_dir), dtype="<i8", mode="r")


def read_files(manifest: Manifest, starts: np.ndarray, row_groups: Sequence[RowGroup], shard_files: Manifest,
               items: Sequence[int], cache: Cache) -> Iterator[CachedFile]:
    """The packed files `items` (positions in `manifest`), in order, with their bytes in `data`.

    `starts` are where each file's bytes start in its shard (see `offsets`).
    Shards are fetched whole into the node cache, `SHARDS_AHEAD` ahead, in the
    order the items first need them; each file is then one `pread` from the
    cached copy, as a loose file is one read: no decoding.
    """
    bounds = np.cumsum([0] + [u.num_rows for u in row_groups])
    shard_of_unit = np.array([u.file for u in row_groups], dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    shard = shard_of_unit[np.searchsorted(bounds, items, side="right") - 1]
    order = shard[np.flatnonzero(np.diff(shard, prepend=-1))].tolist()  # a shard per run of its files
    fetched = read_items(shard_files, order, cache, fetch_threads=SHARD_THREADS, prefetch=SHARDS_AHEAD,
                         prefetch_bytes=1 << 62)
    root, paths, sizes = manifest.root, manifest.paths, manifest.sizes
    open_shard, fd, held = -1, -1, None
    try:
        for i, k in zip(items.tolist(), shard.tolist()):
            if k != open_shard:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                f = next(fetched)  # a shard read again after another is a cache hit
                open_shard, held = k, f.data
                if held is None:
                    fd = os.open(f.local_path, os.O_RDONLY)
            size, at = int(sizes[i]), int(starts[i])
            data = held[at:at + size] if held is not None else os.pread(fd, size, at)
            yield CachedFile(f"{root}/{paths[i]}", "", size, i, data=data)
    finally:
        if fd >= 0:
            os.close(fd)


def shuffled(table: pa.Table, piece: RowGroup | RowSlice, *, seed: int, epoch: int) -> pa.Table:
    """The piece's rows in a seeded order of their own (a shuffle within the row group)."""
    unit = unit_of(piece)
    order = _epoch_order(table.num_rows, epoch, f"{seed}/{unit.file}/{unit.row_group}", True)  # type: ignore[arg-type]
    return table.take(pa.array(order))


def volume_paths(root: str, relative: pa.ChunkedArray | pa.Array) -> pa.Array | pa.ChunkedArray:
    """`root/relative` for each relative path of a shard's `path` column."""
    return pc.binary_join_element_wise(pa.scalar(root), relative, "/")
