"""Packs of records that name media: a row per record, each medium's bytes in the record's own row.

A folder that readers read as records naming media (HF's folder convention,
a `metadata.jsonl` beside the images, or records given `media=` and
`media_dir=`, see `air_core.read.media`) is packed as those records, not as
loose files: each shard row is a record, its fields as the records hold them
and each media column, under the name the rows give it, holding HF's media
storage, `struct<bytes, path>` (a list of them for a list of paths): the
medium's bytes and its path as the record names it. The media are then read
with their records' row groups, a range of a shard, never file by file. A
medium named by several records is stored in each of their rows: a row group
is then whole in itself, so a rank reads only its own row groups, and any
Parquet reader reads a row's media with it.

Packing reads the records first (they are small) and learns each medium's
version from the source's listing, or by a `stat` where it lies outside it;
a record naming a missing medium, one outside the volume, or an image that
does not open is refused as a reader refuses it (naming the records file,
the record's line or row and the path), or left out with `on_error="skip"`.
The generation is named for the records' listing, every medium's version and
the options: packing an unchanged set again writes nothing, a changed medium
makes a new generation. Records keep their order; shards and row groups are
cut by the bytes of their media (`cut`), a row group never across two
records files, so the pack's listing (the records files) splits it as the
records split (HF's `train/` and `test/`).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from tqdm import tqdm

from ..errors import FetchError
from ..io import transport
from ..io.cache import Cache, read_bytes
from ..io.fetch import ordered_map, retrying
from ..manifest import Manifest
from .layout import cuts

if TYPE_CHECKING:
    import pyarrow as pa

    from ..read.media import MediaPlan
    from ..source import Source

_READ_AHEAD_BYTES = 256 << 20
_BINARY_MAX = 2**31 - 1


@dataclass(frozen=True)
class Records:
    """The records to pack, read, with their media located and versioned.

    Attributes:
        manifest: the records files' listing (what the pack lists).
        schema: the records' schema (each media column under its records' name, holding paths).
        tables: per records file, its records as read.
        kept: per record to pack, in order: (records file, its row in that file's table).
        media: per record to pack: (column, the path as named, its volume path) of each medium it names.
        versions: every medium's volume path -> its (size, mtime in ns).
        skipped: where each record left out lay, with on_error="skip".
    """

    manifest: Manifest
    schema: pa.Schema
    tables: list[pa.Table]
    kept: list[tuple[int, int]]
    media: list[list[tuple[str, str, str]]]
    versions: dict[str, tuple[int, int]]
    skipped: list[str]

    def sizes(self) -> np.ndarray:
        """Each record's bytes: its media's, and its share of its file's records (a record of text alone)."""
        mean = [t.nbytes // max(1, t.num_rows) for t in self.tables]
        return np.array([mean[f] + sum(self.versions[v][0] for _, _, v in named)
                         for (f, _), named in zip(self.kept, self.media)], dtype=np.int64)

    def key(self) -> str:
        """A digest of the records' listing and of every medium's version, in record order."""
        digest = hashlib.sha256(self.manifest.fingerprint.encode())
        for named in self.media:
            for column, given, vpath in named:
                digest.update(f"\0{column}\0{given}\0{vpath}\0{self.versions[vpath]}".encode())
        return digest.hexdigest()


def read_records(source: Source, listing: Manifest, *, threads: int, on_error: str) -> Records:
    """The records of `source` (a `MediaReader`'s), read through the node cache, and each medium they name located
    and versioned: from `listing` (the packed folder's) where it lies there, else by a `stat`.

    Raises:
        MediaError: a record names a medium that is missing, a folder, or outside the volume (with
            `on_error="raise"`), naming the records file, the record's line (or row) and the path.
    """
    reader = source.reader
    plan: MediaPlan = reader.plan()
    manifest = source.manifest
    units = reader.units()
    cache = Cache(source.cache_dir)
    skipped: list[str] = []
    tables: list[list[pa.Table]] = [[] for _ in range(len(manifest))]
    for k, table in reader.records.read_pieces(units, cache, columns=None, fetch_threads=threads,
                                               on_error=on_error, skipped=skipped):
        tables[units[k].file].append(table)
    schema = reader.records.schema()
    whole = [_concat(t, schema) for t in tables]
    listed = {p: (int(s), int(m)) for p, s, m in zip(listing.paths.tolist(), listing.sizes.tolist(),
                                                     listing.mtimes.tolist())}
    root = listing.root + "/"
    columns = [m.column for m in plan.media]
    found: list[tuple[int, int, str, list[tuple[str, str, str]] | tuple[str, str]]] = []
    for f, table in enumerate(whole):
        vpath = manifest.volume_path(f)
        values = {c: table.column(c).to_pylist() for c in columns}
        for r in range(table.num_rows):
            found.append((f, r, vpath, plan.named(vpath, {c: values[c][r] for c in columns})))
    wanted = sorted({v for *_, named in found if isinstance(named, list) for _, _, v in named
                     if not v.startswith(root) or v[len(root):] not in listed})
    versions = {v: listed[v[len(root):]] for *_, named in found if isinstance(named, list)
                for _, _, v in named if v.startswith(root) and v[len(root):] in listed}
    versions.update(zip(wanted, ordered_map(lambda v: _version(plan, v), ((v, 0) for v in wanted),
                                            threads=threads, max_ahead=4 * threads, max_bytes=1 << 62)))
    kept, media = [], []
    for f, r, vpath, named in found:
        problem = named if isinstance(named, tuple) else next(
            ((given, versions[v]) for _, given, v in named if isinstance(versions[v], str)), None)
        if problem is not None:
            plan.refuse(vpath, problem[0], problem[1], on_error, skipped)
            continue
        kept.append((f, r))
        media.append(named)
    return Records(manifest, schema, whole, kept, media, {v: x for v, x in versions.items() if not isinstance(x, str)},
                   skipped)


def _version(plan: MediaPlan, vpath: str) -> tuple[int, int] | str:
    """The medium's (size, mtime in ns), or why it cannot be read."""
    local = plan.local_volume + vpath[len(plan.volume):]
    try:
        return retrying(lambda: transport.stat(local), vpath)
    except FetchError as e:
        return plan.unreadable(vpath, e)


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    import pyarrow as pa

    return pa.concat_tables(tables) if tables else schema.empty_table()


def cut(files: Sequence[int], sizes: Sequence[int], shard_bytes: int, row_group_bytes: int
        ) -> list[list[tuple[int, int]]]:
    """Per shard, its row groups as [start, stop) ranges of the records (`files`: each one's records file, in
    order; `sizes`: its bytes): shards of about `shard_bytes`, row groups of about `row_group_bytes`, none across
    two records files. Pure."""
    files, sizes = np.asarray(files, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    out = []
    for start, stop in cuts(sizes, shard_bytes):
        groups = []
        bounds = [start, *(start + 1 + np.flatnonzero(np.diff(files[start:stop]))).tolist(), stop]
        for a, b in zip(bounds, bounds[1:]):
            groups += [(a + x, a + y) for x, y in cuts(sizes[a:b], row_group_bytes)]
        out.append(groups)
    return out


class Rows:
    """How records become a pack's rows: the rows' schema, and a record's media's bytes in it."""

    def __init__(self, records: Records, plan: MediaPlan, largest_group: int) -> None:
        import pyarrow as pa

        self.records, self.plan = records, plan
        binary = pa.binary() if largest_group <= _BINARY_MAX else pa.large_binary()
        self.storage = pa.struct([("bytes", binary), ("path", pa.string())])
        by_column = {m.column: m for m in plan.media}
        self.schema = pa.schema([
            f if f.name not in by_column else
            pa.field(by_column[f.name].name, pa.list_(self.storage) if by_column[f.name].many else self.storage)
            for f in records.schema])

    def table(self, rows: Sequence[int], contents: Sequence[dict[str, list[bytes]]]) -> pa.Table:
        """The pack's rows of the records `rows` (positions in `records.kept`, of one records file), each with
        its media's bytes (`contents`: per record, column -> the bytes of each medium it names, in order)."""
        import pyarrow as pa

        f = self.records.kept[rows[0]][0]
        table = self.records.tables[f].take(pa.array([self.records.kept[r][1] for r in rows], pa.int64()))
        for m in self.plan.media:
            i = table.column_names.index(m.column)
            column = table.column(i).combine_chunks()
            data = [b for c in contents for b in c.get(m.column, [])]
            if m.many:
                named = column.flatten()
                offsets = pa.compute.subtract(column.offsets, column.offsets[0])
                array = pa.ListArray.from_arrays(offsets, self._storage(named, data), mask=column.is_null())
            else:
                array = self._storage(column, data, mask=column.is_null())
            table = table.set_column(i, m.name, array)
        return table.cast(self.schema)

    def _storage(self, named: pa.Array, data: list[bytes], mask: pa.Array | None = None) -> pa.Array:
        """`struct<bytes, path>` of each path named (nulls left null) and the bytes of those not null, in order."""
        import pyarrow as pa

        present = iter(data)
        contents = pa.array([None if n is None else next(present) for n in named.to_pylist()],
                            self.storage.field("bytes").type)
        return pa.StructArray.from_arrays([contents, named.cast(pa.string())], fields=list(self.storage), mask=mask)


def write_shards(rows: Rows, shards: list[list[tuple[int, int]]], todo: list[int], folder: str, *, threads: int,
                 on_error: str, skipped: list[str], progress: bool) -> None:
    """Build each shard in `todo` on local disk, its records' media read ahead, and copy it onto the volume as it
    is built (as `air_core.packs.write` copies a pack of files)."""
    import pyarrow.parquet as pq

    from .store import shard_name
    from .write import _ABANDONED, _WHOLE, _copy_shard

    records, plan = rows.records, rows.plan
    kinds = {m.column: m.kind for m in plan.media}
    groups = [(a, b) for k in todo for a, b in shards[k]]

    def fetch(r: int) -> tuple[dict[str, list[bytes]], tuple[str, str] | None]:
        """Record `r`'s media's bytes by column, or (the path named, what is wrong with it)."""
        out: dict[str, list[bytes]] = {}
        for column, named, vpath in records.media[r]:
            local = plan.local_volume + vpath[len(plan.volume):]
            size, mtime = records.versions[vpath]
            try:
                data = retrying(lambda: read_bytes(local, vpath, size, mtime), vpath)
            except FetchError as e:
                return out, (named, plan.unreadable(vpath, e))
            if kinds[column] == "image":
                why = plan.not_an_image(io.BytesIO(data), vpath)
                if why is not None:
                    return out, (named, why)
            out.setdefault(column, []).append(data)
        return out, None

    sizes = [sum(records.versions[v][0] for _, _, v in named) for named in records.media]
    fetched = ordered_map(fetch, ((r, sizes[r]) for a, b in groups for r in range(a, b)), threads=threads,
                          max_ahead=4 * threads, max_bytes=_READ_AHEAD_BYTES)
    options = _writer_options(rows.schema, [m.name for m in plan.media])
    stage = tempfile.mkdtemp(prefix="air-pack-")
    copies: list[Future] = []
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="air-pack-copy") as copier, \
                tqdm(total=sum(sizes[r] for a, b in groups for r in range(a, b)), unit="B", unit_scale=True,
                     desc="pack", disable=not progress) as bar:
            for k in todo:
                local = os.path.join(stage, shard_name(k))
                grown: SimpleQueue = SimpleQueue()
                copies.append(copier.submit(_copy_shard, local, grown, None, folder, k))
                end = _ABANDONED
                try:
                    with pq.ParquetWriter(local, rows.schema, **options) as writer:
                        for a, b in shards[k]:
                            kept, contents = [], []
                            for r in range(a, b):
                                got, problem = next(fetched)
                                bar.update(sizes[r])
                                if problem is not None:
                                    f = records.kept[r][0]
                                    plan.refuse(records.manifest.volume_path(f), *problem, on_error, skipped)
                                    continue
                                kept.append(r)
                                contents.append(got)
                            # A row group of records all left out is written empty: the cuts stay the marker's.
                            table = rows.table(kept, contents) if kept else rows.schema.empty_table()
                            writer.write_table(table, row_group_size=max(1, len(kept)))
                            grown.put(os.path.getsize(local))
                    end = _WHOLE
                finally:
                    grown.put(end)
                while len(copies) > 1:
                    copies.pop(0).result()
            for c in copies:
                c.result()
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _writer_options(schema: pa.Schema, media: Sequence[str]) -> dict[str, Any]:
    """The media's bytes stored as they are (already compressed, each its own format), without a dictionary;
    every other column compressed, as Parquet writers do by default."""
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(schema.empty_table(), buffer)
    parquet = pq.read_metadata(io.BytesIO(buffer.getvalue())).schema
    leaves = [parquet.column(i).path for i in range(len(parquet))]
    raw = [p for p in leaves if p.split(".")[0] in media and p.endswith(".bytes")]
    return {"compression": {p: "none" if p in raw else "snappy" for p in leaves},
            "use_dictionary": [p for p in leaves if p not in raw]}


def row_counts(folder: str, names: Sequence[str]) -> list[list[int]]:
    """The rows of each row group of each shard `names` in the generation folder `folder` (a local path), from
    their footers: a run may have left records out of shards an earlier, killed run wrote."""
    import pyarrow.parquet as pq

    from ..io.files_api import RemoteFile

    out = []
    for name in names:
        local = os.path.join(folder, name)
        api = transport.remote(local)
        source = local if api is None else RemoteFile(api, local, *transport.stat(local))
        md = pq.read_metadata(source)
        out.append([md.row_group(g).num_rows for g in range(md.num_row_groups)])
    return out


def records_settings(source: Source) -> dict[str, Any]:
    """What the options say of the records (which columns name media, where their paths are relative to), for
    the generation's name."""
    return {"media": repr(source.options["media"]), "media_dir": source.options.get("media_dir"),
            "records_mode": source.mode}


__all__ = ["Records", "Rows", "cut", "read_records", "records_settings", "row_counts",
           "write_shards"]
