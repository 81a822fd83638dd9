"""`StreamResumeCallback`: a Trainer resumed from a checkpoint reads on where its stream stopped.

transformers resumes a run's data by reading the batches of the finished
steps again and dropping them (`Trainer.get_resumed_dataloader`,
accelerate's `skip_first_batches`): at step 50,000 of batch 32 on 8 ranks,
12.8 million rows fetched, decoded and tokenized again before the next step.
A `datasets` stream knows its exact position (`IterableDataset.state_dict()`);
this callback carries it through the Trainer's checkpoints:

- when training starts, the DataLoader accelerate prepared for the Trainer
  reads through a stateful one (`air_hf.stream_loader`);
- at every checkpoint, every rank writes the position of the last batch it
  trained on, with what that position belongs to
  (`checkpoint-N/stream_positions/rank-R.json`);
- on `train(resume_from_checkpoint=...)`, every rank reads on from its own
  position, in its epoch, and the Trainer skips nothing
  (`args.ignore_data_skip`, set by the callback).

Every rank decides together, before the first step: a checkpoint whose
positions belong to another stream or another grid is refused on every
rank, naming what differs; one without positions falls back to the
Trainer's own skipping, with a warning saying what it reads.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import datasets
from accelerate.data_loader import DataLoaderDispatcher
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from air_core.doors import StateError, process_group

from .stream_identity import describe, differences
from .stream_loader import StreamLoader

POSITIONS = "stream_positions"  # the folder of a checkpoint that holds every rank's position
VERSION = 1
log = logging.getLogger("air_hf")


class StreamResumeCallback(TrainerCallback):
    """Saves every rank's stream position in each Trainer checkpoint, and resumes from it without reading again.

    Pass it to `transformers.Trainer` (or a subclass, such as TRL's
    `SFTTrainer`) training on a `datasets.IterableDataset`, such as
    `load_dataset("uc-volume", ..., streaming=True)` and what is built on it
    (`map`, `filter`, `remove_columns`, ...)::

        trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[air_hf.StreamResumeCallback()])
        trainer.train(resume_from_checkpoint=True)

    Each checkpoint folder in `args.output_dir` gets `stream_positions/rank-R.json`
    from every rank R: the position of the last batch that rank trained on
    (one per DataLoader worker: batches workers read ahead are not counted),
    its epoch, and the stream's identity. A resumed run finds them in the
    checkpoint of its step in `args.output_dir` (the one
    `resume_from_checkpoint=True` takes), and its first batch is the one the
    stopped run would have trained on next. Rows of the finished steps are
    not handed to the pipeline again (`map`, tokenizing, collating), and a
    `uc-volume` stream does not read them either: it starts at the piece of
    its shard it stopped in (a file, a span of one, a row group), and inside
    it at the row where the reader can (Parquet: its row group, sliced),
    else where the reader's parse of the piece reaches it.

    The callback sets `args.ignore_data_skip`: the stream resumes from its
    position, not by the Trainer reading and dropping batches. A checkpoint
    without positions falls back to the Trainer's own skipping, with a
    warning. Refused, on every rank and before the first step, with an
    error naming what differs: positions of another stream (folder,
    listing, read options, seed, shards, pipeline), of another grid
    (processes x DataLoader workers: a `datasets` state counts the examples
    of each worker's own shards, so it resumes on the grid it was saved on),
    or of another step; positions on some ranks only.

    Several processes need `accelerator_config={"dispatch_batches": False}`
    (each process reads its own shards, as `air_hf`'s docs advise).
    """

    def __init__(self) -> None:
        self._loader: StreamLoader | None = None
        self._identity: dict[str, Any] | None = None

    def on_init_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        # Set before `train()` reads it: the Trainer then restores its random states at the first step, as it
        # does when it skips nothing.
        args.ignore_data_skip = True

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        args.ignore_data_skip = True  # a callback added after the Trainer was made
        self._loader = _take_over(train_dataloader, args.world_size)
        self._identity = describe(self._loader.dataset)
        if state.global_step > 0:
            self._resume(args, state)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                train_dataloader: Any = None, **kwargs: Any) -> None:
        assert self._loader is not None, "on_train_begin came first"
        folder = _folder(args, state.global_step)
        os.makedirs(folder, exist_ok=True)
        position = {"version": VERSION, "step": state.global_step, "grid": self._grid(args),
                    "epoch": self._loader.dataset.epoch, "stream": self._identity,
                    # accelerate's state of its base loader, taken before it read ahead: the last batch handed over
                    "loader": train_dataloader.state_dict()}
        path = _path(folder, args.process_index)
        with open(path + ".tmp", "w") as f:
            json.dump(position, f)
        os.replace(path + ".tmp", path)

    def _grid(self, args: TrainingArguments) -> list[int]:
        assert self._loader is not None
        return [args.world_size, self._loader.num_workers]

    def _resume(self, args: TrainingArguments, state: TrainerState) -> None:
        assert self._loader is not None and self._identity is not None
        path = _path(_folder(args, state.global_step), args.process_index)
        saved = _read(path)
        refusal = None if saved is None else self._refusal(saved, path, args, state.global_step)
        verdicts = _gather((args.process_index, saved is not None, refusal))
        refused = [(rank, text) for rank, _, text in verdicts if text is not None]
        if refused:
            rank, text = refused[0]
            raise StateError(text if len(verdicts) == 1 else f"rank {rank}: {text}")
        missing = [rank for rank, found, _ in verdicts if not found]
        if missing and len(missing) < len(verdicts):
            raise StateError(
                f"the checkpoint of step {state.global_step} holds the stream positions of some ranks only: none for "
                f"ranks {missing} in their {POSITIONS} folder: resume on the machines it was saved on, with the "
                f"same args.output_dir"
            )
        if saved is None:
            batches = state.global_step * args.gradient_accumulation_steps
            log.warning(
                "%s holds no stream position (a checkpoint saved without StreamResumeCallback, or outside "
                "args.output_dir): as the Trainer does, this rank reads and drops the %d batches (%d rows) of the %d "
                "finished steps before step %d; checkpoints from now on hold positions",
                path, batches, batches * args.per_device_train_batch_size, state.global_step, state.global_step + 1)
            self._loader.drop(batches)
        elif saved["loader"]["_iterator_finished"]:  # stopped at the end of a pass: the next one, from its start
            self._loader.start(saved["epoch"] + 1)
        else:
            self._loader.resume(saved["loader"], saved["epoch"])

    def _refusal(self, saved: dict, path: str, args: TrainingArguments, step: int) -> str | None:
        """Why `saved` cannot resume this rank, or None."""
        if saved.get("version") != VERSION:
            return f"{path} is a stream position of version {saved.get('version')!r}; this version reads {VERSION}"
        if saved["step"] != step:
            return f"{path} was saved at step {saved['step']}, in a checkpoint of step {step}: it is another run's"
        grid = self._grid(args)
        if saved["grid"] != grid:
            return (
                f"{path} was saved by {_grid_text(*saved['grid'])}; this run has {_grid_text(*grid)}. A datasets "
                f"stream resumes on the grid it was saved on (its position counts the examples of each worker's own "
                f"shards): resume with {_grid_text(*saved['grid'])}"
            )
        differ = differences(saved["stream"], self._identity or {})
        if differ:
            return (
                f"{path} holds the position of another stream: {'; '.join(differ)}. Resume with the stream this "
                f"checkpoint was trained on; to train on this one instead, remove {os.path.dirname(path)}: the "
                f"Trainer then reads and drops as many of its batches as were trained"
            )
        return None


def _take_over(loader: Any, num_processes: int) -> StreamLoader:
    """The Trainer's loader reading through a `StreamLoader`, made like the loader accelerate holds."""
    base = getattr(loader, "base_dataloader", None)
    if base is None:
        raise StateError(
            f"StreamResumeCallback works with the DataLoader accelerate prepares for the Trainer; this Trainer trains "
            f"on a {type(loader).__name__}"
        )
    if not isinstance(base.dataset, datasets.IterableDataset):
        raise StateError(
            f"StreamResumeCallback resumes a streaming dataset (a datasets.IterableDataset, as load_dataset(..., "
            f"streaming=True) gives); this Trainer reads a {type(base.dataset).__name__}. A datasets.Dataset is "
            f"resumed by the Trainer itself, without reading it: leave the callback out"
        )
    if isinstance(loader, DataLoaderDispatcher) and num_processes > 1:
        raise StateError(
            "StreamResumeCallback on several processes needs TrainingArguments(accelerator_config="
            "{'dispatch_batches': False}): with the default, process 0 reads the batches of every process, ahead "
            "of them, and its stream's position is not one any process trained up to"
        )
    stream = StreamLoader.like(base)
    loader.base_dataloader = stream
    return stream


def _grid_text(processes: int, workers: int) -> str:
    return f"{processes} process{'es' if processes != 1 else ''} with dataloader_num_workers={workers}"


def _folder(args: TrainingArguments, step: int) -> str:
    return os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}", POSITIONS)


def _path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank-{rank}.json")


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _gather(verdict: tuple) -> list[tuple]:
    """Every rank's `verdict`, in rank order (this one's alone without a process group)."""
    group = process_group()
    if group is None or group.get_world_size() == 1:
        return [verdict]
    verdicts: list = [None] * group.get_world_size()
    group.all_gather_object(verdicts, verdict)
    return verdicts
