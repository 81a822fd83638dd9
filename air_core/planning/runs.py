"""Runs of a table's rows, what a `RowStream` reads, and how a resumed run shares out what is left. Pure.

A run is rows [lo, hi) of one piece (a row group, a span of a line file, a
row range of either), counted in the order the piece is read (seeded with
`shuffle`); `hi` None: to the piece's end, whose count may not be known
before it is read (a span that was not counted). A stream that stopped
after the first `n` rows of its run `k` leaves `remainder` behind; a resumed
run deals the remainders of every stream of the run it resumes again over
its own grid: by bytes, whole runs, or, where every rank must get as many
rows, cut by counted rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .shares import Equalize, rank_shares
from .rows import RowSlice, split_rows


@dataclass(frozen=True)
class Run:
    """Rows [lo, hi) of `piece`, in its read order; `hi` None: to its end."""

    piece: Any
    lo: int = 0
    hi: int | None = None

    def rows(self) -> int | None:
        """How many rows it holds; None: not known before it is read."""
        if self.hi is not None:
            return self.hi - self.lo
        total = self.piece.num_rows
        return None if total < 0 else total - self.lo


def remainder(runs: Sequence[Run], consumed: Sequence[int]) -> list[Run]:
    """What is left of `runs` after the first `consumed[1]` rows of run `consumed[0]` (and every run before it)."""
    k, n = consumed
    if k >= len(runs):
        return []
    first = runs[k]
    return [Run(first.piece, first.lo + n, first.hi), *runs[k + 1:]] if n else list(runs[k:])


def deal_bytes(runs: Sequence[Run], weights: Sequence[int], parts: int) -> list[list[Run]]:
    """Whole `runs` dealt into `parts` byte-balanced parts (`weights`: each run's bytes), each in input order."""
    return [[runs[k] for k in part] for part in rank_shares(list(weights), world_size=parts)]


def deal_rows(runs: Sequence[Run], parts: int, how: Equalize) -> list[list[Run]]:
    """The rows of counted `runs`, in order, cut into `parts` contiguous ranges: "none" within a row, "drop" to
    the smallest, "pad" to the largest (wrapping around to the first rows)."""
    # A run is a row range of its piece as `RowSlice` is of its row group: the same cut serves both.
    ranges = [RowSlice(r.piece, r.lo, r.lo + r.rows()) for r in runs]  # type: ignore[operator]
    return [[Run(s.unit, s.start, s.stop) for s in part] for part in split_rows(ranges, parts, how)]
