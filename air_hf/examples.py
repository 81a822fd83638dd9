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
is where `datasets` decodes them, and the iterable offers rows only: given
tables (`iter_arrow`), `datasets` decodes them in one-row tables and takes
its position at the start of the table a row came in, so a resume would
read that table's rows before the position again (records that name media:
up to `air_core.read.media.RECORDS_AT_ONCE` of them, their media fetched).
Given rows, `datasets` encodes each one again before decoding it, and its
`Audio` encoding needs torchcodec, even for a file's path: without
torchcodec, which decoding audio needs too, a stream with audio offers its
tables, for `decode(False)`. Elsewhere `iter_arrow` (`with_format("arrow")`)
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

**The position.** `datasets`' state of an Arrow iterable is a shard and the
examples read of it, so a resume reads the shard from its start and drops
the examples before the position. This iterable's state also says where
that is among the shard's pieces (`PIECE`: the pieces done, and the examples
read of the next one), and tells the tables and rows functions to start
there (`start=`): the pieces done are not read. The functions key each
table or list of rows by its piece's place among the shard's pieces. Each
run (a table, a list of rows) is handed on once the next one is read, so
that the state moves to the next piece as soon as a piece's last row is
handed on: `datasets` takes its own positions between tables (a `map`'s
rebatching), and one taken there names the next piece, not the end of the
last. That costs a shard's first row the reading of its second run too. A
state saved without `PIECE` (by an earlier release) still resumes, by
reading the shard from its start and dropping what it had read.
"""

from __future__ import annotations

import sys

from itertools import islice
from typing import Any, Callable, Iterator

import datasets
import pyarrow as pa
from datasets import config
from datasets.features.features import require_decoding
from datasets.formatting import PythonFormatter
from datasets.iterable_dataset import ArrowExamplesIterable, _batch_to_examples, _split_gen_kwargs

EPOCH = "epoch"  # the gen_kwarg that adds up the epochs' shifts (an int, not a list: never split into shards)
# The state's place among the shard's pieces: the pieces done, and the examples read of the next (None where a state
# was saved without them).
PIECE, PIECE_EXAMPLE = "piece_idx", "piece_example_idx"

# (gen_kwargs, start=(pieces done, rows of the next read)) -> (piece, Python rows), in lists: the rows of the tables
# function's tables, as they convert, each keyed by its piece's place among the shard's pieces.
RowsFn = Callable[..., Iterator[tuple[int, list[dict]]]]
Run = Any  # a table (`pa.Table`) or a list of Python rows


class Tables(ArrowExamplesIterable):
    """An `ArrowExamplesIterable` that reports `features`, yields rows of a rows function beside its tables
    function, resumes a shard at the piece its state names, and adds up the epochs' seed shifts into its `EPOCH`
    gen_kwarg."""

    _features: datasets.Features | None  # as the dataset has them
    _decoded: bool  # some of them need decoding: not reported
    _rows_only: bool  # and no tables offered (see the module's docstring)
    _rows_fn: RowsFn
    _worker_split: bool  # the DataLoader worker's own shards: the next shift is the worker's id, not an epoch

    @classmethod
    def of(cls, plain: ArrowExamplesIterable, features: datasets.Features | None, rows_fn: RowsFn) -> Tables:
        """`plain` as this class, its rows from `rows_fn` (taking the tables function's gen_kwargs); `features`
        not reported when one of them needs decoding (its rows then come from the tables function, and `datasets`
        decodes them), and then no tables offered where `datasets` can encode them (see the module's docstring)."""
        # Copies `plain`'s fields rather than calling its constructor, whose arguments vary across datasets releases.
        it = cls.__new__(cls)
        it.__dict__.update(plain.__dict__)
        it._features = features
        it._decoded = features is not None and any(require_decoding(f) for f in features.values())
        it._rows_only = it._decoded and (config.TORCHCODEC_AVAILABLE or not _audio(features))
        it._rows_fn = rows_fn
        it._worker_split = False
        return it

    @property
    def features(self) -> datasets.Features | None:
        return None if self._decoded else self._features

    @property
    def iter_arrow(self) -> Callable[[], Iterator[tuple[int, pa.Table]]] | None:
        return None if self._rows_only else self._iter_arrow

    @property
    def builder(self) -> Any:
        """The builder whose rows this iterates (a `UCVolume`)."""
        return self._rows_fn.__self__

    def _init_state_dict(self) -> dict:
        state = super()._init_state_dict()
        state.update({PIECE: None, PIECE_EXAMPLE: None})  # set as the pass starts: None left is a state without them
        return state

    def __iter__(self):  # noqa: ANN204 - datasets' signature
        state = self._state_dict or _fresh_state()  # none: a pass nobody resumes
        if self.features is not None:
            # datasets' own loop (ArrowExamplesIterable.__iter__), over the rows function's rows rather than its
            # tables converted.
            for piece, rows, following in self._runs(self._rows_fn, state):
                for k, example in enumerate(rows, 1):
                    _count(state, 1, piece, following if k == len(rows) else piece)
                    yield piece, example
            return
        formatter = PythonFormatter()  # as ArrowExamplesIterable.__iter__ converts, and decodes, the tables
        for piece, table, following in self._runs(self.generate_tables_fn, state):
            left = len(table)
            for part in table.to_reader(max_chunksize=config.ARROW_READER_BATCH_SIZE_IN_DATASET_ITER):
                for example in _batch_to_examples(formatter.format_batch(part)):
                    left -= 1
                    _count(state, 1, piece, piece if left else following)
                    yield piece, example

    def _iter_arrow(self) -> Iterator[tuple[int, pa.Table]]:
        state = self._state_dict or _fresh_state()
        for piece, table, following in self._runs(self.generate_tables_fn, state):
            _count(state, len(table), piece, following)
            yield piece, table

    def _runs(self, fn: Callable[..., Iterator[tuple[int, Run]]], state: dict
              ) -> Iterator[tuple[int, Run, int | None]]:
        """(piece, run, what follows it) of `fn` (the tables or the rows function) for every shard from `state`'s
        position on, each shard's started at its piece. What follows a run: the next run's piece, `_END` where the
        shard ends, or None where reading on failed (raised once the run is handed on). The caller counts the
        examples it hands on into `state` (`_count`).

        The next run is read before a run is handed on: where it is another piece's, the state moves to that piece
        once the run is handed on, so a position taken between the two (datasets takes its own between tables)
        names the next piece, and a resume from it reads nothing of the one done."""
        for gen_kwargs in islice(_split_gen_kwargs(self.kwargs, max_num_jobs=self.num_shards), state["shard_idx"], None):
            drop = 0
            if state.get(PIECE) is None:  # saved without its place in the pieces: read from the shard's start again
                state[PIECE], state[PIECE_EXAMPLE], drop = 0, 0, state["shard_example_idx"]
            start = (state[PIECE], state[PIECE_EXAMPLE])
            # Told only where a pass resumes: a function made for datasets' own iterable takes the gen_kwargs alone.
            runs = _dropped(fn(**gen_kwargs) if start == (0, 0) else fn(**gen_kwargs, start=start), drop, state)
            held = next(runs, None)
            if held is None:
                _next_shard(state)
            while held is not None:
                piece, run = held
                if piece != state[PIECE]:
                    state[PIECE], state[PIECE_EXAMPLE] = piece, 0
                try:
                    following = next(runs, None)
                except Exception:
                    yield piece, run, None
                    raise
                yield piece, run, _END if following is None else following[0]
                held = following

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


_END = -1  # what follows a shard's last run


def _fresh_state() -> dict:
    return {"shard_idx": 0, "shard_example_idx": 0, PIECE: 0, PIECE_EXAMPLE: 0}


def _count(state: dict, examples: int, piece: int, following: int | None) -> None:
    """`examples` more of `piece` handed on; then, where `following` is not `piece`, the state moved past it: to
    the start of the `following` piece, or of the next shard (`_END`); None: where reading on failed, it stays."""
    state["shard_example_idx"] += examples
    state[PIECE_EXAMPLE] += examples
    if following == _END:
        _next_shard(state)
    elif following is not None and following != piece:
        state[PIECE], state[PIECE_EXAMPLE] = following, 0


def _next_shard(state: dict) -> None:
    state.update({"shard_idx": state["shard_idx"] + 1, "shard_example_idx": 0, PIECE: 0, PIECE_EXAMPLE: 0})


def _dropped(runs: Iterator[tuple[int, Run]], rows: int, state: dict) -> Iterator[tuple[int, Run]]:
    """`runs` without their first `rows` rows (counted in their pieces in `state`, as read before), nor empty ones."""
    for piece, run in runs:
        if rows:
            if piece != state[PIECE]:
                state[PIECE], state[PIECE_EXAMPLE] = piece, 0
            n = min(rows, len(run))
            run, rows = run[n:], rows - n
            state[PIECE_EXAMPLE] += n  # already in shard_example_idx
        if len(run):
            yield piece, run


def _audio(feature: Any) -> bool:
    """Whether `feature` (features, or one, nested in lists or not) holds an `Audio` feature."""
    if isinstance(feature, dict):
        return any(_audio(f) for f in feature.values())
    if isinstance(feature, (list, tuple)):
        return any(_audio(f) for f in feature)
    if isinstance(feature, (datasets.List, datasets.LargeList)):
        return _audio(feature.feature)
    return isinstance(feature, datasets.Audio)


def _this_worker() -> tuple[int, int] | None:
    """(workers, this one's id) inside a DataLoader worker, else None."""
    # Like datasets, only look for a worker when torch is loaded: importing it costs seconds.
    worker = sys.modules["torch.utils.data"].get_worker_info() if "torch.utils.data" in sys.modules else None
    return (worker.num_workers, worker.id) if worker is not None else None
