"""What a read task runs, on whichever Ray worker it lands.

Each read function is a named closure over plain data: its `Part` of the
source (the reader's pieces with their own rows of the listing, and the
local volume folder the driver resolved: a worker may not share the
driver's `AIR_VOLUMES_ROOT`), the cache folder when one was given, and the
options. It reads through the cache of the node it runs on (its own
`AIR_CACHE_DIR`, or default), so a second execution on the node reads
nothing from the volume, and turns what the part yields into blocks: file
rows into `path` / `local_path` / `size` / `bytes`, tables as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from air_core.doors import DEFAULT_PREFETCH, Cache, CachedFile, FetchError, Part, without_skips
from air_core.read.media import with_contents

from .task_plan import BINARY_BYTES, binary_block_bytes


@dataclass(frozen=True)
class TaskSource:
    """Where a task caches to and how it fetches; `cache_dir` None: the default of the node the task runs on.

    `verify`: hits hash each copy against its checksum (`air_core.doors.Cache`).
    """

    cache_dir: str | None
    cache_limit: int | None
    verify: bool
    fetch: dict

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


def files_read_fn(source: TaskSource, part: Part, *, include_paths: bool, contents_type: pa.DataType | None,
                  max_block_bytes: int, max_block_rows: int | None = None,
                  keep_count: bool = False) -> Callable[[], Iterator[pa.Table]]:
    """A read task's function for file rows: one row per file, with its contents as `contents_type`.

    A block ends once its files hold `max_block_bytes` (less, when that keeps
    `binary` contents under 2 GiB), whether or not their contents are in it: a
    consumer that opens `local_path` itself then gets its work in bounded
    pieces as soon as they are fetched. `max_block_rows`
    (Ray's per-task row limit, as in `take(n)`) ends a block early and bounds
    the fetches ahead, so a limited read fetches little more than it needs.
    `keep_count`: a file skipped under `on_error="skip"` is stood in for (see
    `air_core.doors.without_skips`). A packed file has no copy of its own: its
    `local_path` is empty, and its bytes come as a view of its row group's
    cached range.
    """
    schema = files_schema(include_paths=include_paths, contents_type=contents_type)
    if contents_type == pa.binary():
        max_block_bytes = binary_block_bytes(max_block_bytes, part.largest)

    def block(files: list[CachedFile]) -> pa.Table:
        columns = {"path": [f.path for f in files]} if include_paths else {}
        columns["local_path"] = [f.local_path for f in files]
        columns["size"] = [f.size for f in files]
        if contents_type is not None:
            columns["bytes"] = contents(files, contents_type)
        return pa.table(columns, schema=schema)

    def read_uc_volume_files() -> Iterator[pa.Table]:
        files: list[CachedFile] = []
        held = 0
        fetch = dict(source.fetch)
        if max_block_rows:
            fetch["prefetch"] = min(fetch.get("prefetch", DEFAULT_PREFETCH), max_block_rows)
        for f in without_skips(part.read(source.cache(), **fetch), keep_count=keep_count):
            files.append(f)
            held += f.size
            if held >= max_block_bytes or len(files) == max_block_rows:
                yield block(files)
                files, held = [], 0
        if files:
            yield block(files)

    return read_uc_volume_files


def table_read_fn(source: TaskSource, part: Part, *, columns: list[str] | None, include_paths: bool,
                  media_bytes: Sequence[str] = ()) -> Callable[[], Iterator[pa.Table]]:
    """A read task's function for a table's rows: one block per piece (a row group, or a range of rows), or per
    bundle of a shuffled mixture's pieces (their rows' paths given row by row). `media_bytes`: media columns
    (local paths of the copies the task fetched) given as the files' bytes."""

    def read_uc_volume_tables() -> Iterator[pa.Table]:
        for path, table in part.read(source.cache(), columns=columns, **source.fetch):
            if media_bytes:
                table = with_contents(table, media_bytes)
            if include_paths:
                paths = path if isinstance(path, pa.Array) else pa.array([path] * table.num_rows, pa.string())
                table = table.append_column("path", paths)
            yield table if columns is None else table.select([c for c in columns if c in table.column_names])

    return read_uc_volume_tables


def contents(files: Sequence[CachedFile], type: pa.DataType) -> pa.Array:
    """The files' bytes as one Arrow `binary` or `large_binary` array: read straight into Arrow memory, or
    copied once from the bytes (or view) a file came with."""
    offsets = np.zeros(len(files) + 1, dtype=np.int64 if type == pa.large_binary() else np.int32)
    np.cumsum([f.size for f in files], out=offsets[1:])
    data = pa.allocate_buffer(int(offsets[-1]))
    view = memoryview(data).cast("B")  # unsigned bytes, as `bytes` are: a file held in memory is assigned
    for f, start in zip(files, offsets.tolist()):
        part = view[start:start + f.size]
        if f.data is not None:  # streamed past a full cache, or a view of a pack's cached range
            part[:] = f.data
            continue
        with open(f.local_path, "rb", buffering=0) as src:
            done = 0
            while done < f.size and (n := src.readinto(part[done:])):
                done += n
        if done != f.size:
            raise FetchError(0, f"{f.path}: its cached copy {f.local_path} holds {done} of {f.size} bytes")
    return pa.Array.from_buffers(type, len(files), [None, pa.py_buffer(offsets), data])
