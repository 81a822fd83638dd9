"""How a listing becomes shards, the lists `datasets` splits over ranks and workers. Pure.

`datasets` hands whole shards to each rank (round-robin in
`split_dataset_by_node`, contiguous in accelerate's `.shard()`) and then to
each DataLoader worker (round-robin). So the shard count is a multiple of
world_size x num_workers, and shards are balanced among themselves: files are
dealt largest first in snake order (counts within one, bytes within the
largest file), rows are cut into contiguous ranges (within one row). Any split
of such shards is balanced, and `equalize` makes shards exactly equal, so
every rank and every worker gets the same number of examples.
"""

from __future__ import annotations

from typing import Sequence

from air_core import Equalize, OptionError, RowGroup, RowSlice, epoch_order, rank_shares, split_rows

MAX_SHARDS_PER_RANK = 12  # splits evenly over 1, 2, 3, 4, 6 or 12 DataLoader workers
MIN_UNITS_PER_SHARD = 4  # a cut row group is decoded by both its shards: keep cuts to a quarter at most


def shard_count(units: int, *, world_size: int, num_workers: int | None) -> int:
    """world_size x num_workers; without num_workers, up to 12 per rank of at least 4 units each."""
    if world_size < 1 or (num_workers is not None and num_workers < 1):
        raise OptionError(
            f"world_size={world_size}, num_workers={num_workers}: both must be whole numbers >= 1"
        )
    per_rank = num_workers or max(1, min(MAX_SHARDS_PER_RANK, units // (MIN_UNITS_PER_SHARD * world_size)))
    return world_size * per_rank


def file_shards(
    sizes: Sequence[int], num_shards: int, *, seed: int, shuffle: bool, equalize: Equalize
) -> list[list[int]]:
    """Manifest indices per shard, each shard in read order (seeded shuffle when asked)."""
    if equalize == "drop" and len(sizes) < num_shards:
        raise _too_few(f"{len(sizes)} files", num_shards)
    return rank_shares(sizes, world_size=num_shards, seed=seed, shuffle=shuffle, equalize=equalize)


def row_shards(
    units: Sequence[RowGroup], num_shards: int, *, seed: int, shuffle: bool, equalize: Equalize
) -> list[list[RowSlice]]:
    """Contiguous row ranges per shard over the row groups (in a seeded order when shuffling)."""
    if equalize == "drop" and sum(u.num_rows for u in units) < num_shards:
        raise _too_few(f"{sum(u.num_rows for u in units)} rows", num_shards)
    order = epoch_order(len(units), epoch=0, seed=seed, shuffle=shuffle)
    return split_rows([units[i] for i in order], num_shards, how=equalize)


def _too_few(what: str, num_shards: int) -> OptionError:
    return OptionError(
        f"equalize='drop' with {what} over {num_shards} shards (world_size x num_workers) leaves "
        "every shard empty: use equalize='pad', or fewer ranks or workers"
    )
