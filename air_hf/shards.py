"""How many shards a split gets, the lists `datasets` splits over ranks and workers. Pure.

`datasets` hands whole shards to each rank (round-robin in
`split_dataset_by_node`, contiguous in accelerate's `.shard()`) and then to
each DataLoader worker (round-robin). So the shard count is a multiple of
world_size x num_workers, and shards are balanced among themselves (the
source's reader deals them: files largest first in snake order, rows cut
into contiguous ranges). Any split of such shards is balanced, and
`equalize` makes shards exactly equal, so every rank and every worker gets
the same number of examples.
"""

from __future__ import annotations


from air_core.doors import OptionError

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


def check_drop(count: int, counts: str, num_shards: int) -> None:
    """Refuse `equalize="drop"` over fewer rows (`count` of them, in `counts`) than shards: each would be empty."""
    if count < num_shards:
        raise OptionError(
            f"equalize='drop' with {count} {counts} over {num_shards} shards (world_size x num_workers) leaves "
            "every shard empty: use equalize='pad', or fewer ranks or workers"
        )
