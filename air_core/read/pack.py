"""A pack (`air_core.pack`) read as what it holds: a row per packed file, or per packed record.

A pack of files: the units are the shards' row groups, whose rows are packed
files; a stream reads neighbouring row groups whole, and each file is one
read of its row group's byte range in the node cache (`air_core.packs.read`).

A pack of records that name media (`air_core.packs.records`): the units are
the shards' row groups too, whose rows are records, read as Parquet row
groups are (`air_core.read.parquet_io`: by byte ranges through the node
cache, only the asked columns' chunks with `columns=`), each media column
giving its media's bytes (`MediaPackReader`). Its rows are the records' rows
of the folder it was packed from, read as records naming media, but for the
media columns, which hold the bytes where the folder's rows hold the path of
a medium's copy in the node cache (`include_bytes=True` at Ray's door). A
row group's bytes are one cache entry: copying each medium out of it into an
entry of its own, for a path, would hold every medium on the node twice and
make a file per medium, the small-file work a pack saves; and as bytes, the
rows travel (Ray's blocks) and a door with media types makes them from the
bytes (HF's `Image()`), as it does a WebDataset's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from ..errors import VolumePathError
from ..packs import plan as pack_plan, read as pack_read, store as pack_store
from ..manifest import Manifest
from ..planning.rows import RowGroup, RowSlice, unit_of
from ..planning.shares import Planning
from ..io.files import CachedFile
from .files import FilesReader
from .parquet import ParquetPart
from .reader import FileRowsPart, FileRowsReader, TableReader
from .row_groups import RowGroupPieces, localize

if TYPE_CHECKING:
    import pyarrow as pa

    from ..io.cache import Cache
    from ..grid import Grid
    from ..source import Source

_LOOSE_ONLY = ("loose files: {path} is a pack, read a row group at a time: its streams take neighbouring row "
               "groups, by count, and an unreadable shard cannot be skipped file by file")


class PackReader(RowGroupPieces, FileRowsReader):
    """The files of a pack, in its shards' row groups; a pack of records is read by `MediaPackReader`."""

    mode = "pack"
    # A read task fetches its row groups' byte ranges at once, each through its own open (bandwidth is per
    # open), and Ray runs a task per CPU: a task of one row group would read through one stream. 8, as a
    # whole shard was fetched in 8 ranges; many more per task leave too few tasks to keep every CPU busy.
    pieces_per_task = 8
    refused = {"on_error": _LOOSE_ONLY, "balance": _LOOSE_ONLY, "columns": FilesReader.refused["columns"]}

    def __new__(cls, source: Source | None = None) -> PackReader:
        # The mode is "pack" for both kinds of pack, and only the marker tells them apart: one of records is
        # read by the reader of its rows.
        if cls is PackReader and source is not None and generation_of(source).media:
            return MediaPackReader(source)  # type: ignore[return-value]
        return super().__new__(cls)

    def generation(self) -> pack_store.Generation:
        """The generation read, as its marker describes it."""
        return generation_of(self.source)

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


def generation_of(source: Source) -> pack_store.Generation:
    """The generation a pack's `source` reads, as its marker describes it (read once per process)."""
    return source.held("generation", lambda: pack_store.load_generation(source.path))


_NOT_RECORDS = ("a row per file: {path} is a pack of records that name media, read as the records' rows (each "
                "media column holding its media's bytes)")


class MediaPackReader(RowGroupPieces, TableReader):
    """The records of a pack of records that name media, a row per record: the records' columns, each media
    column holding the bytes of its medium (a list of them, for a list of paths), with or without Ray's
    `include_bytes`.

    Its units are the shards' row groups, each holding the records of one records file: the pack's listing
    (the records files) splits them as the folder's records split (HF's `train/` and `test/`). A `schema=`
    given (HF's `features=`) types the rows' other columns; the media columns hold bytes whatever it gives
    them (HF's `Image()` is made from them).
    """

    mode = "pack"
    label = "packed records"
    takes = ("schema",)
    refused = dict.fromkeys(("decode", "labels", "balance"), _NOT_RECORDS)

    def generation(self) -> pack_store.Generation:
        """The generation read, as its marker describes it."""
        return generation_of(self.source)

    def shards(self) -> Manifest:
        """The shard files, listed."""
        return self.source.held("shards", lambda: pack_read.shards(self.generation()))

    def own_listing(self) -> Manifest:
        return pack_read.index(self.generation(), self.source.cache_dir)

    def placed(self) -> list[tuple[RowGroup, int]]:
        """Every row group of the shards (their footers read once per process), in order, with the records file
        (a position in the pack's listing) whose records it holds."""
        def make() -> list[tuple[RowGroup, int]]:
            from . import parquet_io
            from ..io.cache import Cache

            units = parquet_io.parquet_units(self.shards(), cache=Cache(self.source.cache_dir))
            files = [f for s in self.generation().shards for f in s.row_group_records]
            if len(files) != len(units):
                raise VolumePathError(
                    f"{self.source.path} holds {len(units)} row groups, its marker {len(files)}: the pack was "
                    "changed by hand; pack the records again")
            return list(zip(units, files))

        return self.source.held("record units", make)

    def units(self) -> list[RowGroup]:
        """The row groups that hold records, in order."""
        return [u for u, _ in self.placed() if u.num_rows]

    def counted(self) -> list[RowGroup]:
        return self.units()

    def validate(self) -> None:
        self.placed()

    def pieces(self, files: Sequence[int]) -> list[RowGroup]:
        member = set(files)
        return [u for u, f in self.placed() if f in member and u.num_rows]

    def media(self) -> dict[str, str]:
        return dict(self.generation().media)

    def schema(self) -> pa.Schema:
        """The records' columns (typed as `schema=` gives them, when given), each media column holding bytes (a
        list of them)."""
        from . import parquet_io
        from ..io.cache import Cache

        stored = self.source.held("records schema", lambda: parquet_io.schema(
            self.shards(), self.units(), Cache(self.source.cache_dir)).remove_metadata())
        return with_bytes(self.source.options.get("schema") or stored, stored, self.media())

    def read_pieces(self, pieces: Sequence[RowGroup | RowSlice], cache: Cache, *, columns: Sequence[str] | None,
                    fetch_threads: int, planning: Planning = Planning(), epoch: int = 0,
                    on_error: str = "raise", skipped: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        from . import parquet_io

        schema = self.schema()
        tables = parquet_io.read_units(self.shards(), pieces, cache, columns=columns, fetch_threads=fetch_threads)
        return enumerate(as_rows(t, schema, self.media()) for t in tables)

    def part(self, pieces: Sequence[RowGroup | RowSlice], planning: Planning, *, epoch: int) -> MediaPackPart:
        return self.parts([pieces], planning, epoch=epoch)[0]

    def parts(self, groups: Sequence[Sequence[RowGroup | RowSlice]], planning: Planning, *,
              epoch: int) -> list[MediaPackPart]:
        """Parts read on one node: a shard the node reads some of is read by ranges, one it reads all of whole
        (as `ParquetReader.parts`)."""
        from . import parquet_io

        m = self.shards()
        ranged = parquet_io.ranged_files([unit_of(p) for g in groups for p in g], m.sizes)
        out = []
        for pieces in groups:
            files, local = localize(pieces)
            out.append(MediaPackPart(m.root, self.source.local, m.fingerprint, m.rows(files), local, self.schema(),
                                     frozenset(k for k, f in enumerate(files) if f in ranged), self.media()))
        return out


@dataclass(frozen=True)
class MediaPackPart(ParquetPart):
    """Row groups of a pack of records to read elsewhere, as a Parquet part reads them (its shards' rows of the
    listing, the pieces, which shards are read by ranges, the rows' schema), each media column's bytes taken out
    of its `struct<bytes, path>`."""

    media: dict[str, str]

    def _rows(self, tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        return (as_rows(table, self.schema, self.media) for table in tables)


def with_bytes(schema: pa.Schema, stored: pa.Schema, media: dict[str, str]) -> pa.Schema:
    """`schema` with each media column as the rows give it: the bytes (`binary`, or a list of them) that the
    pack's `struct<bytes, path>` (in `stored`) holds."""
    import pyarrow as pa
    import pyarrow.types as pt

    def of(f: pa.Field) -> pa.Field:
        if f.name not in media:
            return f
        many = pt.is_list(stored.field(f.name).type)
        return pa.field(f.name, pa.list_(pa.binary()) if many else pa.binary())

    return pa.schema([of(f) for f in schema])


def as_rows(table: pa.Table, schema: pa.Schema, media: dict[str, str]) -> pa.Table:
    """A pack's rows of records (`table`, of some of its columns) as the readers give them: each media column's
    bytes, out of its `struct<bytes, path>`, and the other columns cast to `schema`'s types."""
    import pyarrow as pa
    import pyarrow.types as pt

    for name in media:
        if name not in table.column_names:
            continue
        i = table.column_names.index(name)
        chunks = []
        for chunk in table.column(i).chunks:
            if pt.is_list(chunk.type):
                offsets = pa.compute.subtract(chunk.offsets, chunk.offsets[0])
                chunk = pa.ListArray.from_arrays(offsets, _bytes_field(chunk.flatten()), mask=chunk.is_null())
            else:
                chunk = _bytes_field(chunk)
            chunks.append(chunk)
        table = table.set_column(i, name, pa.chunked_array(chunks, type=schema.field(name).type))
    return table.cast(pa.schema([schema.field(c) for c in table.column_names]))


def _bytes_field(chunk: pa.StructArray) -> pa.Array:
    """The `bytes` of a `struct<bytes, path>`, null where the struct is."""
    import pyarrow as pa

    return chunk.flatten()[chunk.type.get_field_index("bytes")].cast(pa.binary())
