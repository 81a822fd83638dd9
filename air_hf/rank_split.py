"""This rank's part of a dataset, without passing rank and world size by hand."""

from __future__ import annotations

from typing import TypeVar

import datasets
from datasets.distributed import split_dataset_by_node

from air_core.doors import OptionError, detect_rank

D = TypeVar("D", datasets.Dataset, datasets.IterableDataset)


def split_for_rank(ds: D, *, rank: int | None = None, world_size: int | None = None) -> D:
    """`split_dataset_by_node` with the rank and world size of this process.

    They come from torch.distributed, then torchrun's `RANK` / `WORLD_SIZE`,
    unless given. A streaming dataset is split by whole shards; when its shard
    count does not divide by the world size, this raises instead of letting
    `datasets` fall back to every rank reading everything.

    Not for `transformers.Trainer`: with `accelerator_config={"dispatch_batches":
    False}` accelerate splits the dataset itself; pass it un-split.
    """
    rank, world_size = detect_rank(rank, world_size)
    if world_size == 1:
        return ds
    if isinstance(ds, datasets.IterableDataset) and ds.num_shards % world_size:
        raise OptionError(
            f"the dataset has {ds.num_shards} shards, which do not split evenly over {world_size} ranks, "
            "so every rank would read every example: load it with world_size= (and num_workers=) "
            "matching the job, e.g. load_dataset('uc-volume', ..., world_size=" f"{world_size})"
        )
    return split_dataset_by_node(ds, rank=rank, world_size=world_size)
