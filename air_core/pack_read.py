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
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import volume
from .cache import Cache
from .errors import VolumePathError
from .manifest import Manifest, list_folder
from .pack_store import INDEX, Generation
from .plan import _epoch_order
from .row_plan import RowGroup, RowSlice, unit_of
from .stream import CachedFile
from .tabular import read_units

SHARDS_AHEAD = 2  # the shard being decoded and the next one, fetched meanwhile
SHARD_THREADS = 2


def index(generation: Generation, cache_dir: str | None) -> Manifest:
    """The packed files' listing (root: the packed folder), under a fingerprint of the pack's own.

    Read through the node cache: every process of the node maps one local copy.
    """
    vpath = f"{generation.path}/{INDEX}"
    local = f"{volume.parse(generation.path).local}/{INDEX}"
    try:
        st = os.stat(local)
    except FileNotFoundError:
        raise VolumePathError(f"{vpath} is missing: the pack is incomplete or was changed by hand; "
                              "pack the source again") from None
    entry = Cache(cache_dir).get(local, vpath, st.st_size, st.st_mtime_ns) or local
    m = Manifest.load(entry)
    # The same files as the loose folder, but planned by row group: a state saved over one must not resume the other.
    fingerprint = hashlib.sha256(f"pack\n{generation.path}\n{m.fingerprint}".encode()).hexdigest()[:32]
    return Manifest(m.root, m._blob, m._offsets, m.sizes, m.mtimes, fingerprint)


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
    """One table per piece of the pack (a row group, or rows of one), its shards fetched ahead."""
    return read_units(shard_files, pieces, cache, columns=columns, fetch_threads=SHARD_THREADS,
                      prefetch=SHARDS_AHEAD, prefetch_bytes=1 << 62, local_root=local_root)


def read_files(manifest: Manifest, row_groups: Sequence[RowGroup], shard_files: Manifest, items: Sequence[int],
               cache: Cache) -> Iterator[CachedFile]:
    """The packed files `items` (positions in `manifest`), in order, with their bytes in `data`.

    Consecutive items of one row group are read from one decode of it.
    """
    starts = np.cumsum([0] + [u.num_rows for u in row_groups])
    items = np.asarray(items, dtype=np.int64)
    unit = np.searchsorted(starts, items, side="right") - 1
    cut = np.flatnonzero(np.diff(unit)) + 1
    runs = [(int(unit[run[0]]), items[run]) for run in np.split(np.arange(len(items)), cut) if len(run)]
    pieces = [RowSlice(row_groups[u], int(f.min() - starts[u]), int(f.max() - starts[u]) + 1) for u, f in runs]
    root, paths, sizes = manifest.root, manifest.paths, manifest.sizes
    for (u, files), piece, table in zip(runs, pieces, read_pieces(shard_files, pieces, cache, columns=["bytes"])):
        blobs = table.column(0).to_pylist()
        first = int(starts[u]) + piece.start
        for i in files.tolist():
            yield CachedFile(f"{root}/{paths[i]}", "", int(sizes[i]), i, data=blobs[i - first])


def shuffled(table: pa.Table, piece: RowGroup | RowSlice, *, seed: int, epoch: int) -> pa.Table:
    """The piece's rows in a seeded order of their own (a shuffle within the row group)."""
    unit = unit_of(piece)
    order = _epoch_order(table.num_rows, epoch, f"{seed}/{unit.file}/{unit.row_group}", True)  # type: ignore[arg-type]
    return table.take(pa.array(order))


def volume_paths(root: str, relative: pa.ChunkedArray | pa.Array) -> pa.Array | pa.ChunkedArray:
    """`root/relative` for each relative path of a shard's `path` column."""
    return pc.binary_join_element_wise(pa.scalar(root), relative, "/")
