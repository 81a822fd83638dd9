"""A mixture of tables: several volume folders' rows (Parquet, JSON Lines, CSV, text) read as one `RowStream`,
each source with its share of every epoch, in rows.

`resolve_tables` checks the sources as `resolve_sources` does, and that they
hold rows of one schema. Each epoch, source i gives exactly kᵢ rows
(`planning.mixture.row_ranges`: whole units repeated, and the next rows of a
walk over seeded permutations of its units, so every row comes once before
any comes twice). A piece of the epoch is a row range of one source's unit
(row group, span), `MixedPiece`; a rank's share is its part of each source's
rows, cut in the units' order (a unit stays on its rank from epoch to epoch
where the source's share of it does), in a seeded order with `shuffle`. With
`shuffle`, a `RowStream` (or a `uc-volume` shard, or a Ray read task) reads
every few pieces of its plan as one `MixedBundle`, their rows together in a seeded order, so the
sources' rows interleave row by row. A resumed run deals what is left as
`RowStream` does any table's runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from .errors import OptionError
from .mixed_source import ROW_MODES, Mixed, MixedSource, resolve_sources, resolve_specs
from .planning import mixture
from .planning.rows import RowSlice, deal_rows, piece_bytes
from .planning.shares import Equalize, Planning, epoch_order
from .read import TableReader
from .read.reader import Part
from .read.row_groups import CountedUnits
from .source import Source

if TYPE_CHECKING:
    import pyarrow as pa

    from .io.cache import Cache

# Pieces a shuffled stream reads as one, their rows interleaved: what it holds decoded at once.
BUNDLE_PIECES = 4


def resolve_tables(sources: Sequence[Mapping[str, Any]], *, epoch_size: int | None = None,
                   cache_dir: str | None = None) -> MixedTable:
    """Check and resolve a mixture of tables' `sources` (see `air_core.RowStream`).

    Raises:
        OptionError: as `resolve_sources` (a bad dict, weight or epoch_size), a
            source not read as a table's rows, two sources of different schemas
            (naming both).
        VolumePathError, EmptyVolumeError: a source folder that is missing or empty.
    """
    resolved, kind, weights, names = resolve_specs(sources, mode="auto", cache_dir=cache_dir)
    for source, name in zip(resolved, names):
        if source.mode not in ROW_MODES:
            raise OptionError(f"{name} is read in mode {source.mode!r}: a mixture of rows reads {ROW_MODES}; give "
                              "its mode=, or mix loose files with FileStream(sources=[...])")
    return _tables(resolved, kind, weights, epoch_size, names)


def resolve_mixture(sources: Sequence[Mapping[str, Any]], *, mode: str = "auto", rows_here: str,
                    epoch_size: int | None = None, cache_dir: str | None = None) -> MixedSource | MixedTable:
    """A mixture of loose files or of tables' rows, as its sources are read (each its dict's `mode`, default
    "auto"), for a door that reads both; the door's own `mode` is "auto", or "files" to read every source as
    loose files (`resolve_sources`, `rows_here` as there).

    Raises:
        OptionError: as `resolve_tables`, sources of files beside sources of rows (naming one of each), and a
            door's `mode` other than "auto" or "files" (a source's mode is given in its dict).
        VolumePathError, EmptyVolumeError: a source folder that is missing or empty.
    """
    if mode == "files":
        return resolve_sources(sources, rows_here=rows_here, epoch_size=epoch_size, cache_dir=cache_dir)
    if mode != "auto":
        raise OptionError(f"mode={mode!r} beside sources=: give mode= in each source's dict (or mode='files' to "
                          "read every source as loose files)")
    resolved, kind, weights, names = resolve_specs(sources, mode="auto", cache_dir=cache_dir)
    files = [name for s, name in zip(resolved, names) if s.mode == "files"]
    if len(files) == len(resolved):
        return MixedSource(resolved, kind, weights, epoch_size, names, [len(s.manifest) for s in resolved])
    table = next((s, name) for s, name in zip(resolved, names) if s.mode != "files")
    if files:
        raise OptionError(f"{files[0]} is read as loose files but {table[1]} as a table's rows (mode "
                          f"{table[0].mode!r}): a mixture reads one or the other; give each source's mode=")
    for source, name in zip(resolved, names):
        if source.mode not in ROW_MODES:
            raise OptionError(f"{name} is read in mode {source.mode!r}: a mixture of rows reads {ROW_MODES}")
    return _tables(resolved, kind, weights, epoch_size, names)


def _tables(resolved: list[Source], kind: mixture.Weight, weights: list[float], epoch_size: int | None,
            names: list[str]) -> MixedTable:
    """The tables' mixture, once their rows' schemas are found to be one."""
    schemas = [s.reader.schema() for s in resolved]
    for name, schema in zip(names[1:], schemas[1:]):
        # Columns and their types; not whether a file promised no nulls (JSON Lines never does, Parquet may).
        if _fields(schema) != _fields(schemas[0]):
            raise OptionError(f"{names[0]} holds rows of ({_fields(schemas[0])}) but {name} of ({_fields(schema)}): "
                              "the sources of a mixture must hold rows of one schema")
    units = [_units(s) for s in resolved]
    return MixedTable(resolved, kind, weights, epoch_size, names, [sum(u.num_rows for u in us) for us in units])


def _fields(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _units(source: Source) -> list:
    """The source's units with their rows counted (a line file's spans are read once to count them)."""
    reader = source.reader
    return reader.counted() if isinstance(reader, CountedUnits) else reader.units()


class MixedTable(Mixed):
    """Several tables' folders read as one (make one with `resolve_tables`); it stands where a `Source` of a
    table does, for `RowStream`. Its items are rows.

    Attributes:
        mode: "rows" (each source is read in its own mode).
    """

    mode = "rows"

    @cached_property
    def reader(self) -> MixedTableReader:
        """How a `RowStream` plans and reads the mixture (made once per process: it holds every unit)."""
        return MixedTableReader(self)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "reader"}


@dataclass(frozen=True)
class MixedPiece:
    """Rows [start, stop) of `unit`, a unit (row group, span) of the mixture's source `source`."""

    source: int
    unit: Any
    start: int
    stop: int

    @property
    def num_rows(self) -> int:
        return self.stop - self.start

    @property
    def nbytes(self) -> int:
        return piece_bytes(RowSlice(self.unit, self.start, self.stop))

    @property
    def native(self) -> Any:
        """The piece as its source's reader reads it: the unit, or a row range of it."""
        whole = (self.start, self.stop) == (0, self.unit.num_rows)
        return self.unit if whole else RowSlice(self.unit, self.start, self.stop)


@dataclass(frozen=True)
class MixedBundle:
    """A few pieces of one stream's plan read as one: all their rows, in the order `seed` draws."""

    pieces: tuple[MixedPiece, ...]
    seed: tuple[int, ...]

    @property
    def num_rows(self) -> int:
        return sum(p.num_rows for p in self.pieces)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pieces)


class MixedTableReader(TableReader):
    """The `TableReader` methods a `RowStream` uses, for a mixture of tables: its pieces are `MixedPiece`s."""

    mode = "rows"
    label = "mixture of rows"
    source: MixedTable

    def __init__(self, mixed: MixedTable) -> None:
        super().__init__(mixed)  # type: ignore[arg-type]
        self._units = [_units(s) for s in mixed.sources]
        # A unit's key, the same in every epoch: its place among the sources' units laid end to end.
        self._keys = [{u: at + k for k, u in enumerate(units)}
                      for at, units in zip(np.cumsum([0] + [len(u) for u in self._units]).tolist(), self._units)]

    def schema(self) -> pa.Schema:
        return self.source.sources[0].reader.schema()

    def check(self, **options: Any) -> None:
        """Refuse what some source's reader refuses."""
        for s in self.source.sources:
            s.reader.check(**options)

    def count(self, pieces: Sequence[MixedPiece]) -> int:
        return sum(p.num_rows for p in pieces)

    def weights(self, pieces: Sequence[Any]) -> list[int]:
        return [piece_bytes(p) for p in pieces]

    def epoch_pieces(self, planning: Planning, *, epoch: int) -> list[MixedPiece]:
        """The pieces of `epoch` (rows drawn by the planning's `seed`), the sources alternating in their
        proportions: a door that deals them itself."""
        return _interleaved([p for pieces in self._source_pieces(epoch, planning.seed) for p in pieces],
                            len(self._units))

    def _source_pieces(self, epoch: int, seed: int) -> list[list[MixedPiece]]:
        """Each source's pieces of `epoch`, in its units' order: exactly its count of rows."""
        out = []
        for i, (units, k) in enumerate(zip(self._units, self.source.counts)):
            ranges = mixture.row_ranges([u.num_rows for u in units], k, seed=seed, epoch=epoch, source=i)
            out.append([MixedPiece(i, units[u], a, b) for u, a, b in ranges])
        return out

    def deal(self, pieces: Sequence[MixedPiece], parts: int, planning: Planning) -> list[list[MixedPiece]]:
        """The rows of `pieces` cut into `parts` ranges of as many rows (with `equalize`, exactly), in a seeded
        order with `shuffle`."""
        dealt = deal_rows(pieces, parts, planning)
        return [[MixedPiece(s.unit.source, s.unit.unit, s.unit.start + s.start, s.unit.start + s.stop) for s in part]
                for part in dealt]

    def share(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> tuple[np.ndarray, list]:
        """`rank`'s pieces of `epoch`, in read order: its part of each source's rows (within a row of the
        others'), then, with `equalize`, rows dropped or padded to the smallest or largest rank's count."""
        ranks: list[list[MixedPiece]] = [[] for _ in range(world_size)]
        before = 0
        for pieces, k in zip(self._source_pieces(epoch, planning.seed), self.source.counts):
            # Rank r takes as many of the source's rows as the positions r mod R among the epoch's rows
            # [before, before + k): within one of k / R, and its total within one of every other rank's.
            lengths = [(before + k - 1 - r) // world_size - (before - 1 - r) // world_size for r in range(world_size)]
            for r, part in enumerate(_cut(pieces, lengths)):
                ranks[r] += part
            before += k
        counts = [self.count(p) for p in ranks]
        mine = ranks[rank]
        if planning.equalize != "none" and len(set(counts)) > 1:
            want = min(counts) if planning.equalize == "drop" else max(counts)
            mine = _resized(mine, want, next(p for p in ranks if p))
        if planning.shuffle:
            mine = [mine[k] for k in epoch_order(len(mine), epoch=epoch, seed=planning.seed, shuffle=True)]
        else:
            mine = _interleaved(mine, len(self._units))
        return np.array([self._keys[p.source][p.unit] for p in mine], dtype=np.int64), mine

    def stream_pieces(self, pieces: list[MixedPiece], planning: Planning, *,
                      epoch: int) -> list[MixedPiece | MixedBundle]:
        """With `shuffle`, a stream's pieces as `MixedBundle`s of `BUNDLE_PIECES` each, the sources alternating in
        their proportions (each source's pieces in their shuffled order): a bundle's rows interleave row by row."""
        if not planning.shuffle:
            return pieces
        # The sources alternating first, so that every bundle holds some of each.
        mixed = _interleaved(list(pieces), len(self._units))
        out: list[MixedPiece | MixedBundle] = []
        for k in range(0, len(mixed), BUNDLE_PIECES):
            first = mixed[k]  # the bundle's seed says which rows it holds, not where it lies in a plan
            out.append(MixedBundle(tuple(mixed[k:k + BUNDLE_PIECES]),
                                   (planning.seed, epoch, self._keys[first.source][first.unit], first.start)))
        return out

    def share_weights(self, rank: int, world_size: int, *, equalize: Equalize) -> np.ndarray:
        """The bytes of every unit of every source, by the keys `share` gives: any may be drawn into a share."""
        return np.array([u.nbytes for units in self._units for u in units], dtype=np.int64)

    def part(self, pieces: Sequence[MixedPiece], planning: Planning, *, epoch: int) -> MixedTablePart:
        """The pieces packed to be read in another process (a Ray read task), in the order a stream reads them:
        with `shuffle` as `MixedBundle`s (`stream_pieces`), so a task's rows interleave the sources row by row.
        Each source's pieces are packed as its reader packs them, the rows inside a piece in the file's order
        (as `read_pieces` reads them)."""
        by_source: dict[int, list] = {}
        reads = []
        for p in self.stream_pieces(list(pieces), planning, epoch=epoch):
            bundled = p.pieces if isinstance(p, MixedBundle) else (p,)
            for q in bundled:
                by_source.setdefault(q.source, []).append(q.native)
            reads.append(([(q.source, q.num_rows) for q in bundled], p.seed if isinstance(p, MixedBundle) else None))
        in_file_order = replace(planning, shuffle=False)
        at = {s: k for k, s in enumerate(by_source)}
        return MixedTablePart([self.source.sources[s].reader.part(natives, in_file_order, epoch=epoch)
                               for s, natives in by_source.items()],
                              [([(at[s], rows) for s, rows in takes], seed) for takes, seed in reads])

    def read_pieces(self, pieces: Sequence[MixedPiece], cache: Cache, *, columns: Sequence[str] | None,
                    fetch_threads: int, planning: Planning = Planning(), epoch: int = 0,
                    on_error: str = "raise", skipped: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        """The pieces' rows, in order: each source's pieces read by its own reader, fetched ahead, one read per
        source; the rows inside a piece in the file's order, so a unit's row range is the same rows in every
        epoch, and a `MixedBundle`'s rows all together, in its seeded order (one table)."""
        flat = [q for p in pieces for q in (p.pieces if isinstance(p, MixedBundle) else (p,))]
        by_source: dict[int, list] = {}
        at = []
        for q in flat:
            mine = by_source.setdefault(q.source, [])
            at.append((q.source, len(mine)))
            mine.append(q.native)
        reads = {s: _Ahead(self.source.sources[s].reader.read_pieces(
                     natives, cache, columns=columns, fetch_threads=fetch_threads, on_error=on_error,
                     skipped=skipped))
                 for s, natives in by_source.items()}
        tables_of = (reads[s].tables_of(j) for s, j in at)  # each flat piece's tables, taken in order
        for k, p in enumerate(pieces):
            if isinstance(p, MixedBundle):
                held = [t for _ in p.pieces for t in next(tables_of)]
                if held:
                    yield k, _shuffled(held, p.seed)
            else:
                for table in next(tables_of):
                    yield k, table


@dataclass(frozen=True)
class MixedTablePart(Part):
    """Pieces of a mixture of tables to read elsewhere: one part of each source's pieces, all read at once, and
    the order to take their rows in.

    Attributes:
        parts: each source's part, its pieces in the order they are taken.
        reads: what to yield, in order: (part, rows) taken from the parts one after another, and the seed of
            their rows' order (a `MixedBundle`'s, as one table), or None (a piece: its tables as they come).
    """

    parts: list[Part]
    reads: list[tuple[list[tuple[int, int]], tuple[int, ...] | None]]

    @property
    def rows(self) -> int:  # type: ignore[override]
        return sum(p.rows for p in self.parts)

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        return sum(p.nbytes for p in self.parts)

    @property
    def input_files(self) -> list[str]:  # type: ignore[override]
        return [f for p in self.parts for f in p.input_files]

    def read(self, cache: Cache, **options: Any) -> Iterator[tuple[str | pa.Array, pa.Table]]:
        """(volume path, table) per table of a piece; a bundle's rows as one table, in its seeded order, with the
        volume path of each of its rows (a string array)."""
        import pyarrow as pa

        rows = [_Rows(part.read(cache, **options)) for part in self.parts]
        for takes, seed in self.reads:
            held = [pair for part, count in takes for pair in rows[part].take(count)]
            if seed is None:
                yield from held
            elif held:
                order = _order(sum(t.num_rows for _, t in held), seed)
                paths = np.repeat(np.array([path for path, _ in held], dtype=object), [t.num_rows for _, t in held])
                yield pa.array(paths[order], pa.string()), _concatenated([t for _, t in held]).take(order)


class _Rows:
    """One part's (volume path, table) pairs, taken a number of rows at a time: a piece's rows are the next
    ones, whichever tables its reader cuts them into."""

    def __init__(self, read: Iterator[tuple[str, pa.Table]]) -> None:
        self._read = iter(read)
        self._left: tuple[str, pa.Table] | None = None

    def take(self, rows: int) -> Iterator[tuple[str, pa.Table]]:
        """The next `rows` rows (fewer, where the part yields fewer: rows skipped under on_error="skip")."""
        while rows > 0:
            path, table = self._left or next(self._read, (None, None))
            if table is None:
                return
            if table.num_rows > rows:
                table, self._left = table.slice(0, rows), (path, table.slice(rows))
            else:
                self._left = None
            rows -= table.num_rows
            yield path, table


def _interleaved(pieces: list[MixedPiece], sources: int) -> list[MixedPiece]:
    """`pieces` with the sources alternating in their proportions: source s's j-th piece at (j + ½)/nₛ of the way
    (ties to the earlier source)."""
    per = np.bincount([p.source for p in pieces], minlength=sources).tolist()
    seen = [0] * sources
    where = []
    for p in pieces:
        where.append(((seen[p.source] + 0.5) / per[p.source], p.source))
        seen[p.source] += 1
    return [pieces[k] for k in sorted(range(len(pieces)), key=where.__getitem__)]


def _shuffled(tables: list[pa.Table], seed: tuple[int, ...]) -> pa.Table:
    """The tables' rows as one table, in an order `seed` draws."""
    table = _concatenated(tables)
    return table.take(_order(table.num_rows, seed))


def _concatenated(tables: list[pa.Table]) -> pa.Table:
    import pyarrow as pa

    # One source's file may say a column holds no nulls where another's does not: the types are the same.
    return pa.concat_tables(tables, promote_options="default")


def _order(rows: int, seed: tuple[int, ...]) -> np.ndarray:
    """The order of a bundle's rows, the same wherever it is read."""
    return np.random.default_rng(seed).permutation(rows)


def _cut(pieces: list[MixedPiece], lengths: list[int]) -> list[list[MixedPiece]]:
    """The rows of `pieces` (in order) cut into consecutive parts of `lengths` rows."""
    out: list[list[MixedPiece]] = []
    k, at = 0, 0  # the piece, and the rows of it already given
    for length in lengths:
        part: list[MixedPiece] = []
        while length:
            p = pieces[k]
            take = min(length, p.num_rows - at)
            part.append(MixedPiece(p.source, p.unit, p.start + at, p.start + at + take))
            length -= take
            at += take
            if at == p.num_rows:
                k, at = k + 1, 0
        out.append(part)
    return out


def _resized(pieces: list[MixedPiece], want: int, pad_from: list[MixedPiece]) -> list[MixedPiece]:
    """`pieces` cut to their first `want` rows, or padded to `want` with rows from the start of themselves
    (of `pad_from`, when they hold none), wrapping around."""
    have = sum(p.num_rows for p in pieces)
    if want <= have:
        out, left = [], want
        for p in pieces:
            if left <= 0:
                break
            out.append(MixedPiece(p.source, p.unit, p.start, p.start + min(left, p.num_rows)))
            left -= out[-1].num_rows
        return out
    pool = pieces or pad_from
    out, k = list(pieces), 0
    while have < want:
        p = pool[k % len(pool)]
        take = min(want - have, p.num_rows)
        out.append(MixedPiece(p.source, p.unit, p.start, p.start + take))
        have, k = have + take, k + 1
    return out


class _Ahead:
    """One source's read (its (position, table) pairs, in order), taken a piece at a time."""

    def __init__(self, read: Iterator[tuple[int, pa.Table]]) -> None:
        self._read = iter(read)
        self._next = next(self._read, None)

    def tables_of(self, j: int) -> Iterator[pa.Table]:
        """The tables of the source's piece `j` (none, when it yields none)."""
        while self._next is not None and self._next[0] <= j:
            k, table = self._next
            self._next = next(self._read, None)
            if k == j:
                yield table
