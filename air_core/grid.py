"""Where this stream sits: (rank, world_size) x (worker, num_workers).

Ranks come from torch.distributed when a process group is up, then from
torchrun's `RANK` / `WORLD_SIZE`, then (0, 1). Workers come from
`torch.utils.data.get_worker_info()`. Every value can be given explicitly.
torch is never imported here: if it is not imported yet, this process is
neither in a process group nor a DataLoader worker.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from .errors import OptionError


@dataclass(frozen=True)
class Grid:
    """One stream's coordinates in the (rank x worker) grid."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        for name, i, n in (("rank", self.rank, self.world_size), ("worker", self.worker, self.num_workers)):
            if n < 1 or not 0 <= i < n:
                raise OptionError(f"{name}={i} out of range for a count of {n}: need 0 <= {name} < count")


def detect_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """(rank, world_size): explicit values, else torch.distributed, else torchrun's env, else (0, 1)."""
    if rank is not None and world_size is not None:
        return rank, world_size
    torch = sys.modules.get("torch")
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        found = torch.distributed.get_rank(), torch.distributed.get_world_size()
    elif "WORLD_SIZE" in os.environ or "RANK" in os.environ:
        if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
            raise OptionError(
                "only one of RANK and WORLD_SIZE is set in the environment: launch with torchrun, "
                "or pass rank= and world_size= explicitly"
            )
        found = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        found = 0, 1
    return (found[0] if rank is None else rank), (found[1] if world_size is None else world_size)


def detect_worker(worker: int | None = None, num_workers: int | None = None) -> tuple[int, int]:
    """(worker, num_workers): explicit values, else the DataLoader worker info, else (0, 1)."""
    found = 0, 1
    torch = sys.modules.get("torch")
    if torch is not None:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            found = info.id, info.num_workers
    return (found[0] if worker is None else worker), (found[1] if num_workers is None else num_workers)


def detect(
    rank: int | None = None,
    world_size: int | None = None,
    worker: int | None = None,
    num_workers: int | None = None,
) -> Grid:
    """The grid of the calling process, with any value overridden."""
    r, ws = detect_rank(rank, world_size)
    w, nw = detect_worker(worker, num_workers)
    return Grid(r, ws, w, nw)
