"""Units that are row groups: what the Parquet reader and the pack reader plan alike.

Both read a sequence of row groups (`units()`, each reader's own), deal their
rows into exact ranges, and give each rank a run of them that no epoch
changes, in a seeded per-epoch order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..plan import epoch_order
from ..row_plan import RowGroup, RowSlice, deal_rows, piece_bytes, split_rows

if TYPE_CHECKING:
    from ..plan import Equalize


class RowGroupPieces:
    """`Reader` methods for a reader whose `units()` are row groups and whose pieces are row groups or row ranges."""

    def units(self) -> list[RowGroup]:
        raise NotImplementedError

    def count(self, pieces: Sequence[RowGroup | RowSlice]) -> int:
        return sum(p.num_rows for p in pieces)

    def deal(self, pieces: Sequence[RowGroup | RowSlice], parts: int, *, seed: int, shuffle: bool,
             equalize: Equalize) -> list[list]:
        return deal_rows(pieces, parts, seed=seed, shuffle=shuffle, equalize=equalize)

    def share(self, rank: int, world_size: int, *, epoch: int, seed: int, shuffle: bool,
              equalize: Equalize) -> tuple[np.ndarray, list]:
        pieces = rank_pieces(self.units(), rank, world_size, equalize)
        order = epoch_order(len(pieces), epoch=epoch, seed=seed, shuffle=shuffle)
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
