"""Where one stream sits: (rank, world_size) x (worker, num_workers). Detecting it is `dist`'s."""

from __future__ import annotations

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
