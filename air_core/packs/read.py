"""Reading a pack as the files it holds: its listing, its row groups, and each file through the node cache.

A stream fetches from the volume only the row groups it reads. A row
group's files lie one after the other in its shard (its `bytes` column
chunk: each file's bytes after their length), so the row group is one byte
range, from its first file's recorded offset (`.offsets`) to its last file's
end: no Parquet decoding. Each range is a node cache entry of its own, keyed
by the shard's version and the range. A node then holds the row groups of
its ranks' shares, not whole shards (a row group that a rank boundary splits
is fetched by both nodes: at most two per rank), and a later epoch, or
another worker of the node, reads them from the cache. Each file is one
`pread` of its row group's cached range, as a loose file is one read.

Ranges are fetched many at once, ahead of the consumer and bounded in bytes,
in the order the stream needs them: a volume's bandwidth is per open file.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from ..io import transport, volume
from ..io.cache import Cache, read_bytes
from ..errors import VolumePathError
from ..io.fetch import ordered_map, retrying
from ..io.listing import list_folder
from ..manifest import Manifest
from .store import INDEX, OFFSETS, Generation
from ..planning.rows import RowGroup
from ..io.files import CachedFile

# Row groups fetched at once, each through its own open (bandwidth is per open): 24 streams in flight. Whole
# shards, fetched in 8 ranges each, read 20,000 files in 3 shards of 1 GiB under the emulated volume at
# 11,700 files/s cold with 3 shards at once (24 streams), 8,200 with 2 and 6,300 with 1.
SPAN_THREADS = 24
# Ahead of the consumer, in cached ranges on disk (or in memory past a full cache): enough for every thread
# to hold a 16 MiB row group and the consumer one more.
SPANS_AHEAD = 64
SPANS_AHEAD_BYTES = 512 << 20
# A 16 MiB range takes 0.1-0.3 s from object storage: a hedge re-reads all of it, so only a stuck one earns it.
_SPAN_HEDGE_FLOOR_S = 1.0


class Placement(NamedTuple):
    """Where packed files lie in their shards.

    Attributes:
        starts: per file, where its bytes start in its shard.
        groups: per file, its row group (a row of `spans`).
        spans: per row group, `(shard, start, stop)`: the byte range of its
            files in that shard (an int64 array of shape (row groups, 3)).
    """

    starts: np.ndarray
    groups: np.ndarray
    spans: np.ndarray

    def take(self, files: Sequence[int]) -> tuple[Placement, list[int]]:
        """The placement of `files` alone, numbered 0.. in that order, and the shards they lie in.

        Its `spans` are those of the files' row groups, their `shard` an index
        into the shards returned: what a task that carries only its own part
        of the listing reads with.
        """
        files = np.asarray(files, dtype=np.int64)
        used, groups = np.unique(self.groups[files], return_inverse=True)
        shards, local = np.unique(self.spans[used, 0], return_inverse=True)
        spans = self.spans[used].copy()
        spans[:, 0] = local
        return Placement(np.asarray(self.starts[files]), groups.astype(np.int64), spans), shards.tolist()


def index(generation: Generation, cache_dir: str | None) -> Manifest:
    """The packed files' listing (root: the packed folder), under a fingerprint of the pack's own.

    Read through the node cache: every process of the node maps one local copy.
    """
    m = Manifest.from_buffer(_cached(generation, INDEX, cache_dir), f"{generation.path}/{INDEX}")
    # The same files as the loose folder, but planned by row group: a state saved over one must not resume the other.
    fingerprint = hashlib.sha256(f"pack\n{generation.path}\n{m.fingerprint}".encode()).hexdigest()[:32]
    return Manifest(m.root, m._blob, m._offsets, m.sizes, m.mtimes, fingerprint)


def _cached(generation: Generation, name: str, cache_dir: str | None) -> mmap.mmap | bytes:
    """The generation's file `name`: its copy in the node cache, mapped; past a full cache the file itself,
    mapped from the mount (FUSE) or read into memory (the Files API, where no local file stands for it)."""
    vpath, local = f"{generation.path}/{name}", f"{volume.parse(generation.path).local}/{name}"
    try:
        size, mtime_ns = transport.stat(local)
    except FileNotFoundError:
        raise VolumePathError(f"{vpath} is missing: the pack is incomplete or was changed by hand; "
                              "pack the source again") from None
    copy = Cache(cache_dir).get(local, vpath, size, mtime_ns)
    if copy is None and transport.remote(local) is not None:
        return read_bytes(local, vpath, size, mtime_ns)
    return _mapped(copy or local)


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


def offsets(generation: Generation, cache_dir: str | None) -> np.ndarray:
    """Where each packed file's bytes start in its shard, in listing order (read through the node cache).

    Mapped, so a node's processes share its pages.
    """
    return np.frombuffer(_cached(generation, OFFSETS, cache_dir), dtype="<i8")


def placement(row_groups: Sequence[RowGroup], starts: np.ndarray, sizes: np.ndarray) -> Placement:
    """Where the packed files lie. Pure.

    Args:
        row_groups: the pack's row groups, in order (`units`).
        starts: where each file's bytes start in its shard (`offsets`).
        sizes: each file's size (the pack's listing's).
    """
    rows = np.array([u.num_rows for u in row_groups], dtype=np.int64)
    last = np.cumsum(rows) - 1
    first = last - rows + 1
    spans = np.stack([np.array([u.file for u in row_groups], dtype=np.int64), np.asarray(starts[first], np.int64),
                      np.asarray(starts[last], np.int64) + np.asarray(sizes[last], np.int64)], axis=1)
    return Placement(starts, np.repeat(np.arange(len(rows), dtype=np.int64), rows), spans.reshape(-1, 3))


def read_files(manifest: Manifest, where: Placement, shard_files: Manifest, items: Sequence[int], cache: Cache, *,
               local_root: str | None = None) -> Iterator[CachedFile]:
    """The packed files `items` (positions in `manifest`), in order, with their bytes in `data`.

    `where` places each position in its shard, an index into `shard_files`.
    `local_root`: where `shard_files.root` lives on this machine, as in
    `read_items`. Each file is one `pread` of its row group's cached range,
    as a loose file is one read: no Parquet decoding.
    """
    root, paths = manifest.root, manifest.paths
    fd, current = -1, None
    try:
        for i, span, at, size in _located(manifest, where, shard_files, items, cache, local_root):
            if span is not current:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                current = span
                if span.data is None:
                    fd = os.open(span.local_path, os.O_RDONLY)
            data = span.data[at:at + size] if span.data is not None else os.pread(fd, size, at)
            yield CachedFile(f"{root}/{paths[i]}", "", size, i, data=data)
    finally:
        if fd >= 0:
            os.close(fd)


def read_views(manifest: Manifest, where: Placement, shard_files: Manifest, items: Sequence[int], cache: Cache, *,
               local_root: str | None = None) -> Iterator[tuple[int, memoryview]]:
    """(item, a view of its bytes) for the packed files `items`, in order (arguments as in `read_files`).

    Views of the mapped cached range, for a consumer that copies each file
    once into memory of its own (a block's Arrow buffer): no `bytes` between.
    """
    view, current = memoryview(b""), None
    for i, span, at, size in _located(manifest, where, shard_files, items, cache, local_root):
        if span is not current:
            current = span
            view = memoryview(span.data if span.data is not None or not span.size else _mapped(span.local_path))
        yield i, view[at:at + size]


def read_spans(shard_files: Manifest, spans: np.ndarray, cache: Cache, *,
               local_root: str | None = None) -> Iterator[CachedFile]:
    """Each `(shard, start, stop)` of `spans`, in order, through the node cache: its `local_path` holds the
    shard's bytes [start, stop) from its offset 0 (or, past a full cache, `data` does).

    `SPAN_THREADS` ranges in flight, up to `SPANS_AHEAD` or `SPANS_AHEAD_BYTES`
    ahead of the consumer; a stuck one is hedged, a failed one retried.
    """
    local_root = local_root or volume.parse(shard_files.root).local
    root, paths, sizes, mtimes = shard_files.root, shard_files.paths, shard_files.sizes, shard_files.mtimes

    def fetch(span: tuple[int, int, int]) -> CachedFile:
        k, start, stop = span
        path, size, mtime = paths[k], int(sizes[k]), int(mtimes[k])
        vpath, src = f"{root}/{path}", f"{local_root}/{path}"

        def once() -> CachedFile:
            entry = cache.get(src, vpath, size, mtime, (start, stop))
            if entry is not None:
                return CachedFile(vpath, entry, stop - start, k)
            return CachedFile(vpath, src, stop - start, k, cached=False,
                              data=read_bytes(src, vpath, size, mtime, (start, stop)))

        return retrying(once, f"{vpath} (bytes {start}-{stop})")

    def hit(span: tuple[int, int, int]) -> CachedFile | None:
        k, start, stop = span
        vpath = f"{root}/{paths[k]}"
        entry = cache.lookup(vpath, int(sizes[k]), int(mtimes[k]), (start, stop))
        return None if entry is None else CachedFile(vpath, entry, stop - start, k)

    return ordered_map(fetch, ((tuple(s), s[2] - s[1]) for s in spans.tolist()), threads=SPAN_THREADS,
                       max_ahead=SPANS_AHEAD, max_bytes=SPANS_AHEAD_BYTES, quick=hit, hedge_floor=_SPAN_HEDGE_FLOOR_S)


def _located(manifest: Manifest, where: Placement, shard_files: Manifest, items: Sequence[int], cache: Cache,
             local_root: str | None) -> Iterator[tuple[int, CachedFile, int, int]]:
    """(item, its row group's cached range, where its bytes start in that range, its size), in order.

    A range per run of the items' row groups, in the order they need them; a
    row group needed again after another is asked for again (a cache hit).
    """
    items = np.asarray(items, dtype=np.int64)
    group = where.groups[items]
    runs = where.spans[group[np.flatnonzero(np.diff(group, prepend=-1))]]
    fetched = read_spans(shard_files, runs, cache, local_root=local_root)
    base = iter(runs[:, 1].tolist())
    starts, sizes = where.starts, manifest.sizes
    open_group, span, begin = -1, None, 0
    for i, g in zip(items.tolist(), group.tolist()):
        if g != open_group:
            open_group, span, begin = g, next(fetched), next(base)
        yield i, span, int(starts[i]) - begin, int(sizes[i])  # type: ignore[misc]


def _mapped(path: str) -> mmap.mmap:
    # Unmapped once the last view of it goes: a consumer may still hold one when the next range begins.
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
