"""DataLoader: torch's, with the reference's defaults, fetch timings, and exactly-once resume on any grid.

Progress rides back with the batches: the collate function, which runs where
a batch is made (a worker, or the main process), tags each batch with its
stream's position (grid, epoch, files consumed). The loader keeps the latest
position per stream as batches are *delivered* to the caller, so batches that
workers prefetched but nobody consumed are not counted. `state_dict()` gathers
every rank's positions into one run state; `load_state_dict()` hands it to the
dataset, which plans what was not delivered over the current grid (any number
of ranks and workers).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import time
from typing import Any, Callable, Iterator

import torch.distributed
import torch.utils.data

from ..doors import StateError, detect_rank, process_group
from . import state as state_mod
from .dataset import UCVolumeDataset
from .timing import FetchTimings, active_run_id

DISTRIBUTED_WORKERS = 6
SINGLE_PROCESS_WORKERS = 48
PREFETCH_FACTOR = 4


def default_num_workers() -> int:
    """6 workers per rank under torch.distributed, 48 for a lone process; never more than the cores allow.

    A worker decodes; its fetch threads keep the reads in flight, so workers
    beyond the cores given to this rank only add processes.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    group = process_group()
    if group is not None and group.get_world_size() > 1:
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        return max(1, min(DISTRIBUTED_WORKERS, cpus // max(1, ranks_here)))
    return max(1, min(SINGLE_PROCESS_WORKERS, cpus))


def find_volume_dataset(dataset: Any, depth: int = 3) -> UCVolumeDataset | None:
    """The UCVolumeDataset that `dataset` is, or wraps as an attribute (a wrapper of a wrapper, ...)."""
    if isinstance(dataset, UCVolumeDataset):
        return dataset
    if depth == 0:
        return None
    for value in getattr(dataset, "__dict__", {}).values():
        found = find_volume_dataset(value, depth - 1) if hasattr(value, "__dict__") else None
        if found is not None:
            return found
    return None


class _TagWithPosition:
    """The collate function, tagging each batch with its stream's position (picklable for spawn)."""

    def __init__(self, collate: Callable, dataset: UCVolumeDataset) -> None:
        self.collate = collate
        self._dataset: UCVolumeDataset | None = dataset  # the main process's copy
        self._position: Callable[[], tuple] | None = None  # of the copy this process iterates, found at its first batch

    def __getstate__(self) -> dict:
        return {"collate": self.collate, "_dataset": None, "_position": None}

    def __call__(self, samples: Any) -> tuple[Any, tuple[int, tuple[int, ...], int]]:
        batch = self.collate(samples)
        position = self._position
        if position is None:
            info = torch.utils.data.get_worker_info()  # a worker has a copy of its own
            dataset = self._dataset if info is None else find_volume_dataset(info.dataset)
            position = self._position = dataset._position  # type: ignore[union-attr]
        # (batch, (epoch, grid, consumed)) as plain tuples: a class or a dict of its own would cost more to
        # pickle across than the rest of the tag (3 us a batch, measured). The tag is the one step a batch
        # costs here that the reference's loader skips over a wrapped dataset, so it does as little as it can:
        # the position's method is found once, and the pass's grid is a tuple made once.
        return batch, position()


class _Pass:
    """One pass over the data: its epoch, the state it resumed from, and each stream's delivered count."""

    def __init__(self, epoch: int, resumed_from: dict | None) -> None:
        self.epoch = epoch
        self.resumed_from = resumed_from
        self.finished = False
        self.consumed: dict[tuple[int, ...], int] = {}  # by grid: each batch stores one count, nothing more

    def deliver(self, epoch: int, grid: tuple[int, ...], consumed: int) -> None:
        if epoch == self.epoch:
            self.consumed[grid] = consumed

    def streams(self) -> list[dict]:
        return [{"grid": list(grid), "consumed": n} for grid, n in self.consumed.items()]


class _LoaderIterator:
    """Times each `next()`, strips the position tags, and records what was delivered."""

    def __init__(self, inner: Iterator, loader: "DataLoader", epoch_pass: _Pass | None) -> None:
        self._inner = inner
        self._loader = loader
        self._pass = epoch_pass
        self._timings = loader._timings_for_pass()
        self._returned_at: float | None = None

    def __iter__(self) -> "_LoaderIterator":
        return self

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def __next__(self) -> Any:
        called_at = time.monotonic()
        try:
            value = next(self._inner)
        except StopIteration:
            if self._pass is not None:
                self._pass.finished = True
            self._timings.flush()
            raise
        except BaseException:
            self._timings.flush()
            raise
        returned_at = time.monotonic()
        if self._pass is not None:  # the loader tags every batch
            value, position = value
            self._pass.deliver(*position)
        between = called_at - self._returned_at if self._returned_at is not None else None
        self._returned_at = returned_at
        self._loader._steps += 1
        self._timings.record(returned_at - called_at, between, self._loader._steps)
        return value


class DataLoader(torch.utils.data.DataLoader):
    """`torch.utils.data.DataLoader` with data-loading defaults, fetch timings and exactly-once resume.

    A drop-in for `databricks.air.data.DataLoader`; it differs from torch's in:

    1. Defaults: `num_workers` is 6 per rank when torch.distributed is
       initialised and 48 for a lone process, capped by the cores this process
       may use (divided among the node's ranks, `LOCAL_WORLD_SIZE`);
       `prefetch_factor=4`; `persistent_workers=True` when there are workers.
       Values you pass win.
    2. Timings: the mean and variance of the time spent waiting in `next()` and
       of the time between `next()` calls, per rank, logged at most every 10 s
       to the active MLflow run or `$MLFLOW_RUN_ID` by a thread of their own,
       so a slow tracking server never holds up `next()` (see
       `air_core.torch.timing`).
    3. Resume: over a `UCVolumeDataset` (or a dataset holding one as an
       attribute, such as a decoding wrapper), `state_dict()` records what was
       delivered to the caller, not what workers prefetched, and
       `load_state_dict()` resumes from it exactly once: every file not yet
       delivered in the epoch is read once, also on another number of ranks or
       workers. `state_dict()` gathers every rank's progress through
       torch.distributed, so call it on every rank at the same step; every rank
       gets the same state, `{"version": 3, "run": <JSON text>}`. Its keys never
       change, so with `torch.distributed.checkpoint` a fresh loader's
       `state_dict()` is the template that `dcp.load` fills in. Once every rank
       finished an epoch, the state is the start of the next one.

    Resume counts files: a wrapper must yield one sample per file it takes (or
    skip files it drops). A wrapper that buffers files (a shuffle buffer) or
    splits one file into many samples resumes after the files it has taken.

    Any multiprocessing start method works (fork, forkserver, spawn).
    """

    def __init__(
        self,
        dataset: Any,
        *args: Any,
        num_workers: int | None = None,
        prefetch_factor: int | None = PREFETCH_FACTOR,
        persistent_workers: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if num_workers is None:
            num_workers = default_num_workers()
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        super().__init__(
            dataset, *args, num_workers=num_workers, prefetch_factor=prefetch_factor if num_workers > 0 else None,
            persistent_workers=persistent_workers, **kwargs,
        )
        self._source = find_volume_dataset(dataset)
        if self._source is not None:
            self.collate_fn = _TagWithPosition(self.collate_fn, self._source)
        self._steps = 0
        self._timings: FetchTimings | None = None
        self._pass: _Pass | None = None
        self._resume: dict | None = None
        self._workers_next_epoch: int | None = None

    def __iter__(self) -> Iterator:  # type: ignore[override]
        self._freeze_before_fork()
        source = self._source
        if source is None:
            return _LoaderIterator(super().__iter__(), self, None)
        epoch = source.next_epoch()
        resume, self._resume = self._resume, None
        reuse = self._iterator is not None and resume is None and self._workers_next_epoch == epoch
        if not reuse and self._iterator is not None:
            # Persistent workers hold the dataset as it was when they started; start them again.
            self._iterator._shutdown_workers()  # type: ignore[attr-defined]
            self._iterator = None
        if not reuse:
            source.set_epoch(epoch)
        self._pass = _Pass(epoch, resume)
        inner = super().__iter__()
        if self.num_workers > 0:
            # Workers move to the next epoch by themselves at their next pass; mirror them here.
            source.set_epoch(epoch + 1)
            self._workers_next_epoch = epoch + 1 if self.persistent_workers else None
        return _LoaderIterator(inner, self, self._pass)

    def _timings_for_pass(self) -> FetchTimings:
        # One window across passes while the run is the same: an iterator left mid-pass keeps its timings here.
        run_id = active_run_id()
        if self._timings is None or self._timings.run_id != run_id:
            if self._timings is not None:
                self._timings.flush()
            self._timings = FetchTimings(detect_rank()[0], run_id)
        return self._timings

    def _freeze_before_fork(self) -> None:
        # A forked worker's first full collection writes to every object it inherited, copying the
        # parent's pages one by one: with torch loaded, a tenth of a second or more per worker before
        # its first read (measured: 6 workers' first epoch 0.73 s, 0.33 s frozen). Objects alive now
        # move to a generation the collector skips, as Python's gc.freeze documentation advises before fork.
        if self.num_workers > 0 and (self._iterator is None or not self.persistent_workers):
            context = self.multiprocessing_context
            # allow_none: asking must not fix the start method for the user; the first listed is the default.
            method = (context.get_start_method() if context is not None
                      else mp.get_start_method(allow_none=True) or mp.get_all_start_methods()[0])
            if method == "fork":
                gc.freeze()

    def state_dict(self) -> dict[str, Any]:
        """The run's progress: what every rank has delivered (a collective: call it on every rank)."""
        source = self._require_source("state_dict")
        head = source.state_dict()
        run, loaded = self._pass, self._resume
        if run is not None:
            local = state_mod.report(run.epoch, run.finished, run.resumed_from, run.streams())
        elif loaded is not None:
            local = state_mod.report(loaded["epoch"], False, loaded["resumed_from"], loaded["streams"])
        else:
            local = state_mod.report(source.next_epoch(), False, None, [])
        return state_mod.encode(state_mod.merge(self._gather(local), head["fingerprint"], head["options"]))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume at the next pass from a `state_dict()`, on this or any other grid."""
        source = self._require_source("load_state_dict")
        state = state_mod.decode(state_dict)
        source.load_state_dict(state)
        self._resume = None if state_mod.is_fresh(state) else state
        self._pass = None

    def _require_source(self, what: str) -> UCVolumeDataset:
        if self._source is None:
            raise StateError(
                f"DataLoader.{what}() needs a UCVolumeDataset, or a dataset that holds one as an attribute; "
                f"this loader reads a {type(self.dataset).__name__}"
            )
        return self._source

    @staticmethod
    def _gather(local: dict) -> list[dict]:
        group = process_group()
        if group is not None and group.get_world_size() > 1:
            reports: list = [None] * group.get_world_size()
            group.all_gather_object(reports, local)
            return reports
        if detect_rank()[1] > 1:
            raise StateError(
                "DataLoader.state_dict() gathers every rank's progress through torch.distributed: call "
                "torch.distributed.init_process_group() first"
            )
        return [local]
