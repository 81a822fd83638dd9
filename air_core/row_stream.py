"""RowStream: the rows of a table (Parquet, JSON Lines, CSV, text) for one (rank, worker) stream, the core's own door.

It resolves a `Source` whose reader is a `TableReader`, takes its rank's
pieces (`Reader.share`: the same every epoch, so node caches keep serving
them), deals them to DataLoader workers by bytes, and reads them through the
reader as runs of rows (`row_runs`). Its state names the run and the row
reached, so a resume on the same grid starts at the next row, and a whole
run's state (`air_core.run_state`) resumes on any grid. `sources=` reads a
mixture of tables the same way (`air_core.mixed_table`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from . import dist, options, table_pickling
from .planning import resume
from .planning import shares as plan_mod
from .errors import OptionError, StateError
from .grid import Grid
from .read import ON_ERRORS, OnError, TableReader, default_fetch_threads
from .read.row_groups import Rows, within
from .planning.runs import Run, deal_bytes, deal_rows, remainder
from .mixed_table import MixedTable, resolve_tables
from .source import Source, check_columns, resolve_source
from .streaming import Stream

if TYPE_CHECKING:
    import pyarrow as pa


class RowStream(Stream):
    """The rows of one (rank, worker) stream of a table under a volume folder, cached on first access.

    `tables()` yields Arrow tables, iterating yields rows as dicts. Every rank
    and DataLoader worker reads a disjoint share (ranks byte-balanced, or with
    equal row counts by `equalize`); together they read every row once per
    epoch. A large JSON Lines, CSV or text file is shared at record boundaries.

    Args:
        path: a volume folder, `/Volumes/c/s/v/dir` or `dbfs:/Volumes/...`.
        mode: "auto" (by the files' extensions), "parquet", "json", "csv", "text" or "webdataset".
        include, exclude, file_extensions: which files to read (as `resolve_source`).
        columns: the columns to read (the others are not decoded, where the format allows).
        shuffle: a new order every epoch (of pieces, and of rows inside each), seeded, the same on every rank.
        seed: the shuffle seed.
        equalize: "none", "pad" (repeat rows so every rank has the largest share's count) or "drop"
            (cut every share to the smallest).
        rank, world_size, worker, num_workers: this stream's place; detected when not given.
        cache_dir, cache_limit, verify: the node cache (as `FileStream`).
        fetch_threads: concurrent reads per stream (default: `default_fetch_threads()`).
        on_error: "raise" (default), or "skip": a malformed record is left out with a warning, and listed
            in `skipped` and in the state.
        schema, delimiter, sample_by: format options (as `resolve_source`).
        media, media_dir: records that name media files (as `resolve_source`): each media column holds the local
            path of its medium's cached copy (a list of them, for a list of paths), fetched ahead of the consumer;
            with on_error="skip", a record naming a missing medium is left out with a warning.
        delta_table, delta_version: read a Delta table's export at `path` (as `resolve_source`).
        sources: instead of `path`, a mixture of tables of one schema, each
            source a dict with its folder's `path`, optionally its `include`,
            `exclude`, `file_extensions` and `mode` ("parquet", "json", "csv",
            "text"; default "auto"), or a Delta table's `delta_table` and
            `delta_version` (exported to `path` and read there, as for one
            folder), and one weight, the same kind for every
            source, of its rows: `proportion`, `repeat` or `choose` (as
            `FileStream`'s). Each epoch holds exactly each source's count of
            rows (see `air_core.mixed_table`), and resumes as one table does.
        epoch_size: a mixture of proportions: rows per epoch (default: the sources' rows added up).

    """

    # Rows are dealt by rows, never by a choice of balance: a state names none.
    _state_options = ("seed", "shuffle", "equalize")

    def __init__(
        self,
        path: str | None = None,
        *,
        sources: Sequence[Mapping[str, Any]] | None = None,
        epoch_size: int | None = None,
        mode: str = "auto",
        include: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        file_extensions: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        equalize: plan_mod.Equalize = "none",
        rank: int | None = None,
        world_size: int | None = None,
        worker: int | None = None,
        num_workers: int | None = None,
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        verify: bool = False,
        fetch_threads: int | None = None,
        on_error: OnError = "raise",
        schema: pa.Schema | None = None,
        delimiter: str | None = None,
        sample_by: str | None = None,
        media: Mapping[str, str] | None = None,
        media_dir: str | None = None,
        delta_table: str | None = None,
        delta_version: int | None = None,
    ) -> None:
        options.choice("equalize", equalize, plan_mod.EQUALIZES)
        options.choice("on_error", on_error, ON_ERRORS)
        options.flag("shuffle", shuffle)
        options.flag("verify", verify)
        options.whole("seed", seed, low=0)
        options.whole("fetch_threads", fetch_threads, low=1, optional=True)
        self._source: Source | MixedTable
        if sources is None:
            if path is None:
                raise OptionError("give the volume folder of a table to read, path=, or several, sources=[...]")
            if epoch_size is not None:
                raise OptionError("epoch_size= sizes the epochs of a mixture: give sources=[...], or leave it unset")
            self._source = resolve_source(path, mode=mode, include=include, exclude=exclude,  # type: ignore[arg-type]
                                          file_extensions=file_extensions, cache_dir=cache_dir, schema=schema,
                                          delimiter=delimiter, sample_by=sample_by, media=media,
                                          media_dir=media_dir, delta_table=delta_table, delta_version=delta_version)
        else:
            beside = [name for name, v in (("path", path), ("include", include), ("exclude", exclude),
                                           ("file_extensions", file_extensions), ("schema", schema),
                                           ("delimiter", delimiter), ("sample_by", sample_by), ("media", media),
                                           ("media_dir", media_dir), ("delta_table", delta_table),
                                           ("delta_version", delta_version))
                      if v is not None] + (["mode"] if mode != "auto" else [])
            if beside:
                raise OptionError(f"sources= names each table's folder and its selection: give {beside[0]}= in each "
                                  "source's dict, not beside sources=")
            self._source = resolve_tables(sources, epoch_size=epoch_size, cache_dir=cache_dir)
        reader = self._source.reader
        if not isinstance(reader, TableReader):
            raise OptionError(f"RowStream reads a table's rows, but {self._source.given} is read in mode "
                              f"{self._source.mode!r}, a row per file: read it with FileStream, or give the mode "
                              "of its format (mode='json', 'csv', 'text' or 'parquet')")
        reader.check(on_error=on_error, columns=columns)
        # Worked out here, once: DataLoader workers forked from this process inherit it, and pyarrow imported,
        # where each worker of each epoch imported pyarrow (0.2 s of CPU) and inferred it from the sample again.
        names = reader.schema().names
        if columns is not None:
            check_columns(columns, names)
        self._columns = list(columns) if columns is not None else None
        self._planning = plan_mod.Planning(seed, shuffle, "bytes", equalize)
        self._place(rank, world_size, worker, num_workers, cache_dir, cache_limit, verify)
        self._fetch_threads, self._on_error = fetch_threads, on_error
        self._consumed = [0, 0]
        self._skipped_before: list[str] = []  # by the pass a same-grid state was saved in
        self._skipped: list[str] = []

    # -- what the stream holds -------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The rows' schema (of `columns` alone, when given)."""
        import pyarrow as pa

        s = self._source.reader.schema()
        return s if self._columns is None else pa.schema([s.field(c) for c in self._columns])

    @property
    def skipped(self) -> list[str]:
        """Where each record left out so far in this pass lay ("<volume path>, line N"), before a resume too."""
        return self._skipped_before + [s for s in self._skipped if s not in self._skipped_before]

    def runs(self, grid: Grid | None = None) -> list[Run]:
        """The runs of rows this stream reads this epoch, in order (no resume applied)."""
        return _Planner(self._source.reader, self._epoch, self._planning).runs(grid or self.grid(), None)

    # -- iteration and resume ----------------------------------------------------

    def tables(self, batch_size: int | None = None) -> Iterator[pa.Table]:
        """The stream's rows as Arrow tables, in order; each counts as delivered once yielded.

        Args:
            batch_size: tables of this many rows (the pass's last may hold fewer), each a copy of its
                own rows: a slice of a larger table carries that table's buffers wherever it is
                pickled, as from a DataLoader worker to its consumer (a 256-row slice of a JSON Lines
                span, ~16x its rows' bytes). None: the tables as the reader makes them (a span's
                records, a row group's rows).

        Tables cross from a DataLoader worker (any `multiprocessing` pickling) as Arrow IPC streams
        (`air_core.table_pickling`), read in place on arrival.
        """
        options.whole("batch_size", batch_size, low=1, optional=True)
        table_pickling.register()  # in the process that yields them: a DataLoader worker pickles each
        read = self._source.reader.read_pieces
        if batch_size is None:
            for run, table in self._read(read):
                self._deliver(run, table.num_rows)
                yield table
        else:
            for parts in _batches(self._read(read), batch_size):
                for run, part in parts:
                    self._deliver(run, part.num_rows)
                yield _compact([part for _, part in parts])
        self._consumed[:] = [self._pass_end, 0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # The reader's Python rows: JSON Lines decodes them without a table, in about half a parse and conversion.
        for run, rows in self._read(self._source.reader.read_rows):
            self._deliver(run, 0)
            for row in rows:
                self._consumed[1] += 1
                yield row
        self._consumed[:] = [self._pass_end, 0]

    def _deliver(self, run: int, rows: int) -> None:
        if run != self._consumed[0]:  # the runs before it are done
            self._consumed[:] = [run, 0]
        self._consumed[1] += rows

    def _read(self, read: Callable[..., Iterator[tuple[int, Rows]]]) -> Iterator[tuple[int, Rows]]:
        """(run position in the plan, its next rows), for what is left of this pass's plan: as `read` gives them
        (the reader's `read_pieces`, tables, or `read_rows`, lists of Python rows).

        The consumer counts what it delivers (`_deliver`), and sets the pass's end once it is done.
        """
        dist.freeze_inherited()
        grid = self.grid()
        resumed_from, mine = self._take_pending(grid)
        done = list(mine["consumed"]) if mine else [0, 0]
        self._skipped_before = list(mine.get("skipped", [])) if mine else []
        runs = _Planner(self._source.reader, self._epoch, self._planning).runs(grid, resumed_from)
        self._grid, self._consumed, self._resumed_from = grid, list(done), resumed_from
        self._skipped = []
        left = remainder(runs, done)
        first = done[0]
        threads = self._fetch_threads or default_fetch_threads(grid.num_workers)
        seen = [0] * len(left)
        pieces = read([r.piece for r in left], self.cache, columns=self._columns, fetch_threads=threads,
                      planning=self._planning, epoch=self._epoch, on_error=self._on_error, skipped=self._skipped)
        self._pass_end = first + len(left)
        for k, table in pieces:
            run, before = left[k], seen[k]  # the table holds the piece's rows [before, before + its rows)
            seen[k] += len(table)
            rows = within(table, before, run.lo, run.hi)
            if len(rows):
                yield first + k, rows

    def state_dict(self) -> resume.StreamState:
        """Where iteration stands: plain data, enough to resume exactly once.

        `air_core.run_state` gathers every stream's state into one that resumes on any grid.
        """
        pending = self._pending
        if pending is not None and "streams" not in pending:
            return dict(pending)
        g = self._grid if pending is None and self._grid is not None else self.grid()
        consumed, before = ([0, 0], pending) if pending is not None else (list(self._consumed), self._resumed_from)
        return {"version": resume.VERSION, "epoch": self._epoch, "fingerprint": self._source.fingerprint,
                "options": self._options(), "grid": [g.rank, g.world_size, g.worker, g.num_workers],
                "consumed": consumed, "skipped": [] if pending is not None else list(self.skipped),
                "resumed_from": before}


class _Planner:
    """The runs of every stream of one epoch after a chain of resumes, each level computed once."""

    def __init__(self, reader: TableReader, epoch: int, planning: plan_mod.Planning) -> None:
        self.reader, self.epoch, self.planning = reader, epoch, planning
        self._runs: dict[tuple[int, Grid], list[Run]] = {}

    def runs(self, grid: Grid, state: dict | None) -> list[Run]:
        """One stream's runs after resuming the run `state` (None: from the epoch's start)."""
        key = (id(state), grid)
        if key not in self._runs:
            runs = self._workers(self._rank_runs(grid, state), grid)
            if state is None:  # whole pieces; a resumed plan is what a fresh one left, read as it was then
                runs = [Run(p) for p in self.reader.stream_pieces([r.piece for r in runs], self.planning,
                                                                  epoch=self.epoch)]
            self._runs[key] = runs
        return self._runs[key]

    def _rank_runs(self, grid: Grid, state: dict | None) -> list[Run]:
        if state is None:
            _, pieces = self.reader.share(grid.rank, grid.world_size, self.planning, epoch=self.epoch)
            return [Run(p) for p in pieces]
        prior = state.get("resumed_from")
        streams = [(Grid(*s["grid"]), s) for s in state["streams"]]
        _check_complete([g for g, _ in streams])
        left = {g: remainder(self.runs(g, prior), s["consumed"]) for g, s in sorted(streams, key=lambda gs: (gs[0].rank, gs[0].worker))}
        if all(g.world_size == grid.world_size for g in left):  # each rank keeps what is left of its own share
            pools = [[r for g, runs in left.items() if g.rank == rank for r in runs] for rank in range(grid.world_size)]
            counts = [sum(r.rows() or 0 for r in pool) for pool in pools]
            if self.planning.equalize == "none" or len(set(counts)) == 1:
                return pools[grid.rank]
        every = [r for runs in left.values() for r in runs]
        if self.planning.equalize != "none":
            return deal_rows(every, grid.world_size, self.planning.equalize)[grid.rank]
        return self._by_bytes(every, grid.world_size)[grid.rank]

    def _workers(self, runs: list[Run], grid: Grid) -> list[Run]:
        return runs if grid.num_workers == 1 else self._by_bytes(runs, grid.num_workers)[grid.worker]

    def _by_bytes(self, runs: list[Run], parts: int) -> list[list[Run]]:
        return deal_bytes(runs, self.reader.weights([r.piece for r in runs]), parts)


def _check_complete(grids: list[Grid]) -> None:
    """Refuse a run state that lacks some of its streams: what they had left would be lost."""
    if not grids:
        raise StateError("a run state with no streams: gather the state_dict() of every stream of the run")
    world, workers = grids[0].world_size, grids[0].num_workers
    want = {(r, w) for r in range(world) for w in range(workers)}
    have = {(g.rank, g.worker) for g in grids if (g.world_size, g.num_workers) == (world, workers)}
    if have != want or len(grids) != len(want):
        raise StateError(f"the run state holds {len(grids)} streams of a grid of {world} ranks x {workers} workers: "
                         "gather the state_dict() of every stream of the run, each once")


def _batches(tables: Iterator[tuple[int, pa.Table]], size: int) -> Iterator[list[tuple[int, pa.Table]]]:
    """The (run, rows) of `tables` regrouped into lists of `size` rows in all (the last may hold fewer)."""
    held: list[tuple[int, pa.Table]] = []
    count = 0
    for run, table in tables:
        while table.num_rows:
            part = table.slice(0, size - count)
            held.append((run, part))
            count += part.num_rows
            table = table.slice(part.num_rows)
            if count == size:
                yield held
                held, count = [], 0
    if held:
        yield held


def _compact(parts: list[pa.Table]) -> pa.Table:
    """One table of the rows of `parts`, in buffers of their own."""
    import pyarrow as pa

    return pa.Table.from_batches([pa.concat_batches([b for part in parts for b in part.to_batches()])])
