"""How a mixture's shards learn the epoch `datasets` iterates, `IterableDataset.set_epoch(e)`.

A mixture's epochs hold different items, so the builder's tables function must
know which epoch it generates. `datasets` has no public way to say it: the
epoch lives on the `IterableDataset` the user last derived (`split_dataset_by_node`,
`map`, `shuffle` each make a new one, with an epoch of its own), and reaches the
examples iterables under it only as a shift of their random seeds: every pass of
an epoch e > 0 calls `shift_rngs(e)` on each iterable that has the method, and
inside a DataLoader worker `shift_rngs(worker id)` too (datasets 5.2,
`IterableDataset._prepare_ex_iterable_for_iteration` and `_iter_pytorch`).
`EpochTables` adds the shifts up into a gen_kwarg, `epoch_shift`, which the
tables function turns into the epoch with `epoch_of`. That protocol is private
to `datasets`: this module is the one place that relies on it, and
`tests/test_hf.py::test_datasets_tells_an_epoch_to_the_tables_function_through_its_seed_shifts`
(in the main process and in DataLoader workers) fails, saying so, if a
release of `datasets` changes it.
"""

from __future__ import annotations

import sys

from datasets.iterable_dataset import ArrowExamplesIterable

SHIFT = "epoch_shift"  # the gen_kwarg that carries the shifts (an int, not a list: never split into shards)


class EpochTables(ArrowExamplesIterable):
    """An `ArrowExamplesIterable` whose gen_kwargs' `epoch_shift` adds up the seed shifts `datasets` applies."""

    def shift_rngs(self, value: int) -> EpochTables:
        return EpochTables(self.generate_tables_fn, {**self.kwargs, SHIFT: self.kwargs[SHIFT] + value},
                           self.generate_more_kwargs_fn, self.sleep_on_threads_shutdown)

    # datasets' own methods return a plain ArrowExamplesIterable: keep ours, with the same gen_kwargs.

    def shuffle_data_sources(self, generator) -> EpochTables:
        return _kept(super().shuffle_data_sources(generator))

    def shard_data_sources(self, num_shards: int, index: int, contiguous: bool = True) -> EpochTables:
        return _kept(super().shard_data_sources(num_shards, index, contiguous=contiguous))

    def reshard_data_sources(self) -> EpochTables:
        return _kept(super().reshard_data_sources())


def _kept(it: ArrowExamplesIterable) -> EpochTables:
    return EpochTables(it.generate_tables_fn, it.kwargs, it.generate_more_kwargs_fn, it.sleep_on_threads_shutdown)


def epoch_of(shift: int) -> int:
    """The epoch being generated, from the shifts `EpochTables` added up: less the DataLoader worker's id, in one."""
    # Like datasets, only look for a worker when torch is loaded: importing it costs seconds.
    worker = sys.modules["torch.utils.data"].get_worker_info() if "torch.utils.data" in sys.modules else None
    return shift - worker.id if worker is not None else shift
