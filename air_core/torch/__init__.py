"""The PyTorch front door: a drop-in for `databricks.air.data`.

    from air_core.torch import DataLoader, UCVolumeDataset

    dataset = UCVolumeDataset("/Volumes/main/ml/raw/images")
    loader = DataLoader(dataset, batch_size=64)
    for paths in loader:
        ...

`UCVolumeDataset` yields the local cached path of every file of a volume
folder, split over ranks and DataLoader workers; `DataLoader` adds the
reference's defaults, MLflow fetch timings and exactly-once resume on any
grid; `UCVolumeWriter` / `UCVolumeReader` store `torch.distributed.checkpoint`
checkpoints on a volume. Importing this module imports torch; the rest of
`air_core` never does.
"""

from typing import Any

from .dataloader import DataLoader, default_num_workers
from .dataset import Checkpointable, PackedFile, UCVolumeDataset

__all__ = ["Checkpointable", "DataLoader", "PackedFile", "UCVolumeDataset", "UCVolumeReader", "UCVolumeWriter",
           "default_num_workers"]


def __getattr__(name: str) -> Any:
    # torch.distributed.checkpoint takes a second to import: spare it to DataLoader workers.
    if name in ("UCVolumeReader", "UCVolumeWriter"):
        from . import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
