"""air_hf: Unity Catalog volumes as Hugging Face datasets.

Importing this package registers the "uc-volume" builder::

    import air_hf
    from datasets import load_dataset

    ds = load_dataset("uc-volume", data_dir="/Volumes/main/ml/raw/images", split="train",
                      streaming=True, decode="image", labels=True, num_workers=4)

A folder of Parquet files streams its rows (row groups are the units, hive
partition folders become columns); any other folder streams a row per file:
`path` (volume path), `local_path` (the node-local cached copy), `size`, and
the column `decode` asks for. Files are copied into the node cache on first
access, by a thread pool reading ahead of the consumer; later epochs read the
cache. See `UCVolumeConfig` for every option.

Shards: their number is world_size x num_workers (world_size detected from
torch.distributed or torchrun), each holding the same number of examples
within one, exactly with `equalize="pad"` or `"drop"`. So `split_for_rank(ds)`
(`split_dataset_by_node` for this process) always splits by shard, and a
DataLoader with `num_workers` workers gives each worker its own shards.

transformers.Trainer on several processes: pass the *un-split* streaming
dataset and let accelerate split it by shard (contiguously) per process::

    ds = load_dataset("uc-volume", data_dir=..., split="train", streaming=True,
                      num_workers=2, equalize="drop")    # world_size: detected under torchrun
    args = TrainingArguments(..., max_steps=N, dataloader_num_workers=2,
                             accelerator_config={"dispatch_batches": False},
                             remove_unused_columns=False)
    Trainer(model=model, args=args, train_dataset=ds, data_collator=collate).train()

With the default `dispatch_batches` (True for an iterable dataset) rank 0
alone reads and broadcasts; splitting beforehand with `split_for_rank`
makes accelerate split again and loses half the data. `max_steps` is
required (the stream has no length), and `equalize` keeps every process at
the same step count.
"""

from typing import TYPE_CHECKING

from air_core.doors import exports

from .builder import UCVolume, UCVolumeConfig
from .registration import NAME, register
from .rank_split import split_for_rank

if TYPE_CHECKING:
    from .trainer_resume import StreamResumeCallback

register()

# Loaded on first use: it imports transformers, which a DataLoader worker unpickling a dataset does not need.
_LAZY = {"StreamResumeCallback": ".trainer_resume"}

__all__ = ["NAME", "StreamResumeCallback", "UCVolume", "UCVolumeConfig", "register", "split_for_rank"]

__getattr__, __dir__ = exports(__name__, _LAZY)
