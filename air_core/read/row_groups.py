"""Units of rows that readers plan alike: row groups (Parquet, packs), and units counted only on request.

`RowGroupPieces`: the Parquet and pack readers read a sequence of row groups
(`units()`, each reader's own), deal their rows into exact ranges, and give
each rank a run of them that no epoch changes, in a seeded per-epoch order.

`CountedUnits`: the line and WebDataset readers' units (spans, tars) hold
rows that are known only once read, so they are dealt as whole units by
bytes; where every rank must get as many rows (`equalize`), each unit is
counted first (`counted()`) and they are planned as row groups are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence, TypeVar

import numpy as np

from ..planning import shares as plan_mod
from ..planning.shares import epoch_order
from ..planning.rows import RowGroup, RowSlice, deal_rows, piece_bytes, split_rows, unit_of
from .reader import Part

if TYPE_CHECKING:
    import pyarrow as pa

    from ..planning.shares import Equalize, Planning

Rows = TypeVar("Rows", "pa.Table", "list[dict[str, Any]]")


class RowGroupPieces:
    """`Reader` methods for a reader whose `units()` are row groups and whose pieces are row groups or row ranges."""

    rows_as_stored = True  # a row group is read whole, in its order (see `TableReader`)

    def units(self) -> list[RowGroup]:
        raise NotImplementedError

    def count(self, pieces: Sequence[RowGroup | RowSlice]) -> int:
        return sum(p.num_rows for p in pieces)

    def deal(self, pieces: Sequence[RowGroup | RowSlice], parts: int, planning: Planning) -> list[list]:
        return deal_rows(pieces, parts, planning)

    def share(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> tuple[np.ndarray, list]:
        pieces = rank_pieces(self.units(), rank, world_size, planning.equalize)
        order = epoch_order(len(pieces), epoch=epoch, seed=planning.seed, shuffle=planning.shuffle)
        return np.asarray(order, dtype=np.int64), [pieces[k] for k in order]

    def share_weights(self, rank: int, world_size: int, *, equalize: Equalize) -> np.ndarray:
        pieces = rank_pieces(self.units(), rank, world_size, equalize)
        return np.array([piece_bytes(p) for p in pieces], dtype=np.int64)

    def weights(self, pieces: Sequence[RowGroup | RowSlice]) -> list[int]:
        return [piece_bytes(p) for p in pieces]


def rank_pieces(units: Sequence[RowGroup], rank: int, world_size: int, equalize: Equalize) -> list:
    """`rank`'s row groups and row ranges, in the same order every epoch (whole row groups on one rank)."""
    if world_size == 1 and equalize == "none":
        return [u for u in units if u.num_rows]
    return split_rows(units, world_size, equalize)[rank]


class CountedUnits:
    """`Reader` methods for units (frozen dataclasses with `nbytes` and `num_rows`, -1 until counted) whose rows
    are counted only where counts must match; pieces are units, or `RowSlice`s of counted ones."""

    def units(self) -> list:
        """Every unit, in listing order, uncounted."""
        raise NotImplementedError

    def counted(self) -> list:
        """`units()`, each with its rows counted (a read of every unit)."""
        raise NotImplementedError

    def unit_bytes(self) -> np.ndarray:
        """The bytes of each of `units()`, in order."""
        return np.array([u.nbytes for u in self.units()], dtype=np.int64)

    def count(self, pieces: Sequence[Any]) -> int:
        return sum(p.num_rows for p in self._with_counts(pieces))

    def deal(self, pieces: Sequence[Any], parts: int, planning: Planning) -> list[list]:
        if planning.equalize != "none":
            return deal_rows(self._with_counts(pieces), parts, planning)
        dealt = plan_mod.rank_shares([piece_bytes(p) for p in pieces], world_size=parts, planning=planning)
        return [[pieces[k] for k in part] for part in dealt]

    def share(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> tuple[np.ndarray, list]:
        if planning.equalize != "none":
            pieces = rank_pieces(self.counted(), rank, world_size, planning.equalize)
            order = epoch_order(len(pieces), epoch=epoch, seed=planning.seed, shuffle=planning.shuffle)
            return np.asarray(order, dtype=np.int64), [pieces[k] for k in order]
        units = self.units()
        keys = plan_mod.rank_share(self.unit_bytes(), rank=rank, world_size=world_size, planning=planning,
                                   epoch=epoch)
        return np.asarray(keys, dtype=np.int64), [units[k] for k in keys]

    def share_weights(self, rank: int, world_size: int, *, equalize: Equalize) -> np.ndarray:
        if equalize != "none":
            pieces = rank_pieces(self.counted(), rank, world_size, equalize)
            return np.array([piece_bytes(p) for p in pieces], dtype=np.int64)
        return self.unit_bytes()

    def weights(self, pieces: Sequence[Any]) -> list[int]:
        return [piece_bytes(p) for p in pieces]

    def _with_counts(self, pieces: Sequence[Any]) -> list:
        """`pieces`, each unit among them replaced by its counted self."""
        counted = {replace(u, num_rows=-1): u for u in self.counted()}
        return [p if isinstance(p, RowSlice) else counted[replace(p, num_rows=-1)] for p in pieces]


def localize(pieces: Sequence[Any]) -> tuple[list[int], list]:
    """The files `pieces` touch (in first-use order), and the pieces renumbered to index that list.

    A part then carries only its own files' rows, not the whole listing.
    """
    files = list(dict.fromkeys(unit_of(p).file for p in pieces))
    position = {f: k for k, f in enumerate(files)}
    out = []
    for p in pieces:
        unit = replace(unit_of(p), file=position[unit_of(p).file])
        out.append(replace(p, unit=unit) if isinstance(p, RowSlice) else unit)
    return files, out


@dataclass(frozen=True)
class CountedPart(Part):
    """Units (or row ranges of them) to read elsewhere: their files' rows of the listing, the pieces numbered
    over them, how they turn into tables (`format`), and the order of rows inside each (the planning's seed and
    shuffle, and the epoch).
    Its `rows` are None unless every piece was counted."""

    root: str
    local_root: str
    fingerprint: str
    listing: list[tuple[str, int, int]]
    pieces: list
    format: Any
    planning: Planning
    epoch: int

    @property
    def rows(self) -> int | None:  # type: ignore[override]
        counts = [p.num_rows for p in self.pieces]
        return None if min(counts, default=0) < 0 else sum(counts)

    @property
    def nbytes(self) -> int:
        return sum(piece_bytes(p) for p in self.pieces)

    @property
    def input_files(self) -> list[str]:
        return [f"{self.root}/{r[0]}" for r in self.listing]


def within(table: Rows, before: int, lo: int, hi: int | None) -> Rows:
    """The rows of `table` (a table, or a list of Python rows) that lie in [lo, hi) (`hi` None: to the end) of a
    sequence of rows, the table holding its rows [before, before + len): all of it, a slice, or none."""
    n = len(table)
    a, b = max(lo, before), before + n if hi is None else min(hi, before + n)
    return table if (a, b) == (before, before + n) else table[a - before:max(a, b) - before]
