"""The uc-volume builder's examples iterable: it reports its features, so `datasets` converts its rows by batch.

`datasets` streams an Arrow builder through an `ArrowExamplesIterable`,
which reports no features; so when a dataset is iterated row by row,
`datasets` adds a step that casts to the dataset's features, cutting every
table into one-row tables and converting each on its own (~30 µs a row,
more than reading and parsing it). This builder's tables already carry
its features' types, so the same iterable reporting those features skips
that step, and its rows come from `datasets`' own conversion of batches
of 10 rows (a few µs a row): the same values, in the same order, with the
same resume state. Features that need decoding (`Image`, `Audio`, ...)
keep the step, which is where `datasets` decodes them.

`datasets` makes a new iterable of its own class when it shuffles or
shards the data sources (`set_epoch`, `split_dataset_by_node`, DataLoader
workers); this one makes its own class again, keeping its features.
"""

from __future__ import annotations

import datasets
from datasets.features.features import require_decoding
from datasets.iterable_dataset import ArrowExamplesIterable


def typed(plain: ArrowExamplesIterable, features: datasets.Features) -> ArrowExamplesIterable:
    """`plain` reporting `features`, or `plain` itself when some feature needs decoding."""
    if any(require_decoding(f) for f in features.values()):
        return plain
    return _Typed.of(plain, features)


class _Typed(ArrowExamplesIterable):
    _features: datasets.Features

    @classmethod
    def of(cls, plain: ArrowExamplesIterable, features: datasets.Features) -> _Typed:
        # Copies `plain`'s fields rather than calling its constructor, whose arguments vary across datasets releases.
        it = cls.__new__(cls)
        it.__dict__.update(plain.__dict__)
        it._features = features
        return it

    @property
    def features(self) -> datasets.Features:
        return self._features

    def shuffle_data_sources(self, generator):  # noqa: ANN001, ANN201 - datasets' signature
        return _Typed.of(super().shuffle_data_sources(generator), self._features)

    def shard_data_sources(self, num_shards: int, index: int, contiguous: bool = True):  # noqa: ANN201
        return _Typed.of(super().shard_data_sources(num_shards, index, contiguous=contiguous), self._features)

    def reshard_data_sources(self):  # noqa: ANN201
        return _Typed.of(super().reshard_data_sources(), self._features)
