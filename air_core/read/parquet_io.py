"""Parquet trees as units of work: row groups, and exact row ranges inside them.

Footers are read concurrently straight from the volume (one small read per
file; over the Files API one ranged request for a file's last 64 KiB); the data itself is fetched through the node cache when a unit is read.
Hive partition folders (`split=train/`) become real columns, since their
values live only in the paths.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Iterator, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from .. import volume
from ..io import transport
from ..io.cache import Cache
from ..io.files_api import RemoteFile
from ..errors import ParquetError
from ..io.fetch import ordered_map
from ..manifest import Manifest
from ..planning.rows import RowGroup, RowSlice, unit_of
from ..io.files import CachedFile, read_items

FOOTER_THREADS = 32
_OPEN_FILES = 8


def partition_values(rel_path: str) -> dict[str, str]:
    """Hive partition values from a relative path: `a=1/b=x/f.parquet` -> {'a': '1', 'b': 'x'}."""
    out = {}
    for part in rel_path.split("/")[:-1]:
        key, eq, value = part.partition("=")
        if eq and key:
            out[unquote(key)] = unquote(value)
    return out


def parquet_units(manifest: Manifest, *, threads: int = FOOTER_THREADS) -> list[RowGroup]:
    """Every row group of every file, in manifest order; footers read concurrently.

    Raises `ParquetError` when a file is unreadable, or when the files do not
    share one schema: readers would otherwise fail mid-pass, or mix types.
    """
    local_root = volume.parse(manifest.root).local

    def footer(i: int) -> tuple[dict[str, str], list[RowGroup]]:
        try:
            md = pq.read_metadata(_input(manifest, local_root, i))
            columns = _column_types(md.schema.to_arrow_schema())
        except (pa.ArrowException, OSError) as e:
            raise ParquetError(
                f"{manifest.volume_path(i)} is not a readable Parquet file ({e}); remove or replace it, "
                "or leave it out with exclude="
            ) from e
        return columns, [RowGroup(i, g, md.row_group(g).num_rows, md.row_group(g).total_byte_size)
                         for g in range(md.num_row_groups)]

    footers = ordered_map(footer, ((i, 0) for i in range(len(manifest))), threads=threads,
                          max_ahead=4 * threads, max_bytes=1 << 62)
    units: list[RowGroup] = []
    first: dict[str, str] | None = None
    for i, (columns, groups) in enumerate(footers):
        if first is None:
            first = columns
        elif columns != first:
            raise ParquetError(
                f"{manifest.volume_path(i)} and {manifest.volume_path(0)} have different columns "
                f"({_difference(columns, first)}): the files of a Parquet tree must share one schema; "
                "select the files of one schema with include=/exclude=, or rewrite the others to it"
            )
        units += groups
    return units


def _input(manifest: Manifest, local_root: str, i: int):
    """What a footer is read from: the file's local path, or over the Files API a file of ranged requests."""
    api = transport.remote()
    if api is None:
        return f"{local_root}/{manifest.paths[i]}"
    return RemoteFile(api, manifest.volume_path(i), int(manifest.sizes[i]), int(manifest.mtimes[i]))


def _column_types(schema: pa.Schema) -> dict[str, str]:
    # Nullability is left out: writers differ in it (nested fields above all), and readers do not mind.
    return {f.name: str(f.type).replace(" not null", "") for f in schema}


def _difference(these: dict[str, str], those: dict[str, str]) -> str:
    """How the columns of the first file differ from the second's, e.g. "id: string vs int64; no 'x'"."""
    out = [f"{n}: {t} vs {those[n]}" for n, t in these.items() if n in those and those[n] != t]
    out += [f"extra {n!r}" for n in these if n not in those]
    out += [f"no {n!r}" for n in those if n not in these]
    return "; ".join(out)


def schema(manifest: Manifest, units: Sequence[RowGroup]) -> pa.Schema:
    """The table schema of the first file, with partition columns appended as strings."""
    i = units[0].file if units else 0
    first = manifest.paths[i]
    try:
        s = pq.read_schema(_input(manifest, volume.parse(manifest.root).local, i))
    except (pa.ArrowException, OSError) as e:
        raise ParquetError(f"{manifest.root}/{first} is not a readable Parquet file ({e})") from e
    for key in partition_values(first):
        if key not in s.names:
            s = s.append(pa.field(key, pa.string()))
    return s


def read_units(
    manifest: Manifest,
    pieces: Iterable[RowGroup | RowSlice],
    cache: Cache,
    *,
    columns: Sequence[str] | None = None,
    fetch_threads: int = 16,
    prefetch: int = 16,
    prefetch_bytes: int = 1 << 30,
    local_root: str | None = None,
) -> Iterator[pa.Table]:
    """One table per piece, in order, with hive partition columns appended.

    Files are fetched into the node cache ahead of the consumer; a file the
    full cache did not admit is read from memory. `local_root`: as in `read_items`.
    """
    pieces = list(pieces)
    units = [unit_of(p) for p in pieces]
    last = {u.file: k for k, u in enumerate(units)}  # a file leaves memory after its last piece
    fetched = read_items(manifest, list(last), cache, fetch_threads=fetch_threads, prefetch=prefetch,
                         prefetch_bytes=prefetch_bytes, local_root=local_root)
    ready: dict[int, CachedFile] = {}
    open_files: OrderedDict[int, pq.ParquetFile] = OrderedDict()
    for k, (piece, unit) in enumerate(zip(pieces, units)):
        while unit.file not in ready:
            f = next(fetched)
            ready[f.index] = f
        pf = open_files.get(unit.file)
        if pf is None:
            pf = _open(ready[unit.file])
            open_files[unit.file] = pf
            if len(open_files) > _OPEN_FILES:
                open_files.popitem(last=False)[1].close()
        open_files.move_to_end(unit.file)
        table = pf.read_row_group(unit.row_group, columns=list(columns) if columns is not None else None)
        if last[unit.file] == k:
            del ready[unit.file]
            open_files.pop(unit.file).close()
        if isinstance(piece, RowSlice):
            table = table.slice(piece.start, piece.num_rows)
        for key, value in partition_values(manifest.paths[unit.file]).items():
            if key not in table.column_names and (columns is None or key in columns):
                table = table.append_column(key, pa.array([value] * table.num_rows, pa.string()))
        yield table
    for pf in open_files.values():
        pf.close()


def _open(f: CachedFile) -> pq.ParquetFile:
    try:
        source = pa.BufferReader(f.data) if f.data is not None else f.local_path
        return pq.ParquetFile(source)
    except (pa.ArrowException, OSError) as e:
        raise ParquetError(f"{f.path} is not a readable Parquet file ({e})") from e
