"""Which packed files one stream reads, in which order. Pure: numbers in, lists out.

A pack's files are numbered in listing order, the order they sit in its
shards; `unit_rows` are the files of each row group, in that order. Row
groups are the units: a stream reads each of its row groups once, whole.

- Rank shares: the files not yet delivered, in pack order, cut into
  `world_size` contiguous ranges, equal within one file (exactly equal with
  `equalize`). A rank reads a run of neighbouring row groups, the same every
  epoch, so its node's cache holds its own row groups and not the whole pack.
- Read order: the rank's row groups in a seeded per-epoch order, and the
  files inside each row group in a seeded order too (`shuffle`), the same on
  every rank.
- Workers: the rank's share, in read order, cut into `num_workers`
  contiguous ranges, so each worker reads whole row groups.
- Resume: the files a run state delivered (each stream's first `consumed`
  items of its plan, chained through `resumed_from` as in `air_core.planning.resume`)
  are taken out and the rest is cut again over the grid that resumes: each
  file is delivered exactly once, on any grid.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import OptionError
from ..grid import Grid
from ..planning.shares import Planning, epoch_order_array
from ..planning.rows import RowGroup, RowSlice


def plan_packs(
    unit_rows: Sequence[int],
    grid: Grid,
    state: dict | None = None,
    *,
    planning: Planning = Planning(),
    epoch: int = 0,
) -> list[int]:
    """The files one stream (rank, worker) reads in `epoch` after resuming the run `state` (None: from the start).

    A pack is cut into contiguous ranges, not balanced: `planning.balance` does not apply.
    """
    return _Pack(unit_rows, epoch, planning).stream(state, grid).tolist()


def rank_counts(unit_rows: Sequence[int], world_size: int, *, planning: Planning = Planning()) -> list[int]:
    """Files each rank reads in a whole epoch."""
    return [len(s) for s in _Pack(unit_rows, 0, planning).shares(None, world_size)]


class _Pack:
    """One epoch of a pack: the read order of its files, and its shares, each level of a resume computed once."""

    def __init__(self, unit_rows: Sequence[int], epoch: int, planning: Planning) -> None:
        seed, shuffle, equalize = planning.seed, planning.shuffle, planning.equalize
        rows = np.asarray(unit_rows, dtype=np.int64)
        self.n, self.equalize = int(rows.sum()), equalize
        units = len(rows)
        unit_at = np.empty(units, np.int64)
        unit_at[epoch_order_array(units, epoch, seed, shuffle)] = np.arange(units)
        within = np.empty(self.n, np.int64)
        # Another stream than the units' (a seed of its own), so the two orders are independent.
        within[epoch_order_array(self.n, epoch, f"{seed}/files", shuffle)] = np.arange(self.n)  # type: ignore[arg-type]
        self.key = unit_at[np.repeat(np.arange(units), rows)] * max(1, self.n) + within
        self._shares: dict[tuple[int, int], list[np.ndarray]] = {}
        self._delivered: dict[int, np.ndarray] = {}

    def stream(self, state: dict | None, grid: Grid) -> np.ndarray:
        """One stream's files in read order: its worker's contiguous part of its rank's share."""
        share = self.shares(state, grid.world_size)[grid.rank]
        w, nw = grid.worker, grid.num_workers
        return share[w * len(share) // nw:(w + 1) * len(share) // nw]

    def shares(self, state: dict | None, world_size: int) -> list[np.ndarray]:
        """Every rank's files in read order, after resuming `state`."""
        key = (id(state), world_size)
        if key not in self._shares:
            gone = self.delivered(state) if state else None
            left = np.arange(self.n) if gone is None else np.flatnonzero(~gone)
            total = len(left)
            if self.equalize == "none":
                bounds = [(k * total // world_size, (k + 1) * total // world_size) for k in range(world_size)]
            else:
                per = total // world_size if self.equalize == "drop" else -(-total // world_size)
                if not per and total and gone is None:
                    raise OptionError(f"equalize='drop' with {total} files over {world_size} ranks leaves every "
                                      "rank empty: use equalize='pad', or fewer ranks")
                bounds = [(k * per, (k + 1) * per) for k in range(world_size)]
            out = []
            for lo, hi in bounds:
                share = left[np.arange(lo, hi) % total] if total else left  # "pad" wraps to the start
                out.append(share[np.argsort(self.key[share], kind="stable")])
            self._shares[key] = out
        return self._shares[key]

    def delivered(self, state: dict) -> np.ndarray:
        """A mask of the files the run `state` had delivered."""
        if id(state) not in self._delivered:
            shared = state.get("resumed_from")
            out = self.delivered(shared).copy() if shared else np.zeros(self.n, bool)
            for s in state["streams"]:
                prior = s["resumed_from"] if "resumed_from" in s else shared
                if prior and prior is not shared:  # a stream that carries its own
                    out |= self.delivered(prior)
                out[self.stream(prior, Grid(*s["grid"]))[: s["consumed"]]] = True
            self._delivered[id(state)] = out
        return self._delivered[id(state)]


def pieces(units: Sequence[RowGroup], files: Sequence[int]) -> list[RowGroup | RowSlice]:
    """The row groups, or row ranges of them, that hold `files` (positions in the pack, ascending).

    Whole row groups come back as they are; a run of files that covers only
    part of one (a split's first or last group) as a `RowSlice`.
    """
    starts = np.cumsum([0] + [u.num_rows for u in units])
    files = np.asarray(files, dtype=np.int64)
    unit = np.searchsorted(starts, files, side="right") - 1
    breaks = np.flatnonzero((np.diff(unit) != 0) | (np.diff(files) != 1)) + 1
    out: list[RowGroup | RowSlice] = []
    for run in np.split(np.arange(len(files)), breaks):
        if len(run):
            u = units[int(unit[run[0]])]
            lo, hi = int(files[run[0]] - starts[unit[run[0]]]), int(files[run[-1]] - starts[unit[run[0]]]) + 1
            out.append(u if (lo, hi) == (0, u.num_rows) else RowSlice(u, lo, hi))
    return out


def files_of(units: Sequence[RowGroup], pieces: Sequence[RowGroup | RowSlice], *,
             planning: Planning = Planning(), epoch: int = 0) -> list[int]:
    """The pack's files that `pieces` hold, piece by piece: in pack order, or in a seeded order inside each piece."""
    starts = dict(zip(((u.file, u.row_group) for u in units), np.cumsum([0] + [u.num_rows for u in units])))
    out: list[int] = []
    for piece in pieces:
        unit = piece.unit if isinstance(piece, RowSlice) else piece
        lo, hi = (piece.start, piece.stop) if isinstance(piece, RowSlice) else (0, unit.num_rows)
        files = np.arange(lo, hi) + starts[unit.file, unit.row_group]
        if planning.shuffle:
            seeded = f"{planning.seed}/{unit.file}/{unit.row_group}"
            files = files[epoch_order_array(len(files), epoch, seeded, True)]  # type: ignore[arg-type]
        out += files.tolist()
    return out
