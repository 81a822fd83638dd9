"""The uc-volume builder's examples iterable: `datasets`' own, told the features and, for a mixture, the epoch.

**Features.** `datasets` streams an Arrow builder through an
`ArrowExamplesIterable`, which reports no features; so when a dataset is
iterated row by row, `datasets` adds a step that casts to the dataset's
features, cutting every table into one-row tables and converting each on
its own (~30 µs a row, more than reading and parsing it). This builder's
tables already carry its features' types, so the iterable reporting those
features skips that step. Its rows are the builder's own Python rows
(`_generate_rows`: JSON Lines decoded straight into rows, without a
table; other tables converted 1,000 rows at a time), in `datasets`' own
loop with its resume state: the same values as `datasets`' conversion, in
the same order.
Features that need decoding (`Image`, `Audio`, ...) keep the step, which
is where `datasets` decodes them; `iter_arrow` (`with_format("arrow")`)
reads the tables.

**The epoch.** A mixture's epochs hold different items, so the builder's
tables function must know which epoch it generates. `datasets` has no
public way to say it: the epoch lives on the `IterableDataset` the user last
derived (`split_dataset_by_node`, `map`, `shuffle` each make a new one, with
an epoch of its own), and reaches the examples iterables under it only as a
shift of their random seeds: every pass of an epoch e > 0 calls
`shift_rngs(e)` on each iterable that has the method (datasets 5.2,
`IterableDataset._prepare_ex_iterable_for_iteration`). The iterable adds the
shifts up into a gen_kwarg, `EPOCH`, which the tables function reads as the
epoch. A DataLoader worker shifts the seeds by its id too, right after
taking its shards (`_iter_pytorch`): the iterable leaves out the one shift
that follows a split into this worker's shards, so `ds.iter()` called
inside a worker, which takes no such split, reads the right epoch as well.

Both rely on what is private to `datasets`; this module is the one place
that does, and `tests/test_hf.py` fails first, saying so, if a release
changes it (`test_rows_are_converted_a_batch_at_a_time`,
`test_datasets_tells_an_epoch_to_the_tables_function_through_its_seed_shifts`).
`datasets` makes a new iterable of its own class when it shuffles or shards
the data sources (`set_epoch`, `split_dataset_by_node`, DataLoader workers):
this one makes its own class again, with its features and gen_kwargs.
"""

from __future__ import annotations

import sys

from itertools import islice
from typing import Any, Callable, Iterator

import datasets
from datasets.features.features import require_decoding
from datasets.iterable_dataset import ArrowExamplesIterable, _split_gen_kwargs

EPOCH = "epoch"  # the gen_kwarg that adds up the epochs' shifts (an int, not a list: never split into shards)

# (gen_kwargs) -> (key, Python rows), in lists: the rows of the tables function's tables, as they convert.
RowsFn = Callable[..., Iterator[tuple[Any, list[dict]]]]


class Tables(ArrowExamplesIterable):
    """An `ArrowExamplesIterable` that reports `features`, yields rows of a rows function beside its tables
    function, and adds up the epochs' seed shifts into its `EPOCH` gen_kwarg."""

    _features: datasets.Features | None
    _rows_fn: RowsFn
    _worker_split: bool  # the DataLoader worker's own shards: the next shift is the worker's id, not an epoch

    @classmethod
    def of(cls, plain: ArrowExamplesIterable, features: datasets.Features | None, rows_fn: RowsFn) -> Tables:
        """`plain` as this class, its rows from `rows_fn` (taking the tables function's gen_kwargs); `features`
        not reported when one of them needs decoding (its rows then come from `datasets`, which decodes them)."""
        # Copies `plain`'s fields rather than calling its constructor, whose arguments vary across datasets releases.
        it = cls.__new__(cls)
        it.__dict__.update(plain.__dict__)
        it._features = None if features is None or any(require_decoding(f) for f in features.values()) else features
        it._rows_fn = rows_fn
        it._worker_split = False
        return it

    @property
    def features(self) -> datasets.Features | None:
        return self._features

    @property
    def builder(self) -> Any:
        """The builder whose rows this iterates (a `UCVolume`)."""
        return self._rows_fn.__self__

    def __iter__(self):  # noqa: ANN204 - datasets' signature
        if self._features is None:
            yield from super().__iter__()
            return
        # datasets' own loop (ArrowExamplesIterable.__iter__), with its state (shard, example in shard), over the
        # rows function's rows rather than its tables converted.
        state = self._state_dict or {"shard_idx": 0, "shard_example_idx": 0}  # none: a pass nobody resumes
        for gen_kwargs in islice(_split_gen_kwargs(self.kwargs, max_num_jobs=self.num_shards), state["shard_idx"], None):
            skip = state["shard_example_idx"]
            for key, rows in self._rows_fn(**gen_kwargs):
                if skip >= len(rows):
                    skip -= len(rows)
                    continue
                for example in islice(rows, skip, None):
                    state["shard_example_idx"] += 1
                    yield key, example
                skip = 0
            state["shard_idx"] += 1
            state["shard_example_idx"] = 0

    def shift_rngs(self, value: int) -> Tables:
        if EPOCH not in self.kwargs:
            return self
        it = Tables.of(self, self._features, self._rows_fn)
        if not self._worker_split:
            it.kwargs = {**self.kwargs, EPOCH: self.kwargs[EPOCH] + value}
        return it

    def shuffle_data_sources(self, generator) -> Tables:  # noqa: ANN001 - datasets' signature
        return Tables.of(super().shuffle_data_sources(generator), self._features, self._rows_fn)

    def shard_data_sources(self, num_shards: int, index: int, contiguous: bool = True) -> Tables:
        it = Tables.of(super().shard_data_sources(num_shards, index, contiguous=contiguous), self._features, self._rows_fn)
        it._worker_split = _this_worker() == (num_shards, index)
        return it

    def reshard_data_sources(self) -> Tables:
        return Tables.of(super().reshard_data_sources(), self._features, self._rows_fn)


def _this_worker() -> tuple[int, int] | None:
    """(workers, this one's id) inside a DataLoader worker, else None."""
    # Like datasets, only look for a worker when torch is loaded: importing it costs seconds.
    worker = sys.modules["torch.utils.data"].get_worker_info() if "torch.utils.data" in sys.modules else None
    return (worker.num_workers, worker.id) if worker is not None else None
