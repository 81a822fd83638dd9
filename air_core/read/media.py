"""Records that name media files (images, audio, video): a records reader's rows, each medium fetched into the node
cache ahead of the consumer and named in its row by the path of its cached copy.

`MediaReader` wraps the reader of the records' format (JSON Lines, CSV,
Parquet): the units, their shares of a grid, the resume and the order are
the records reader's, and so is every option but the media. For each record
a stream delivers, the media it names are resolved against their base folder
(`media_dir=`, else the records file's own folder), refused if they leave the
volume, and fetched through the fetch pool and the node cache in record
order, many at once, ahead of the consumer. A rank fetches only the media of
its own records and never lists the media: each medium's version (size,
mtime), its key in the node cache, is learnt by a `stat` the first time the
job reads it, and kept for the job's later passes (`media_versions`), which
then make no call to the volume for a cached medium. A medium named by
several records is fetched once per node.

A record that names a missing medium, or an image that does not open as one
(its header read once a job, where Pillow is installed), is a `MediaError`
naming the records file, the record's line (its row, in Parquet) and the
medium's path; with `on_error="skip"` it is left
out with a warning and its place is added to the stream's `skipped`, as a
malformed record is.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from ..errors import FetchError, MediaError, OptionError
from ..io import transport
from ..io.fetch import ordered_map, retrying
from ..planning.rows import RowSlice, deal_rows, split_rows, unit_of
from ..planning.shares import Planning, epoch_order
from . import media_paths, media_versions
from . import reader_class
from .files import DEFAULT_FETCH_THREADS, DEFAULT_PREFETCH
from .media_paths import MediaColumn
from .reader import Part, TableReader

if TYPE_CHECKING:
    import pyarrow as pa

    from ..io.cache import Cache
    from ..planning.shares import Equalize
    from ..source import Source

log = logging.getLogger("air_core")

# A rank's records are cut into this many pieces, for its DataLoader workers (1, 2, 3, 4, 6 or 12 share them evenly)
# or its read tasks: a records file of 2 MB naming 20,000 images is one unit of the records reader, but 48 pieces
# over 8 ranks x 6 workers.
PIECES_PER_RANK = 12
# A door that deals pieces into shards itself (HF's) gets pieces of at most this many records, and shards of whole
# ranges of them.
RECORDS_PER_PIECE = 1024
# A stream's first rows come one record at a time (a trainer's first look at a stream is one row), later ones in
# runs of up to this many records of one piece (a door may make a table of each run: one a record costs more than
# the record's media lookups on a warm pass).
RECORDS_AT_ONCE = 64


class MediaReader(TableReader):
    """Records naming media files, read by the reader of their format; a row per record, each media column holding
    the local path of its medium's cached copy (a list of them for a list of paths).

    A `schema=` given (HF's `features=`) is the rows' schema: its media columns, whatever their types there (HF's
    `Image()` is a struct), are read from the records as paths, under the records' names; its other columns are
    parsed as given.
    """

    def __init__(self, source: Source) -> None:
        super().__init__(source)
        if source.mode == "pack":
            raise OptionError(f"media= and media_dir= read records that name media in their folder, but {source.given} "
                              "is a pack, read as it was packed (records packed with their media give their rows "
                              "as they are): read it without them, or give them to `air-data pack` (--media, "
                              "--media-dir) when packing the records")
        records = reader_class(source.mode)(source.with_options(schema=None))
        given = source.options.get("schema")
        if given is not None:
            media = source.held("media", lambda: source.options["media"].columns(records.schema()))
            records = reader_class(source.mode)(source.with_options(schema=_records_schema(given, media)))
        self.records = records
        self.mode, self.label, self.counts = records.mode, records.label, records.counts
        self.pieces_per_task = records.pieces_per_task
        self.takes = records.takes + ("media", "media_dir")
        # A missing medium is skipped with on_error="skip", in every records format; a door that gives files' bytes
        # (Ray's include_bytes) gives the media's.
        self.refused = {k: v for k, v in records.refused.items() if k not in ("on_error", "include_bytes")}

    def __repr__(self) -> str:
        return f"MediaReader({self.records!r})"

    def validate(self) -> None:
        self.records.validate()
        self.plan()

    def own_listing(self) -> Any:
        return self.records.own_listing()

    # -- what the rows are ---------------------------------------------------------

    def plan(self, columns: Sequence[str] | None = None) -> MediaPlan:
        """How the rows of `columns` (the rows' names; None: all) get their media: the media columns among them,
        where paths are resolved, and the rows' schema."""
        import pyarrow as pa

        spec = self.source.options["media"]
        media = self.source.held("media", lambda: spec.columns(self.records.schema()))
        self._check_given(media)
        by_column = {m.column: m for m in media}
        # A media column holds the local path of each medium's copy, under its name (HF's, in the folder convention).
        schema = pa.schema([f if f.name not in by_column else
                            pa.field(by_column[f.name].name,
                                     pa.list_(pa.string()) if by_column[f.name].many else pa.string())
                            for f in self.records.schema()])
        if columns is not None:
            schema = pa.schema([schema.field(c) for c in columns])
        folder = self.source.options.get("media_dir")
        vol = "/".join(self.source.path.split("/")[:5])
        local_volume = self.source.local[:len(self.source.local) - len(self.source.path) + len(vol)]
        plan = MediaPlan(tuple(media), folder, vol, local_volume, schema, None, self.records.mode == "parquet",
                         self.source.job)
        return plan if columns is None else plan.of(columns)

    def _check_given(self, media: Sequence[MediaColumn]) -> None:
        """Refuse a given schema (HF's `features=`) that lacks a media column the records have."""
        given = self.source.options.get("schema")
        missing = [m.name for m in media if given is not None and m.name not in given.names]
        if missing:
            raise OptionError(f"features= (schema=) lacks the media column {missing[0]!r}: name it, as "
                              f"datasets.Image() or the like (its paths are read from the records)")

    def schema(self) -> pa.Schema:
        """The records' columns, each media column under its name (HF's, in the folder convention) holding the
        local path of its medium's cached copy (a string), or of each (a list of strings)."""
        return self.plan().schema

    def media(self) -> dict[str, str]:
        return {m.name: m.kind for m in self.plan().media}

    # -- units: ranges of records ---------------------------------------------------------

    def units(self) -> list:
        """Every unit of the records (a span, a row group) with its records counted: what pieces are cut from."""
        return [u for u in self.records.counted() if u.num_rows]

    def pieces(self, files: Sequence[int]) -> list[RowSlice]:
        member = set(files)
        return _cut([u for u in self.units() if u.file in member], RECORDS_PER_PIECE)

    def count(self, pieces: Sequence[RowSlice]) -> int:
        return sum(p.num_rows for p in pieces)

    def deal(self, pieces: Sequence[RowSlice], parts: int, planning: Planning) -> list[list]:
        return [_merged(part) for part in deal_rows(pieces, parts, planning)]

    def share(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> tuple[np.ndarray, list]:
        pieces = self._rank_pieces(rank, world_size, planning.equalize)
        order = epoch_order(len(pieces), epoch=epoch, seed=planning.seed, shuffle=planning.shuffle)
        return np.asarray(order, dtype=np.int64), [pieces[k] for k in order]

    def share_weights(self, rank: int, world_size: int, *, equalize: Equalize) -> np.ndarray:
        return np.array(self.weights(self._rank_pieces(rank, world_size, equalize)), dtype=np.int64)

    def weights(self, pieces: Sequence[RowSlice]) -> list[int]:
        """Each piece's records times the records' mean size: parts balance by records, each naming its media,
        not by the bytes of the records (a run of long conversations names no more images than short ones)."""
        units = self.units()
        mean = max(1, sum(u.nbytes for u in units) // max(1, sum(u.num_rows for u in units)))
        return [p.num_rows * mean for p in pieces]

    def _rank_pieces(self, rank: int, world_size: int, equalize: Equalize) -> list[RowSlice]:
        """`rank`'s records, the same every epoch: an equal range of them (within one record, or exactly with
        `equalize`), cut into `PIECES_PER_RANK` pieces for its DataLoader workers or read tasks."""
        share = split_rows(self.units(), world_size, equalize)[rank]
        return [s for part in split_rows(share, PIECES_PER_RANK) for s in part]

    def stream_pieces(self, pieces: list, planning: Planning, *, epoch: int) -> list:
        return self.records.stream_pieces(pieces, planning, epoch=epoch)

    def part(self, pieces: Sequence, planning: Planning, *, epoch: int) -> MediaPart:
        return self.parts([pieces], planning, epoch=epoch)[0]

    def parts(self, groups: Sequence[Sequence], planning: Planning, *, epoch: int) -> list[Part]:
        return [MediaPart(p, self.plan()) for p in self.records.parts(groups, planning, epoch=epoch)]

    # -- reading --------------------------------------------------------------------------

    def read_rows(self, pieces: Sequence, cache: Cache, *, columns: Sequence[str] | None, fetch_threads: int,
                  planning: Planning = Planning(), epoch: int = 0, on_error: str = "raise",
                  skipped: list[str] | None = None) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """The records of `pieces` as `TableReader.read_rows` gives them, each with its media fetched."""
        plan = self.plan(columns)
        m = self.source.manifest
        runs = self.records.read_rows(pieces, cache, columns=plan.columns, fetch_threads=fetch_threads,
                                      planning=planning, epoch=epoch, on_error=on_error, skipped=skipped)
        named = ((k, m.volume_path(unit_of(pieces[k]).file), rows) for k, rows in runs)
        return plan.fetched(named, cache, threads=fetch_threads, on_error=on_error, skipped=skipped)

    def read_pieces(self, pieces: Sequence, cache: Cache, *, columns: Sequence[str] | None, fetch_threads: int,
                    planning: Planning = Planning(), epoch: int = 0, on_error: str = "raise",
                    skipped: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        import pyarrow as pa

        schema = self.plan(columns).schema
        for k, rows in self.read_rows(pieces, cache, columns=columns, fetch_threads=fetch_threads,
                                      planning=planning, epoch=epoch, on_error=on_error, skipped=skipped):
            yield k, pa.Table.from_pylist(rows, schema=schema)


@dataclass(frozen=True)
class MediaPlan:
    """How rows get their media; small, it travels with a read task.

    Attributes:
        media: the media columns among the rows'.
        media_dir: the volume folder every path is relative to; None: each records file's own folder.
        volume: the volume's root, `/Volumes/c/s/v`: no medium may lie outside it.
        local_volume: where the volume's root lies on the machine that resolved the source.
        schema: the rows' schema.
        columns: the records' columns read for these rows; None: all of them.
        tabular: the records are Parquet (a record's place is its row, not its line).
        job: the source's `job`: the media versions learnt are kept under it.
    """

    media: tuple[MediaColumn, ...]
    media_dir: str | None
    volume: str
    local_volume: str
    schema: pa.Schema
    columns: tuple[str, ...] | None
    tabular: bool
    job: str

    def of(self, columns: Sequence[str]) -> MediaPlan:
        """This plan for the rows' `columns` alone (in that order; names it lacks are left out)."""
        import pyarrow as pa

        schema = pa.schema([self.schema.field(c) for c in columns if c in self.schema.names])
        names = {m.name: m.column for m in self.media}
        return replace(self, media=tuple(m for m in self.media if m.name in schema.names), schema=schema,
                       columns=tuple(names.get(n, n) for n in schema.names))

    def fetched(self, runs: Iterator[tuple[int, str, list[dict[str, Any]]]], cache: Cache, *, threads: int,
                on_error: str, skipped: list[str] | None = None,
                prefetch: int = DEFAULT_PREFETCH) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """(key, rows) for `runs` of (key, records file's volume path, records), in order, each record's media
        fetched ahead by `threads` threads, up to `prefetch` records ahead; a run comes back in runs of up to
        `RECORDS_AT_ONCE` records (one, first). The versions of each run's media learnt by this job are kept
        (`media_versions`): a later pass over the run asks the volume nothing for a medium cached."""
        def records() -> Iterator[tuple[_Record, int]]:
            for key, vpath, rows in runs:
                base = self.media_dir or vpath.rsplit("/", 1)[0]
                named = [self._named(base, row) for row in rows]
                run = _Run.of(key, named, cache.root, self.job)
                for row, n in zip(rows, named):
                    yield _Record(run, vpath, row, n), 0

        out: list[dict[str, Any]] = []
        held: _Run | None = None
        most = 1
        for record in ordered_map(lambda r: self._fetch(r, cache), records(), threads=threads, max_ahead=prefetch,
                                  max_bytes=1 << 62, quick=_refused):
            if held is not record.run:
                if held is not None:
                    held.keep(cache.root, self.job)
                if out:
                    yield held.key, out
                    out, most = [], min(2 * most, RECORDS_AT_ONCE)
                held = record.run
            elif len(out) >= most:
                yield held.key, out
                out, most = [], min(2 * most, RECORDS_AT_ONCE)
            record.run.learn(record)
            if record.problem is not None:
                self._fail(record, on_error, skipped)
                continue
            out.append(self._row(record))
        if held is not None:
            held.keep(cache.root, self.job)
            if out:
                yield held.key, out

    def named(self, vpath: str, row: dict[str, Any]) -> list[tuple[str, str, str]] | tuple[str, str]:
        """(column, the path as named, its volume path) of each medium `row`, a record of the records file at
        `vpath`, names, in order; or (the path named, why it may not be read) for the first that may not."""
        return self._named(self.media_dir or vpath.rsplit("/", 1)[0], row)

    def _named(self, base: str, row: dict[str, Any]) -> list[tuple[str, str, str]] | tuple[str, str]:
        """(column, the path as named, its volume path) of each medium `row` names, in order; or (the path named,
        why it may not be read) for the first that may not."""
        out = []
        for m in self.media:
            value = row.get(m.column)
            for named in (value or []) if m.many else ([] if value is None else [value]):
                why = media_paths.outside(base, named, self.volume)
                if why is not None:
                    return named, why
                out.append((m.column, named, media_paths.join(base, named)))
        return out

    def _fetch(self, record: _Record, cache: Cache) -> _Record:
        """`record` with the local path of each of its media, fetched, and the versions learnt of those whose
        version the job did not know yet; or with its problem: a medium that is missing (or unreadable, a
        folder) on the volume, or an image whose copy does not open as one (its header read where Pillow is
        installed, the first time the job reads it)."""
        found: dict[str, list[str]] = {}
        learnt: dict[str, tuple[int, int]] = {}
        known = record.run.versions
        kinds = {m.column: m.kind for m in self.media}
        for column, named, vpath in record.named:  # type: ignore[union-attr]
            local = self.local_volume + vpath[len(self.volume):]
            try:
                copy, version = retrying(lambda: _copy(cache, local, vpath, known.get(vpath)), vpath)
            except FetchError as e:
                return replace(record, problem=(named, self.unreadable(vpath, e)))
            if known.get(vpath) != version:  # first read by this job: an image is opened, once a job
                why = self.not_an_image(copy, vpath) if kinds[column] == "image" else None
                if why is not None:
                    return replace(record, problem=(named, why))
                learnt[vpath] = version
            found.setdefault(column, []).append(copy)
        return replace(record, found=found, learnt=learnt)

    def _row(self, record: _Record) -> dict[str, Any]:
        found = record.found or {}
        out = {}
        renamed = {m.column: m for m in self.media}
        for column, value in record.row.items():
            m = renamed.get(column)
            if m is None:
                out[column] = value
            elif m.many:
                out[m.name] = found.get(column, []) if value is not None else None
            else:
                out[m.name] = found[column][0] if value is not None else None
        return out

    def _fail(self, record: _Record, on_error: str, skipped: list[str] | None) -> None:
        named, why = record.problem  # type: ignore[misc]
        self.refuse(record.vpath, named, why, on_error, skipped)

    @staticmethod
    def not_an_image(file: str | IO[bytes], vpath: str) -> str | None:
        """Why `file` (a path, or a file object of its bytes), the medium at `vpath`, does not open as an image
        (its header read), in a `MediaError`'s words; None: it does, or Pillow is not here to tell."""
        try:
            from PIL import Image
        except ImportError:
            return None
        try:
            with Image.open(file):
                return None
        except Exception as e:  # noqa: BLE001 - any failure to open it is the reason, in Pillow's words
            return f"{vpath}, which does not open as an image ({type(e).__name__}: {e})"

    @staticmethod
    def unreadable(vpath: str, error: FetchError) -> str:
        """Why the medium at `vpath` could not be read (`error`), in a `MediaError`'s words."""
        return f"{vpath}, {_why(error)}"

    def refuse(self, vpath: str, named: str, why: str, on_error: str, skipped: list[str] | None) -> None:
        """Raise a `MediaError` for a record of the records file at `vpath` that names `named`, which cannot be
        read (`why`), naming the file, the record's line (or row) and the path; with `on_error="skip"`, warn and
        add its place to `skipped` instead.

        Raises:
            MediaError: with `on_error="raise"`.
        """
        place = _place(vpath, named, self.local_volume + vpath[len(self.volume):], self.tabular,
                       tuple(m.column for m in self.media))
        said = f"{place}: the record names {named!r}: {why}"
        if on_error == "skip":
            log.warning("skipping a record: %s", said)
            if skipped is not None:
                skipped.append(place)
            return
        raise MediaError(f"{said}; fix or remove the record, or pass on_error='skip' to leave out records whose "
                         "media cannot be read, with a warning")


class MediaPart(Part):
    """A records reader's part to read elsewhere, and how its rows get their media."""

    def __init__(self, records: Part, plan: MediaPlan) -> None:
        self.records, self.plan = records, plan

    @property
    def rows(self) -> int:  # type: ignore[override]
        return self.records.rows

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        return self.records.nbytes

    @property
    def input_files(self) -> list[str]:  # type: ignore[override]
        return self.records.input_files

    def read(self, cache: Cache, *, on_error: str = "raise", columns: Sequence[str] | None = None,
             **fetch: int) -> Iterator[tuple[str, pa.Table]]:
        """(records file's volume path, table) per run of records, their media fetched. `fetch`: the records
        part's fetch options; `fetch_threads` and `prefetch` (in records) fetch the media too."""
        import pyarrow as pa

        plan = self.plan if columns is None else self.plan.of(columns)
        tables = self.records.read(cache, on_error=on_error, columns=plan.columns, **fetch)
        paths: list[str] = []

        def runs() -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
            for k, (path, table) in enumerate(tables):
                paths.append(path)
                yield k, path, table.to_pylist()

        for k, rows in plan.fetched(runs(), cache, threads=fetch.get("fetch_threads", DEFAULT_FETCH_THREADS),
                                    on_error=on_error, prefetch=fetch.get("prefetch", DEFAULT_PREFETCH)):
            yield paths[k], pa.Table.from_pylist(rows, schema=plan.schema)


class _Run:
    """A run of records (what the records reader yields at once) on its way: its key, its media (volume paths,
    sorted, each once), the versions the job kept for them, and those learnt as its records are fetched."""

    def __init__(self, key: int, media: list[str], versions: dict[str, tuple[int, int]]) -> None:
        self.key, self.media, self.versions = key, media, versions
        self.learnt: dict[str, tuple[int, int]] = {}
        self.whole = True  # every record's media read: what the run learnt may be kept

    @classmethod
    def of(cls, key: int, named: Sequence[list[tuple[str, str, str]] | tuple[str, str]], root: str,
           job: str) -> _Run:
        """The run `key` whose records name `named`, with the versions `job` kept for its media."""
        media = sorted({v for n in named if isinstance(n, list) for _, _, v in n})
        kept = media_versions.load(root, job, media_versions.run_key(job, media), len(media)) if media else None
        return cls(key, media, dict(zip(media, kept)) if kept is not None else {})

    def learn(self, record: _Record) -> None:
        """Take in what fetching `record` learnt."""
        if record.problem is not None:
            self.whole = False
        elif record.learnt:
            self.learnt.update(record.learnt)

    def keep(self, root: str, job: str) -> None:
        """Keep the versions of the run's media for `job`'s later passes, where it learnt some and read them all."""
        if not self.learnt or not self.whole:
            return
        versions = {**self.versions, **self.learnt}
        media_versions.save(root, job, media_versions.run_key(job, self.media), [versions[v] for v in self.media])


def contents(paths: Sequence[str | None]) -> pa.Array:
    """The bytes of the files at `paths` (local paths; None: a null), as a `binary` array."""
    import pyarrow as pa

    data = []
    for path in paths:
        if path is None:
            data.append(None)
            continue
        with open(path, "rb") as f:
            data.append(f.read())
    return pa.array(data, pa.binary())


def with_contents(table: pa.Table, names: Sequence[str]) -> pa.Table:
    """`table` with each column of `names` (local paths of media copies, or lists of them) holding the files'
    bytes instead (lists of them)."""
    import pyarrow as pa
    import pyarrow.types as pt

    for name in names:
        if name not in table.column_names:
            continue
        i, column = table.column_names.index(name), table.column(name).combine_chunks()
        if pt.is_list(column.type) or pt.is_large_list(column.type):
            values = contents(column.flatten().to_pylist())
            # `offsets` index the values `flatten` gives: rebased to start at 0, as a sliced column's may not
            offsets = pa.compute.subtract(column.offsets, column.offsets[0])
            array = pa.ListArray.from_arrays(offsets, values, mask=column.is_null())
        else:
            array = contents(column.to_pylist())
        table = table.set_column(i, name, array)
    return table


def contents_schema(schema: pa.Schema, names: Sequence[str]) -> pa.Schema:
    """`schema` with each column of `names` holding bytes (a list of them) instead of paths, as `with_contents`
    gives them."""
    import pyarrow as pa
    import pyarrow.types as pt

    def of(f: pa.Field) -> pa.Field:
        if f.name not in names:
            return f
        many = pt.is_list(f.type) or pt.is_large_list(f.type)
        return pa.field(f.name, pa.list_(pa.binary()) if many else pa.binary())

    return pa.schema([of(f) for f in schema])


@dataclass(frozen=True)
class _Record:
    """A record on its way: its run, its records file, its row, the media it names (or the path named and why it
    may not be read), and, once fetched, their local paths by column and the versions learnt (or the path named
    and what is wrong with its medium)."""

    run: _Run
    vpath: str
    row: dict[str, Any]
    named: list[tuple[str, str, str]] | tuple[str, str]
    found: dict[str, list[str]] | None = None
    learnt: dict[str, tuple[int, int]] | None = None
    problem: tuple[str, str] | None = None


def _records_schema(given: pa.Schema, media: Sequence[MediaColumn]) -> pa.Schema:
    """The records' schema for rows of schema `given`: each media column under its name in the records, holding a
    path (a list of them), the other columns as given."""
    import pyarrow as pa

    by_name = {m.name: m for m in media}
    return pa.schema([f if f.name not in by_name else
                      pa.field(by_name[f.name].column, pa.list_(pa.string()) if by_name[f.name].many else pa.string())
                      for f in given])


def _cut(units: Sequence[Any], most: int) -> list[RowSlice]:
    """`units`' records in ranges of at most `most`, none across two units."""
    return [RowSlice(u, lo, min(lo + most, u.num_rows)) for u in units for lo in range(0, u.num_rows, most)]


def _merged(slices: Sequence[RowSlice]) -> list[RowSlice]:
    """`slices` with each run of ranges that follow one another in one unit joined into one range (read once)."""
    out: list[RowSlice] = []
    for s in slices:
        if out and out[-1].unit == s.unit and out[-1].stop == s.start:
            out[-1] = RowSlice(s.unit, out[-1].start, s.stop)
        else:
            out.append(s)
    return out


def _refused(record: _Record) -> _Record | None:
    """A record settled on the calling thread, with no fetch: one whose media may not be read, or that names none."""
    if isinstance(record.named, tuple):
        return replace(record, problem=record.named)
    return None if record.named else replace(record, found={})


def _copy(cache: Cache, local: str, vpath: str, known: tuple[int, int] | None) -> tuple[str, tuple[int, int]]:
    """(the local path of the cached copy of the medium at `local` (`vpath` on the volume), fetched first if
    needed; its version). `known`: the version the job read it at, which finds a cached copy with no call to the
    volume; None, or a copy to fetch of a medium changed since: its version is read from the volume (the media
    are never listed)."""
    if known is not None:
        try:
            return _cached(cache, local, vpath, known), known
        except OSError:  # changed, or gone, since the job first read it: looked at afresh
            pass
    version = transport.stat(local)
    return _cached(cache, local, vpath, version), version


def _cached(cache: Cache, local: str, vpath: str, version: tuple[int, int]) -> str:
    entry = cache.get(local, vpath, *version)
    if entry is not None:
        return entry
    if transport.remote(local) is not None:
        raise FetchError(0, f"{vpath} was not admitted to the full node cache, and over the Files API it has no "
                         "local path: raise cache_limit, or free room in the cache folder")
    return local  # past a full cache, the volume's own file


def _why(error: FetchError) -> str:
    import errno

    if error.errno == errno.ENOENT:
        return "which is not on the volume"
    if error.errno == errno.EISDIR:
        return "which is a folder, not a file"
    return f"which cannot be read ({error})"


def _place(vpath: str, named: str, local: str, tabular: bool, columns: tuple[str, ...]) -> str:
    """Where the first record of the records file at `local` (`vpath`) that names `named` lies: "<vpath>, line N"
    (Parquet: "row N", from 0). Found by a search of the file, made only for an error or a skip."""
    size, mtime = transport.stat(local)
    if tabular:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from .arrow_owned import owned

        table = pq.read_table(pa.BufferReader(owned(transport.read_file(local))), columns=list(columns))
        for i, row in enumerate(table.to_pylist()):
            if any(v == named or (isinstance(v, list) and named in v) for v in row.values()):
                return f"{vpath}, row {i}"
        return vpath
    needles = {named.encode(), json.dumps(named)[1:-1].encode()}
    with transport.open_read(local, size, mtime) as f:
        for line, text in enumerate(f, 1):
            if any(n in text for n in needles):
                return f"{vpath}, line {line}"
    return vpath


__all__ = ["MediaPart", "MediaPlan", "MediaReader", "contents", "contents_schema", "with_contents"]
