"""FileStream: manifest + plan + cache + fetch pool -> the files of one stream.

The one engine behind every front door. A stream is small when pickled (its
`Source` carries the listing's file, not the listing), so it can be handed to
spawned DataLoader workers, Ray tasks and `@distributed` functions.
"""

from __future__ import annotations

import logging
import os
from itertools import islice
from typing import Iterable, Iterator, Literal, NamedTuple, Sequence

from . import dist, options, pack_plan, resume, volume
from . import plan as plan_mod
from .cache import Cache, read_bytes, read_fd
from .errors import FetchError, OptionError, StateError
from .fetch import ordered_map, retrying
from .grid import Grid
from .manifest import Manifest
from .source import resolve_source

log = logging.getLogger("air_core")

OnError = Literal["raise", "skip"]
ON_ERRORS = ("raise", "skip")
DEFAULT_FETCH_THREADS = 64
WORKER_FETCH_THREADS = 32
DEFAULT_PREFETCH = 256
DEFAULT_PREFETCH_BYTES = 512 << 20


def default_fetch_threads(num_workers: int | None = None) -> int:
    """Reads in flight per stream: 64 in a process of its own, 32 when several DataLoader workers share the cores.

    Beyond that, a worker's fetch threads contend with its consumer and with
    the other workers more than their reads overlap (2,000 files under the
    emulated volume, 2 cores: 2 workers read 4,735 files/s at 32 threads each
    and 3,430 at 64; 6 workers 4,746 and 2,417). `num_workers` defaults to the
    DataLoader worker count detected now.
    """
    if num_workers is None:
        num_workers = dist.detect_worker()[1]
    return WORKER_FETCH_THREADS if num_workers > 1 else DEFAULT_FETCH_THREADS


class CachedFile(NamedTuple):
    """One file of a stream (a named tuple: built once per file, so it must be cheap).

    Attributes:
        path: the volume path (`/Volumes/c/s/v/...`).
        local_path: a local path to read: the cached copy, or the volume file
            itself when the cache was full (then `cached` is False); empty for
            a file read from a pack, whose bytes are in `data`.
        size: size in bytes.
        index: the file's index in the manifest.
        cached: whether `local_path` is a node-local cached copy.
        data: the bytes, when the file was streamed past a full cache or read from a pack.
    """

    path: str
    local_path: str
    size: int
    index: int
    cached: bool = True
    data: bytes | None = None

    def read_bytes(self) -> bytes:
        """The file's bytes (already in memory when it was streamed past a full cache)."""
        if self.data is not None:
            return self.data
        fd = os.open(self.local_path, os.O_RDONLY)
        try:
            return read_fd(fd, self.size)
        finally:
            os.close(fd)


class Skipped(NamedTuple):
    """A file left out under `on_error="skip"`: it stayed unreadable through every retry.

    Attributes:
        path: the volume path.
        index: the file's index in the manifest.
        error: what the last attempt met.
    """

    path: str
    index: int
    error: str


def without_skips(records: Iterable[CachedFile | Skipped], *, keep_count: bool) -> Iterator[CachedFile]:
    """The files of `records`, each `Skipped` one logged and left out.

    With `keep_count` (equal counts were asked for: a rank short of one file
    would hang DDP at the end of the epoch), a skipped file is stood in for
    by the file delivered before it, or by the next one when it comes first,
    as `equalize="pad"` repeats files.
    """
    last: CachedFile | None = None
    owed = 0
    for r in records:
        if isinstance(r, Skipped):
            log.warning("skipped %s, which stays unreadable: %s", r.path, r.error)
            if not keep_count:
                continue
            if last is None:
                owed += 1
                continue
            r = last
        last = r
        for _ in range(owed + 1):
            yield r
        owed = 0


def read_items(
    manifest: Manifest,
    items: Iterable[int],
    cache: Cache,
    *,
    fetch_threads: int = DEFAULT_FETCH_THREADS,
    prefetch: int = DEFAULT_PREFETCH,
    prefetch_bytes: int = DEFAULT_PREFETCH_BYTES,
    local_root: str | None = None,
    on_error: OnError = "raise",
) -> Iterator[CachedFile | Skipped]:
    """Fetch manifest items through the cache, ahead of the consumer, in order.

    `local_root` is where `manifest.root` lives on this machine (default: mapped
    by this process's `AIR_VOLUMES_ROOT`); a process reading what another one
    listed, such as a Ray task, passes the lister's. A file that stays
    unreadable raises `FetchError`, or with `on_error="skip"` is yielded as a
    `Skipped` in its place (see `without_skips`).
    """
    local_root = local_root or volume.parse(manifest.root).local
    root = manifest.root

    def fetch(item: Row) -> CachedFile:
        i, path, size, mtime = item
        vpath, src = f"{root}/{path}", f"{local_root}/{path}"

        def once() -> CachedFile:
            entry = cache.get(src, vpath, size, mtime)
            if entry is not None:
                return CachedFile(vpath, entry, size, i)
            return CachedFile(vpath, src, size, i, cached=False, data=read_bytes(src, vpath, size, mtime))

        try:
            return retrying(once, vpath)
        except FetchError as e:
            if on_error == "raise":
                raise
            return Skipped(vpath, i, str(e))

    def hit(item: Row) -> CachedFile | None:
        i, path, size, mtime = item
        vpath = f"{root}/{path}"
        entry = cache.lookup(vpath, size, mtime)
        return None if entry is None else CachedFile(vpath, entry, size, i)

    return ordered_map(fetch, _rows(manifest, items), threads=fetch_threads,
                       max_ahead=prefetch, max_bytes=prefetch_bytes, quick=hit)


Row = tuple[int, str, int, int]  # (manifest index, relative path, size, mtime_ns)
_ROWS_AT_ONCE = 128


def _rows(manifest: Manifest, items: Iterable[int]) -> Iterator[tuple[Row, int]]:
    """(row, size) of each item, its path and numbers decoded `_ROWS_AT_ONCE` items at a time.

    One decode and one conversion per chunk rather than per file: a warm
    pass costs a `stat` and little else per file.
    """
    it = iter(items)
    while chunk := list(islice(it, _ROWS_AT_ONCE)):
        for i, (path, size, mtime) in zip(chunk, manifest.rows(chunk)):
            yield (i, path, size, mtime), size


class FileStream:
    """The files of one (rank, worker) stream of a volume folder, cached on first access.

    Iterating yields `CachedFile`s in plan order. Every rank and DataLoader
    worker gets a disjoint, byte-balanced share; together they cover the
    folder exactly once per epoch (or with equal counts per rank when
    `equalize` is set).

    Args:
        path: a volume folder, `/Volumes/c/s/v/dir` or `dbfs:/Volumes/...`.
        include: glob(s) of files to keep, relative to `path` (`*` crosses `/`).
        exclude: glob(s) of files to leave out.
        shuffle: reorder each share every epoch (seeded, the same on every rank).
        seed: the shuffle seed.
        balance: "bytes" (default) or "stride" (the reference's `files[gid::R*W]`).
        equalize: "none", "pad" (repeat items so every rank has as many as the
            largest share) or "drop" (cut every share to the smallest).
        rank, world_size: this process's place; detected when not given.
        worker, num_workers: the DataLoader worker; detected when not given.
        cache_dir: the node cache folder (default: `air_core.cache.default_dir()`).
        cache_limit: cap on the cache's bytes; None for no cap.
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

    Attributes:
        skipped: the volume paths left out so far in this pass (`on_error="skip"`).
    """

    def __init__(
        self,
        path: str,
        *,
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
        self._source = resolve_source(path, mode="files", include=include, exclude=exclude, cache_dir=cache_dir,
                                      manifest=manifest)
        self.path, self.mode = self._source.path, self._source.mode
        if self.mode == "pack" and (balance != "bytes" or on_error != "raise"):
            raise OptionError(f"{path} is a pack: its streams take neighbouring row groups, by count, and an "
                              "unreadable shard cannot be skipped file by file; leave balance= and on_error= unset")
        self._plan_opts = {"seed": seed, "shuffle": bool(shuffle), "balance": balance, "equalize": equalize}
        self._rank, self._world_size = dist.detect_rank(rank, world_size)
        Grid(self._rank, self._world_size)
        self._worker, self._num_workers = worker, num_workers
        self._cache_dir, self._cache_limit, self._verify = cache_dir, cache_limit, verify
        self._fetch = {"fetch_threads": fetch_threads, "prefetch": prefetch, "prefetch_bytes": prefetch_bytes,
                       "on_error": on_error}
        self._fingerprint = self._source.fingerprint
        self._cache: Cache | None = None
        self._epoch = 0
        self._pending: dict | None = None
        self._grid: Grid | None = None
        self._consumed = 0
        self._resumed_from: dict | None = None
        self.skipped: list[str] = []

    # -- what the stream holds -------------------------------------------------

    @property
    def manifest(self) -> Manifest:
        """The listing this stream plans from (loaded from the cache folder after unpickling)."""
        return self._source.manifest

    @property
    def cache(self) -> Cache:
        """This process's handle on the node cache (its `stats` count this process's use)."""
        if self._cache is None:
            self._cache = Cache(self._cache_dir, limit_bytes=self._cache_limit, verify=self._verify)
        return self._cache

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads (see `set_epoch`)."""
        return self._epoch

    def grid(self) -> Grid:
        """This stream's place, with the DataLoader worker detected now."""
        w, nw = dist.detect_worker(self._worker, self._num_workers)
        return Grid(self._rank, self._world_size, w, nw)

    def items(self, grid: Grid | None = None) -> list[int]:
        """Manifest indices this stream reads this epoch, in order (no resume applied)."""
        return self._plan(grid or self.grid(), None)

    def __len__(self) -> int:
        """Files this rank reads per epoch, all its DataLoader workers together."""
        if self.mode == "pack":
            units = [u.num_rows for u in self._source.units()]
            return pack_plan.rank_counts(units, self._world_size, equalize=self._plan_opts["equalize"])[self._rank]
        m, o = self.manifest, self._plan_opts
        epoch = plan_mod.Epoch(m.sizes, epoch=self._epoch, seed=o["seed"], shuffle=o["shuffle"],
                               by_size=m.largest_first)
        # This rank's share alone: dealing every rank's in read order would sort all of them.
        deal = plan_mod.Deal(epoch, self._world_size, balance=o["balance"], equalize=o["equalize"], excluded=None)
        return len(deal.share(self._rank))

    # -- iteration and resume ----------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its shuffle); a pending resume state for another epoch is dropped."""
        if self._pending is not None and self._pending["epoch"] != epoch:
            self._pending = None
        self._epoch = epoch

    def __iter__(self) -> Iterator[CachedFile]:
        dist.freeze_inherited()
        grid = self.grid()
        resumed_from, done = self._take_pending(grid)
        items = self._plan(grid, resumed_from)
        self._grid, self._consumed, self._resumed_from = grid, done, resumed_from
        self.skipped = []
        if self.mode == "pack":
            from .pack_read import read_files

            source = self._source
            records = read_files(self.manifest, source.placement(), source.shards(), items[done:], self.cache)
            yield from self._positions(records)  # type: ignore[misc]
            return
        fetch = dict(self._fetch)
        fetch["fetch_threads"] = fetch["fetch_threads"] or default_fetch_threads(grid.num_workers)
        records = self._positions(read_items(self.manifest, items[done:], self.cache, **fetch))
        if fetch["on_error"] == "raise":  # nothing is skipped: one generator less per file
            yield from records  # type: ignore[misc]
        else:
            yield from without_skips(records, keep_count=self._plan_opts["equalize"] != "none")

    def _plan(self, grid: Grid, resumed_from: dict | None) -> list[int]:
        """This stream's items after resuming the run `resumed_from`: files, or a pack's files by row group."""
        if self.mode == "pack":
            opts = {k: v for k, v in self._plan_opts.items() if k != "balance"}
            return pack_plan.plan([u.num_rows for u in self._source.units()], grid, resumed_from, epoch=self._epoch,
                                  **opts)
        m = self.manifest
        return resume.plan(m.sizes, grid, resumed_from, epoch=self._epoch, by_size=m.largest_first, **self._plan_opts)

    def _positions(self, records: Iterator[CachedFile | Skipped]) -> Iterator[CachedFile | Skipped]:
        # A skipped file's place in the plan is passed like a delivered one's: a resume goes on after it.
        for r in records:
            self._consumed += 1
            if isinstance(r, Skipped):
                self.skipped.append(r.path)
            yield r

    def state_dict(self) -> dict:
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
            "fingerprint": self._fingerprint,
            "options": dict(self._plan_opts),
            "grid": [g.rank, g.world_size, g.worker, g.num_workers],
            "consumed": consumed,
            "skipped": [] if pending is not None else list(self.skipped),
            "resumed_from": before,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at the next iteration.

        Takes either one stream's `state_dict()` (resume on the same grid), or a
        whole run's state, `air_core.run_state([every stream's state_dict()])`,
        which resumes on any grid (see `air_core.resume` for who reads the rest).
        """
        if not isinstance(state, dict) or "epoch" not in state or "fingerprint" not in state:
            raise StateError(f"not a FileStream state: {state!r:.200}")
        if state["fingerprint"] != self._fingerprint:
            raise StateError(
                f"the state was saved over a different listing of {self.path} (fingerprint "
                f"{state['fingerprint']} vs {self._fingerprint}): the folder changed since; "
                "resume needs the same files"
            )
        state = resume.upgrade(state)
        if state.get("options", self._plan_opts) != self._plan_opts:
            raise StateError(
                f"the state was saved with plan options {state['options']}, this stream has {self._plan_opts}"
            )
        if "streams" in state and any(s.get("epoch", state["epoch"]) != state["epoch"] for s in state["streams"]):
            raise StateError("a run state's streams must all be from its epoch")
        self._pending = state
        self._epoch = state["epoch"]

    def _take_pending(self, grid: Grid) -> tuple[dict | None, int]:
        """(the run state this pass resumes, items of its plan already delivered)."""
        state, self._pending = self._pending, None
        if state is None:
            return None, 0
        if "streams" in state:
            return state, 0
        saved = Grid(*state["grid"])
        if saved != grid:
            raise StateError(
                f"the state was saved by stream {saved} but this is {grid}: to resume on another grid, "
                "load the whole run's state, air_core.run_state([every stream's state_dict()])"
            )
        return state.get("resumed_from"), state["consumed"]

    # -- pickling: the source carries its listing's file, not the listing ---------

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cache": None}
