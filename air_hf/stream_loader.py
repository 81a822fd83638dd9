"""The Trainer's DataLoader made stateful: the position of every batch it hands over, resumed in its own epoch.

accelerate wraps the Trainer's DataLoader in a `DataLoaderShard` (or a
`DataLoaderDispatcher`), which reads its `base_dataloader` one batch ahead
and, when that loader has `state_dict()`, takes its state just before each
read ahead: the position of the batch it hands the Trainer next (accelerate's
`DataLoaderAdapter._update_state_dict`). torchdata's `StatefulDataLoader`
gives that state: each DataLoader worker sends its dataset's `state_dict()`
with the batch it made, so what workers read ahead is not counted, and a
resume starts each worker at its own position and the workers' round at the
worker whose batch came next. transformers 5.x does not ask accelerate for
one (its `AcceleratorConfig` takes no `use_stateful_dataloader`), so
`StreamLoader.like` makes one with the same arguments as the loader
accelerate holds, to stand in its place before the first pass.

A `datasets.IterableDataset` applies a saved state only in the epoch it was
saved in, and reads another order in each epoch (`set_epoch`). A Trainer
resumed on a stream with no length counts its epochs from 0 again, so the
loader shifts the epoch it is told by as many as the resumed pass was ahead.
"""

from __future__ import annotations

import inspect
from itertools import islice
from typing import Any, Iterator

import datasets
import torch.utils.data
from torchdata.stateful_dataloader import StatefulDataLoader

# An iterable dataset's loader makes its own sampler; `shuffle` is not kept.
_NOT_COPIED = {"dataset", "shuffle", "sampler", "batch_sampler"}
_ARGUMENTS = [name for name in inspect.signature(torch.utils.data.DataLoader).parameters if name not in _NOT_COPIED]


class StreamLoader(StatefulDataLoader):
    """A `StatefulDataLoader` over a `datasets.IterableDataset` that resumes a saved position in its saved epoch."""

    dataset: datasets.IterableDataset

    @classmethod
    def like(cls, loader: torch.utils.data.DataLoader) -> StreamLoader:
        """A loader made with `loader`'s dataset and arguments (batch size, collate function, workers, ...)."""
        return cls(loader.dataset, **{name: getattr(loader, name) for name in _ARGUMENTS if hasattr(loader, name)})

    def __init__(self, dataset: datasets.IterableDataset, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self._epoch_shift = 0
        self._next_epoch: int | None = None  # the epoch the next pass reads, whichever one it is told
        self._drop = 0

    def resume(self, state: dict, epoch: int) -> None:
        """Read on at the next pass from `state`, a `state_dict()` taken in `epoch`; the passes after it read the
        epochs after it."""
        self.load_state_dict(state)
        self._next_epoch = epoch

    def start(self, epoch: int) -> None:
        """Read `epoch` from its start at the next pass; the passes after it read the epochs after it."""
        self._next_epoch = epoch

    def drop(self, batches: int) -> None:
        """Read and drop the first `batches` batches of the next pass."""
        self._drop = batches

    def __iter__(self) -> Iterator:
        told = self.dataset.epoch  # accelerate has just set the Trainer's epoch on the dataset
        if self._next_epoch is not None:
            self._epoch_shift, self._next_epoch = self._next_epoch - told, None
        if self._epoch_shift:
            self.dataset.set_epoch(told + self._epoch_shift)
        batches = super().__iter__()
        for _ in islice(batches, self._drop):
            pass
        self._drop = 0
        return batches
