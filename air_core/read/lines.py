"""Files of one record per line (JSON Lines, CSV, text), read as a table's rows: what their readers share.

The units are spans (`line_spans`): a large uncompressed file is cut at fixed
offsets into spans that each own the records starting inside them, so one
file is shared by every rank and worker, byte-balanced, and each byte crosses
the network once (a span is an entry of its own in the node cache, and so is
each step of the run-on of its last record). A compressed file (`.gz`,
`.zst`) is one span, read whole and decompressed as it streams. Where counts
must match (`equalize`), every span's records are counted first, and row
ranges of spans are dealt, as the Parquet reader deals row groups.

A format is a `LinesReader` subclass (its extensions, its schema) and a
`Format` (how a run of whole records parses into a table, and, where it can,
straight into Python rows), which travels to the processes that read.

A JSON format's `.json` files are read by their records, not their lines
(`json_array`): an index of where each top-level object lies, made once per
node, says which objects each span owns (those that start in it) and how far
its last one runs on; a span's objects reach the parser one a line, each at its
offset in the file, and an error names the record by its place in the file
("object 12"). A compressed `.json` file is read as JSON Lines.
"""

from __future__ import annotations

import functools
import logging
import mmap
import os
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, ClassVar, Iterable, Iterator, Sequence

import numpy as np

from ..io import transport
from ..io.cache import Cache, read_bytes
from ..errors import EmptyVolumeError, RecordError
from ..io.fetch import ordered_map, retrying
from ..manifest import Manifest
from ..planning.rows import RowSlice, unit_of
from ..planning.shares import Planning
from . import COMPRESSIONS, json_array, line_spans
from .line_spans import TAIL_BYTES, Span, Spans, first_record, tail_end
from .reader import TableReader
from .row_groups import CountedPart, CountedUnits, Rows, localize, within

if TYPE_CHECKING:
    import pyarrow as pa


log = logging.getLogger("air_core")

# Spans fetched ahead of the consumer: by bytes, this many spans' worth (each is a cache entry on disk until
# read, and is read into memory then); by count, as many as loose files have in flight, since a folder of small
# files is a span a file and reads in flight decide its speed (6 in flight read 2,000 files of 8 KB at a tenth
# of the rate 64 did under the emulated volume).
SPANS_AHEAD = 6
SPAN_READS = 64
# Records in a fixed sample from the start of the listing, the same on every process, decide inferred types: the
# first bytes of its first files, read by range (so no rank reads a span it does not own for them).
SAMPLE_BYTES = 1 << 20
# A compressed file decompresses into runs of whole records of about this many bytes, each parsed alone.
CHUNK_BYTES = 16 << 20

Piece = Span | RowSlice
# Bytes, or a read-only view of them: a span's records are parsed from its mapped cache entry, not copied.
Buffer = bytes | memoryview


@dataclass(frozen=True)
class Format:
    """How a run of whole records of one format parses into a table; small, it travels with a read task.

    Subclasses are frozen dataclasses with a `columns` field: the columns to parse, None for all.

    Attributes:
        header: a file's first line is a header, not a record (CSV).
        row_run_bytes: where every line is a whole record and `rows` makes them, an unshuffled read's Python
            rows are made from about this many bytes of records at a time, as the consumer reaches them
            (None: a chunk's at once).
        objects: the name endings of uncompressed files whose records are JSON objects found by an index
            (`json_array`), not lines.
    """

    header: ClassVar[bool] = False
    row_run_bytes: ClassVar[int | None] = None
    objects: ClassVar[tuple[str, ...]] = ()

    def select(self, columns: Sequence[str] | None) -> Format:
        """This format, parsing `columns` alone (None: as it is)."""
        return self if columns is None else replace(self, columns=tuple(columns))  # type: ignore[call-arg]

    def parse(self, data: Buffer, *, first: bool) -> pa.Table:
        """The records in `data` (whole records, newline-separated; bytes, or a view of a span's mapped copy in
        the cache); `first`: it starts at its file's start."""
        raise NotImplementedError

    def rows(self, data: Buffer, *, first: bool) -> list[dict[str, Any]] | None:
        """The records in `data` (as `parse` takes them) as Python rows, equal to `parse(...).to_pylist()`, made
        without a table; None where this format or its schema has no such way, or a record is not one it takes
        (then `parse` reads the run, and says what is wrong)."""
        return None

    def explain(self, line: bytes) -> str | None:
        """What is wrong with one record that does not parse, in the user's words; None: the parser's say."""
        return None


class LinesReader(CountedUnits, TableReader):
    """A format whose files hold one record per line; subclasses name the format and its schema.

    Its `extensions` are the uncompressed files'; each with `.gz` or `.zst` after it is read too. `objects`: as
    its `Format`'s (known before its schema).
    """

    objects: ClassVar[tuple[str, ...]] = ()

    refused = dict.fromkeys(
        ("decode", "labels", "include_bytes"),
        "files mode: {path} is read as records, a row each; pass mode='files' to read its files as files")

    @classmethod
    def suffixes(cls, *, given: bool) -> tuple[str, ...] | None:
        plain = super().suffixes(given=given)
        return None if plain is None else tuple(p + c for p in plain for c in ("", *(f".{z}" for z in COMPRESSIONS)))

    # -- what the format says ---------------------------------------------------

    def format(self) -> Format:
        """How this source's records parse (every column)."""
        raise NotImplementedError

    def splittable(self) -> bool:
        """Whether a large uncompressed file may be cut into spans (its records never hold a newline)."""
        return True

    def infer(self, sample: list[tuple[str, bytes]]) -> pa.Schema:
        """The schema of records like those in `sample`: (volume path, whole records from its start) of the
        first files of the listing."""
        raise NotImplementedError

    # -- units ------------------------------------------------------------------------

    def units(self) -> Spans:
        """Every span of every file, in listing order."""
        def make() -> Spans:
            m = self.source.manifest
            if self.splittable():
                whole = np.zeros(len(m), dtype=bool)
                for codec in COMPRESSIONS:
                    whole |= m.paths.endswith(f".{codec}")
            else:
                whole = np.ones(len(m), dtype=bool)
            return Spans(m.sizes, whole, line_spans.SPAN_BYTES)

        return self.source.held("units", make)

    def unit_bytes(self) -> np.ndarray:
        return self.units().nbytes()

    def counted(self) -> list[Span]:
        """Every span with its records counted (as they read with on_error="skip"): each span read once, through
        the node cache, by this process."""
        def make() -> list[Span]:
            m, fmt, units, cache = self.source.manifest, self.format(), self.units(), Cache(self.source.cache_dir)
            indexed = np.flatnonzero(m.paths.endswith(self.objects)).tolist() if self.objects else []
            # A `.json` file's spans are counted by its index; a line file's by a parse of each.
            counts = {}
            for k in indexed:
                index = _object_index(m, k, cache, self.source.local)
                for unit in units.of_files([k]):
                    i, j = index.within(unit.start, unit.stop)
                    counts[unit] = j - i
            rest = [u for u in units if u not in counts]
            for unit, chunks in _records(m, rest, cache, self.source.local):
                counts[unit] = sum(_parse(fmt, _Where(m, unit, base, lines, self.source.local), parts,
                                          "count").num_rows for base, lines, parts in chunks)
            return [replace(u, num_rows=counts[u]) for u in units]

        return self.source.held("counted", make)

    def validate(self) -> None:
        if not self.units():
            raise EmptyVolumeError(f"{self.source.path} holds {self.mode} files, but every one is empty")

    def schema(self) -> pa.Schema:
        """The given schema, or the one inferred from a fixed sample of records at the start of the listing."""
        given = self.source.options.get("schema")
        if given is not None:
            return given
        return self.source.held("schema", lambda: self.infer(self.sample()))

    def sample(self) -> list[tuple[str, bytes]]:
        """(volume path, whole records from its start) of the first files of the listing, `SAMPLE_BYTES` of
        records in all (at least the first record, however long): the same on every process.

        Read by range (`line_spans.sample_prefixes`), each file's first bytes an entry of the node cache of its
        own, so a process reads no span it does not own to infer types, and a node asks the volume once; a first
        record longer than that reads on in growing ranges to its end. Small files are read many at once. A
        `.json` file of objects gives its first span's objects, by its index (read whole by every node that
        reads it).
        """
        m, cache, local = self.source.manifest, Cache(self.source.cache_dir), self.source.local
        plan = [(k, n, not i) for i, (k, n) in enumerate(line_spans.sample_prefixes(m.sizes, SAMPLE_BYTES))]
        made = functools.partial(_object_index, m, cache=cache, local_root=local)

        def fetch(item: tuple[int, int, bool]) -> tuple[bytes, bool]:
            return _sample_head(m, *item, functools.partial(_get, m, cache, local), made, objects=self.objects,
                                want=SAMPLE_BYTES)

        def hit(item: tuple[int, int, bool]) -> tuple[bytes, bool] | None:
            try:  # as `_records`' hits: on the calling thread, never in the hedging deadline's learning
                return _sample_head(m, *item, functools.partial(_cached, m, cache),
                                    functools.partial(_held_index, m, cache), objects=self.objects,
                                    want=SAMPLE_BYTES)
            except _Miss:
                return None

        out: list[tuple[str, bytes]] = []
        held = 0
        for (k, _, first), (data, complete) in zip(plan, ordered_map(
                fetch, ((item, item[1]) for item in plan), threads=SPAN_READS, max_ahead=SPAN_READS,
                max_bytes=SAMPLE_BYTES, quick=hit)):
            cut = line_spans.sample_records(data, SAMPLE_BYTES - held, complete=complete, first=first)
            out.append((m.volume_path(k), cut))
            held += len(cut)
            if held >= SAMPLE_BYTES:
                break
        return out

    def pieces(self, files: Sequence[int]) -> list[Piece]:
        return self.units().of_files(sorted(set(files)))

    # -- reading ------------------------------------------------------------------------

    def read_pieces(self, pieces: Sequence[Piece], cache: Cache, *, columns: Sequence[str] | None,
                    fetch_threads: int, planning: Planning = Planning(), epoch: int = 0,
                    on_error: str = "raise", skipped: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        for index, _, table in read_spans(self.source.manifest, pieces, cache, self.format().select(columns),
                                          local_root=self.source.local, planning=planning, epoch=epoch,
                                          on_error=on_error, skipped=skipped):
            yield index, table

    def read_rows(self, pieces: Sequence[Piece], cache: Cache, *, columns: Sequence[str] | None,
                  fetch_threads: int, planning: Planning = Planning(), epoch: int = 0, on_error: str = "raise",
                  skipped: list[str] | None = None) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """As `read_pieces`, a list of Python rows per table it yields: each run's made by the format's `rows`
        where it gives them, without a table."""
        for index, _, rows in read_span_rows(self.source.manifest, pieces, cache, self.format().select(columns),
                                             local_root=self.source.local, planning=planning, epoch=epoch,
                                             on_error=on_error, skipped=skipped):
            yield index, rows

    def part(self, pieces: Sequence[Piece], planning: Planning, *, epoch: int) -> LinesPart:
        m = self.source.manifest
        files, local = localize(pieces)
        return LinesPart(m.root, self.source.local, m.fingerprint, m.rows(files), local, self.format(), planning,
                         epoch)


class LinesPart(CountedPart):
    """Spans to read elsewhere: their files' rows of the listing, the pieces numbered over them, and how their
    records parse."""

    def read(self, cache: Cache, *, on_error: str = "raise", columns: Sequence[str] | None = None,
             **fetch: object) -> Iterator[tuple[str, pa.Table]]:
        """(volume path, table) per run of records. `fetch` is not used: spans are fetched on the line
        readers' own terms (`SPAN_READS`, `SPANS_AHEAD`)."""
        manifest = Manifest.from_rows(self.root, self.listing, self.fingerprint)
        for _, path, table in read_spans(manifest, self.pieces, cache, self.format.select(columns),
                                         local_root=self.local_root, planning=self.planning, epoch=self.epoch,
                                         on_error=on_error):
            yield path, table


def read_spans(manifest: Manifest, pieces: Sequence[Piece], cache: Cache, fmt: Format, *, local_root: str,
               planning: Planning, epoch: int, on_error: str,
               skipped: list[str] | None = None) -> Iterator[tuple[int, str, pa.Table]]:
    """(piece index, volume path, table) per run of records, in order: each piece's span's records (a row range
    of them, for a `RowSlice`), in an order seeded by (the planning's seed, epoch, span) with its `shuffle`; a
    compressed file's in runs of about `CHUNK_BYTES`. `skipped`: where each record left out under on_error="skip"
    lay is added to it."""
    return _runs(manifest, pieces, cache, fmt, _parse, lambda table, order: table.take(order),
                 local_root=local_root, planning=planning, epoch=epoch, on_error=on_error, skipped=skipped)


def read_span_rows(manifest: Manifest, pieces: Sequence[Piece], cache: Cache, fmt: Format, *, local_root: str,
                   planning: Planning, epoch: int, on_error: str,
                   skipped: list[str] | None = None) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
    """As `read_spans`, each run's rows as a list of Python rows (`_rows`): the same rows, in the same order, with
    the same errors and skips; unshuffled, in runs of about the format's `row_run_bytes` (a shuffle draws over a
    whole chunk's records)."""
    return _runs(manifest, pieces, cache, fmt, _rows, lambda rows, order: [rows[i] for i in order.tolist()],
                 local_root=local_root, planning=planning, epoch=epoch, on_error=on_error, skipped=skipped,
                 run_bytes=None if planning.shuffle else fmt.row_run_bytes)


def _runs(manifest: Manifest, pieces: Sequence[Piece], cache: Cache, fmt: Format,
          parse: Callable[[Format, _Where, Sequence[Buffer], str, list[str] | None], Rows],
          take: Callable[[Rows, np.ndarray], Rows], *, local_root: str, planning: Planning, epoch: int,
          on_error: str, skipped: list[str] | None, run_bytes: int | None = None) -> Iterator[tuple[int, str, Rows]]:
    """`read_spans`, each run made by `parse` (a table, or Python rows) and reordered by `take`; `run_bytes`: the
    runs cut into pieces of whole records of about that many bytes, each parsed as the consumer reaches it."""
    units = [unit_of(p) for p in pieces]
    for index, (piece, (unit, chunks)) in enumerate(zip(pieces, _records(manifest, units, cache, local_root,
                                                                          objects=fmt.objects))):
        path = manifest.volume_path(unit.file)
        lo, hi = (piece.start, piece.stop) if isinstance(piece, RowSlice) else (0, None)
        if run_bytes is not None:
            chunks = _cut(chunks, run_bytes, counted=unit.whole and compression(path) is not None)
        objects = json_array.held(_index_file(manifest, unit.file, cache)) \
            if _indexed(manifest, unit.file, fmt.objects) else None
        done = 0
        for k, (base, lines, parts) in enumerate(chunks):
            if hi is not None and done >= hi:
                break
            run = parse(fmt, _Where(manifest, unit, base, lines, local_root, objects), parts, on_error, skipped)
            run, done = within(run, done, lo, hi), done + len(run)
            if planning.shuffle and len(run) > 1:
                # Seeded by the file's name, not its place in a listing: a Ray task's part renumbers its files.
                rng = np.random.default_rng((planning.seed, epoch, zlib.crc32(manifest.paths[unit.file].encode()),
                                             unit.index, k))
                run = take(run, rng.permutation(len(run)))
            yield index, path, run


# (offset in the file, or in its decompressed bytes; newlines before it, -1: not known; whole records, in parts
# that follow one another)
Chunks = Iterator[tuple[int, int, tuple[Buffer, ...]]]


def _records(manifest: Manifest, units: Iterable[Span], cache: Cache, local_root: str, *,
             objects: tuple[str, ...] = ()) -> Iterator[tuple[Span, Chunks]]:
    """(span, its own whole records in runs) for each of `units`, in order, fetched ahead through the node cache:
    up to `SPAN_READS` of them and `SPANS_AHEAD` spans' worth at once.

    A span of an uncompressed file is one run, in two parts: its records but
    the last, a view of its cached copy mapped into memory (read in place: a
    copy of 16 MB into a fresh process's memory faults in every page, which
    cost a DataLoader worker more than a third of the parse), and its last
    record joined to its run-on. A compressed file decompresses, as it is
    consumed, into runs of about `CHUNK_BYTES`. A file whose name ends with one
    of `objects` is read by its index of JSON objects (`json_array`): a span's
    objects, one a line.
    """
    paths, sizes = manifest.paths, manifest.sizes

    def get(k: int, start: int, stop: int) -> bytes | str:
        return _get(manifest, cache, local_root, k, start, stop)

    def fetch(unit: Span, get: Callable[[int, int, int], bytes | str], index: Callable[[int], json_array.ObjectIndex]
              ) -> Chunks:
        if _indexed(manifest, unit.file, objects):
            return _objects(unit, index(unit.file), int(sizes[unit.file]), get)
        data = get(unit.file, unit.start, unit.stop)
        if unit.whole and (codec := compression(paths[unit.file])) is not None:
            return _decompressed(data, codec, manifest.volume_path(unit.file))
        data = _mapped(data)
        at = first_record(data, unit.start)
        if at is None:
            return iter(())
        base, lines = unit.start + at, -1 if unit.start else 0
        size, stop = int(sizes[unit.file]), unit.stop
        if stop >= size:  # its last record ends the file
            return iter([(base, lines, (memoryview(data)[at:],))])
        whole = data.rfind(b"\n") + 1  # the records before it end inside the span
        tail = [memoryview(data)[whole:]]
        while stop < size:  # the last record runs on into what follows
            chunk = _bytes(get(unit.file, stop, min(size, stop + TAIL_BYTES)))
            end = tail_end(chunk)
            tail.append(chunk if end is None else chunk[:end])
            if end is not None:
                break
            stop += len(chunk)
        return iter([(base, lines, (memoryview(data)[at:whole], b"".join(tail)))])

    cached = functools.partial(_cached, manifest, cache)
    held = functools.partial(_held_index, manifest, cache)

    def hit(unit: Span) -> tuple[Span, Chunks] | None:
        """A unit whose bytes (and run-on) are all cached, taken on the calling thread; None: some are not.

        A hit must not reach `ordered_map`'s threads: their hedging deadline
        learns from every attempt's time, and a hit's microseconds set it to
        its floor, under a span's read from the volume (~0.15 s for 16 MB over
        netvol on 2 busy cores), which was then hedged: read twice.
        """
        try:
            return unit, fetch(unit, cached, held)
        except _Miss:
            return None

    made = functools.partial(_object_index, manifest, cache=cache, local_root=local_root)
    yield from ordered_map(lambda unit: (unit, fetch(unit, get, made)), ((u, u.nbytes) for u in units),
                           threads=SPAN_READS, max_ahead=SPAN_READS, max_bytes=SPANS_AHEAD * line_spans.SPAN_BYTES,
                           quick=hit)


def _sample_head(manifest: Manifest, k: int, n: int, first: bool, get: Callable[[int, int, int], bytes | str],
                 index: Callable[[int], json_array.ObjectIndex], *, objects: tuple[str, ...],
                 want: int) -> tuple[bytes, bool]:
    """File `k`'s records from its start, for the sample, from its first `n` bytes (`get`: a range's bytes, or
    its cached copy's path): (records, whether they end with a whole record, as at the file's end). A compressed
    file's first bytes are decompressed as far as they go, up to about `want` bytes. `first`: the sample's first
    file, which gives at least one record: where none ends in them, ranges that double read on until one does
    (a record is never cut, and its types never guessed from a part of it)."""
    size = int(manifest.sizes[k])
    if _indexed(manifest, k, objects):
        chunks = _objects(Span(k, 0, 0, min(size, line_spans.SPAN_BYTES)), index(k), size, get)
        return b"".join(bytes(p) for _, _, parts in chunks for p in parts), True
    codec, vpath = compression(manifest.paths[k]), manifest.volume_path(k)
    data, stop = _bytes(get(k, 0, n)), n
    while True:
        records, complete = (data, stop >= size) if codec is None else \
            _inflated(data, codec, vpath, want, whole=stop >= size)
        if complete or not first or b"\n" in records:
            return records, complete
        data, stop = data + _bytes(get(k, stop, min(size, 2 * stop))), min(size, 2 * stop)


def _inflated(data: bytes, codec: str, vpath: str, want: int, *, whole: bool) -> tuple[bytes, bool]:
    """The decompressed start of a compressed file whose first bytes are `data` (`whole`: all of them): at least
    `want` bytes and through a newline, where they hold as many; and whether that is all the file holds."""
    import pyarrow as pa

    out, ended, newline = bytearray(), False, False
    with pa.CompressedInputStream(pa.BufferReader(data), codec) as stream:
        while len(out) < want or not newline:
            try:
                block = stream.read(1 << 16)
            except (OSError, pa.ArrowException) as e:
                if whole:
                    raise RecordError(f"{vpath} is not a readable {codec} file ({e}): remove or replace it, or "
                                      "leave it out with exclude=") from None
                break  # the first bytes end inside the stream: what came before them is all they hold
            if not block:
                ended = True
                break
            out += block
            newline = newline or b"\n" in block
    return bytes(out), ended and whole


def _cached(manifest: Manifest, cache: Cache, k: int, start: int, stop: int) -> str:
    """Bytes [start, stop) of file `k` as their cached copy's path; `_Miss` where the cache has none."""
    copy = cache.lookup(*_key(manifest, k, start, stop))
    if copy is None:
        raise _Miss
    return copy


def _held_index(manifest: Manifest, cache: Cache, k: int) -> json_array.ObjectIndex:
    """File `k`'s index of objects, if made; `_Miss` where not."""
    index = json_array.held(_index_file(manifest, k, cache))
    if index is None:
        raise _Miss
    return index


def _key(manifest: Manifest, k: int, start: int, stop: int) -> tuple[str, int, int, tuple[int, int] | None]:
    """The cache's key of bytes [start, stop) of file `k`: its volume path, size, mtime and span (None: whole)."""
    size = int(manifest.sizes[k])
    return manifest.volume_path(k), size, int(manifest.mtimes[k]), None if (start, stop) == (0, size) else (start,
                                                                                                          stop)


def _get(manifest: Manifest, cache: Cache, local_root: str, k: int, start: int, stop: int) -> bytes | str:
    """Bytes [start, stop) of file `k`: the path of their cached copy, or (past a full cache) the bytes."""
    vpath, size, mtime, span = _key(manifest, k, start, stop)
    src = f"{local_root}/{manifest.paths[k]}"

    def once() -> bytes | str:
        copy = cache.get(src, vpath, size, mtime, span)
        return read_bytes(src, vpath, size, mtime, span) if copy is None else copy

    return retrying(once, vpath if span is None else f"{vpath} (bytes {start}-{stop})")


def _indexed(manifest: Manifest, k: int, objects: tuple[str, ...]) -> bool:
    """Whether file `k` is read by its index of objects: its name ends with one of `objects` (uncompressed)."""
    return bool(objects) and manifest.paths[k].lower().endswith(objects)


def _index_file(manifest: Manifest, k: int, cache: Cache) -> str:
    return json_array.index_file(cache.root, manifest.volume_path(k), int(manifest.sizes[k]), int(manifest.mtimes[k]))


def _object_index(manifest: Manifest, k: int, cache: Cache, local_root: str) -> json_array.ObjectIndex:
    """File `k`'s index of objects: made, where no process of the node made it yet, from its spans fetched through
    the node cache (the ones its records are read from), several at once."""
    size = int(manifest.sizes[k])

    def blocks() -> Iterator[memoryview | bytes]:
        spans = json_array.spans_of(size, line_spans.SPAN_BYTES, 0, size)
        for data in ordered_map(lambda s: _mapped(_get(manifest, cache, local_root, k, *s)),
                                ((s, s[1] - s[0]) for s in spans), threads=SPANS_AHEAD, max_ahead=SPANS_AHEAD,
                                max_bytes=SPANS_AHEAD * line_spans.SPAN_BYTES):
            yield data

    return json_array.index_of(_index_file(manifest, k, cache), blocks, manifest.volume_path(k))


def _objects(unit: Span, index: json_array.ObjectIndex, size: int, get: Callable[[int, int, int], bytes | str]
             ) -> Chunks:
    """The objects a span of a `.json` file owns (those that start in it), one a line, each at its offset in the
    file: read from its copy and the next spans' as far as the last one runs."""
    i, j = index.within(unit.start, unit.stop)
    if i == j:
        return iter(())
    lo, hi = int(index.starts[i]), int(index.ends[j - 1])
    parts = []
    for a, b in json_array.spans_of(size, line_spans.SPAN_BYTES, lo, hi):
        data = _mapped(get(unit.file, a, b))
        parts.append(memoryview(data)[max(lo, a) - a:min(hi, b) - a])
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return iter([(lo, -1, (json_array.as_lines(data, index.starts[i:j] - lo, index.ends[i:j] - lo),))])


class _Miss(Exception):
    """A quick look found some of a unit's bytes missing from the node cache."""


def _cut(chunks: Chunks, size: int, *, counted: bool) -> Chunks:
    """`chunks` in pieces of whole records of about `size` bytes, one part each. `counted`: the newlines before
    each piece are counted (a compressed file's: the volume's bytes are not the ones its offsets count); else a
    piece past a run's start leaves them to be counted from the volume, should an error need a line number."""
    for base, lines, parts in chunks:
        at = base  # where the next piece starts
        for part in parts:
            view, start = memoryview(part), 0
            while start < len(view):
                end = _line_end(view, start + size)
                yield at, lines, (view[start:end],)
                lines = lines + bytes(view[start:end]).count(b"\n") if counted and lines >= 0 else -1
                at, start = at + end - start, end


def _line_end(view: memoryview, at: int) -> int:
    """Where the line holding byte `at` of `view` ends (just past its newline); the end of `view` past it."""
    step = 4096
    while at < len(view):
        found = tail_end(bytes(view[at:at + step]))
        if found is not None:
            return at + found
        at, step = at + step, step * 2
    return len(view)


def _bytes(data: bytes | str) -> bytes:
    if isinstance(data, bytes):
        return data
    with open(data, "rb") as f:
        return f.read()


def _mapped(data: bytes | str) -> bytes | mmap.mmap:
    """The bytes, or the cached copy at path `data` mapped read-only, its pages mapped at once (entries are
    replaced by a rename, never rewritten in place, so the mapping stays whole)."""
    if isinstance(data, bytes):
        return data
    with open(data, "rb") as f:
        if not os.fstat(f.fileno()).st_size:
            return b""
        return mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                         prot=mmap.PROT_READ)


def compression(path: str) -> str | None:
    """The codec of a compressed file, by its extension; None: not compressed."""
    return COMPRESSIONS.get(path.rsplit(".", 1)[-1].lower())


def _decompressed(data: bytes | str, codec: str, vpath: str) -> Chunks:
    """The records of a compressed file, in runs of whole records of about `CHUNK_BYTES`."""
    import pyarrow as pa

    def fail(e: Exception) -> RecordError:
        return RecordError(f"{vpath} is not a readable {codec} file ({e}): remove or replace it, or leave it out "
                           "with exclude=")

    try:
        raw = pa.OSFile(data) if isinstance(data, str) else pa.BufferReader(data)
        stream = pa.CompressedInputStream(raw, codec)
    except (OSError, pa.ArrowException) as e:
        raise fail(e) from None
    offset, lines, rest = 0, 0, b""
    with stream:
        while True:
            try:
                block = stream.read(CHUNK_BYTES)
            except (OSError, pa.ArrowException) as e:
                raise fail(e) from None
            if not block:
                break
            block = rest + block
            end = block.rfind(b"\n") + 1
            if end:
                run = block[:end]
                yield offset, lines, (run,)
                offset, lines, rest = offset + end, lines + run.count(b"\n"), block[end:]
            else:
                rest = block
    if rest:
        yield offset, lines, (rest,)


def _parse(fmt: Format, where: _Where, parts: Sequence[Buffer], on_error: str,
           skipped: list[str] | None = None) -> pa.Table:
    """Whole records of one run (in `parts`, one after the other), as a table; a malformed one raises
    `RecordError` naming its file, line and offset, or with on_error="skip" is left out with a warning ("count":
    left out quietly, as when counting)."""
    import pyarrow as pa

    first = where.base == 0
    parts = [p for p in parts if len(p)] or [b""]
    try:
        tables = [fmt.parse(p, first=first and not k) for k, p in enumerate(parts)]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    except (pa.ArrowException, ValueError) as e:
        data = b"".join(parts)  # an error is found, and said, in bytes of its own
        bad = _bad_lines(fmt, data, first, e)
    lines = _line_starts(data)
    for index, message in bad:
        described = where.describe(data, lines[index], message)
        if on_error == "raise":
            raise RecordError(described + "; fix or remove the record, or pass on_error='skip' to skip malformed "
                              "records with a warning") from None
        if on_error == "skip":
            log.warning("skipping a malformed record: %s", described)
            if skipped is not None:
                skipped.append(where.place(data, lines[index]))
    drop = {i for i, _ in bad}
    bounds = lines + [len(data)]
    return fmt.parse(b"".join(data[bounds[i]:bounds[i + 1]] for i in range(len(lines)) if i not in drop),
                     first=first)


def _rows(fmt: Format, where: _Where, parts: Sequence[Buffer], on_error: str,
          skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of `_parse`'s table as Python rows: made by the format's `rows`, without a table, where it gives
    them for every part; else (a format without them, or a record they do not take) `_parse`'s table converted,
    so a malformed record raises, or is skipped and counted, exactly as there."""
    first = where.base == 0
    rows: list[dict[str, Any]] = []
    for k, p in enumerate([p for p in parts if len(p)]):
        got = fmt.rows(p, first=first and not k)
        if got is None:
            return _parse(fmt, where, parts, on_error, skipped).to_pylist()
        rows += got
    return rows


def _line_starts(data: bytes) -> list[int]:
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
    starts = np.concatenate([[0], ends[ends < len(data)]])
    return starts.tolist() if len(data) else []


def _bad_lines(fmt: Format, data: bytes, first: bool, error: Exception) -> list[tuple[int, str]]:
    """Every line of `data` that does not parse, with why: found by halving, a parse per step."""
    lines = _line_starts(data)
    bounds = lines + [len(data)]
    header = 1 if first and fmt.header else 0

    def ok(lo: int, hi: int) -> bool:
        chunk = (data[:bounds[1]] if header and lo else b"") + data[bounds[lo]:bounds[hi]]
        try:
            fmt.parse(chunk, first=first and (lo == 0 or bool(header)))
            return True
        except Exception:  # noqa: BLE001 - any failure of the parser marks the lines bad
            return False

    bad: list[tuple[int, str]] = []
    lo = header
    while lo < len(lines) and not ok(lo, len(lines)):
        low, high = lo, len(lines)  # the shortest prefix [lo, high) that fails
        while high - low > 1:
            mid = (low + high) // 2
            if ok(lo, mid):
                low = mid
            else:
                high = mid
        line = high - 1
        bad.append((line, _why(fmt, data[bounds[line]:bounds[line + 1]], first and line == 0, error)))
        lo = line + 1
    if not bad:  # the whole fails, no line alone does: report the first error as it came
        bad.append((0, str(error)))
    return bad


def _why(fmt: Format, line: bytes, first: bool, error: Exception) -> str:
    explained = fmt.explain(line)
    if explained is not None:
        return explained
    try:
        fmt.parse(line, first=first)
    except Exception as e:  # noqa: BLE001 - the parser's own words are the message
        return str(e)
    return str(error)


class _Where:
    """Where a run of records lies: its file, its offset there (or in its decompressed bytes) and the newlines
    before it (-1: not counted yet; counted from the volume on an error alone); `objects`: the file's index of
    objects, where its records are a `.json` file's."""

    def __init__(self, manifest: Manifest, unit: Span, base: int, lines: int, local_root: str,
                 objects: json_array.ObjectIndex | None = None) -> None:
        self.manifest, self.unit, self.base, self.lines, self.local_root = manifest, unit, base, lines, local_root
        self.objects = objects

    def describe(self, data: bytes, at: int, message: str) -> str:
        """`message` about the record at `data[at:]`, with its file, line number and byte offset."""
        vpath = self.manifest.volume_path(self.unit.file)
        what = "decompressed byte offset" if self.unit.whole and compression(vpath) else "byte offset"
        return f"{self.place(data, at)} ({what} {self.base + at}): {message}"

    def place(self, data: bytes, at: int) -> str:
        """The file and line of the record at `data[at:]`: "/Volumes/.../f.jsonl, line 12" (a `.json` file's: its
        place among the file's objects, "object 12")."""
        if self.objects is not None:
            number = int(np.searchsorted(self.objects.starts, self.base + at, side="right"))
            return f"{self.manifest.volume_path(self.unit.file)}, object {number}"
        if self.lines < 0:
            k = self.unit.file
            self.lines = _count_newlines(transport.open_read(f"{self.local_root}/{self.manifest.paths[k]}",
                                                             int(self.manifest.sizes[k]),
                                                             int(self.manifest.mtimes[k])), self.base)
        line = self.lines + data.count(b"\n", 0, at) + 1
        return f"{self.manifest.volume_path(self.unit.file)}, line {line}"


def _count_newlines(file: BinaryIO, end: int) -> int:
    """Newlines in the first `end` bytes of `file`, which this closes."""
    n = 0
    with file as f:
        while end > 0 and (chunk := f.read(min(end, 16 << 20))):
            n += chunk.count(b"\n")
            end -= len(chunk)
    return n


__all__ = ["COMPRESSIONS", "Buffer", "Format", "LinesPart", "LinesReader", "compression", "read_span_rows",
           "read_spans"]
