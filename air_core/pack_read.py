"""Reading a pack as the files it holds: its listing, its row groups, and each file through the node cache.

A generation's shards are fetched whole into the node cache, as any large
file is: in concurrent 16 MiB ranges, each its own open (bandwidth is per
open file), a couple of shards ahead of the consumer. Each file is then one
`pread` of its bytes from the cached copy, where the pack recorded them
(`.offsets`): no Parquet decoding, one copy, as a loose file is one read.

Fetching only a stream's byte ranges would spare the rest of each shard on
nodes that read a part of it; the cache keys whole files, and a rank's share
is a contiguous run of row groups, so a node fetches its own shards plus at
most the two it shares with its neighbours.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from typing import Iterator, Sequence

import numpy as np

from . import volume
from .cache import Cache
from .errors import VolumePathError
from .listing import list_folder
from .manifest import Manifest
from .pack_store import INDEX, OFFSETS, Generation
from .row_plan import RowGroup
from .stream import CachedFile, read_items

# Shards fetched at once, ahead of the consumer. Bandwidth is per open stream and the cache copies a
# shard as 8 concurrent ranges: 3 shards keep 24 streams busy (20,000 files in 3 shards of 1 GiB under
# the emulated volume: 11,700 files/s cold, against 8,200 with 2 shards ahead and 6,300 with 1).
SHARDS_AHEAD = 3
SHARD_THREADS = 3


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


def offsets(generation: Generation, cache_dir: str | None) -> np.ndarray:
    """Where each packed file's bytes start in its shard, in listing order (read through the node cache).

    Mapped, so a node's processes share its pages.
    """
    return np.memmap(_cached(generation, OFFSETS, cache_dir), dtype="<i8", mode="r")


def shard_of(row_groups: Sequence[RowGroup]) -> np.ndarray:
    """The shard of each packed file, in listing order."""
    return np.repeat([u.file for u in row_groups], [u.num_rows for u in row_groups]).astype(np.int64)


def read_files(manifest: Manifest, starts: np.ndarray, shards: np.ndarray, shard_files: Manifest,
               items: Sequence[int], cache: Cache, *, local_root: str | None = None) -> Iterator[CachedFile]:
    """The packed files `items` (positions in `manifest`), in order, with their bytes in `data`.

    `starts` and `shards` give, for each position, where its bytes start in
    its shard and which shard (an index into `shard_files`) that is.
    `local_root`: where `shard_files.root` lives on this machine, as in
    `read_items`. Each file is one `pread` of the cached shard, as a loose
    file is one read: no Parquet decoding.
    """
    root, paths = manifest.root, manifest.paths
    fd, current = -1, None
    try:
        for i, shard, at, size in _located(manifest, starts, shards, shard_files, items, cache, local_root):
            if shard is not current:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                current = shard
                if shard.data is None:
                    fd = os.open(shard.local_path, os.O_RDONLY)
            data = shard.data[at:at + size] if shard.data is not None else os.pread(fd, size, at)
            yield CachedFile(f"{root}/{paths[i]}", "", size, i, data=data)
    finally:
        if fd >= 0:
            os.close(fd)


def read_views(manifest: Manifest, starts: np.ndarray, shards: np.ndarray, shard_files: Manifest,
               items: Sequence[int], cache: Cache, *,
               local_root: str | None = None) -> Iterator[tuple[int, memoryview]]:
    """(item, a view of its bytes) for the packed files `items`, in order (arguments as in `read_files`).

    Views of the mapped cached shard, for a consumer that copies each file
    once into memory of its own (a block's Arrow buffer): no `bytes` between.
    """
    view, current = memoryview(b""), None
    for i, shard, at, size in _located(manifest, starts, shards, shard_files, items, cache, local_root):
        if shard is not current:
            current = shard
            view = memoryview(shard.data if shard.data is not None else _mapped(shard.local_path))
        yield i, view[at:at + size]


def _located(manifest: Manifest, starts: np.ndarray, shards: np.ndarray, shard_files: Manifest,
             items: Sequence[int], cache: Cache, local_root: str | None) -> Iterator[tuple[int, CachedFile, int, int]]:
    """(item, its shard's cached copy, where its bytes start, its size), in order.

    Shards are fetched whole into the node cache, `SHARDS_AHEAD` ahead, in
    the order the items need them; a shard needed again after another is
    asked for again (a cache hit).
    """
    items = np.asarray(items, dtype=np.int64)
    shard = shards[items]
    order = shard[np.flatnonzero(np.diff(shard, prepend=-1))].tolist()  # a shard per run of its files
    fetched = read_items(shard_files, order, cache, fetch_threads=SHARD_THREADS, prefetch=SHARDS_AHEAD,
                         prefetch_bytes=1 << 62, local_root=local_root)
    sizes = manifest.sizes
    open_shard, f = -1, None
    for i, k in zip(items.tolist(), shard.tolist()):
        if k != open_shard:
            open_shard, f = k, next(fetched)
        yield i, f, int(starts[i]), int(sizes[i])  # type: ignore[misc]


def _mapped(path: str) -> mmap.mmap:
    # Unmapped once the last view of it goes: a consumer may still hold one when the next shard begins.
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
