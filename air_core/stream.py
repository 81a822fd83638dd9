"""FileStream: the files of one (rank, worker) stream, the core's own front door.

It resolves a `Source`, plans its share and reads it through the source's
reader (loose files, or a pack's files). A stream is small when pickled
(its `Source` carries the listing's file, not the listing), so it can be
handed to spawned DataLoader workers, Ray tasks and `@distributed` functions.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from . import dist, heap, options
from .planning import resume
from .planning import shares as plan_mod
from .grid import Grid
from .manifest import Manifest
from .read import DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, ON_ERRORS, CachedFile, OnError, Skipped, default_fetch_threads, without_skips
from .errors import OptionError
from .mixed_source import MixedSource, resolve_sources
from .source import Source, resolve_source
from .streaming import Stream

_REMEMBERED_PLAN = 1 << 16  # items of a plan kept for the next pass: a longer one costs less per item to make


class FileStream(Stream):
    """The files of one (rank, worker) stream of a volume folder, cached on first access.

    Iterating yields `CachedFile`s in plan order. Every rank and DataLoader
    worker gets a disjoint, byte-balanced share; together they cover the
    folder exactly once per epoch (or with equal counts per rank when
    `equalize` is set).

    A mixture (`sources=`) reads several folders as one stream: each epoch
    holds exactly the items each source's weight asks (see
    `air_core.planning.mixture`), shuffled together with `shuffle`, dealt and
    resumed (on any grid, at any epoch) like one folder's files. An item a
    mixture takes in several epochs is read on the same rank each time,
    save the few moved to even out the ranks' counts, so node caches stay
    warm; `CachedFile.index` and `items()` then number the sources' listings
    laid end to end.

    Args:
        path: a volume folder, `/Volumes/c/s/v/dir` or `dbfs:/Volumes/...`.
        sources: instead of `path`, a mixture: a list of dicts, each with a
            folder's `path`, optionally its `include`, `exclude`,
            `file_extensions` and `mode` ("files"), and one weight, the same
            kind for every source: `proportion` (its fraction of each epoch,
            relative to the others'), `repeat` (its items per epoch, times
            this; fractions allowed) or `choose` (this many of its items per epoch).
        epoch_size: a mixture of proportions: items per epoch (default: the
            sources' sizes added up).
        include: glob(s) of files to keep, relative to `path` (`*` crosses `/`).
        exclude: glob(s) of files to leave out.
        shuffle: reorder each share every epoch (seeded, the same on every rank).
        seed: the shuffle seed.
        balance: "bytes" (default) or "stride" (the reference's `files[gid::R*W]`).
        equalize: "none", "pad" (repeat items so every rank has as many as the
            largest share) or "drop" (cut every share to the smallest).
        rank, world_size: this process's place; detected when not given.
        worker, num_workers: the DataLoader worker; detected when not given.
        cache_dir: the node cache folder (default: `air_core.io.cache.default_dir()`).
        cache_limit: cap on the node cache's bytes, recorded in the cache for every process on the node;
            None: keep to the cap last recorded there, if any.
        verify: hash each cached copy against the checksum recorded when it
            was copied, on every hit, and fetch again one that differs
            (default False: each hit checks the copy's length only; see the
            README for what each costs).
        fetch_threads: concurrent reads per stream (default: `default_fetch_threads()`).
        prefetch: most files fetched ahead of the consumer.
        prefetch_bytes: most bytes fetched ahead of the consumer.
        on_error: "raise" (default): a file that stays unreadable through
            every retry raises `FetchError`; "skip": it is left out with a
            warning, listed in `skipped` and in the state (a resume neither
            delivers nor re-reads it), and with `equalize` stood in for by
            another file of the stream, so counts stay equal.
        manifest: a listing to use instead of listing `path` (it must be of `path`).

    Raises:
        OptionError, VolumePathError, EmptyVolumeError: on bad input, naming
            the option or source (see `air_core.mixed_source.resolve_sources`).

    Attributes:
        skipped: the volume paths left out so far in this pass (`on_error="skip"`).
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        sources: Sequence[Mapping[str, Any]] | None = None,
        epoch_size: int | None = None,
        include: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        balance: plan_mod.Balance = "bytes",
        equalize: plan_mod.Equalize = "none",
        rank: int | None = None,
        world_size: int | None = None,
        worker: int | None = None,
        num_workers: int | None = None,
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        verify: bool = False,
        fetch_threads: int | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
        on_error: OnError = "raise",
        manifest: Manifest | None = None,
    ) -> None:
        options.choice("balance", balance, plan_mod.BALANCES)
        options.choice("equalize", equalize, plan_mod.EQUALIZES)
        options.whole("fetch_threads", fetch_threads, low=1, optional=True)
        options.whole("prefetch", prefetch, low=1)
        options.whole("prefetch_bytes", prefetch_bytes, low=1)
        options.choice("on_error", on_error, ON_ERRORS)
        options.flag("verify", verify)
        self._source: Source | MixedSource
        if sources is None:
            if path is None:
                raise OptionError("give a volume folder to read, path=, or several, sources=[...]")
            if epoch_size is not None:
                raise OptionError("epoch_size= sizes the epochs of a mixture: give sources=[...], or leave it unset")
            self._source = resolve_source(path, mode="files", include=include, exclude=exclude, cache_dir=cache_dir,
                                          manifest=manifest)
        else:
            given = [name for name, v in (("path", path), ("include", include), ("exclude", exclude),
                                          ("manifest", manifest)) if v is not None]
            if given:
                raise OptionError(f"sources= names each folder and its selection: give {given[0]}= in each "
                                  "source's dict, not beside sources=")
            self._source = resolve_sources(sources, rows_here="RowStream(sources=[...])", epoch_size=epoch_size,
                                           cache_dir=cache_dir)
        self._source.reader.check(balance=balance, on_error=on_error)
        self._planning = plan_mod.Planning(seed, bool(shuffle), balance, equalize)
        self._place(rank, world_size, worker, num_workers, cache_dir, cache_limit, verify)
        self._fetch = {"fetch_threads": fetch_threads, "prefetch": prefetch, "prefetch_bytes": prefetch_bytes,
                       "on_error": on_error}
        self._consumed = 0
        self._last_plan: tuple[tuple[Grid, int], Sequence[int]] | None = None
        self.skipped: list[str] = []

    # -- what the stream holds -------------------------------------------------

    @property
    def manifest(self) -> Manifest:
        """The listing this stream plans from (loaded from the cache folder after unpickling); a mixture has one
        per source, and raises `OptionError` here."""
        return self._source.manifest

    def items(self, grid: Grid | None = None) -> list[int]:
        """Manifest indices this stream reads this epoch, in order (no resume applied; a mixture's: see the class)."""
        items = self._plan(grid or self.grid(), None)
        return items.tolist() if isinstance(items, np.ndarray) else list(items)

    def __len__(self) -> int:
        """Files this rank reads per epoch, all its DataLoader workers together."""
        return self._source.reader.rank_count(self._rank, self._world_size, self._planning, epoch=self._epoch)

    # -- iteration and resume ----------------------------------------------------

    def __iter__(self) -> Iterator[CachedFile]:
        dist.freeze_inherited()
        grid = self.grid()
        resumed_from, mine = self._take_pending(grid)
        done = mine["consumed"] if mine else 0
        items = self._plan(grid, resumed_from)
        self._grid, self._consumed, self._resumed_from = grid, done, resumed_from
        self._grid_key = (grid.rank, grid.world_size, grid.worker, grid.num_workers)
        self.skipped = []
        fetch = dict(self._fetch)
        fetch["fetch_threads"] = fetch["fetch_threads"] or default_fetch_threads(grid.num_workers)
        records = self._source.reader.read_files(items[done:], self.cache, **fetch)
        if fetch["on_error"] == "raise":  # nothing is skipped: the count is all a warm item needs here
            for r in records:
                self._consumed += 1
                yield r
        else:
            yield from without_skips(self._positions(records), keep_count=self._planning.equalize != "none")

    def _plan(self, grid: Grid, resumed_from: dict | None) -> Sequence[int]:
        """This stream's items after resuming the run `resumed_from` (not to be changed: it may be the last pass's):
        a list, or a long share's int64 array (see `Reader.plan`)."""
        reader = self._source.reader
        if resumed_from is not None:
            return _given_back(reader.plan(grid, resumed_from, self._planning, epoch=self._epoch))
        # Unshuffled, every epoch has the plan of the last: a DataLoader worker would plan it again at every
        # pass, ~0.3 ms of its CPU (~1 us an item at 6 workers), for a few hundred files.
        key = (grid, reader.plan_epoch(self._planning, self._epoch))
        if self._last_plan is not None and self._last_plan[0] == key:
            return self._last_plan[1]
        items = _given_back(reader.plan(grid, None, self._planning, epoch=self._epoch))
        self._last_plan = (key, items) if len(items) <= _REMEMBERED_PLAN else None
        return items

    def _positions(self, records: Iterator[CachedFile | Skipped]) -> Iterator[CachedFile | Skipped]:
        # A skipped file's place in the plan is passed like a delivered one's: a resume goes on after it.
        for r in records:
            self._consumed += 1
            if isinstance(r, Skipped):
                self.skipped.append(r.path)
            yield r

    def state_dict(self) -> resume.StreamState:
        """Where iteration stands: plain data, enough to resume exactly-once.

        `air_core.run_state` gathers every stream's state into one that resumes
        on any grid. A state loaded but not yet iterated stands where it said.
        """
        pending = self._pending
        if pending is not None and "streams" not in pending:
            return dict(pending)
        g = self._grid if pending is None and self._grid is not None else self.grid()
        consumed, before = (0, pending) if pending is not None else (self._consumed, self._resumed_from)
        return {
            "version": resume.VERSION,
            "epoch": self._epoch,
            "fingerprint": self._source.fingerprint,
            "options": self._options(),
            "grid": [g.rank, g.world_size, g.worker, g.num_workers],
            "consumed": consumed,
            "skipped": [] if pending is not None else list(self.skipped),
            "resumed_from": before,
        }

    def position(self) -> tuple[int, tuple[int, ...], int]:
        """`(epoch, grid, consumed)` of `state_dict()`, without the rest (its fingerprint, options, ...), which
        would cost a DataLoader worker ~10 us a batch; the grid is the pass's own tuple, made once."""
        if self._pending is not None or self._grid is None:
            return super().position()  # type: ignore[return-value]
        return self._epoch, self._grid_key, self._consumed

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_last_plan": None}  # a plan is made again where it is used


def _given_back(items: Sequence[int]) -> Sequence[int]:
    """`items`, a plan just made; a long one's temporaries (arrays over its rank's share) given back to the
    system, which the C heap would otherwise keep (see `air_core.heap`)."""
    if len(items) > _REMEMBERED_PLAN:
        heap.give_back_freed()
    return items
