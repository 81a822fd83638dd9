"""What the core's own streams share: a place in the grid, the node cache, the epoch and a resume state to take up.

`FileStream` (a source's files) and `RowStream` (a table's rows) differ in
what they read and in how far a state says they got; both load a stream's
own state (the same grid) or a whole run's (any grid) the same way.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import ClassVar

from . import dist
from .errors import StateError
from .grid import Grid
from .io.cache import Cache
from .planning import resume
from .planning.shares import Planning
from .source import Source


class Stream:
    """The plumbing of a (rank, worker) stream of a `Source`; subclasses plan and read."""

    _source: Source
    _planning: Planning
    # The planning options a state names, and a state loaded must match.
    _state_options: ClassVar[tuple[str, ...]] = tuple(asdict(Planning()))

    def _place(self, rank: int | None, world_size: int | None, worker: int | None, num_workers: int | None,
               cache_dir: str | None, cache_limit: int | None, verify: bool) -> None:
        """Take this stream's place (ranks detected when not given) and its node cache's settings."""
        self.path, self.mode = self._source.path, self._source.mode
        self._rank, self._world_size = dist.detect_rank(rank, world_size)
        Grid(self._rank, self._world_size)
        self._worker, self._num_workers = worker, num_workers
        self._cache_dir, self._cache_limit, self._verify = cache_dir, cache_limit, verify
        self._cache: Cache | None = None
        self._cache_pid = 0
        self._epoch = 0
        self._pending: dict | None = None
        self._grid: Grid | None = None
        self._resumed_from: dict | None = None

    @property
    def cache(self) -> Cache:
        """This process's handle on the node cache (its `stats` count this process's use). A forked child (a
        DataLoader worker) makes its own, however far the parent read: the parent's handle is its fetch threads'."""
        if self._cache is None or self._cache_pid != os.getpid():
            self._cache = Cache(self._cache_dir, limit_bytes=self._cache_limit, verify=self._verify)
            self._cache_pid = os.getpid()
        return self._cache

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads (see `set_epoch`)."""
        return self._epoch

    def grid(self) -> Grid:
        """This stream's place, with the DataLoader worker detected now."""
        w, nw = dist.detect_worker(self._worker, self._num_workers)
        return Grid(self._rank, self._world_size, w, nw)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its shuffle); a pending resume state for another epoch is dropped."""
        if self._pending is not None and self._pending["epoch"] != epoch:
            self._pending = None
        self._epoch = epoch

    def position(self) -> tuple[int, tuple[int, ...], object]:
        """`(epoch, grid, consumed)` of `state_dict()`, the grid as a tuple: how far this stream's pass got, what
        a DataLoader tags each batch with (every batch: a subclass gives it without making the rest of the state)."""
        state = self.state_dict()  # type: ignore[attr-defined]
        return state["epoch"], tuple(state["grid"]), state["consumed"]

    def load_state_dict(self, state: dict) -> None:
        """Resume at the next iteration.

        Takes either one stream's `state_dict()` (resume on the same grid), or a
        whole run's state, `air_core.run_state([every stream's state_dict()])`,
        which resumes on any grid (see `air_core.planning.resume` for who reads the rest).
        """
        if not isinstance(state, dict) or "epoch" not in state or "fingerprint" not in state:
            raise StateError(f"not a {type(self).__name__} state: {state!r:.200}")
        if state["fingerprint"] != self._source.fingerprint:
            raise StateError(self._source.changed_since(state["fingerprint"]))
        state = resume.upgrade(state)
        mine = self._options()
        if state.get("options", mine) != mine:
            raise StateError(f"the state was saved with plan options {state['options']}, this stream has {mine}")
        if "streams" in state and any(s.get("epoch", state["epoch"]) != state["epoch"] for s in state["streams"]):
            raise StateError("a run state's streams must all be from its epoch")
        self._pending = state
        self._epoch = state["epoch"]

    def _options(self) -> dict:
        """This stream's planning, as its states name it."""
        return {name: getattr(self._planning, name) for name in self._state_options}

    def _take_pending(self, grid: Grid) -> tuple[dict | None, dict | None]:
        """(the run state this pass resumes, this stream's own saved state it goes on from); None, None: afresh."""
        state, self._pending = self._pending, None
        if state is None or "streams" in state:
            return state, None
        saved = Grid(*state["grid"])
        if saved != grid:
            raise StateError(
                f"the state was saved by stream {saved} but this is {grid}: to resume on another grid, "
                "load the whole run's state, air_core.run_state([every stream's state_dict()])"
            )
        return state.get("resumed_from"), state

    # -- pickling: the source carries its listing's file, not the listing ---------

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cache": None}
