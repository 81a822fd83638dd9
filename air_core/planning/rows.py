"""Units of tabular work and how their rows are cut among parts. Pure: numbers in, lists out.

A unit is one Parquet row group; a piece is a unit or a row range inside one.
Cutting a sequence of pieces into contiguous row ranges gives every part the
same number of rows within one (or exactly, padded or dropped), which is
what equal step counts per rank need when files hold few large row groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from ..errors import OptionError
from .shares import Planning, epoch_order


@dataclass(frozen=True)
class RowGroup:
    """One row group: `file` is its manifest index, `nbytes` its uncompressed size; `start` and `stop`
    where its column chunks lie in the file (bytes [start, stop)), where a reader fetches it by range
    (Parquet; 0, 0 where none does)."""

    file: int
    row_group: int
    num_rows: int
    nbytes: int
    start: int = 0
    stop: int = 0


@dataclass(frozen=True)
class RowSlice:
    """Rows [start, stop) of a row group."""

    unit: RowGroup
    start: int
    stop: int

    @property
    def num_rows(self) -> int:
        """Rows in the range."""
        return self.stop - self.start


def unit_of(piece: RowGroup | RowSlice) -> RowGroup:
    """The row group a piece is, or lies in."""
    return piece.unit if isinstance(piece, RowSlice) else piece


def piece_bytes(piece: RowGroup | RowSlice) -> int:
    """A piece's share of its row group's uncompressed bytes."""
    unit = unit_of(piece)
    if not isinstance(piece, RowSlice) or not unit.num_rows:
        return unit.nbytes
    return unit.nbytes * piece.num_rows // unit.num_rows


def split_rows(pieces: Sequence[RowGroup | RowSlice], parts: int,
               how: Literal["none", "drop", "pad"] = "none") -> list[list[RowSlice]]:
    """Cut the rows of `pieces` (in order) into `parts` contiguous ranges. Pure.

    "none": sizes differ by at most one row; "drop": every part gets
    floor(total/parts) rows, the rest is dropped; "pad": every part gets
    ceil(total/parts) rows, the last ones wrapping around to the start.
    """
    slices = [p if isinstance(p, RowSlice) else RowSlice(p, 0, p.num_rows) for p in pieces]
    slices = [s for s in slices if s.num_rows]
    total = sum(s.num_rows for s in slices)
    if how == "none":
        bounds = [(k * total // parts, (k + 1) * total // parts) for k in range(parts)]
    elif how in ("drop", "pad"):
        per = total // parts if how == "drop" else -(-total // parts)
        bounds = [(k * per, (k + 1) * per) for k in range(parts)]
    else:
        raise OptionError(f"equalize={how!r}: choose one of ('none', 'pad', 'drop')")
    return [_cut(slices, lo, hi, total) for lo, hi in bounds]


def deal_rows(pieces: Sequence[RowGroup | RowSlice], parts: int, planning: Planning) -> list[list[RowSlice]]:
    """The rows of `pieces`, taken in a seeded order (with `planning.shuffle`), cut into `parts` contiguous ranges,
    as equal as `planning.equalize` asks."""
    order = epoch_order(len(pieces), epoch=0, seed=planning.seed, shuffle=planning.shuffle)
    return split_rows([pieces[i] for i in order], parts, how=planning.equalize)


def _cut(slices: Sequence[RowSlice], lo: int, hi: int, total: int) -> list[RowSlice]:
    """Rows [lo, hi) of the concatenated slices, wrapping past the end."""
    out: list[RowSlice] = []
    while lo < hi:
        start = lo % total
        end = start + min(hi - lo, total - start)
        offset = 0
        for s in slices:
            a, b = max(start, offset), min(end, offset + s.num_rows)
            if a < b:
                out.append(RowSlice(s.unit, s.start + a - offset, s.start + b - offset))
            offset += s.num_rows
        lo += end - start
    return out
