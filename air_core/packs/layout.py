"""How a pack cuts a listing into shards and row groups. Pure: sizes in, ranges out.

Files keep their listing order (sorted by path) and are cut into contiguous
runs: shards of about `shard_bytes`, row groups of about `row_group_bytes`
inside each shard. The cuts depend on the sizes alone, so a run that was
killed and started again cuts the same shards, and keeps those it finished.
Cuts fall at equal byte quantiles rather than greedily: 2.9 GB in 1 GiB
shards makes three shards of ~0.97 GB, not two full ones and a small one, so
readers splitting shards get even shares.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import OptionError


def cuts(sizes: Sequence[int], target_bytes: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of `sizes`, contiguous, about `target_bytes` each, none empty.

    The number of ranges is ceil(total / target); each ends at the first
    item that reaches its share of the total, so ranges differ by at most
    about one item's size.
    """
    if target_bytes < 1:
        raise OptionError(f"a shard or row group size of {target_bytes} bytes: give at least 1")
    sizes = np.asarray(sizes, dtype=np.int64)
    if not len(sizes):
        return []
    ends = np.cumsum(sizes)
    parts = int(min(len(sizes), max(1, -(-int(ends[-1]) // target_bytes))))
    shares = ends[-1] * np.arange(1, parts) // parts
    stops = np.unique(np.searchsorted(ends, shares, side="left") + 1)
    stops = [int(s) for s in stops if 0 < s < len(sizes)] + [len(sizes)]
    return list(zip([0, *stops[:-1]], stops))


def layout(sizes: Sequence[int], shard_bytes: int, row_group_bytes: int) -> list[list[tuple[int, int]]]:
    """Per shard, its row groups as [start, stop) ranges of listing positions."""
    out = []
    for start, stop in cuts(sizes, shard_bytes):
        out.append([(start + a, start + b) for a, b in cuts(sizes[start:stop], row_group_bytes)])
    return out
