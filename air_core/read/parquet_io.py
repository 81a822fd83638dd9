"""Parquet trees as units of work: row groups, and exact row ranges inside them.

Footers are read concurrently: over FUSE straight from the volume (one small
read per file), over the Files API as one ranged request for a file's last
64 KiB, kept in the node cache. The data itself is fetched through the node
cache when a unit is read.
Hive partition folders (`split=train/`) become real columns, since their
values live only in the paths.

A stream that reads every row group of a file fetches it whole (over FUSE
one `sendfile`, or 16 MiB ranges at once for a large file). One that reads
only some of them, a rank's share of a file that ranks split, fetches only
their byte ranges (each row group's column chunks, known from the footer
when the tree was planned) and the file's last 64 KiB for its footer, each
a node cache entry of its own: across ranks a file's bytes are fetched
about once, not once per rank. Ray's read tasks on one node fetch as their
node's share would (`ParquetReader.parts`): a file the node reads whole is
fetched whole, however the tasks split its row groups.

A read of some columns (`columns=`) fetches only their column chunks in each
row group it reads, and the footer: a text-only pass over a table with its
images inline reads the text. Each span of chunks is a node cache entry of
its own, so a later read of other columns fetches only theirs, and a full
read still fetches the file whole (a projection is served from that copy).
"""

from __future__ import annotations

import mmap
from collections import OrderedDict
from typing import Collection, Iterable, Iterator, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from ..io import transport, volume
from ..io.cache import Cache, read_bytes
from ..io.files_api import RemoteFile
from ..io.ranges import RangeFile
from ..errors import ParquetError
from ..io.fetch import ordered_map, retrying
from ..manifest import Manifest
from ..planning import column_chunks
from ..planning.rows import RowGroup, RowSlice, unit_of
from ..io.files import CachedFile
from .arrow_owned import owned

FOOTER_THREADS = 32
# What is fetched for a footer read by range: as much as `RemoteFile` fetches for one (most footers fit).
FOOTER_TAIL = RemoteFile.TAIL
_OPEN_FILES = 8
FOOTERS_KEPT = 16 << 20  # bytes of footers a process keeps (see `_Footers`)


class _Footers:
    """The footers this process has read, by file version, up to `limit` serialized bytes (the first read are
    kept). Planning reads every footer once; the schema and the reads that follow in the same process (HF's
    streaming door, DataLoader workers forked after planning) open no file again for one."""

    def __init__(self, limit: int) -> None:
        self.limit, self.bytes, self.held = limit, 0, {}

    def get(self, manifest: Manifest, k: int) -> pq.FileMetaData | None:
        return self.held.get(_version(manifest, k))

    def put(self, manifest: Manifest, k: int, md: pq.FileMetaData) -> None:
        key = _version(manifest, k)
        if key not in self.held and self.bytes + md.serialized_size <= self.limit:
            self.held[key] = md
            self.bytes += md.serialized_size


def _version(manifest: Manifest, k: int) -> tuple[str, int, int]:
    return manifest.volume_path(k), int(manifest.sizes[k]), int(manifest.mtimes[k])


_FOOTERS = _Footers(FOOTERS_KEPT)


def partition_values(rel_path: str) -> dict[str, str]:
    """Hive partition values from a relative path: `a=1/b=x/f.parquet` -> {'a': '1', 'b': 'x'}."""
    out = {}
    for part in rel_path.split("/")[:-1]:
        key, eq, value = part.partition("=")
        if eq and key:
            out[unquote(key)] = unquote(value)
    return out


def parquet_units(manifest: Manifest, *, threads: int = FOOTER_THREADS,
                  cache: Cache | None = None) -> list[RowGroup]:
    """Every row group of every file, in manifest order; footers read concurrently.

    `cache`: over the Files API, each footer is read from the file's last `FOOTER_TAIL` bytes kept in this
    node cache, the entry that a ranged read of the file uses later: a node's ranks and passes ask for it
    once, not each of them once for planning and again for reading.

    Raises `ParquetError` when a file is unreadable, or when the files do not
    share one schema: readers would otherwise fail mid-pass, or mix types.
    """
    local_root = volume.parse(manifest.root).local

    def footer(i: int) -> tuple[pq.FileMetaData, dict[str, str], list[RowGroup]]:
        try:
            md = pq.read_metadata(_input(manifest, local_root, i, cache))
            columns = _column_types(md.schema.to_arrow_schema())
        except (pa.ArrowException, OSError) as e:
            raise ParquetError(
                f"{manifest.volume_path(i)} is not a readable Parquet file ({e}); remove or replace it, "
                "or leave it out with exclude="
            ) from e
        return md, columns, [RowGroup(i, g, md.row_group(g).num_rows, md.row_group(g).total_byte_size,
                                      *_byte_range(md.row_group(g))) for g in range(md.num_row_groups)]

    footers = ordered_map(footer, ((i, 0) for i in range(len(manifest))), threads=threads,
                          max_ahead=4 * threads, max_bytes=1 << 62)
    units: list[RowGroup] = []
    first: dict[str, str] | None = None
    for i, (md, columns, groups) in enumerate(footers):
        _FOOTERS.put(manifest, i, md)
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


def _byte_range(rg: pq.RowGroupMetaData) -> tuple[int, int]:
    """Where a row group's column chunks lie in its file: [first chunk's first page, last chunk's end)."""
    spans = _chunks(rg)
    return (min(a for _, a, _ in spans), max(b for _, _, b in spans)) if spans else (0, 0)


def _chunks(rg: pq.RowGroupMetaData) -> list[tuple[str, int, int]]:
    """Each column chunk of a row group: (its leaf's path in the schema, where its first page starts, its end)."""
    out = []
    for c in range(rg.num_columns):
        chunk = rg.column(c)
        first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        out.append((chunk.path_in_schema, first, first + chunk.total_compressed_size))
    return out


def _input(manifest: Manifest, local_root: str, i: int, cache: Cache | None):
    """What a footer is read from: the file's local path, or over the Files API its tail in the node cache
    (`cache`; a file of ranged requests without one, or for a footer longer than the tail)."""
    api = transport.remote(local_root)
    if api is None:
        return f"{local_root}/{manifest.paths[i]}"
    size = int(manifest.sizes[i])
    if cache is not None and size >= 8:
        tail = _fetch_range(manifest, cache, (i, max(0, size - FOOTER_TAIL), size), local_root).read_bytes()
        if int.from_bytes(tail[-8:-4], "little") + 8 <= len(tail):
            return pa.BufferReader(tail)
    return RemoteFile(api, manifest.volume_path(i), size, int(manifest.mtimes[i]))


def _column_types(schema: pa.Schema) -> dict[str, str]:
    # Nullability is left out: writers differ in it (nested fields above all), and readers do not mind.
    return {f.name: str(f.type).replace(" not null", "") for f in schema}


def _difference(these: dict[str, str], those: dict[str, str]) -> str:
    """How the columns of the first file differ from the second's, e.g. "id: string vs int64; no 'x'"."""
    out = [f"{n}: {t} vs {those[n]}" for n, t in these.items() if n in those and those[n] != t]
    out += [f"extra {n!r}" for n in these if n not in those]
    out += [f"no {n!r}" for n in those if n not in these]
    return "; ".join(out)


def schema(manifest: Manifest, units: Sequence[RowGroup], cache: Cache | None = None) -> pa.Schema:
    """The table schema of the first file, with partition columns appended as strings (`cache`: as in
    `parquet_units`)."""
    i = units[0].file if units else 0
    first = manifest.paths[i]
    md = _FOOTERS.get(manifest, i)
    try:
        s = md.schema.to_arrow_schema() if md is not None else \
            pq.read_schema(_input(manifest, volume.parse(manifest.root).local, i, cache))
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
    ranged: Collection[int] | None = None,
) -> Iterator[pa.Table]:
    """One table per piece, in order, with hive partition columns appended.

    Files, or the byte ranges of their row groups that `pieces` read (see the
    module docs), are fetched into the node cache ahead of the consumer; what
    the full cache did not admit is read from memory. `local_root`: as in `read_items`.
    `ranged`: the files read by ranges (default: those `pieces` do not read whole, `ranged_files`).
    `columns`: only these columns' chunks of each row group are fetched (see `_projections`).
    """
    pieces = list(pieces)
    units = [unit_of(p) for p in pieces]
    ranged = ranged_files(units, manifest.sizes) if ranged is None else ranged
    footers: dict[int, pq.FileMetaData] = {}
    chunked: dict[RowGroup, list[Range]] = {}
    if columns is not None:
        footers, chunked = _projections(manifest, units, columns, cache, local_root, ranged, fetch_threads)
    for u in units:
        if u.file in ranged and u.file not in footers and (md := _FOOTERS.get(manifest, u.file)) is not None:
            footers[u.file] = md
    wants = [_ranges(u, int(manifest.sizes[u.file]), u.file in ranged, chunked.get(u), u.file in footers)
             for u in units]
    last = {r: k for k, rs in enumerate(wants) for r in rs}  # a range leaves memory after its last piece
    last_of_file = {u.file: k for k, u in enumerate(units)}
    fetched = _read_ranges(manifest, list(last), cache, fetch_threads=fetch_threads, prefetch=prefetch,
                           prefetch_bytes=prefetch_bytes, local_root=local_root or volume.parse(manifest.root).local)
    ready: dict[Range, CachedFile] = {}
    open_files: OrderedDict[int, pq.ParquetFile] = OrderedDict()
    for k, (piece, unit, rs) in enumerate(zip(pieces, units, wants)):
        for r in rs:
            while r not in ready:
                got, f = next(fetched)
                ready[got] = f
        cols = list(columns) if columns is not None else None
        if unit.file in ranged or unit in chunked:
            if unit.file not in footers:
                footers[unit.file] = _footer(manifest, cache, ready[rs[0]], local_root)
            table = _read_ranged(manifest, unit, footers[unit.file], [(r[1], ready[r]) for r in rs], cols,
                                 local_root)
        else:
            pf = open_files.get(unit.file)
            if pf is None:
                pf = _open(ready[rs[0]])
                open_files[unit.file] = pf
                if len(open_files) > _OPEN_FILES:
                    open_files.popitem(last=False)[1].close()
            open_files.move_to_end(unit.file)
            table = pf.read_row_group(unit.row_group, columns=cols)
        for r in rs:
            if last[r] == k:
                del ready[r]
        if last_of_file[unit.file] == k:
            footers.pop(unit.file, None)
            if unit.file in open_files:
                open_files.pop(unit.file).close()
        if isinstance(piece, RowSlice):
            table = table.slice(piece.start, piece.num_rows)
        for key, value in partition_values(manifest.paths[unit.file]).items():
            if key not in table.column_names and (columns is None or key in columns):
                table = table.append_column(key, pa.array([value] * table.num_rows, pa.string()))
        yield table
    for pf in open_files.values():
        pf.close()


Range = tuple[int, int, int]  # (file, start, stop)


def ranged_files(units: Sequence[RowGroup], sizes) -> set[int]:
    """The files that `units` read by row-group ranges rather than whole. Pure.

    A file is fetched whole when the row groups it is read for hold all of it but its footer (the ranges
    would skip no more than the last `FOOTER_TAIL` bytes fetched for the footer anyway), or when a row
    group's range is not known.
    """
    needed: dict[int, dict[int, int]] = {}
    known: dict[int, bool] = {}
    for u in units:
        needed.setdefault(u.file, {})[u.row_group] = u.stop - u.start
        known[u.file] = known.get(u.file, True) and u.stop > u.start
    return {f for f, groups in needed.items() if known[f] and int(sizes[f]) - sum(groups.values()) > FOOTER_TAIL}


def _ranges(unit: RowGroup, size: int, ranged: bool, chunks: list[Range] | None, footer_read: bool) -> list[Range]:
    """What a row group's read needs fetched: its file; or its own bytes (`chunks` where given), after the file's
    tail for its footer unless that is read already."""
    if not ranged and chunks is None:
        return [(unit.file, 0, size)]
    return ([] if footer_read else [_tail(unit.file, size)]) + (chunks or [(unit.file, unit.start, unit.stop)])


def _tail(file: int, size: int) -> Range:
    return file, max(0, size - FOOTER_TAIL), size


def _projections(manifest: Manifest, units: Sequence[RowGroup], columns: Sequence[str], cache: Cache,
                 local_root: str | None, ranged: Collection[int], threads: int
                 ) -> tuple[dict[int, pq.FileMetaData], dict[RowGroup, list[Range]]]:
    """The footers read, and the units read by column chunks with the ranges of `columns`' chunks of each.

    A file is read by column chunks when its copy is not in the node cache whole and its chunks of `columns`
    in `units` skip more than a footer's tail of what would be fetched otherwise (the file, or its row groups'
    ranges). Each span is a node cache entry of its own, so a later read of other columns fetches only theirs;
    a row group whose whole range is cached already is read from that. Footers come from the files' tails
    through the node cache, read concurrently.
    """
    files = sorted({u.file for u in units})

    def footer(k: int) -> pq.FileMetaData | None:
        size, mtime = int(manifest.sizes[k]), int(manifest.mtimes[k])
        if cache.lookup(manifest.volume_path(k), size, mtime) is not None:
            return None
        known = _FOOTERS.get(manifest, k)
        return known if known is not None else \
            _footer(manifest, cache, _fetch_range(manifest, cache, _tail(k, size), local_root), local_root)

    read = ordered_map(footer, ((k, 0) for k in files), threads=min(threads, FOOTER_THREADS),
                       max_ahead=4 * threads, max_bytes=1 << 62)
    footers = {k: md for k, md in zip(files, read) if md is not None}
    by_file: dict[int, set[RowGroup]] = {}
    for u in units:
        if u.file in footers:
            by_file.setdefault(u.file, set()).add(u)
    chunked: dict[RowGroup, list[Range]] = {}
    for k, group in by_file.items():
        size, mtime, vpath = int(manifest.sizes[k]), int(manifest.mtimes[k]), manifest.volume_path(k)
        spans = {u: [(u.start, u.stop)] if u.stop > u.start and cache.lookup(vpath, size, mtime, (u.start, u.stop))
                 else column_chunks.selected(_chunks(footers[k].row_group(u.row_group)), columns) for u in group}
        otherwise = sum(u.stop - u.start for u in group) if k in ranged else int(manifest.sizes[k])
        if sum(b - a for s in spans.values() for a, b in s) + FOOTER_TAIL < otherwise:
            chunked.update({u: [(k, a, b) for a, b in s] for u, s in spans.items()})
    return footers, chunked


def _read_ranges(manifest: Manifest, ranges: Sequence[Range], cache: Cache, *, fetch_threads: int, prefetch: int,
                 prefetch_bytes: int, local_root: str) -> Iterator[tuple[Range, CachedFile]]:
    """(range, its copy) for each of `ranges`, in order, fetched through the node cache ahead of the consumer, small
    ranges of one file through one open (`column_chunks.one_open_batches`): `local_path` holds the range's bytes
    from its offset 0 (past a full cache, `data` does)."""

    def fetch(batch: list[Range]) -> list[tuple[Range, CachedFile]]:
        return list(zip(batch, _fetch_ranges(manifest, cache, batch, local_root)))

    def hit(batch: list[Range]) -> list[tuple[Range, CachedFile]] | None:
        out = []
        for r in batch:
            k, start, stop = r
            size = int(manifest.sizes[k])
            entry = cache.lookup(manifest.volume_path(k), size, int(manifest.mtimes[k]), _span(r, size))
            if entry is None:
                return None
            out.append((r, CachedFile(manifest.volume_path(k), entry, stop - start, k)))
        return out

    batches = column_chunks.one_open_batches(ranges)
    for fetched in ordered_map(fetch, ((b, sum(r[2] - r[1] for r in b)) for b in batches), threads=fetch_threads,
                               max_ahead=prefetch, max_bytes=prefetch_bytes, quick=hit):
        yield from fetched


def _span(r: Range, size: int) -> tuple[int, int] | None:
    """A range's span in the node cache's terms: None for the whole file."""
    return None if (r[1], r[2]) == (0, size) else (r[1], r[2])


def _fetch_range(manifest: Manifest, cache: Cache, r: Range, local_root: str | None) -> CachedFile:
    return _fetch_ranges(manifest, cache, [r], local_root)[0]


def _fetch_ranges(manifest: Manifest, cache: Cache, ranges: Sequence[Range], local_root: str | None
                  ) -> list[CachedFile]:
    """Copies of `ranges`, all of one file, through the node cache (small ones through one open of the file held
    for the next call, `Cache.get_spans`); a range the full cache did not admit is read into memory."""
    k = ranges[0][0]
    size, mtime = int(manifest.sizes[k]), int(manifest.mtimes[k])
    vpath = manifest.volume_path(k)
    src = f"{local_root or volume.parse(manifest.root).local}/{manifest.paths[k]}"
    spans = [_span(r, size) for r in ranges]

    def once() -> list[CachedFile]:
        if sum(stop - start for _, start, stop in ranges) <= column_chunks.ONE_OPEN_BYTES:
            entries = cache.get_spans(src, vpath, size, mtime, spans)
        else:  # a large range (a file), through opens of its own: a volume's bandwidth is per open file
            entries = [cache.get(src, vpath, size, mtime, span) for span in spans]
        return [CachedFile(vpath, entry, stop - start, k) if entry is not None else
                CachedFile(vpath, src, stop - start, k, cached=False, data=read_bytes(src, vpath, size, mtime, span))
                for entry, span, (_, start, stop) in zip(entries, spans, ranges)]

    _, start, stop = ranges[0]
    what = vpath if spans == [None] else f"{vpath} (bytes {start}-{stop}" + \
        (f" and {len(ranges) - 1} more ranges)" if len(ranges) > 1 else ")")
    return retrying(once, what)


def _footer(manifest: Manifest, cache: Cache, tail: CachedFile, local_root: str | None) -> pq.FileMetaData:
    """A file's footer, from its cached tail (or, for a footer longer than the tail, its own range)."""
    k = tail.index
    data = tail.read_bytes()
    length = int.from_bytes(data[-8:-4], "little") + 8
    size = int(manifest.sizes[k])
    if length > len(data) and length <= size:
        data = _fetch_range(manifest, cache, (k, size - length, size), local_root).read_bytes()
    try:
        return pq.read_metadata(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as e:
        raise ParquetError(f"{tail.path} is not a readable Parquet file ({e})") from e


def _read_ranged(manifest: Manifest, unit: RowGroup, footer: pq.FileMetaData, parts: list[tuple[int, CachedFile]],
                 columns: list[str] | None, local_root: str | None) -> pa.Table:
    """Row group `unit` of its file, read from the cached ranges `parts` ((offset in the file, its copy))."""
    k = unit.file
    size, mtime = int(manifest.sizes[k]), int(manifest.mtimes[k])
    vpath = manifest.volume_path(k)
    src = f"{local_root or volume.parse(manifest.root).local}/{manifest.paths[k]}"
    file = _Ranges(size, [(at, _bytes_of(f)) for at, f in parts],
                   lambda a, b: read_bytes(src, vpath, size, mtime, (a, b)))
    try:
        # A Python file is read and decoded on this thread (see `arrow_owned`), where its reads take the GIL
        # anyway: pre-buffering would read it on Arrow's I/O pool, and its ranges are in memory already.
        return pq.ParquetFile(file, metadata=footer, pre_buffer=False).read_row_group(
            unit.row_group, columns=columns, use_threads=False)
    except (pa.ArrowException, OSError) as e:
        raise ParquetError(f"{vpath} is not a readable Parquet file ({e})") from e


def _bytes_of(f: CachedFile):
    if f.data is not None:
        return f.data
    if not f.size:
        return b""
    with open(f.local_path, "rb") as copy:
        return mmap.mmap(copy.fileno(), 0, access=mmap.ACCESS_READ)


class _Ranges(RangeFile):
    """A file of which only some byte ranges are at hand, for a Parquet reader given the footer: a read in
    one of them is served from it; any other (a writer whose chunk offsets mislead) is asked of `fetch`."""

    def __init__(self, size: int, parts: list[tuple[int, object]], fetch) -> None:
        super().__init__(size)
        self.parts, self.fetch = parts, fetch

    def _range(self, start: int, stop: int) -> memoryview:
        for at, data in self.parts:
            if at <= start and stop <= at + len(data):
                return memoryview(data)[start - at:stop - at]
        return memoryview(self.fetch(start, stop))

    def read(self, size: int = -1) -> memoryview:
        # pyarrow takes any buffer from a Python file's read: a view of the cached range spares the two copies
        # of io's read (into a fresh bytearray, then bytes), ~15% of a warm row group's read.
        start = self._at
        stop = self.size if size < 0 else min(self.size, start + size)
        if stop <= start:
            return memoryview(b"")
        data = self._range(start, stop)
        self._at += len(data)
        return data


def _open(f: CachedFile) -> pq.ParquetFile:
    try:
        source = pa.BufferReader(owned(f.data)) if f.data is not None else f.local_path
        return pq.ParquetFile(source)
    except (pa.ArrowException, OSError) as e:
        raise ParquetError(f"{f.path} is not a readable Parquet file ({e})") from e
