"""A pack (`air_core.pack`) read as the files it holds: a row per packed file, row group by row group.

The units are the shards' row groups, whose rows are packed files; a
stream reads neighbouring row groups whole, and each file is one read of its
row group's byte range in the node cache (`air_core.packs.read`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence


from ..packs import plan as pack_plan, read as pack_read, store as pack_store
from ..manifest import Manifest
from ..planning.rows import RowGroup, RowSlice
from ..io.files import CachedFile
from .files import FilesReader
from .reader import FileRowsPart, FileRowsReader
from .row_groups import RowGroupPieces

if TYPE_CHECKING:
    from ..io.cache import Cache
    from ..grid import Grid
    from ..planning.shares import Planning

_LOOSE_ONLY = ("loose files: {path} is a pack, read a row group at a time: its streams take neighbouring row "
               "groups, by count, and an unreadable shard cannot be skipped file by file")


class PackReader(RowGroupPieces, FileRowsReader):
    """The files of a pack, in its shards' row groups."""

    mode = "pack"
    # A read task fetches its row groups' byte ranges at once, each through its own open (bandwidth is per
    # open), and Ray runs a task per CPU: a task of one row group would read through one stream. 8, as a
    # whole shard was fetched in 8 ranges; many more per task leave too few tasks to keep every CPU busy.
    pieces_per_task = 8
    refused = {"on_error": _LOOSE_ONLY, "balance": _LOOSE_ONLY, "columns": FilesReader.refused["columns"]}

    def generation(self) -> pack_store.Generation:
        """The generation read, as its marker describes it."""
        return self.source.held("generation", lambda: pack_store.load_generation(self.source.path))

    def units(self) -> list[RowGroup]:
        """Every shard's row groups, in order: `num_rows` are packed files, `file` indexes `shards()`."""
        return self.source.held("units", lambda: pack_read.units(self.generation()))

    def shards(self) -> Manifest:
        """The shard files, listed."""
        return self.source.held("shards", lambda: pack_read.shards(self.generation()))

    def placement(self) -> pack_read.Placement:
        """Where each packed file lies, in its row group's byte range of its shard."""
        def make() -> pack_read.Placement:
            offsets = pack_read.offsets(self.generation(), self.source.cache_dir)
            return pack_read.placement(self.units(), offsets, self.source.manifest.sizes)

        return self.source.held("placement", make)

    def own_listing(self) -> Manifest:
        return pack_read.index(self.generation(), self.source.cache_dir)

    def _unit_rows(self) -> list[int]:
        return [u.num_rows for u in self.units()]

    def pieces(self, files: Sequence[int]) -> list[RowGroup | RowSlice]:
        return pack_plan.pieces(self.units(), files)

    def plan(self, grid: Grid, resumed_from: dict | None, planning: Planning, *, epoch: int) -> list[int]:
        return pack_plan.plan_packs(self._unit_rows(), grid, resumed_from, planning=planning, epoch=epoch)

    def rank_count(self, rank: int, world_size: int, planning: Planning, *, epoch: int) -> int:
        return pack_plan.rank_counts(self._unit_rows(), world_size, planning=planning)[rank]

    def files_of(self, pieces: Sequence[RowGroup | RowSlice], planning: Planning) -> list[int]:
        return pack_plan.files_of(self.units(), pieces, planning=planning)

    def read_files(self, items: Sequence[int], cache: Cache, *, fetch_threads: int, on_error: str = "raise",
                   **fetch: int) -> Iterator[CachedFile]:
        # Ranges are fetched on the pack reader's own threads (`pack_read.SPAN_THREADS`), whatever a loose file takes.
        source = self.source
        return pack_read.read_files(source.manifest, self.placement(), self.shards(), items, cache)

    def part(self, pieces: Sequence[RowGroup | RowSlice], planning: Planning, *, epoch: int) -> PackPart:
        source = self.source
        manifest, shards = source.manifest, self.shards()
        files = pack_plan.files_of(self.units(), pieces, planning=planning, epoch=epoch)
        placed, used = self.placement().take(files)  # only its files' places and its shards' rows
        return PackPart(manifest.root, manifest.fingerprint, manifest.rows(files), files, placed, shards.root,
                        source.local, shards.fingerprint, shards.rows(used))


@dataclass(frozen=True)
class PackPart(FileRowsPart):
    """Packed files to read elsewhere: their rows of the pack's listing, their places in their row groups, and
    those row groups' shards' rows."""

    root: str
    fingerprint: str
    listing: list[tuple[str, int, int]]
    files: list[int]
    placed: pack_read.Placement
    shard_root: str
    shard_local_root: str
    shard_fingerprint: str
    shard_listing: list[tuple[str, int, int]]

    @property
    def input_files(self) -> list[str]:
        return [f"{self.shard_root}/{r[0]}" for r in self.shard_listing]

    def read(self, cache: Cache, **fetch: object) -> Iterator[CachedFile]:
        """Each file's bytes as a view of its row group's mapped cached range: one copy, by the consumer.

        `fetch` is not used: ranges are fetched on the pack reader's own threads (`pack_read.SPAN_THREADS`).
        """
        manifest = Manifest.from_rows(self.root, self.listing, self.fingerprint)
        shards = Manifest.from_rows(self.shard_root, self.shard_listing, self.shard_fingerprint)
        for i, view in pack_read.read_views(manifest, self.placed, shards, range(len(manifest)), cache,
                                            local_root=self.shard_local_root):
            yield CachedFile(manifest.volume_path(i), "", len(view), i, data=view)  # type: ignore[arg-type]
