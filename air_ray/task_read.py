"""What a read task runs, on whichever Ray worker it lands.

Each read function is a named closure over plain data: its group's rows of
the listing, the local volume folder the driver resolved (a worker may not
share the driver's `AIR_VOLUMES_ROOT`), the cache folder when one was given,
and the options. It fetches through the cache of the node it runs on (its
own `AIR_CACHE_DIR`, or default), on the core's fetch threads, so a second
execution on the node reads nothing from the volume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from air_core import (
    DEFAULT_PREFETCH, Cache, CachedFile, FetchError, Manifest, RowGroup, RowSlice, read_items, unit_of,
    without_skips,
)
from air_core.pack_read import Placement, read_views
from air_core.tabular import read_units

from .task_plan import BINARY_BYTES, binary_block_bytes

Row = tuple[str, int, int]  # (path relative to the root, size, mtime_ns)


@dataclass(frozen=True)
class TaskSource:
    """Where a task reads from and caches to; `cache_dir` None: the default of the node the task runs on.

    `verify`: hits hash each copy against its checksum (`air_core.Cache`).
    """

    root: str
    local_root: str
    fingerprint: str
    cache_dir: str | None
    cache_limit: int | None
    verify: bool
    fetch: dict

    def manifest(self, rows: Sequence[Row]) -> Manifest:
        """The task's own slice of the listing, in read order."""
        return Manifest.from_rows(self.root, rows, self.fingerprint)

    def cache(self) -> Cache:
        """This process's handle on its node's cache (resolved here, not on the driver)."""
        return Cache(self.cache_dir, limit_bytes=self.cache_limit, verify=self.verify)


def bytes_type(largest: int) -> pa.DataType:
    """The `bytes` column's type for files of at most `largest` bytes.

    `binary` (32-bit offsets) whenever a block can be kept under its 2 GiB by
    closing it early (see `task_plan.binary_block_bytes`): pyarrow turns it
    into Python bytes several times faster than `large_binary`, which is left
    for files over 1 GiB.
    """
    return pa.binary() if largest <= BINARY_BYTES // 2 else pa.large_binary()


def files_schema(*, include_paths: bool, contents_type: pa.DataType | None) -> pa.Schema:
    """Rows of files mode: `path` (volume path), `local_path` (node-local copy), `size`, `bytes`.

    `contents_type` is the `bytes` column's type (see `bytes_type`); None leaves the column out.
    """
    fields = [pa.field("path", pa.string())] if include_paths else []
    fields += [pa.field("local_path", pa.string()), pa.field("size", pa.int64())]
    if contents_type is not None:
        fields.append(pa.field("bytes", contents_type))
    return pa.schema(fields)


def files_read_fn(source: TaskSource, rows: Sequence[Row], *, include_paths: bool, contents_type: pa.DataType | None,
                  max_block_bytes: int, max_block_rows: int | None = None,
                  keep_count: bool = False) -> Callable[[], Iterator[pa.Table]]:
    """A read task's function for files mode: one row per file, with its contents as `contents_type`.

    A block ends once its files hold `max_block_bytes` (less, when that keeps
    `binary` contents under 2 GiB), whether or not their contents are in it: a
    consumer that opens `local_path` itself then gets its work in bounded
    pieces as soon as they are fetched. `max_block_rows`
    (Ray's per-task row limit, as in `take(n)`) ends a block early and bounds
    the fetches ahead, so a limited read fetches little more than it needs.
    `keep_count`: a file skipped under `on_error="skip"` is stood in for (see
    `air_core.without_skips`).
    """
    schema = files_schema(include_paths=include_paths, contents_type=contents_type)
    if contents_type == pa.binary():
        max_block_bytes = binary_block_bytes(max_block_bytes, max(r[1] for r in rows))

    def block(files: list[CachedFile]) -> pa.Table:
        columns = {"path": [f.path for f in files]} if include_paths else {}
        columns["local_path"] = [f.local_path for f in files]
        columns["size"] = [f.size for f in files]
        if contents_type is not None:
            columns["bytes"] = contents(files, contents_type)
        return pa.table(columns, schema=schema)

    def read_uc_volume_files() -> Iterator[pa.Table]:
        manifest = source.manifest(rows)
        files: list[CachedFile] = []
        held = 0
        fetch = dict(source.fetch)
        if max_block_rows:
            fetch["prefetch"] = min(fetch.get("prefetch", DEFAULT_PREFETCH), max_block_rows)
        records = read_items(manifest, range(len(manifest)), source.cache(), local_root=source.local_root, **fetch)
        for f in without_skips(records, keep_count=keep_count):
            files.append(f)
            held += f.size
            if held >= max_block_bytes or len(files) == max_block_rows:
                yield block(files)
                files, held = [], 0
        if files:
            yield block(files)

    return read_uc_volume_files


def parquet_read_fn(source: TaskSource, rows: Sequence[Row], pieces: Sequence[RowGroup | RowSlice], *,
                    columns: list[str] | None, include_paths: bool) -> Callable[[], Iterator[pa.Table]]:
    """A read task's function for Parquet mode: one table per row group (or row range).

    `rows` are the files the pieces touch; each piece's `file` indexes `rows`.
    """

    def read_uc_volume_parquet() -> Iterator[pa.Table]:
        manifest = source.manifest(rows)
        tables = read_units(manifest, pieces, source.cache(), columns=columns, local_root=source.local_root,
                            **source.fetch)
        for piece, table in zip(pieces, tables):
            if include_paths:
                path = manifest.volume_path(unit_of(piece).file)
                table = table.append_column("path", pa.array([path] * table.num_rows, pa.string()))
            yield table if columns is None else table.select([c for c in columns if c in table.column_names])

    return read_uc_volume_parquet


def pack_read_fn(source: TaskSource, rows: Sequence[Row], where: Placement, shard_rows: Sequence[Row], *, root: str,
                 include_paths: bool, contents_type: pa.DataType | None, max_block_bytes: int,
                 max_block_rows: int | None = None) -> Callable[[], Iterator[pa.Table]]:
    """A read task's function over a pack: files mode's rows, each file read from its row group's cached range.

    `rows` are the task's packed files (relative to `root`, the packed
    folder) in read order; `where` places each one in its row group of one
    of `shard_rows` (relative to `source.root`, the pack's folder), as
    `Placement.take` gives it. Each file's bytes are copied once, from the
    mapped range into the block. `local_path` is empty: a packed file has no
    copy of its own. Blocks close as in files mode.
    """
    schema = files_schema(include_paths=include_paths, contents_type=contents_type)
    if contents_type == pa.binary():
        max_block_bytes = binary_block_bytes(max_block_bytes, max(r[1] for r in rows))

    def block(manifest: Manifest, files: list[tuple[int, memoryview]]) -> pa.Table:
        columns = {"path": [manifest.volume_path(i) for i, _ in files]} if include_paths else {}
        columns["local_path"] = [""] * len(files)
        columns["size"] = [len(view) for _, view in files]
        if contents_type is not None:
            columns["bytes"] = views_array([view for _, view in files], contents_type)
        return pa.table(columns, schema=schema)

    def read_uc_volume_pack() -> Iterator[pa.Table]:
        manifest = Manifest.from_rows(root, rows, source.fingerprint)
        files: list[tuple[int, memoryview]] = []
        held = 0
        for i, view in read_views(manifest, where, source.manifest(shard_rows), range(len(rows)), source.cache(),
                                  local_root=source.local_root):
            files.append((i, view))
            held += len(view)
            if held >= max_block_bytes or len(files) == max_block_rows:
                yield block(manifest, files)
                files, held = [], 0
        if files:
            yield block(manifest, files)

    return read_uc_volume_pack


def views_array(views: Sequence[memoryview], type: pa.DataType) -> pa.Array:
    """Bytes held in memory as one Arrow `binary` or `large_binary` array: one copy each, into Arrow memory."""
    offsets = np.zeros(len(views) + 1, dtype=np.int64 if type == pa.large_binary() else np.int32)
    np.cumsum([len(v) for v in views], out=offsets[1:])
    data = pa.allocate_buffer(int(offsets[-1]))
    target = memoryview(data).cast("B")
    for view, start in zip(views, offsets.tolist()):
        target[start:start + len(view)] = view
    return pa.Array.from_buffers(type, len(views), [None, pa.py_buffer(offsets), data])


def contents(files: Sequence[CachedFile], type: pa.DataType) -> pa.Array:
    """The files' bytes as one Arrow `binary` or `large_binary` array, read straight into Arrow memory."""
    offsets = np.zeros(len(files) + 1, dtype=np.int64 if type == pa.large_binary() else np.int32)
    np.cumsum([f.size for f in files], out=offsets[1:])
    data = pa.allocate_buffer(int(offsets[-1]))
    view = memoryview(data).cast("B")  # unsigned bytes, as `bytes` are: a file held in memory is assigned
    for f, start in zip(files, offsets.tolist()):
        part = view[start:start + f.size]
        if f.data is not None:  # streamed past a full cache: already in memory
            part[:] = f.data
            continue
        with open(f.local_path, "rb", buffering=0) as src:
            done = 0
            while done < f.size and (n := src.readinto(part[done:])):
                done += n
        if done != f.size:
            raise FetchError(0, f"{f.path}: its cached copy {f.local_path} holds {done} of {f.size} bytes")
    return pa.Array.from_buffers(type, len(files), [None, pa.py_buffer(offsets), data])
