"""Loose files, a row each: the format whose units are files, dealt by bytes, each fetched whole into the node
cache (through `air_core.io.files`, the engine the Parquet and WebDataset readers fetch their files through too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from ..planning import shares as plan_mod
from ..planning import resume
from ..io.cache import Cache
from ..io.files import DEFAULT_FETCH_THREADS, DEFAULT_PREFETCH, DEFAULT_PREFETCH_BYTES, CachedFile, OnError, Skipped, read_items
from ..manifest import Manifest
from .reader import FileRowsReader, Part

if TYPE_CHECKING:
    from ..grid import Grid
    from ..planning.shares import Equalize, Planning


class FilesReader(FileRowsReader):
    """Loose files: the units are files, balanced by bytes, each fetched whole into the node cache."""

    mode = "files"
    # Below this many files a read task costs more to schedule and to warm up than its reads take.
    pieces_per_task = 64
    refused = {"columns": "Parquet mode, whose rows are a table's: {path} is read as files, a row per file (its "
                          "path, local_path, size and contents)"}

    def pieces(self, files: Sequence[int]) -> list[int]:
        return list(files)

    def deal(self, pieces: Sequence[int], parts: int, planning: Planning) -> list[list]:
        files = np.asarray(pieces, dtype=np.int64)
        # `rank_shares` as arrays: 10^6 files dealt into shards are mapped back to files without a Python loop.
        deal = plan_mod.Deal(plan_mod.Epoch(self.source.manifest.sizes[files], epoch=0, planning=planning), parts,
                             excluded=None)
        return [files[part].tolist() for part in deal.shares()]

    def count(self, pieces: Sequence[int]) -> int:
        return len(pieces)

    def plan(self, grid: Grid, resumed_from: dict | None, planning: Planning, *, epoch: int) -> np.ndarray:
        m = self.source.manifest
        return resume.plan_resume(m.sizes, grid, resumed_from, planning=planning, epoch=epoch,
                                  by_size=m.largest_first)

    def plan_epoch(self, planning: Planning, epoch: int) -> int:
        # The deal follows the sizes alone; only the shuffle changes with the epoch.
        return epoch if planning.shuffle else 0

    def rank_count(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> int:
        m = self.source.manifest
        order = plan_mod.Epoch(m.sizes, epoch=epoch, planning=planning, by_size=m.largest_first)
        # This rank's share alone: dealing every rank's in read order would sort all of them.
        return len(plan_mod.Deal(order, world_size, excluded=None).share(rank))

    def files_of(self, pieces: Sequence[int], planning: Planning) -> list[int]:
        return list(pieces)

    def read_files(self, items: Sequence[int], cache: Cache, *, fetch_threads: int, on_error: OnError = "raise",
                   **fetch: int) -> Iterator[CachedFile | Skipped]:
        return read_items(self.source.manifest, items, cache, fetch_threads=fetch_threads, on_error=on_error,
                          **fetch)

    def share(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> tuple[np.ndarray, list[int]]:
        m = self.source.manifest
        files = plan_mod.rank_share(m.sizes, rank=rank, world_size=world_size, planning=planning, epoch=epoch,
                                    by_size=m.largest_first)
        return np.asarray(files, dtype=np.int64), files

    def share_weights(self, rank: int, world_size: int, *, equalize: Equalize) -> np.ndarray:
        return self.source.manifest.sizes

    def weights(self, pieces: Sequence[int]) -> list[int]:
        return self.source.manifest.sizes[np.asarray(pieces, dtype=np.int64)].tolist()

    def part(self, pieces: Sequence[int], planning: Planning, *, epoch: int) -> FilesPart:
        m = self.source.manifest
        return FilesPart(self.source.local, m.subset(pieces), list(pieces))


@dataclass(frozen=True)
class FilesPart(Part):
    """Loose files to read elsewhere: their part of the listing (arrays, which travel as they are), and where
    its root lies on the machine that listed it (a Ray worker may not share the driver's `AIR_VOLUMES_ROOT`)."""

    local_root: str
    listing: Manifest
    files: list[int]

    @property
    def rows(self) -> int:
        return len(self.listing)

    @property
    def nbytes(self) -> int:
        return int(self.listing.sizes.sum())

    @property
    def largest(self) -> int:
        return int(self.listing.sizes.max(initial=0))

    @property
    def input_files(self) -> list[str]:
        return list(map(f"{self.listing.root}/".__add__, self.listing.paths.tolist()))

    def read(self, cache: Cache, *, fetch_threads: int = DEFAULT_FETCH_THREADS, prefetch: int = DEFAULT_PREFETCH,
             prefetch_bytes: int = DEFAULT_PREFETCH_BYTES, on_error: OnError = "raise",
             columns: Sequence[str] | None = None) -> Iterator[CachedFile | Skipped]:
        return read_items(self.listing, range(len(self.listing)), cache, fetch_threads=fetch_threads, prefetch=prefetch,
                          prefetch_bytes=prefetch_bytes, local_root=self.local_root, on_error=on_error)
